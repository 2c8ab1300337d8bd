"""CEL for lite: one evaluator shared by CRD validation rules and ValidatingAdmissionPolicy.

Leaf package (imports stdlib, cel_expr_python, protobuf and leaf `lite/*.py` modules only). The runtime is
cel-expr-python (Google's C++ CEL bound to Python; see docs/internals.md for why).

Stable API (add, don't break):

    from lite import cel
    env = cel.Environment({"self": cel.DYN, "oldSelf": cel.DYN},
                          functions=[cel.Function("f", "f_string", [cel.STRING], cel.BOOL, impl)],
                          opaque_types=["kubernetes.authorization.Authorizer"])
    program = env.compile("self.x > 1", sizes=...)    # CompileError(str) on syntax/type errors
    program.eval({"self": {...}}, budget)              # EvalError / CostExceeded
    program.estimated_cost.max                          # static estimate (cost.py)
    program.runtime_cost({"self": cel.Shape(schema, values=[obj])})

- `Environment(variables, functions=(), opaque_types=(), library=True)`: variables map names to CEL types
  (`DYN`, `STRING`, `INT`, `BOOL`, `LIST_DYN`, `MAP_DYN`, ... or an opaque type name). The Kubernetes libraries
  (libraries.py) and the strings/optional/bindings extensions are always present unless
  `library=False`. `functions` add overloads; a member function's first parameter is its receiver; impls take
  and return plain Python values, raise ValueError to fail. Opaque types are protobuf messages with one string
  field `v`: build one with `env.opaque.make(name, text)`, read `msg.v`. Per-request context for an impl (the
  authorizer's user) is best passed through a `contextvars.ContextVar` set around `eval`.
- `Environment.compile(src, sizes=None)`: compile once, keep the `Program`; `sizes(var) -> Shape` gives the
  schema bounds used by the static cost estimate.
- Typed checking (schematypes.py, checking.py): `Environment(variables, messages=decls.files(), checking=True)`
  with variables typed by `schematypes.Declarations().cel_type(schematypes.decl_type(schema))`; `env.check(src)`
  gives the result type or raises CompileError in cel-go's words; `mixed_literals(src, type_of)` finds mixed
  list/map literals. A checking environment is not for evaluation (variables of message types take protobuf
  messages): evaluate programs compiled with `DYN` variables.
- `Program.eval(activation, budget=None, runtime_cost=None)`: plain values in, plain value out; with a
  `Budget`, charges `runtime_cost` (or the static maximum) first. `activation` is a mapping, or an
  `Activation` from `env.activation(mapping)`: the values converted to CEL once and shared by every program
  evaluated on them (the conversion is most of a rule's cost when `self` is an object).
- `lite.cel.projection.reads(src, names)` / `project(value, paths)`: the parts of JSON variables an expression
  can read, and the values cut down to them (same result, less to convert; see projection.py).
- Errors: `CompileError`, `EvalError`, `CostExceeded` (all `CelError`); `str(e)` is upstream-like text.
- `issue(src, offset, message)`: an error text in the runtime's format (`ERROR: <input>:1:5: ...` and a caret
  line), for callers' own compile-time checks.
- Limits: `PER_CALL_LIMIT`, `RUNTIME_CEL_COST_BUDGET`, `STATIC_ESTIMATED_COST_LIMIT`,
  `STATIC_ESTIMATED_CRD_COST_LIMIT` (upstream's values); `cost_error_message(name, cost, limit)` formats
  upstream's "exceeds budget by factor of" text.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from lite.cel.errors import CelError, CompileError, CostExceeded, EvalError

if TYPE_CHECKING:
    from cel_expr_python.cel import Type

    from lite.cel.checking import go_type_name, mixed_literals
    from lite.cel.cost import Cost, Shape, estimate, parse
    from lite.cel.env import (
        MAX_REQUEST_SIZE_BYTES,
        PER_CALL_LIMIT,
        RUNTIME_CEL_COST_BUDGET,
        STATIC_ESTIMATED_COST_LIMIT,
        STATIC_ESTIMATED_CRD_COST_LIMIT,
        Activation,
        Budget,
        Environment,
        Function,
        Program,
        cost_error_message,
        issue,
    )

    DYN: Type
    STRING: Type
    INT: Type
    UINT: Type
    DOUBLE: Type
    BOOL: Type
    BYTES: Type
    NULL: Type
    LIST_DYN: Type
    MAP_DYN: Type

_TYPES = ("DYN", "STRING", "INT", "UINT", "DOUBLE", "BOOL", "BYTES", "NULL")
# The pure-Python parts load on first use too: a server with no CEL rules and no bound policy needs only
# `lite.cel.errors` (the cost model and the type-checking helpers are 0.2 MB of code).
_LEAVES = {"go_type_name": "checking", "mixed_literals": "checking", "Cost": "cost", "Shape": "cost",
           "estimate": "cost", "parse": "cost"}


def __getattr__(name: str) -> Any:
    """The runtime-backed names, loaded on first use (module `__getattr__`, PEP 562): importing `lite.cel`,
    its errors, `cost` or `projection` does not load cel-expr-python and protobuf (about 15 MB of a server's
    memory); the first `Environment` does, once. The names from `checking` and `cost` load their module on
    first use."""
    leaf = _LEAVES.get(name)
    if leaf is not None:
        value = getattr(importlib.import_module(f"lite.cel.{leaf}"), name)
        globals()[name] = value
        return value
    if name not in __all__ or name in globals():
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from cel_expr_python.cel import Type as _Type

    from lite.cel import env

    values: dict[str, Any] = {t: getattr(_Type, t) for t in _TYPES}
    values.update(Type=_Type, LIST_DYN=_Type.List(_Type.DYN), MAP_DYN=_Type.Map(_Type.STRING, _Type.DYN))
    for n in __all__:
        if n not in values and n not in globals() and n not in _LEAVES:
            values[n] = getattr(env, n)
    globals().update(values)
    return values[name]


__all__ = [
    "BOOL", "BYTES", "DOUBLE", "DYN", "INT", "LIST_DYN", "MAP_DYN", "MAX_REQUEST_SIZE_BYTES", "NULL",
    "PER_CALL_LIMIT", "RUNTIME_CEL_COST_BUDGET", "STATIC_ESTIMATED_COST_LIMIT", "STATIC_ESTIMATED_CRD_COST_LIMIT",
    "STRING", "UINT", "Activation", "Budget", "CelError", "CompileError", "Cost", "CostExceeded", "Environment",
    "EvalError", "Function", "Program", "Shape", "Type", "cost_error_message", "estimate", "go_type_name", "issue",
    "mixed_literals", "parse",
]
