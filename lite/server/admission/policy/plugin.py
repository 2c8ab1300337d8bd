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

Status: each policy's `status.observedGeneration` and `status.typeChecking` (see `typecheck.py`) are written
through `/status` once per generation.

Invariants: requests on admissionregistration.k8s.io objects are exempt (a broken policy can always be
removed); the policy set is read from memory once the informers listed (from the registry before); each
policy evaluation has upstream's runtime cost limits (see `budget.py`).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import field
from functools import cached_property
from typing import TYPE_CHECKING, Any

from lite.cel.errors import CelError
from lite.client import Client
from lite.errors import ApiError, Cause
from lite.informer import Informer
from lite.kinds import Kind, KindRegistry
from lite.records import dataclass
from lite.selectors import LabelSelector
from lite.server.admission import equivalent, review, versioned
from lite.server.admission.matching import Attributes, parse_selector
from lite.server.admission.namespaces import NamespaceLabels
from lite.server.admission.policy.status import PolicyStatus
from lite.server.api.admissionwarnings import add_warning
from lite.server.api.conversion import Converter
from lite.server.api.strategies.base import Admission
from lite.server.authz.attrs import Attributes as AuthzAttributes
from lite.server.authz.attrs import RequestInfo
from lite.server.authz.chain import AuthorizerChain
from lite.server.requestuser import UserInfo, current_user

if TYPE_CHECKING:
    from lite.cel import projection
    from lite.cel.env import Program
    from lite.server.admission.policy import budget, decide
    from lite.server.admission.policy.celenv import AuthzDecision, PolicyEnv
    from lite.server.admission.policy.plain import Plan

log = logging.getLogger("lite.admission")
audit = logging.getLogger("lite.audit")
GROUP = "admissionregistration.k8s.io"
Obj = dict[str, Any]
_JSON_VARIABLES = ("object", "oldObject", "request", "namespaceObject")


@dataclass
class Compiled:
    """One policy revision's programs (or the configuration error that stops it)."""

    error: str = ""
    conditions: list[tuple[str, Program]] = field(default_factory=list)
    variables: list[tuple[str, Program]] = field(default_factory=list)
    validations: list[tuple[Obj, Program, Program | None]] = field(default_factory=list)
    audits: list[tuple[str, str, Program]] = field(default_factory=list)
    safe_size: int = field(default_factory=lambda: _unbounded())  # values no longer than this cannot go over a
    # cost limit (budget.py)


def _unbounded() -> int:
    from lite.server.admission.policy.budget import UNBOUNDED

    return UNBOUNDED


