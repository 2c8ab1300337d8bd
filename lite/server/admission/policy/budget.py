"""Runtime CEL cost of ValidatingAdmissionPolicy evaluations: upstream's per-call limit and budgets.

Upstream (`k8s.io/apiserver/pkg/admission/plugin/cel`, `apis/cel/config.go`) charges each expression's actual
cost as cel-go counts it: an expression over `PER_CALL_LIMIT` fails (`operation cancelled: actual cost limit
exceeded`, handled by the policy's failurePolicy like any evaluation error), and each evaluation of a policy
(one binding, one param) has budgets: `RUNTIME_CEL_COST_BUDGET` for its validations then, with what is left,
its messageExpressions; another for its auditAnnotations; `MATCH_CONDITIONS_BUDGET` for its matchConditions.
Going over one fails the whole evaluation with `OUT_OF_BUDGET`.

cel-expr-python counts no cost, so lite bounds it (`lite.cel.cost.bounded_cost`): every comprehension is
charged each element of what it iterates, every string function the length of its operand, sizes taken from
the actual values. Short-circuits (`exists` that stops at its first match, `&&` whose left side is false) are not
credited, so the figure is an upper bound of upstream's; variables are charged to the validations' budget when
they are computed (upstream charges a variable to the first expression that reads it).

To keep that walk off the common path, each policy revision gets a `safe_size` at compile time: the largest
size S such that, with no list, map or string of its variables longer than S (their JSON length bounds all
three), none of its expressions can exceed a limit. A request whose variables are no longer than that is not
metered at all.

Invariants: pure (no I/O); `safe_size` is monotone-safe: metering is skipped only when the bound proves it
cannot refuse.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import orjson

from lite.cel.cost import CappedShape, Shape, bounded_cost
from lite.cel.limits import MAX_REQUEST_SIZE_BYTES, PER_CALL_LIMIT, RUNTIME_CEL_COST_BUDGET
from lite.records import dataclass

if TYPE_CHECKING:
    from lite.cel.env import Program

MATCH_CONDITIONS_BUDGET = 2_500_000  # upstream's RuntimeCELCostBudgetMatchConditions
OUT_OF_BUDGET = "validation failed due to running out of cost budget, no further validation rules will be run"
CALL_LIMIT = "operation cancelled: actual cost limit exceeded"
UNBOUNDED = 1 << 62
JSON_VARIABLES = ("object", "oldObject", "request", "namespaceObject", "params")
_CEILING = 4 * MAX_REQUEST_SIZE_BYTES  # no variable can be larger (the request, its defaults, a namespace)

__all__ = ["CALL_LIMIT", "MATCH_CONDITIONS_BUDGET", "OUT_OF_BUDGET", "PER_CALL_LIMIT", "RUNTIME_CEL_COST_BUDGET",
           "Meter", "json_size", "meter", "safe_size", "too_large"]


def json_size(value: Any) -> int:
    """The JSON length of a value (0 for null; a value that is not JSON counts as unbounded)."""
    if value is None:
        return 0
    try:
        return len(orjson.dumps(value))
    except TypeError:
        return UNBOUNDED


def _cost(prog: Program, scope: dict[str, Shape], cap: int) -> tuple[int, int]:
    if prog.node is None:  # text lite's parser cannot read: unit cost (as the static estimate, see lite.cel.cost)
        return 1, 0
    return bounded_cost(prog.node, scope, cap)


def safe_size(conditions: list[Program], variables: list[Program], validations: list[Program],
              messages: list[Program], audits: list[Program]) -> int:
    """The largest size S (see the module doc) at which no expression can go over the per-call limit and no
    group over its budget; `UNBOUNDED` when no request can, -1 when even empty values might."""
    def fits(size: int) -> bool:
        scope: dict[str, Shape] = {v: CappedShape(cap=size) for v in JSON_VARIABLES}
        spent, cap = 0, size
        for p in variables:
            c, result = _cost(p, {**scope, "variables": CappedShape(cap=cap)}, cap)
            if c > PER_CALL_LIMIT:
                return False
            spent, cap = spent + c, max(cap, result)
        scope["variables"] = CappedShape(cap=cap)
        for group, budget, start in ((conditions, MATCH_CONDITIONS_BUDGET, 0),
                                     (validations + messages, RUNTIME_CEL_COST_BUDGET, spent),
                                     (audits, RUNTIME_CEL_COST_BUDGET, 0)):
            total = start
            for p in group:
                c, _ = _cost(p, scope, cap)
                if c > PER_CALL_LIMIT:
                    return False
                total += c
            if total > budget:
                return False
        return True

    if fits(_CEILING):
        return UNBOUNDED
    if not fits(0):
        return -1
    lo, hi = 0, _CEILING  # fits(lo), not fits(hi)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid
    return lo


@dataclass
class Meter:
    """The actual values of one evaluation, to charge each expression its bound (`charge`)."""

    scope: dict[str, Shape]
    cap: int

    def cost(self, prog: Program) -> int:
        return _cost(prog, self.scope, self.cap)[0]

    def set_variables(self, values: Mapping[str, Any]) -> None:
        self.cap = max(self.cap, max((json_size(v) for v in values.values()), default=0))
        self.scope["variables"] = CappedShape(values=[dict(values)], cap=self.cap)


def too_large(limit: int, data: Mapping[str, Any]) -> bool:
    """Whether some JSON variable of `data` is longer than `limit` (one serialization of the whole mapping
    answers no for the common small request)."""
    try:
        if len(orjson.dumps(data)) <= limit:
            return False
    except TypeError:  # opaque values (the authorizer's): variable by variable
        pass
    return meter(limit, data) is not None


def meter(limit: int, data: Mapping[str, Any], sizes: dict[int, int] | None = None) -> Meter | None:
    """A Meter for an evaluation over `data`, or None when its values are within the policy's `safe_size`;
    `sizes` remembers JSON lengths by value identity (one request's values, which it keeps alive, shared by
    its policies; params are measured each time)."""
    if limit >= UNBOUNDED:
        return None
    size = 0
    for v in JSON_VARIABLES:
        value = data.get(v)
        if value is None:
            continue
        memo = sizes if sizes is not None and v != "params" else None  # params come and go within a request
        n = memo.get(id(value)) if memo is not None else None
        if n is None:
            n = json_size(value)
            if memo is not None:
                memo[id(value)] = n
        size = max(size, n)
    if size <= limit:
        return None
    return Meter({v: CappedShape(values=[data.get(v)], cap=size) for v in JSON_VARIABLES}, size)
