"""The ValidatingAdmissionPolicy admission plugin (upstream `pkg/admission/plugin/policy/validating`).

`PolicyAdmission` keeps policies and bindings in informers and, as a validating hook, for each policy that has
bindings and whose `matchConstraints` select the request: compiles it once per resourceVersion (a compile
error is a configuration error), and for each binding whose `matchResources` select the request, collects the
params (`paramKind` of any served kind, custom resources included; `paramRef` by name, namespace or selector,
`parameterNotFoundAction`), then per param evaluates `matchConditions` (all true, or the binding is skipped),
`variables`, `validations` (with `messageExpression`) and `auditAnnotations`, and applies the binding's
`validationActions` (see `decide.py`). Deny refuses the request with upstream's message; Warn adds a
`Warning:` header; Audit (and the audit annotations) are logged on the `lite.audit` logger, which is where lite
keeps audit information (it has no audit log backend).

Variables: `object`, `oldObject` (null on CREATE / DELETE as upstream), `request` (the AdmissionRequest without
its objects), `params`, `namespaceObject` (null for cluster-scoped requests), `variables`, `authorizer`,
`authorizer.requestResource` (checks go to the server's authorizer chain as the requesting user).

Invariants: requests on admissionregistration.k8s.io objects are exempt (a broken policy can always be
removed); the policy set is read from memory once the informers listed (from the registry before); each
policy evaluation has upstream's runtime cost budget.
"""

from __future__ import annotations

import asyncio
import logging
import re
from dataclasses import dataclass, field
from typing import Any

from lite.cel.env import Budget, CelError, Program
from lite.client import Client
from lite.errors import ApiError, Cause
from lite.informer import Informer
from lite.kinds import Kind, KindRegistry
from lite.server.admission import review
from lite.server.admission.matching import Attributes, parse_selector
from lite.server.admission.namespaces import NamespaceLabels
from lite.server.admission.policy import decide, matching
from lite.server.admission.policy.celenv import AuthzDecision, PolicyEnv
from lite.server.api.admissionwarnings import add_warning
from lite.server.api.strategies.base import Admission
from lite.server.authz.attrs import Attributes as AuthzAttributes
from lite.server.authz.attrs import RequestInfo
from lite.server.authz.chain import AuthorizerChain
from lite.server.requestuser import UserInfo, current_user

log = logging.getLogger("lite.admission")
audit = logging.getLogger("lite.audit")
GROUP = "admissionregistration.k8s.io"
Obj = dict[str, Any]
_VAR_REF = re.compile(r"\bvariables\.([A-Za-z_][A-Za-z0-9_]*)")


@dataclass
class Compiled:
    """One policy revision's programs (or the configuration error that stops it)."""

    error: str = ""
    conditions: list[tuple[str, Program]] = field(default_factory=list)
    variables: list[tuple[str, Program]] = field(default_factory=list)
    validations: list[tuple[Obj, Program, Program | None]] = field(default_factory=list)
    audits: list[tuple[str, str, Program]] = field(default_factory=list)


