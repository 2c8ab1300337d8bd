"""Compile CEL expressions once against declared variables; evaluate them with an activation and a cost budget.

`Environment(variables, functions=..., opaque_types=...)` builds one cel-expr-python environment with the
Kubernetes libraries (see `libraries.py`) plus the caller's functions; `env.compile(src)` returns a `Program`
(or raises `CompileError` with the runtime's caret message); `program.eval(activation, budget)` returns the
plain Python result (or raises `EvalError`, or `CostExceeded` when the budget runs out).

Invariants: an `Environment` and its `Program`s are immutable after construction and safe to share between
requests; evaluation never mutates the activation; errors carry upstream-like text without the C++ runtime's
status-code prefixes (`NOT_FOUND: `, `[INVALID_ARGUMENT]`). The error classes are defined in `errors.py` (importable
without the runtime) and re-exported here.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import field
from typing import Any

from cel_expr_python import cel
from cel_expr_python.ext import ext_bindings, ext_optional, ext_strings

from lite.cel import checking as checking_mod
from lite.cel import cost as costmod
from lite.cel import libraries
from lite.cel.errors import CelError as CelError
from lite.cel.errors import CompileError as CompileError
from lite.cel.errors import CostExceeded as CostExceeded
from lite.cel.errors import EvalError as EvalError

# Upstream's limits (k8s.io/apiserver/pkg/apis/cel/config.go).
from lite.cel.limits import MAX_REQUEST_SIZE_BYTES as MAX_REQUEST_SIZE_BYTES
from lite.cel.limits import PER_CALL_LIMIT as PER_CALL_LIMIT
from lite.cel.limits import RUNTIME_CEL_COST_BUDGET as RUNTIME_CEL_COST_BUDGET
from lite.cel.limits import STATIC_ESTIMATED_COST_LIMIT as STATIC_ESTIMATED_COST_LIMIT
from lite.cel.limits import STATIC_ESTIMATED_CRD_COST_LIMIT as STATIC_ESTIMATED_CRD_COST_LIMIT
from lite.cel.opaque import OpaqueTypes
from lite.records import dataclass

_STATUS_PREFIX = re.compile(r"^(?:[A-Z_]+: )")
_STATUS_SUFFIX = re.compile(r"\s*\[[A-Z_]+\]$")


def clean_message(text: str) -> str:
    """Drop the C++ runtime's status code decorations, keep the message (and its caret lines)."""
    lines = text.strip().splitlines() or [""]
    lines[0] = _STATUS_PREFIX.sub("", lines[0])
    lines[-1] = _STATUS_SUFFIX.sub("", lines[-1])
    out = "\n".join(lines)
    m = re.fullmatch(r'Key not found in map : "?(.*?)"?', out)
    if m:
        return f"no such key: {m.group(1)}"
    m = re.fullmatch(r"Index error: index=(-?\d+) size=\d+", out)
    if m:
        return f"index out of bounds: {m.group(1)}"
    m = re.fullmatch(r'No value with name "(.*)" found in Activation', out)
    if m:
        return f"no such attribute: {m.group(1)}"
    return out


@dataclass
class Budget:
    """A per-request runtime cost budget (upstream RuntimeCELCostBudget); `charge` raises once it is spent."""

    remaining: int = RUNTIME_CEL_COST_BUDGET
    per_call_limit: int = PER_CALL_LIMIT

    def charge(self, cost: int) -> None:
        if cost > self.per_call_limit:
            raise CostExceeded("operation cancelled: actual cost limit exceeded")
        if cost > self.remaining:
            self.remaining = -1
            raise CostExceeded("validation failed due to running out of cost budget, "
                               "no further validation rules will be run")
        self.remaining -= cost


@dataclass(frozen=True)
class Function:
    """One function overload a caller adds: `name`, parameter and result types (`cel.Type`s or opaque type
    names), `member` for receiver-style calls (`x.f(y)`, first parameter is the receiver), and `impl` (plain
    Python values in and out; raise ValueError to make the call fail with that message)."""

    name: str
    overload_id: str
    params: Sequence[Any]
    result: Any
    impl: Any
    member: bool = False


