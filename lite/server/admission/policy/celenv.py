"""The CEL environment of ValidatingAdmissionPolicy expressions, over the shared `lite.cel` package.

Variables (upstream `k8s.io/apiserver/pkg/admission/plugin/cel`): `object`, `oldObject`, `request`, `params`,
`namespaceObject`, `variables` (dynamic), `authorizer` and `authorizer.requestResource` (opaque types of the
Kubernetes authorizer library, upstream `library/authz.go`):

    authorizer.group(g).resource(r)[.subresource(s)][.namespace(ns)][.name(n)].check(verb) -> Decision
    authorizer.path(p).check(verb) -> Decision (path(p) is a PathCheck: check is all it has)
    authorizer.serviceAccount(ns, name) -> Authorizer (checks then run as that ServiceAccount)
    authorizer.requestResource.check(verb) -> Decision (the request's group/resource/namespace/name)
    Decision.allowed() / .reason() / .errored() / .error()

Each opaque value carries its state as JSON text in its one string field (see `lite.cel.opaque`); `check`
calls the `Check` function given to `PolicyEnv` with (user, attributes) and turns its answer into a Decision.

Expressions are type-checked against upstream's signatures (a second environment where PathCheck is its own
type, never evaluated) before they are compiled for the runtime, so what upstream refuses at policy write is
refused, with cel-go's wording for receiver-style calls (`applied to 'kubernetes.authorization.PathCheck.(string)'`).

Invariants: one `PolicyEnv` per plugin (its `Environment` is immutable and shared by all requests); a
`Program` is compiled once per policy revision by the caller.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from typing import Any

from cel_expr_python import cel

from lite.cel.cost import member_calls
from lite.cel.env import Activation, CompileError, Environment, Function, Program
from lite.records import dataclass

AUTHORIZER = "kubernetes.authorization.Authorizer"
GROUP_CHECK = "kubernetes.authorization.GroupCheck"
RESOURCE_CHECK = "kubernetes.authorization.ResourceCheck"
PATH_CHECK = "kubernetes.authorization.PathCheck"
DECISION = "kubernetes.authorization.Decision"
OPAQUE = (AUTHORIZER, GROUP_CHECK, RESOURCE_CHECK, DECISION)
_MEMBER_OVERLOAD = re.compile(r"^(ERROR: <input>:(\d+):(\d+): found no matching overload for '[^']*' applied to )"
                              r"'\(([^,()]+)(?:, (.*))?\)'$")

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


class _TypesOnly(Environment):
    """An environment that is only compiled against, never evaluated (its two `check` overloads cannot be
    registered for evaluation): the literal checks, which evaluate, are the evaluated environment's."""

    def _check_literals(self, source: str) -> None:
        return None


def _typing_functions() -> list[Function]:
    """Upstream's authorizer library signatures (`library/authz.go`), for type checking only: `path` gives a
    PathCheck, which has `check` and nothing else. (The runtime cannot tell two `check` overloads apart by their
    message receivers, so the evaluated environment gives `path` a ResourceCheck; compiling against this one
    first refuses what upstream refuses.)"""
    S, B = cel.Type.STRING, cel.Type.BOOL

    def never(*_: Any) -> Any:
        raise ValueError("type-checking environment: not evaluated")

    member = [("path", [AUTHORIZER, S], PATH_CHECK), ("group", [AUTHORIZER, S], GROUP_CHECK),
              ("serviceAccount", [AUTHORIZER, S, S], AUTHORIZER), ("resource", [GROUP_CHECK, S], RESOURCE_CHECK),
              ("subresource", [RESOURCE_CHECK, S], RESOURCE_CHECK), ("namespace", [RESOURCE_CHECK, S], RESOURCE_CHECK),
              ("name", [RESOURCE_CHECK, S], RESOURCE_CHECK), ("check", [RESOURCE_CHECK, S], DECISION),
              ("check", [PATH_CHECK, S], DECISION), ("allowed", [DECISION], B), ("reason", [DECISION], S),
              ("errored", [DECISION], B), ("error", [DECISION], S)]
    return [Function(name, f"typing_{name}_{params[0].rsplit('.', 1)[1].lower()}", params, result, never, True)
            for name, params, result in member]


