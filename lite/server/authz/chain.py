"""The authorizer chain the API server asks about every request (upstream's union authorizer).

Role: `AuthorizerChain.authorize(attrs)` asks, in order, the privileged-group check (`system:masters` may do
everything, as upstream's superuser authorizer), then the Node authorizer (`node`, `authz.node`), then
RBAC; the first allowing answer wins (a Node refusal keeps its reason if RBAC refuses too), and no opinion
from all of them refuses.
`forbidden(attrs, reason)` is the 403 Status upstream's filter writes. `rules_for` answers
SelfSubjectRulesReview with the same chain.

RBAC verdicts are cached per (user, groups, request attributes) and dropped whenever the index changes
(`PolicyIndex.generation`), so a cached answer is always the one the current policy gives. A request about one
object by a user none of whose rules in that namespace names objects (`resourceNames`) is cached without the
object's name (and path): its verdict is that of every object of the kind, and a kubelet patching each of its
pods' status is one entry, not thousands.

Invariants: deciding is synchronous and pure over the in-memory index (`await ready()` first, once, so a
request during start-up waits for the policy instead of being refused); nothing here touches the store.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import field

from lite.errors import ApiError
from lite.records import dataclass
from lite.server.authz import rbac
from lite.server.authz.attrs import Attributes, RequestInfo
from lite.server.authz.index import PolicyIndex
from lite.server.authz.rbac import Compiled, Verdict
from lite.server.authz.rules import Rule
from lite.server.requestuser import UserInfo

MASTERS = "system:masters"
ANONYMOUS = UserInfo("system:anonymous", ("system:unauthenticated",))
ALL_RULES = (Rule(("*",), ("*",), ("*",)), Rule(("*",), non_resource_urls=("*",)))
# A decider returns a Verdict, or None for no opinion.
Decider = Callable[[Attributes], "Verdict | None"]


@dataclass
class AuthorizerChain:
    index: PolicyIndex
    node: Decider | None = None  # the Node authorizer (authz.node)
    ready_timeout: float = 30.0
    cache_size: int = 8192
    # RBAC verdicts by (user, groups, request attributes), and each user's compiled rules by (user, groups,
    # namespace); both valid for one index generation.
    _cache: OrderedDict[tuple[object, ...], Verdict] = field(default_factory=OrderedDict, repr=False)
    _compiled: OrderedDict[tuple[object, ...], Compiled] = field(default_factory=OrderedDict, repr=False)
    _cache_generation: int = field(default=-1, repr=False)
    _verdicts: dict[Verdict, Verdict] = field(default_factory=dict, repr=False)

    async def ready(self) -> None:
        if not self.index.ready.is_set():
            try:
                await asyncio.wait_for(self.index.ready.wait(), self.ready_timeout)
            except TimeoutError:
                pass  # decide with what is there: nothing but system:masters is allowed before the policy loads

    def authorize(self, attrs: Attributes) -> Verdict:
        if MASTERS in attrs.user.groups:
            return Verdict(True, "")
        if self.node is not None:
            decided = self.node(attrs)
            if decided is not None and decided.allowed:
                return decided
            if decided is not None:  # a refusal is upstream's no opinion with a reason: RBAC may still allow
                rbac_verdict = self._rbac(attrs)
                return rbac_verdict if rbac_verdict.allowed else decided
        return self._rbac(attrs)

    def _rbac(self, attrs: Attributes) -> Verdict:
        """RBAC's verdict, from the cache while the policy has not changed. Users repeat the same few
        requests, and a miss walks every rule of every binding the user has."""
        if self._cache_generation != self.index.generation:
            self._cache.clear()
            self._compiled.clear()
            self._verdicts.clear()
            self._cache_generation = self.index.generation
        info = attrs.info
        key: tuple[object, ...] = (attrs.user.name, attrs.user.groups, info)
        verdict = self._cache.get(key)
        if verdict is None:
            compiled = self._rules(attrs.user, info.namespace)
            if info.resource_request and info.name and not compiled.by_name:
                # no rule of the user's names objects: one verdict (and one entry) for the requests about every
                # object of a kind (a kubelet's status patch of each of its pods), not one per object
                key = (attrs.user.name, attrs.user.groups, info.verb, info.api_group, info.resource,
                       info.subresource, info.namespace)
                verdict = self._cache.get(key)
            if verdict is None:
                verdict = rbac.decide(compiled, attrs)
                # equal verdicts (one rule allowing a user thousands of per-object requests) are one object
                verdict = self._verdicts.setdefault(verdict, verdict)
                if len(self._verdicts) > self.cache_size // 8:
                    self._verdicts.clear()
                self._cache[key] = verdict
                if len(self._cache) > self.cache_size:
                    self._cache.popitem(last=False)
        return verdict

    def _rules(self, user: UserInfo, namespace: str) -> Compiled:
        key = (user.name, user.groups, namespace)
        compiled = self._compiled.get(key)
        if compiled is None:
            compiled = rbac.compile_rules(self.index, user, namespace)
            self._compiled[key] = compiled
            if len(self._compiled) > self.cache_size // 8:
                self._compiled.popitem(last=False)
        return compiled

    def check(self, attrs: Attributes) -> None:
        """Raise the 403 for a request the chain does not allow."""
        verdict = self.authorize(attrs)
        if not verdict.allowed:
            raise forbidden(attrs, verdict.reason)

    def impersonation_refusal(self, caller: UserInfo, check: tuple[str, str, str, str, str]) -> ApiError | None:
        """For `impersonation.impersonate`: None when `caller` may impersonate (group, resource, subresource,
        namespace, name), else the 403."""
        group, resource, sub, ns, name = check
        attrs = Attributes(caller, RequestInfo(True, "", "impersonate", group, "v1" if group else "", resource,
                                               sub, ns, name))
        verdict = self.authorize(attrs)
        return None if verdict.allowed else forbidden(attrs, verdict.reason)

    def rules_for(self, user: UserInfo, namespace: str) -> tuple[list[Rule], list[str]]:
        """The rules `user` holds in `namespace` (cluster-wide ones included) and resolution errors."""
        if MASTERS in user.groups:
            return list(ALL_RULES), []
        compiled = rbac.compile_rules(self.index, user, namespace)
        return compiled.rules, compiled.errors


def forbidden_message(attrs: Attributes) -> str:
    """Upstream's `forbiddenMessage` (the part after "... is forbidden: ")."""
    info, user = attrs.info, attrs.user.name
    if not info.resource_request:
        return f'User "{user}" cannot {info.verb} path "{info.path}"'
    resource = f"{info.resource}/{info.subresource}" if info.subresource else info.resource
    if info.namespace:
        return (f'User "{user}" cannot {info.verb} resource "{resource}" in API group "{info.api_group}" '
                f'in the namespace "{info.namespace}"')
    return (f'User "{user}" cannot {info.verb} resource "{resource}" in API group "{info.api_group}" '
            'at the cluster scope')


def forbidden(attrs: Attributes, reason: str = "") -> ApiError:
    """The 403 Status for a refused request: `<resource> "<name>" is forbidden: <message>[: <reason>]`,
    `forbidden: ...` for non-resource paths; details name the resource (as kind), group and name."""
    msg = forbidden_message(attrs)
    if reason:
        msg = f"{msg}: {reason}"
    info = attrs.info
    if not info.resource_request or not info.resource:
        return ApiError(f"forbidden: {msg}", 403, "Forbidden")
    qualified = f"{info.resource}.{info.api_group}" if info.api_group else info.resource
    head = f'{qualified} "{info.name}"' if info.name else qualified
    return ApiError(f"{head} is forbidden: {msg}", 403, "Forbidden", name=info.name, group=info.api_group,
                    kind=info.resource)