@dataclass(frozen=True)
class Activation:
    """Variable values converted to CEL once (`Environment.activation`), for several evaluations."""

    native: Any
    data: Mapping[str, Any]


@dataclass
class Program:
    """A compiled expression; `eval` returns plain Python values (lists, dicts, str, int, float, bool, None,
    opaque types as their protobuf message)."""

    source: str
    _expr: Any
    env: Environment
    estimated_cost: costmod.Cost = field(default_factory=lambda: costmod.Cost(1, 1))
    node: costmod.Node | None = None

    def result_type(self) -> Any:
        """The checked result type (`cel.BOOL`, `cel.STRING`, `cel.DYN` when it depends on the data, ...)."""
        return self._expr.return_type()

    def runtime_cost(self, scope: Mapping[str, costmod.Shape]) -> int:
        """The cost of one evaluation with the variables' actual values (`Shape(schema, values=[v])`)."""
        if self.node is None:
            return self.estimated_cost.max
        return costmod.estimate_node(self.node, dict(scope))

    def eval(self, activation: Mapping[str, Any] | Activation, budget: Budget | None = None, *,
             runtime_cost: int | None = None) -> Any:
        """Evaluate with `activation`: variable name -> plain JSON-like value, or an `Activation` made once by
        `env.activation(...)` and shared by several programs of the environment (the conversion of the values
        to CEL happens once there: ~10x cheaper per rule for an object-sized `self`). `budget`, when given, is
        charged the evaluation's cost (`runtime_cost`, else the program's estimated maximum) first."""
        if budget is not None:
            budget.charge(self.estimated_cost.max if runtime_cost is None else runtime_cost)
        try:
            if isinstance(activation, Activation):
                value = self._expr.eval(activation.native)
            else:
                value = self._expr.eval(data=activation)
        except RuntimeError as exc:  # activation/type errors are raised, not returned
            raise EvalError(clean_message(str(exc))) from None
        if value.type() == cel.Type.ERROR:
            raise EvalError(clean_message(str(value.value())))
        return value.plain_value()


