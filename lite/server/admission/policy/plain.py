"""The plain path of ValidatingAdmissionPolicy evaluation (pure parts): a policy without params or audit
annotations becomes list elements of one CEL program, true when its validations pass or its matchConditions
exclude the request (`plain_elements`); `Plan` is what the plugin remembers per request kind.

Invariants: pure; an element's error (a condition's or a validation's) stays an error, so the caller falls
back to exact evaluation, which gives upstream's decision.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from lite.cel.cost import tokenize
from lite.cel.projection import Paths
from lite.records import dataclass

if TYPE_CHECKING:
    from lite.cel.env import Program

Obj = dict[str, Any]
_VAR_REF = re.compile(r"\bvariables\.([A-Za-z_][A-Za-z0-9_]*)")


@dataclass(frozen=True)
class Plan:
    """How requests of one kind are judged: `combined` (the plain policies' validations as one conjunction, or None)
    and the policies judged exactly."""

    combined: Program | None
    others: list[tuple[Obj, list[Obj]]]
    reads: frozenset[str]  # which of request, namespaceObject, authorizer `combined` may read (by name)
    # per JSON variable (object, oldObject, request, namespaceObject), the parts `combined` may read (see
    # lite.cel.projection): the activation converts only those to CEL
    paths: dict[str, Paths | None] | None = None
    # the smallest safe_size of the policies in `combined` (see budget.py): larger values are judged exactly
    safe_size: int = 1 << 62


_LITERAL = re.compile(r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"")


def plain_elements(spec: Obj) -> list[str] | None:
    """Pure: each validation of `spec` as one CEL expression that is true when the validation passes or the
    matchConditions do not all hold: `cel.bind(litevar_<v>, <var>, ...(<conditions>) ? (<validation>) : true)`
    with `variables.<v>` rewritten to `litevar_<v>`. A condition's error stays an error (so the exact path
    judges it); None for policies with params or audit annotations, or whose expressions name `variables.`
    inside a string literal (the rewrite would change the literal)."""
    if spec.get("paramKind") or spec.get("auditAnnotations"):
        return None
    conditions = [str(c.get("expression") or "") for c in spec.get("matchConditions") or [] if isinstance(c, dict)]
    variables = [(str(v.get("name") or ""), str(v.get("expression") or ""))
                 for v in spec.get("variables") or [] if isinstance(v, dict)]
    validations = [str(v.get("expression") or "") for v in spec.get("validations") or [] if isinstance(v, dict)]
    sources = conditions + [e for _, e in variables] + validations
    if any(_LITERAL.sub("", src).count("variables.") != src.count("variables.") for src in sources):
        return None

    def rewrite(src: str) -> str:
        return _VAR_REF.sub(r"litevar_\1", src) if variables else src

    guard = " && ".join(f"({rewrite(c)})" for c in conditions)
    out = []
    for v in validations:
        e = f"({rewrite(v)})"
        if guard:
            e = f"(({guard}) ? {e} : true)"
        for name, expr in reversed(variables):
            e = f"cel.bind(litevar_{name}, ({rewrite(expr)}), {e})"
        out.append(e)
    return out


def no_selectors(m: Obj) -> bool:
    """Whether a match block has no namespace or object selector."""
    return not m.get("namespaceSelector") and not m.get("objectSelector")


def bind_once(source: str, names: tuple[str, ...]) -> str:
    """Pure: `source` reading each variable of `names` it names once, through `cel.bind(__lite_<name>, <name>,
    ...)` with every other occurrence of the identifier renamed (an alpha-renaming: field names after `.` are
    not identifiers, and a macro variable of the same name is renamed with them, so it still shadows). The
    runtime converts a variable given as plain data at each reference. Text lite cannot tokenize is returned
    as it is."""
    try:
        toks = tokenize(source)
    except ValueError:
        return source
    for name in names:
        at = [t for i, t in enumerate(toks) if t[0] == "id" and t[1] == name and
              not (i > 0 and toks[i - 1][1] in (".", ".?"))]
        if len(at) < 2:
            continue
        out, last = [], 0
        for _kind, _text, start, end in at:
            out += [source[last:start], f"__lite_{name}"]
            last = end
        source = f"cel.bind(__lite_{name}, {name}, {''.join(out) + source[last:]})"
        toks = tokenize(source)
    return source