class PolicyAdmission:
    def __init__(self, client: Client, kinds: KindRegistry, namespaces: NamespaceLabels,
                 authorizer: AuthorizerChain | None, *, plain: bool = True, converter: Converter | None = None) -> None:
        """`plain=False` judges every policy exactly (tests compare both paths); `converter`: the API server's
        CRD conversion webhooks, for custom objects shown in another version."""
        self.converter = converter
        self.client, self.kinds, self.namespaces, self.authorizer = client, kinds, namespaces, authorizer
        self.plain = plain
        self.policy_kind = _kind(kinds, "validatingadmissionpolicies")
        self.binding_kind = _kind(kinds, "validatingadmissionpolicybindings")
        self.policies = Informer(client, self.policy_kind)
        self.bindings = Informer(client, self.binding_kind)
        self._compiled: dict[tuple[str, str], Compiled] = {}
        self._bound_key: tuple[str, str] = ("", "")
        self._bound_set: list[tuple[Obj, list[Obj]]] = []
        self._selectors: dict[int, Any] = {}
        self._rules: dict[tuple[Any, ...], bool] = {}
        self._memo = False
        self._plans: dict[tuple[Any, ...], Plan] = {}
        self._elements: dict[tuple[str, str], list[str] | None] = {}
        self._everything = LabelSelector()
        self.families = equivalent.families(kinds)

    @cached_property
    def env(self) -> PolicyEnv:
        """The CEL environment, built when the first policy is compiled: a server without policies never
        loads the CEL runtime (cel-expr-python and protobuf, about 15 MB)."""
        from lite.server.admission.policy.celenv import PolicyEnv

        return PolicyEnv(self._check)

    def compile_error(self, source: str) -> str | None:
        """`PolicyEnv.compile_error` (for the policy strategy's validation), the environment built on first use."""
        return self.env.compile_error(source)

    async def run(self) -> None:
        async with asyncio.TaskGroup() as tg:
            tg.create_task(self.policies.run())
            tg.create_task(self.bindings.run())
            tg.create_task(PolicyStatus(self.client, self.kinds, self.policies).run())

    async def _list(self, informer: Informer) -> list[Obj]:
        if informer.has_synced:
            return informer.list()
        return list((await self.client.list(informer.kind)).get("items") or [])

    # ---- the hook ----------------------------------------------------------------------------------

    async def _bound(self) -> list[tuple[Obj, list[Obj]]]:
        """(policy, its bindings) for every policy that has bindings, by name; rebuilt only when either
        informer saw a change (its last resourceVersion moved)."""
        synced = self.policies.has_synced and self.bindings.has_synced
        key = (self.policies.last_sync_resource_version, self.bindings.last_sync_resource_version)
        if synced and key == self._bound_key:
            return self._bound_set
        self._memo = False  # id()-keyed memos hold only for a set kept alive in _bound_set
        by_policy: dict[str, list[Obj]] = {}
        for b in sorted(await self._list(self.bindings), key=_name):
            by_policy.setdefault(str((b.get("spec") or {}).get("policyName") or ""), []).append(b)
        bound = [(p, by_policy[_name(p)]) for p in sorted(await self._list(self.policies), key=_name)
                 if _name(p) in by_policy]
        if synced:
            self._bound_key, self._bound_set = key, bound
            self._selectors.clear()  # both keyed by id() of dicts of the previous set
            self._rules.clear()
            self._plans.clear()
            self._memo = True
        return bound

    def _rules_match(self, m: Obj, a: Attributes, rules_required: bool) -> bool:
        """`matching.resource_rules_match`, remembered per match block of the current policy set and request
        kind (operation, resource, version, scope) unless the block's rules name objects."""
        from lite.server.admission.policy import matching

        if not self._memo or matching.name_dependent(m):
            return matching.resource_rules_match(m, a, rules_required=rules_required)
        key = (id(m), rules_required, a.operation, a.group, a.version, a.resource, a.subresource, a.namespaced)
        got = self._rules.get(key)
        if got is None:
            if len(self._rules) > 4096:
                self._rules.clear()
            self._plans.clear()
            self._memo = True
            got = self._rules[key] = matching.resource_rules_match(m, a, rules_required=rules_required)
        return got

    def _parse(self, d: Any) -> LabelSelector | None:
        """`parse_selector`, remembered per selector object of the current policy set."""
        if not d:
            return self._everything if d is None or d == {} else None
        if not self._memo:
            return parse_selector(d)
        got = self._selectors.get(id(d), self)
        if got is self:
            got = self._selectors[id(d)] = parse_selector(d)
        return got if isinstance(got, LabelSelector) else None

    async def validate(self, adm: Admission) -> None:
        if adm.kind.group == GROUP:
            return
        if self._memo and (self.policies.last_sync_resource_version,
                           self.bindings.last_sync_resource_version) == self._bound_key:
            bound = self._bound_set  # the common case: nothing changed since the last request
        else:
            bound = await self._bound()
        if not bound:
            return
        from lite.server.admission.policy import budget, decide  # with `plain`: loaded by the first bound policy
        from lite.server.admission.policy.plain import Plan

        k = adm.request_kind
        family = equivalent.family_of(self.families, self.kinds, k)
        plan: Plan | None
        if family:  # kinds with equivalents: each policy sees the request in the version it matched
            plan = Plan(None, bound, frozenset())
        else:
            plan = self._plans.get((adm.operation, k.group, k.version, k.plural, adm.subresource, k.namespaced)) \
                if self._memo else None
        if plan is None:
            plan = self._plan(bound, _attributes(adm))
        if plan.combined is None and not plan.others:
            return  # no policy can match a request of this kind: nothing to build
        ctx: _Request | None = None
        exact = plan.others
        if plan.combined is not None:
            r: Any = None
            try:
                if plan.reads:
                    ctx = _Request(self, adm, _attributes(adm), family)
                    data: Any = await ctx.plain_activation(plan.reads, plan.paths)
                else:  # object and oldObject alone: no request to describe
                    data = _plain_data(adm, plan.paths)
                from lite.cel.env import Activation  # loaded already: a plan with policies compiled them

                # values that might go over a cost limit: every policy is judged (and metered) exactly
                if plan.safe_size >= budget.UNBOUNDED or not budget.too_large(
                        plan.safe_size, data.data if isinstance(data, Activation) else data):
                    # from a plain mapping (the program reads each variable once, `bind_once`): ~2.5 us less
                    # than making an Activation first
                    r = plan.combined.eval(data)
            except CelError:  # conversion or evaluation failed: the exact path reports it
                pass
            if r is not True:
                exact = bound  # something failed: every policy's exact decisions, in order
        if not exact:
            return
        a = _attributes(adm)
        if ctx is None:
            ctx = _Request(self, adm, a, family)
        out = decide.Outcome()
        for policy, bindings in exact:
            await self._policy(ctx, policy, bindings, out)
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

    def _plan(self, bound: list[tuple[Obj, list[Obj]]], a: Attributes) -> Plan:
        """How to judge requests of `a`'s kind against the current set: the validations of every "plain"
        policy (no params, matchConditions, variables, audit annotations, selectors or resourceNames, and a
        binding that applies whole) as one CEL conjunction (`a && b && ...`), judged at once (the request
        passes them all, or every policy is then evaluated exactly); the others one by one. Remembered per
        request kind."""
        from lite.cel import projection
        from lite.server.admission.policy import budget, matching
        from lite.server.admission.policy.plain import Plan, bind_once, no_selectors

        key = (a.operation, a.group, a.version, a.resource, a.subresource, a.namespaced)
        got = self._plans.get(key) if self._memo else None
        if got is not None:
            return got
        plain: list[str] = []
        others: list[tuple[Obj, list[Obj]]] = []
        safe = budget.UNBOUNDED
        for policy, bindings in bound:
            spec = policy.get("spec") or {}
            m = spec.get("matchConstraints")
            if not self.plain or not self._memo or not isinstance(m, dict) or matching.name_dependent(m):
                others.append((policy, bindings))
                continue
            if not self._rules_match(m, a, True):
                continue  # no request of this kind can match it
            applying = [b for b in bindings if self._binding_applies_whole((b.get("spec") or {}).get("matchResources"),
                                                                             a)]
            compiled = self._compile(policy)
            elements = None if compiled.error or not no_selectors(m) or len(applying) != len(bindings) \
                else self._plain_elements(policy)
            if elements is None:
                others.append((policy, bindings))
                continue
            plain += elements
            safe = min(safe, compiled.safe_size)
        combined: Program | None = None
        # one conjunction: true exactly when every element is (an error or a false anywhere is not true), and
        # cheaper than a list, which the runtime builds and hands back element by element
        source = " && ".join(f"({e})" for e in plain)
        if plain:
            try:
                combined = self.env.compile(bind_once(source, ("object", "oldObject")))
            except CelError:
                others = bound
        joined = " ".join(plain)
        reads = frozenset(v for v in ("request", "namespaceObject", "authorizer") if v in joined)
        plan = Plan(combined, others, reads, projection.reads(source, _JSON_VARIABLES) if combined else None, safe)
        if self._memo:
            if len(self._plans) > 1024:
                self._plans.clear()
            self._plans[key] = plan
        return plan

    def _plain_elements(self, policy: Obj) -> list[str] | None:
        """The policy's validations as elements of the plain path's list (each true when the validation passes
        or the matchConditions exclude the request; variables bound with `cel.bind`), or None when it has
        params or audit annotations or its rewritten expressions do not compile. Remembered per revision."""
        from lite.server.admission.policy.plain import plain_elements

        meta = policy.get("metadata") or {}
        key = (str(meta.get("name") or ""), str(meta.get("resourceVersion") or ""))
        if key in self._elements:
            return self._elements[key]
        if len(self._elements) > 256:
            self._elements.clear()
        elements = plain_elements(policy.get("spec") or {})
        if elements is not None:
            try:
                for e in elements:
                    self.env.compile(e)
            except CelError:
                elements = None
        self._elements[key] = elements
        return elements

    def _binding_applies_whole(self, m: Any, a: Attributes) -> bool:
        """Whether a binding's matchResources lets every request of `a`'s kind through (so the plain path may
        judge it without looking at the request's object or namespace)."""
        from lite.server.admission.policy import matching
        from lite.server.admission.policy.plain import no_selectors

        if m is None:
            return True
        return isinstance(m, dict) and not matching.name_dependent(m) and no_selectors(m) \
            and self._rules_match(m, a, False)

    async def _policy(self, ctx: _Request, policy: Obj, bindings: list[Obj], out: decide.Outcome) -> None:
        spec = policy.get("spec") or {}
        fp = str(spec.get("failurePolicy") or "Fail")
        pname = _name(policy)
        seen = await ctx.constraints_kind(spec.get("matchConstraints"))
        if seen is None:
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
            if not await ctx.binding_matches(bspec.get("matchResources")):
                continue
            try:
                params = await self._params(param_kind, bspec.get("paramRef"), ctx.a)
            except _ConfigError as e:
                out.config_error(pname, bname, fp, str(e))
                continue
            actions = [str(x) for x in bspec.get("validationActions") or []]
            versioned_ctx = await ctx.seen_as(seen)
            for param in params:
                await self._evaluate(versioned_ctx, compiled, fp, pname, bname, actions, param, out, annotations)
        for key, values in annotations.items():
            out.annotations[f"{pname}/{key}"] = ", ".join(values)

    async def _evaluate(self, ctx: _Request, c: Compiled, fp: str, pname: str, bname: str, actions: list[str],
                        param: Obj | None, out: decide.Outcome, annotations: dict[str, list[str]]) -> None:
        from lite.server.admission.policy import budget, decide

        data = await ctx.full(param)
        try:
            act = ctx.shared if param is None and ctx.shared is not None else self.env.activation(data)
        except CelError as e:  # values CEL cannot take: a failure of every expression, by failurePolicy
            if fp != "Ignore":
                out.apply(pname, bname, actions, 0, decide.Decision(True, str(e), "", True))
            return
        if param is None:
            ctx.shared = act
        meter = budget.meter(c.safe_size, data, ctx.sizes)

        def give_up(message: str) -> None:
            if fp != "Ignore":
                out.apply(pname, bname, actions, 0, decide.Decision(True, message, "", True))

        if c.conditions:  # as upstream's matcher: any false skips; else errors fail by failurePolicy
            left = budget.MATCH_CONDITIONS_BUDGET
            results = []
            for _cond, prog in c.conditions:
                r, left = _metered(prog, act, meter, left)
                if left < 0:
                    return give_up(budget.OUT_OF_BUDGET)
                results.append(r)
            if any(r is False for r in results):
                return
            errors = [r.message for r in results if isinstance(r, decide.Failed)]
            if errors:
                return give_up(errors[0] if len(errors) == 1 else f"[{', '.join(errors)}]")
            if any(r is not True for r in results):
                return
        left = budget.RUNTIME_CEL_COST_BUDGET
        if c.variables:
            variables: Obj = {}
            for vname, prog in c.variables:  # in order: a variable may read the ones before it
                over = False
                if meter is not None:
                    meter.set_variables(variables)
                    cost = meter.cost(prog)
                    over = cost > budget.PER_CALL_LIMIT
                    left -= min(cost, budget.PER_CALL_LIMIT)
                    if left < 0:
                        return give_up(budget.OUT_OF_BUDGET)
                if over:
                    continue  # cancelled: as a variable that failed, an error where it is read
                r = _run_with(prog, self.env, {**data, "variables": variables})
                if not isinstance(r, decide.Failed):
                    variables[vname] = r
            if meter is not None:
                meter.set_variables(variables)
            try:
                act = self.env.activation({**data, "variables": variables})
            except CelError as e:
                return give_up(str(e))
        results = []
        for _v, prog, _msg in c.validations:
            r, left = _metered(prog, act, meter, left)
            if left < 0:
                return give_up(budget.OUT_OF_BUDGET)
            results.append(r)
        messages_failed = False
        cancelled: set[int] = set()  # messageExpressions over the per-call limit
        if meter is not None:  # upstream evaluates every messageExpression, on what the validations left
            for i, (_v, _prog, msg_prog) in enumerate(c.validations):
                if msg_prog is not None:
                    cost = meter.cost(msg_prog)
                    if cost > budget.PER_CALL_LIMIT:
                        cancelled.add(i)
                    left -= min(cost, budget.PER_CALL_LIMIT)
            messages_failed = left < 0
        decisions: list[tuple[int, decide.Decision]] = []
        for i, ((v, _prog, msg_prog), r) in enumerate(zip(c.validations, results, strict=True)):
            if messages_failed and not isinstance(r, decide.Failed):
                r = decide.Failed(f"failed messageExpression: {budget.OUT_OF_BUDGET}")
            m = _run(msg_prog, act) if msg_prog is not None and r is not True \
                and not isinstance(r, decide.Failed) and i not in cancelled else None
            d = decide.validation_decision(v, r, m, fp)
            if d.deny:
                decisions.append((i, d))
        left = budget.RUNTIME_CEL_COST_BUDGET
        audited: list[tuple[str, str, Any]] = []
        for key, expr, prog in c.audits:
            r, left = _metered(prog, act, meter, left)
            if left < 0:
                return give_up(budget.OUT_OF_BUDGET)
            audited.append((key, expr, r))
        for i, d in decisions:
            out.apply(pname, bname, actions, i, d)
        for key, expr, r in audited:
            value, denial = decide.audit_value(key, expr, r, fp)
            if denial is not None:
                out.denied.append((pname, bname, denial))
            if value is not None and value not in annotations.setdefault(key, []):
                annotations[key].append(value)

    # ---- compile, params -----------------------------------------------------------------------------

    def _compile(self, policy: Obj) -> Compiled:
        from lite.server.admission.policy import budget

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
            c.safe_size = budget.safe_size([p for _, p in c.conditions], [p for _, p in c.variables],
                                           [p for _, p, _m in c.validations],
                                           [m for _, _p, m in c.validations if m is not None],
                                           [p for _, _k, p in c.audits])
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
        from lite.server.admission.policy.celenv import AuthzDecision  # loaded with `env`, which calls this

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

    def __init__(self, plugin: PolicyAdmission, adm: Admission, a: Attributes, family: equivalent.Family = (),
                 kind: Kind | None = None) -> None:
        """`a`: the request as the client made it; `kind`: the version this view of it is in (by default the
        client's); `family`: the request kind's equivalent kinds."""
        self.plugin, self.adm, self.family = plugin, adm, family
        self.requested = a
        self.kind = kind or adm.request_kind
        self.a = equivalent.seen_as(a, self.kind) if kind is not None else a
        self._versions: dict[equivalent.Key, _Request] = {equivalent.key(self.kind): self}
        self._ns: Obj | None = None
        self._ns_done = False
        self._base: Obj | None = None
        self.shared: Any = None  # the runtime activation without params, shared by the policies that have none
        self.sizes: dict[int, int] = {}  # JSON lengths of this request's values, by identity (budget.meter)
        self._user: Obj = {}
        self._authz: Obj | None = None

    @cached_property
    def obj(self) -> Obj | None:
        """The object in this version (converted on first use: most requests match no policy)."""
        return equivalent.present(self.adm.kind, self.kind, self.adm.obj)

    @cached_property
    def old(self) -> Obj | None:
        return equivalent.present(self.adm.kind, self.kind, self.adm.old)

    async def seen_as(self, kind: Kind) -> _Request:
        """This request as a policy that sees it in `kind`'s version does (object converted, `request.kind` that
        version); one per version, sharing the namespace lookup."""
        got = self._versions.get(equivalent.key(kind))
        if got is None:
            got = _Request(self.plugin, self.adm, self.requested, self.family, kind)
            got._versions = self._versions
            got._ns, got._ns_done = self._ns, self._ns_done
            if versioned.by_webhook(self.adm.kind, kind):  # through the CRD's conversion webhook, now
                conv = self.plugin.converter
                got.__dict__["obj"] = await versioned.present(conv, self.adm.kind, kind, self.adm.obj)
                got.__dict__["old"] = await versioned.present(conv, self.adm.kind, kind, self.adm.old)
            self._versions[equivalent.key(kind)] = got
        return got

    async def constraints_kind(self, m: Any) -> Kind | None:
        """The kind whose version the policy with matchConstraints `m` sees the request in; None: no match."""
        from lite.server.admission.policy import matching

        if not self.family:
            return self.kind if await self.matches(m, rules_required=True) else None
        seen = matching.constraints_kind(m, self.requested, self.adm.request_kind, self.family)
        return seen if seen is not None and await self._selectors_match(m) else None

    async def binding_matches(self, m: Any) -> bool:
        """Whether a binding's matchResources `m` selects the request."""
        from lite.server.admission.policy import matching

        if not self.family:
            return await self.matches(m, rules_required=False)
        if not isinstance(m, dict):
            return True
        return matching.binding_rules_match(m, self.requested, self.adm.request_kind, self.family) and \
            await self._selectors_match(m)

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
        if m is None:
            return not rules_required
        if not self.plugin._rules_match(m, self.a, rules_required):
            return False
        return await self._selectors_match(m)

    async def _selectors_match(self, m: Obj) -> bool:
        from lite.server.admission.policy import matching

        labels = None
        if matching.needs_namespace_labels(m, self.a, self.plugin._parse):
            ns = await self.namespace()
            labels = _labels(ns) if ns is not None else {}
        return matching.selectors_match(m, self.a, labels, self.adm.obj, self.adm.old, self.plugin._parse)

    async def plain_activation(self, reads: frozenset[str], paths: dict[str, projection.Paths | None] | None) -> Any:
        """The runtime activation of the plain path: no params, and of the other variables only those the
        combined program `reads` (the request, namespace and authorizer values cost a little to make); of the
        JSON variables only the `paths` it can read (the runtime converts what it is given, whole)."""
        from lite.cel import projection

        if "authorizer" in reads:
            if self.shared is None:
                self.shared = self.plugin.env.activation(await self.full(None))
            return self.shared
        if not reads & {"request", "namespaceObject"}:  # (the plain path never serves kinds with equivalents)
            return _plain_data(self.adm, paths)
        data = await self.activation(None)
        if paths is not None:
            data = {k: projection.project(v, paths[k]) if k in paths else v for k, v in data.items()}
        return data  # evaluated once: converted by the runtime during that evaluation (no Activation to make)

    async def activation(self, param: Obj | None) -> Obj:
        if param is None and self._base is not None:
            return self._base
        if self._base is None:
            user = current_user()
            u: Obj = review.user_info(user.name, user.groups, user.uid) if user is not None else {"username": ""}
            if user is not None and user.extra:
                u["extra"] = {k: list(v) for k, v in user.extra}
            req = review.review_request("", self.a, self.kind.kind, None, None, u, self.adm.dry_run,
                                        requested=(self.requested, self.adm.request_kind.kind))["request"]
            for k in ("object", "oldObject", "uid"):
                req.pop(k, None)
            ns = await self.namespace()
            self._user = u
            self._base = {
                "params": None, "object": self.obj,
                "oldObject": self.old if self.adm.operation != "CREATE" else None,
                "request": req, "namespaceObject": ns,
            }
        return self._base if param is None else {**self._base, "params": param}

    async def full(self, param: Obj | None) -> Obj:
        """`activation(param)` with the authorizer variables."""
        data = await self.activation(param)
        if self._authz is None:
            env, u = self.plugin.env, self._user
            self._authz = {"authorizer": env.authorizer(u), "authorizer.requestResource": env.request_resource(u, {
                "group": self.a.group, "resource": self.a.resource, "subresource": self.a.subresource,
                "namespace": self.a.namespace, "name": self.a.name})}
        return {**data, **self._authz}


