"""The CEL environment of ValidatingAdmissionPolicy expressions, over the shared `lite.cel` package.

Variables (upstream `k8s.io/apiserver/pkg/admission/plugin/cel`): `object`, `oldObject`, `request`, `params`,
`namespaceObject`, `variables` (dynamic), `authorizer` and `authorizer.requestResource` (opaque types of the
Kubernetes authorizer library, upstream `library/authz.go`):

    authorizer.group(g).resource(r)[.subresource(s)][.namespace(ns)][.name(n)].check(verb) -> Decision
    authorizer.path(p).check(verb) -> Decision
    authorizer.serviceAccount(ns, name) -> Authorizer (checks then run as that ServiceAccount)
    authorizer.requestResource.check(verb) -> Decision (the request's group/resource/namespace/name)
    Decision.allowed() / .reason() / .errored() / .error()

Each opaque value carries its state as JSON text in its one string field (see `lite.cel.opaque`); `check`
calls the `Check` function given to `PolicyEnv` with (user, attributes) and turns its answer into a Decision.

Invariants: one `PolicyEnv` per plugin (its `Environment` is immutable and shared by all requests); a
`Program` is compiled once per policy revision by the caller.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from cel_expr_python import cel

from lite.cel.env import Activation, CompileError, Environment, Function, Program

AUTHORIZER = "kubernetes.authorization.Authorizer"
GROUP_CHECK = "kubernetes.authorization.GroupCheck"
RESOURCE_CHECK = "kubernetes.authorization.ResourceCheck"
DECISION = "kubernetes.authorization.Decision"
OPAQUE = (AUTHORIZER, GROUP_CHECK, RESOURCE_CHECK, DECISION)

VARIABLES: dict[str, Any] = {
    "object": cel.Type.DYN, "oldObject": cel.Type.DYN, "request": cel.Type.DYN, "params": cel.Type.DYN,
    "namespaceObject": cel.Type.DYN, "variables": cel.Type.DYN,
    "authorizer": AUTHORIZER, "authorizer.requestResource": RESOURCE_CHECK,
}


@dataclass(frozen=True)
class AuthzDecision:
    """What an authorizer said: upstream's decision (allow/deny/no opinion), its reason, an error text."""

    allowed: bool
    reason: str = ""
    error: str = ""


# (user json, attributes) -> decision. Attributes: verb, group, resource, subresource, namespace, name, path.
Check = Callable[[dict[str, Any], dict[str, str]], AuthzDecision]


def _state(v: Any) -> dict[str, Any]:
    return dict(json.loads(v.v or "{}"))


class PolicyEnv:
    """The compiled-once environment; `compile` raises `CompileError` with the runtime's message."""

    def __init__(self, check: Check) -> None:
        self.check = check
        self.env = Environment(VARIABLES, functions=self._functions(), opaque_types=OPAQUE)

    def compile(self, source: str) -> Program:
        return self.env.compile(source)

    def compile_error(self, source: str) -> str | None:
        try:
            self.env.compile(source)
        except CompileError as e:
            return str(e)
        return None

    def activation(self, data: Mapping[str, Any]) -> Activation:
        """`data` converted to CEL once and shared by every expression of a policy (what a `Program.eval(dict)`
        would convert again for each expression: ~10x cheaper)."""
        return self.env.activation(data)

    def authorizer(self, user: dict[str, Any]) -> Any:
        return self._make(AUTHORIZER, {"user": user})

    def request_resource(self, user: dict[str, Any], attrs: dict[str, str]) -> Any:
        return self._make(RESOURCE_CHECK, {"user": user, **attrs})

    def _make(self, name: str, state: dict[str, Any]) -> Any:
        return self.env.opaque.make(name, json.dumps(state, separators=(",", ":")))

    def _derive(self, name: str, field: str) -> Callable[[Any, str], Any]:
        def impl(v: Any, arg: str) -> Any:
            return self._make(name, {**_state(v), field: arg})
        return impl

    def _check(self, v: Any, verb: str) -> Any:
        state = _state(v)
        user = state.pop("user", {})
        state["verb"] = verb
        try:
            d = self.check(user, {k: str(x) for k, x in state.items()})
        except Exception as e:  # an authorizer failure is the decision's error, as upstream
            d = AuthzDecision(False, "", str(e))
        return self._make(DECISION, {"allowed": d.allowed, "reason": d.reason, "error": d.error})

    def _service_account(self, v: Any, namespace: str, name: str) -> Any:
        user = {"username": f"system:serviceaccount:{namespace}:{name}",
                "groups": ["system:serviceaccounts", f"system:serviceaccounts:{namespace}", "system:authenticated"]}
        return self._make(AUTHORIZER, {"user": user})

    def _functions(self) -> list[Function]:
        S, B = cel.Type.STRING, cel.Type.BOOL
        return [
            Function("group", "authorizer_group", [AUTHORIZER, S], GROUP_CHECK, self._derive(GROUP_CHECK, "group"),
                     True),
            # the runtime dispatches member overloads on (name, arity, message-ness), so a path check is a
            # ResourceCheck carrying a path: one `check` overload serves both
            Function("path", "authorizer_path", [AUTHORIZER, S], RESOURCE_CHECK, self._derive(RESOURCE_CHECK, "path"),
                     True),
            Function("serviceAccount", "authorizer_serviceaccount", [AUTHORIZER, S, S], AUTHORIZER,
                     self._service_account, True),
            Function("resource", "groupcheck_resource", [GROUP_CHECK, S], RESOURCE_CHECK,
                     self._derive(RESOURCE_CHECK, "resource"), True),
            Function("subresource", "resourcecheck_subresource", [RESOURCE_CHECK, S], RESOURCE_CHECK,
                     self._derive(RESOURCE_CHECK, "subresource"), True),
            Function("namespace", "resourcecheck_namespace", [RESOURCE_CHECK, S], RESOURCE_CHECK,
                     self._derive(RESOURCE_CHECK, "namespace"), True),
            Function("name", "resourcecheck_name", [RESOURCE_CHECK, S], RESOURCE_CHECK,
                     self._derive(RESOURCE_CHECK, "name"), True),
            Function("check", "resourcecheck_check", [RESOURCE_CHECK, S], DECISION, self._check, True),
            Function("allowed", "decision_allowed", [DECISION], B, lambda d: bool(_state(d)["allowed"]), True),
            Function("reason", "decision_reason", [DECISION], S, lambda d: str(_state(d)["reason"]), True),
            Function("errored", "decision_errored", [DECISION], B, lambda d: bool(_state(d)["error"]), True),
            Function("error", "decision_error", [DECISION], S, lambda d: str(_state(d)["error"]), True),
        ]