class Environment:
    """Declared variables + the Kubernetes libraries + caller functions, compiled once."""

    def __init__(self, variables: Mapping[str, Any], *, functions: Iterable[Function] = (),
                 opaque_types: Iterable[str] = (), library: bool = True, messages: Iterable[Any] = (),
                 checking: bool = False) -> None:
        """`messages`: protobuf `FileDescriptorProto`s declaring message types that variables may have
        (`schematypes.Declarations.files()`). `checking`: an environment only to type-check with (`check`): it
        has cel-go's cross-type numeric comparisons, which the runtime lacks; do not evaluate its programs."""
        self.opaque = OpaqueTypes([*libraries.EXTRA_TYPES, *opaque_types], messages)
        decls: dict[str, list[Any]] = {}
        funcs = [*(libraries.all_functions(self.opaque) if library else []), *functions]
        for f in funcs:
            params = [self._type(p) for p in f.params]
            decls.setdefault(f.name, []).append(cel.Overload(f.overload_id, self._type(f.result), params,
                                                             is_member=f.member, impl=f.impl))
        self.variables = {k: self._type(v) for k, v in variables.items()}
        declared = [cel.FunctionDecl(name, overloads) for name, overloads in decls.items()]
        config = None
        if checking:
            config = cel.NewEnvConfigFromYaml(checking_mod.COMPARISON_CONFIG)
            declared += checking_mod.comparison_functions()
        self._env = cel.NewEnv(
            descriptor_pool=self.opaque.pool, variables=self.variables, config=config,
            extensions=[ext_strings.ExtStrings(), ext_optional.ExtOptional(), ext_bindings.ExtBindings()],
            functions=declared)

    def _type(self, t: Any) -> Any:
        if isinstance(t, str):
            return self.opaque.type(t)
        return t

    def _check_literals(self, source: str) -> None:
        """Upstream's AST validators (1.29+): a literal regex of `matches`, a literal `duration(...)` or
        `timestamp(...)` must be valid when the expression compiles (`invalid matches argument`). Checked by
        the runtime itself (RE2, its duration and timestamp parsers) on the literal alone."""
        for c in costmod.member_calls(source, tuple(_LITERAL_CHECKS)):
            if len(c.args) != 1 or (c.name == "matches") == (c.start == c.name_start):
                continue  # matches as a member call on a literal pattern; duration/timestamp as globals
            start, end = c.args[0]
            literal = source[start:end]
            if costmod.tokenize(literal)[0][0] != "str" or len(costmod.tokenize(literal)) != 2:
                continue
            try:
                bad = self._env.compile(_LITERAL_CHECKS[c.name].format(literal)).eval().type() == cel.Type.ERROR
            except RuntimeError:
                bad = True
            if bad:
                raise CompileError(issue(source, start, f"invalid {c.name} argument"))

    def activation(self, data: Mapping[str, Any]) -> Activation:
        """`data` converted once, to evaluate several of this environment's programs with it."""
        try:
            return Activation(self._env.Activation(data=data), data)
        except (RuntimeError, TypeError, ValueError) as exc:
            raise EvalError(clean_message(str(exc))) from None

    def check(self, source: str) -> Any:
        """Type-check `source` alone (no literal checks, no cost estimate): its result type (`cel.BOOL`, ...),
        or CompileError with cel-go's text."""
        return self._compile(source).return_type()

    def _compile(self, source: str) -> Any:
        rewritten = _with_optional_results(source)
        try:
            return self._env.compile(rewritten)
        except RuntimeError as exc:
            if rewritten == source:
                raise CompileError(checking_mod.go_style(source, clean_message(str(exc)))) from None
            try:  # the text as written: its own message (with its columns) if it does not compile either
                return self._env.compile(source)
            except RuntimeError as original:
                raise CompileError(checking_mod.go_style(source, clean_message(str(original)))) from None

    def compile(self, source: str, *, sizes: costmod.SizeFn | None = None) -> Program:
        """Compile `source`; `sizes` (variable path -> (min, max) size) feeds the static cost estimate."""
        expr = self._compile(source)
        self._check_literals(source)
        try:
            node: costmod.Node | None = costmod.parse(source)
        except (ValueError, RecursionError):
            node = None  # the runtime accepted what lite's estimator cannot read: unit cost, see cost.py
        scope = {v: (sizes(v) if sizes else costmod.Shape()) for v in self.variables}
        high = costmod.estimate_node(node, scope) if node is not None else 1
        return Program(source, expr, self, costmod.Cost(1, high), node)


_LITERAL_CHECKS = {"matches": "''.matches({})", "duration": "duration({})", "timestamp": "timestamp({})"}


def issue(src: str, at: int, message: str) -> str:
    """A compile error in the runtime's format: `ERROR: <input>:line:col: message` and a caret line."""
    line_no = src.count("\n", 0, at) + 1
    line_start = src.rfind("\n", 0, at) + 1
    line_end = src.find("\n", at)
    text = src[line_start:line_end if line_end >= 0 else len(src)]
    col = at - line_start
    return f"ERROR: <input>:{line_no}:{col + 1}: {message}\n | {text}\n | {'.' * col}^"


def _with_optional_results(src: str) -> str:
    """`src` as the runtime can compile it: two-variable comprehensions (`m.all(k, v, p)`, `existsOne`,
    `transformList`, `transformMap`, `transformMapEntry`) as one-variable macros over pairs; `string(x)` able
    to print IPs and CIDRs (bound as dyn and dispatched on its type); `indexOf` and
    `lastIndexOf` calls renamed to lite's `__indexOf`/`__lastIndexOf` (the strings
    extension owns those names and the runtime refuses list overloads beside its own), and the library calls
    that return optionals rewritten onto lite's non-optional functions (Python functions cannot return CEL
    optionals): `X.validate(s)` -> `optional.ofNonZeroValue(X.__formatValidate(s))`,
    `format.named(n)` -> `(format.__known(n) ? optional.of(format.__named(n)) : optional.none())`. One call
    at a time, the innermost first, so nested calls are rewritten too."""
    renames = sorted(costmod.member_calls(src, ("indexOf", "lastIndexOf")), key=lambda c: -c.name_start)
    for c in renames:  # list and string receivers: libraries.index_of
        src = src[:c.name_start] + "__" + c.name + src[c.name_start + len(c.name):]
    for _ in range(64):
        calls = [c for c in costmod.member_calls(src, _REWRITTEN) if _rewrite(src, c) is not None]
        if not calls:
            return src
        c = min(calls, key=lambda c: c.end - c.start)
        src = src[:c.start] + str(_rewrite(src, c)) + src[c.end:]
    return src