_UNDECLARED = re.compile(r"^(ERROR: <input>:(\d+):(\d+): )undeclared reference to '([^']*)' \(in container ''\)$")
_AUTHZ_METHODS = frozenset({"path", "group", "serviceAccount", "resource", "subresource", "namespace", "name",
                            "check", "allowed", "reason", "errored", "error"})
_TYPE_PART = re.compile(r"[A-Z_]+(?=[<>,]|$)")


def _type_name(runtime: str) -> str:
    """A type as cel-go writes it (`string`, `list(int)`, `map(string, dyn)`, `null_type`), from the runtime's
    (`STRING`, `LIST<INT>`, ...); message types are left as they are."""
    if "." in runtime:
        return runtime
    out = _TYPE_PART.sub(lambda m: {"NULL": "null_type"}.get(m.group(0), m.group(0).lower()), runtime)
    return out.replace("<", "(").replace(">", ")").replace(",", ", ").replace(",  ", ", ")


def member_style(source: str, message: str) -> str:
    """A "no matching overload" error of a receiver-style call in cel-go's words: the receiver's type before the
    arguments (`'kubernetes.authorization.PathCheck.(string)'`, not `'(kubernetes.authorization.PathCheck,
    string)'`). Other messages are returned as they are."""
    first, sep, rest = message.partition("\n")
    m = _MEMBER_OVERLOAD.match(first)
    if m is None:
        return message
    line, col = int(m.group(2)), int(m.group(3))
    lines = source.split("\n")
    text = lines[line - 1] if 0 < line <= len(lines) else ""
    before = re.sub(r"[A-Za-z_][A-Za-z0-9_]*\s*$", "", text[:col - 1]).rstrip()  # the caret is at the '('
    if not before.endswith("."):
        return message  # a global call: cel-go writes the arguments alone, as the runtime does
    return f"{m.group(1)}'{m.group(4)}.({m.group(5) or ''})'{sep}{rest}"


def _state(v: Any) -> dict[str, Any]:
    return dict(json.loads(v.v or "{}"))


class PolicyEnv:
    """The compiled-once environment; `compile` raises `CompileError` with the runtime's message."""

    def __init__(self, check: Check) -> None:
        self.check = check
        self.env = Environment(VARIABLES, functions=self._functions(), opaque_types=OPAQUE)
        self.types = _TypesOnly(VARIABLES, functions=_typing_functions(), opaque_types=(*OPAQUE, PATH_CHECK))

    def compile(self, source: str) -> Program:
        """Type-check `source` against upstream's authorizer signatures, then compile it for the runtime."""
        try:
            self.types.compile(source)
        except CompileError as e:
            raise CompileError(self._arity(source, member_style(source, str(e)))) from None
        return self.env.compile(source)  # (also checks literal regexes, durations and timestamps)

    def _arity(self, source: str, message: str) -> str:
        """The runtime calls an authorizer method given the wrong number of arguments an undeclared reference;
        cel-go reports no matching overload for the receiver's and arguments' types: so does this."""
        first, sep, rest = message.partition("\n")
        m = _UNDECLARED.match(first)
        if m is None or m.group(4) not in _AUTHZ_METHODS:
            return message
        line, col, name = int(m.group(2)), int(m.group(3)), m.group(4)
        offset = sum(len(x) + 1 for x in source.split("\n")[:line - 1]) + col - 1
        for c in member_calls(source, (name,)):
            if c.name_start + len(name) != offset or c.start == c.name_start:
                continue
            receiver = source[c.start:c.name_start].rstrip().removesuffix(".").removesuffix("?")
            try:
                types = [_type_name(self.types.compile(t).result_type().name())
                         for t in [receiver, *(source[a:b] for a, b in c.args)]]
            except CompileError:
                return message
            return (f"{m.group(1)}found no matching overload for '{name}' applied to "
                    f"'{types[0]}.({', '.join(types[1:])})'{sep}{rest}")
        return message

    def compile_error(self, source: str) -> str | None:
        try:
            self.compile(source)
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