class PolicyAdmission:
    def __init__(self, client: Client, kinds: KindRegistry, namespaces: NamespaceLabels,
                 authorizer: AuthorizerChain | None) -> None:
        self.client, self.kinds, self.namespaces, self.authorizer = client, kinds, namespaces, authorizer
        self.env = PolicyEnv(self._check)
        self.policy_kind = _kind(kinds, "validatingadmissionpolicies")
        self.binding_kind = _kind(kinds, "validatingadmissionpolicybindings")
        self.policies = Informer(client, self.policy_kind)
        self.bindings = Informer(client, self.binding_kind)
        self._compiled: dict[tuple[str, str], Compiled] = {}

    async def run(self) -> None:
        async with asyncio.TaskGroup() as tg:
            tg.create_task(self.policies.run())
            tg.create_task(self.bindings.run())

    async def _list(self, informer: Informer) -> list[Obj]:
        if informer.has_synced:
            return informer.list()
        return list((await self.client.list(informer.kind)).get("items") or [])

    # ---- the hook ----------------------------------------------------------------------------------

    async def validate(self, adm: Admission) -> None:
        if adm.kind.group == GROUP:
            return
        bindings = await self._list(self.bindings)
        if not bindings:
            return
        by_policy: dict[str, list[Obj]] = {}
        for b in sorted(bindings, key=_name):
            by_policy.setdefault(str((b.get("spec") or {}).get("policyName") or ""), []).append(b)
        policies = [p for p in await self._list(self.policies) if _name(p) in by_policy]
        if not policies:
            return
        a = _attributes(adm)
        out = decide.Outcome()
        ctx = _Request(self, adm, a)
        for policy in sorted(policies, key=_name):
            await self._policy(ctx, policy, by_policy[_name(policy)], out)
        for w in out.warnings:
            add_warning(w)
        if out.annotations:
            audit.info("admission %s %s %s/%s: %s", a.operation, a.resource, a.namespace, a.name, out.annotations)
        if out.denied:
            pname, bname, d = out.denied[0]
            msg, reason, code = decide.refusal(pname, bname, d)
            who = f'{a.resource} "{a.name}"' if a.name else a.resource
            raise ApiError(f"{who} is forbidden: {msg}", code, reason, name=a.name, group=a.group, kind=a.resource,
                           causes=[Cause("", msg, "")])

    async def _policy(self, ctx: _Request, policy: Obj, bindings: list[Obj], out: decide.Outcome) -> None:
        spec = policy.get("spec") or {}
        fp = str(spec.get("failurePolicy") or "Fail")
        pname = _name(policy)
        if not await ctx.matches(spec.get("matchConstraints"), rules_required=True):
            return
        compiled = self._compile(policy)
        if compiled.error:
            out.config_error(pname, "", fp, compiled.error)
            return
        param_kind: Kind | None = None
        pk = spec.get("paramKind")
        if isinstance(pk, dict):
            group, _, version = str(pk.get("apiVersion") or "").rpartition("/")
            param_kind = self.kinds.by_gvk(group, version, str(pk.get("kind") or ""))
            if param_kind is None:
                gvk = f"{group + '/' if group else ''}{version}, Kind={pk.get('kind')}"
                out.config_error(pname, "", fp, f"failed to find resource referenced by paramKind: '{gvk}'")
                return
        annotations: dict[str, list[str]] = {}
        for binding in bindings:
            bspec = binding.get("spec") or {}
            bname = _name(binding)
            if not await ctx.matches(bspec.get("matchResources"), rules_required=False):
                continue
            try:
                params = await self._params(param_kind, bspec.get("paramRef"), ctx.a)
            except _ConfigError as e:
                out.config_error(pname, bname, fp, str(e))
                continue
            actions = [str(x) for x in bspec.get("validationActions") or []]
            for param in params:
                await self._evaluate(ctx, compiled, fp, pname, bname, actions, param, out, annotations)
        for key, values in annotations.items():
            out.annotations[f"{pname}/{key}"] = ", ".join(values)

    async def _evaluate(self, ctx: _Request, c: Compiled, fp: str, pname: str, bname: str, actions: list[str],
                        param: Obj | None, out: decide.Outcome, annotations: dict[str, list[str]]) -> None:
        act = await ctx.activation(param)
        budget = Budget()
        for _cond, prog in c.conditions:
            r = _run(prog, act, budget)
            if isinstance(r, decide.Failed):
                if fp != "Ignore":
                    out.apply(pname, bname, actions, 0, decide.Decision(True, r.message, "", True))
                return
            if r is not True:
                return
        variables: Obj = {}
        act["variables"] = variables
        for vname, prog in c.variables:
            r = _run(prog, act, budget)
            if not isinstance(r, decide.Failed):
                variables[vname] = r
        for i, (v, prog, msg_prog) in enumerate(c.validations):
            r = _run(prog, act, budget)
            m = _run(msg_prog, act, budget) if msg_prog is not None and r is not True \
                and not isinstance(r, decide.Failed) else None
            d = decide.validation_decision(v, r, m, fp)
            if d.deny:
                out.apply(pname, bname, actions, i, d)
        for key, expr, prog in c.audits:
            value, denial = decide.audit_value(key, expr, _run(prog, act, budget), fp)
            if denial is not None:
                out.denied.append((pname, bname, denial))
            if value is not None and value not in annotations.setdefault(key, []):
                annotations[key].append(value)

    # ---- compile, params -----------------------------------------------------------------------------

    def _compile(self, policy: Obj) -> Compiled:
        meta = policy.get("metadata") or {}
        key = (str(meta.get("name") or ""), str(meta.get("resourceVersion") or ""))
        got = self._compiled.get(key)
        if got is not None:
            return got
        if len(self._compiled) > 256:  # old revisions: keep the memo bounded
            self._compiled.clear()
        spec = policy.get("spec") or {}
        c = Compiled()
        try:
            c.conditions = [(str(m.get("name")), self.env.compile(str(m.get("expression"))))
                            for m in spec.get("matchConditions") or []]
            c.variables = [(str(v.get("name")), self.env.compile(str(v.get("expression"))))
                           for v in spec.get("variables") or []]
            for v in spec.get("validations") or []:
                me = v.get("messageExpression")
                c.validations.append((v, self.env.compile(str(v.get("expression"))),
                                      self.env.compile(str(me)) if me else None))
            c.audits = [(str(a.get("key")), str(a.get("valueExpression")),
                         self.env.compile(str(a.get("valueExpression"))))
                        for a in spec.get("auditAnnotations") or []]
        except CelError as e:
            c = Compiled(error=f"compilation error: {e}")
        self._compiled[key] = c
        return c

    async def _params(self, kind: Kind | None, ref: Any, a: Attributes) -> list[Obj | None]:
        if kind is None:
            return [None]
        if not isinstance(ref, dict):
            raise _ConfigError("paramKind is specified but paramRef is not set in the binding")
        ns = ""
        if kind.namespaced:
            ns = str(ref.get("namespace") or a.namespace)
            if not ns:
                raise _ConfigError("cannot use namespaced paramRef in policy binding that matches cluster-scoped "
                                   "resources")
        found: list[Obj | None] = []
        if ref.get("name"):
            try:
                found = [await self.client.get(kind, ns, str(ref["name"]))]
            except ApiError as e:
                if e.code != 404:
                    raise
        else:
            sel = parse_selector(ref.get("selector"))
            items = (await self.client.list(kind, ns)).get("items") or []
            found = [o for o in items if sel is not None and sel.matches(_labels(o))]
        if not found and ref.get("parameterNotFoundAction") == "Deny":
            raise _ConfigError("no params found for policy binding with `Deny` parameterNotFoundAction")
        return found

    def _check(self, user: Obj, attrs: dict[str, str]) -> AuthzDecision:
        if self.authorizer is None:
            return AuthzDecision(False, "", "no authorizer is configured")
        info = UserInfo(str(user.get("username") or ""), tuple(user.get("groups") or ()), str(user.get("uid") or ""))
        path = attrs.get("path", "")
        ri = RequestInfo(not path, path, attrs.get("verb", ""), attrs.get("group", ""), "",
                         attrs.get("resource", ""), attrs.get("subresource", ""), attrs.get("namespace", ""),
                         attrs.get("name", ""))
        v = self.authorizer.authorize(AuthzAttributes(info, ri))
        return AuthzDecision(v.allowed, v.reason)