def _plain_data(adm: Admission, paths: dict[str, projection.Paths | None] | None) -> Obj:
    """The plain path's variables when it reads only `object` and `oldObject` (null on CREATE, as upstream):
    of each, the `paths` the combined program can read."""
    from lite.cel import projection

    old = adm.old if adm.operation != "CREATE" else None
    if paths is None:
        return {"object": adm.obj, "oldObject": old, "params": None}
    return {"object": projection.project(adm.obj, paths["object"]),
            "oldObject": projection.project(old, paths["oldObject"]), "params": None}


def _run_with(prog: Program, env: PolicyEnv, data: Obj) -> Any:
    """`_run` over a fresh activation of `data` (a conversion failure is the expression's failure)."""
    from lite.server.admission.policy import decide

    try:
        return _run(prog, env.activation(data))
    except CelError as e:
        return decide.Failed(f"expression '{prog.source}' resulted in error: {e}")


def _metered(prog: Program, act: Any, meter: budget.Meter | None, left: int) -> tuple[Any, int]:
    """(`_run`'s result, what is left of the budget after it; -1: it ran out). An expression over the per-call
    limit fails without running (upstream cancels it there)."""
    from lite.server.admission.policy import budget, decide

    if meter is None:
        return _run(prog, act), left
    cost = meter.cost(prog)
    if cost > budget.PER_CALL_LIMIT:
        left -= budget.PER_CALL_LIMIT
        return decide.Failed(f"expression '{prog.source}' resulted in error: {budget.CALL_LIMIT}"), \
            (left if left >= 0 else -1)
    if cost > left:
        return None, -1
    return _run(prog, act), left - cost


def _run(prog: Program, act: Any) -> Any:
    from lite.server.admission.policy import decide

    try:
        return prog.eval(act)
    except CelError as e:
        return decide.Failed(f"expression '{prog.source}' resulted in error: {e}")


def _attributes(adm: Admission) -> Attributes:
    """The request as the client made it (through a view: in the view's group and version)."""
    k = adm.request_kind
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