_TWO_VAR = ("all", "exists", "existsOne", "transformList", "transformMap", "transformMapEntry")
_REWRITTEN = ("validate", "named", "string", *_TWO_VAR)
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _rewrite(src: str, c: costmod.Call) -> str | None:
    """The replacement text of one call (see `_with_optional_results`), None to leave it."""
    receiver, args = src[c.start:c.name_start], src[c.name_start + len(c.name):c.end]
    if c.name == "string":  # string(ip) / string(cidr): the runtime refuses new overloads of `string`
        if c.start != c.name_start or len(c.args) != 1 or src[c.args[0][0]:c.args[0][1]].strip() == "__lite_s":
            return None
        return (f"cel.bind(__lite_s, dyn({src[c.args[0][0]:c.args[0][1]]}), type(__lite_s) == net.IP ? "
                "__lite_ip_text(__lite_s) : type(__lite_s) == net.CIDR ? __lite_cidr_text(__lite_s) : "
                "string(__lite_s))")
    if c.start == c.name_start:
        return None
    if c.name == "validate":
        return f"optional.ofNonZeroValue({receiver}__formatValidate{args})"
    if c.name == "named":
        if receiver.replace(" ", "") != "format.":
            return None
        return f"(format.__known{args} ? optional.of(format.__named{args}) : optional.none())"
    # two-variable comprehensions (cel-go's ext.TwoVarComprehensions, in upstream's 1.32 environment): the
    # runtime lacks them, so they become one-variable macros over lite's [key-or-index, value] pairs
    parts = [src[a:b].strip() for a, b in c.args]
    if len(parts) not in (3, 4) or not all(_IDENT.fullmatch(p) for p in parts[:2]) or \
            (len(parts) == 4 and c.name not in ("transformList", "transformMap")):
        return None
    k, v, rest = parts[0], parts[1], parts[2:]
    pairs = f"__lite_pairs({receiver.rstrip().removesuffix('.').removesuffix('?').rstrip('.')})"

    def bound(expr: str) -> str:
        return f"cel.bind({k}, __lite_p[0], cel.bind({v}, __lite_p[1], ({expr})))"

    if c.name in ("all", "exists"):
        return f"{pairs}.{c.name}(__lite_p, {bound(rest[0])})"
    if c.name == "existsOne":
        return f"{pairs}.exists_one(__lite_p, {bound(rest[0])})"
    body = ", ".join(bound(e) for e in rest)
    if c.name == "transformList":
        return f"{pairs}.map(__lite_p, {body})"
    if c.name == "transformMap":
        if len(rest) == 2:
            return f"__lite_to_map({pairs}.map(__lite_p, {bound(rest[0])}, [__lite_p[0], {bound(rest[1])}]))"
        return f"__lite_to_map({pairs}.map(__lite_p, [__lite_p[0], {body}]))"
    return f"__lite_merge_maps({pairs}.map(__lite_p, {body}))"


def cost_error_message(name: str, cost: int, limit: int) -> str:
    """Upstream's text for an estimate over its limit (`name` e.g. "estimated rule cost")."""
    factor = cost / limit
    if factor > 100.0:
        shown = "more than 100x"
    elif factor < 1.5:
        shown = f"{factor:f}x"
    else:
        shown = f"{factor:.1f}x"
    return (f"{name} exceeds budget by factor of {shown} (try simplifying the rule, or adding maxItems, "
            "maxProperties, and maxLength where arrays, maps, and strings are declared)")