class _ConfigError(Exception):
    pass


class _Request:
    """One request as the policies see it; the namespace is looked up at most once."""

    def __init__(self, plugin: PolicyAdmission, adm: Admission, a: Attributes) -> None:
        self.plugin, self.adm, self.a = plugin, adm, a
        self._ns: Obj | None = None
        self._ns_done = False
        self._base: Obj | None = None

    async def namespace(self) -> Obj | None:
        if not self._ns_done:
            self._ns_done = True
            if self.a.namespaced and self.a.namespace and not (self.a.group == "" and self.a.resource == "namespaces"):
                ns = self.plugin.namespaces.informer.get(self.a.namespace) \
                    if self.plugin.namespaces.informer.has_synced else None
                if ns is None:
                    try:
                        ns = await self.plugin.client.get(self.plugin.namespaces.kind, "", self.a.namespace)
                    except ApiError as e:
                        if e.code != 404:
                            raise
                self._ns = ns
        return self._ns

    async def matches(self, m: Any, *, rules_required: bool) -> bool:
        labels = None
        if matching.needs_namespace_labels(m, self.a):
            ns = await self.namespace()
            labels = _labels(ns) if ns is not None else {}
        return matching.matches(m, self.a, labels, self.adm.obj, self.adm.old, rules_required=rules_required)

    async def activation(self, param: Obj | None) -> Obj:
        if self._base is None:
            user = current_user()
            u: Obj = review.user_info(user.name, user.groups, user.uid) if user is not None else {"username": ""}
            if user is not None and user.extra:
                u["extra"] = {k: list(v) for k, v in user.extra}
            req = review.review_request("", self.a, self.adm.kind.kind, None, None, u, self.adm.dry_run)["request"]
            for k in ("object", "oldObject", "uid"):
                req.pop(k, None)
            ns = await self.namespace()
            env = self.plugin.env
            self._base = {
                "object": self.adm.obj, "oldObject": self.adm.old if self.adm.operation != "CREATE" else None,
                "request": req, "namespaceObject": ns, "authorizer": env.authorizer(u),
                "authorizer.requestResource": env.request_resource(u, {
                    "group": self.a.group, "resource": self.a.resource, "subresource": self.a.subresource,
                    "namespace": self.a.namespace, "name": self.a.name}),
            }
        return {**self._base, "params": param}


def _run(prog: Program, act: Obj, budget: Budget) -> Any:
    # lite.cel charges a budget the expression's static estimate (not its actual cost), which for unbounded
    # request objects exceeds the per-call limit: policies are evaluated without a runtime budget for now.
    del budget
    try:
        return prog.eval(act)
    except CelError as e:
        return decide.Failed(f"expression '{prog.source}' resulted in error: {e}")


def _attributes(adm: Admission) -> Attributes:
    k = adm.kind
    return Attributes(adm.operation, k.group, k.version, k.plural, adm.subresource, k.namespaced,
                      adm.namespace if k.namespaced else "", adm.name)


def _name(o: Obj) -> str:
    return str((o.get("metadata") or {}).get("name") or "")


def _labels(o: Obj | None) -> dict[str, str]:
    labels = ((o or {}).get("metadata") or {}).get("labels")
    return labels if isinstance(labels, dict) else {}


def _kind(kinds: KindRegistry, plural: str) -> Kind:
    k = kinds.by_resource(GROUP, "v1", plural)
    if k is None:
        raise RuntimeError(f"{plural}.{GROUP} is not registered")
    return k

