"""Status type checking of ValidatingAdmissionPolicy expressions (upstream's `status.typeChecking`), as far
as lite goes: every `object.<field>...` / `oldObject.<field>...` path of an expression is walked through the
schema of each kind the policy's `matchConstraints.resourceRules` name (no wildcards, as upstream), and a field
the schema does not have becomes an expression warning in upstream's words:

    apps/v1, Kind=Deployment: ERROR: <input>:1:7: undefined field 'replica'
     | object.replica > 1
     | ......^

Not checked (no warning, never a false one): paths below a map, a list, a scalar or a schema that keeps
unknown fields; comprehension variables; function results; types of operands (upstream also reports type
mismatches such as `object.spec.replicas == 'x'`).

Invariants: pure (schemas are handed in as compiled `typecheck.Node` trees); warnings are ordered by field and
then by kind.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from lite.server.api.typecheck import ANY, MAP, STRUCT, Node

Obj = dict[str, Any]
_LITERAL = re.compile(r"'''.*?'''|\"\"\".*?\"\"\"|'(?:[^'\\\n]|\\.)*'|\"(?:[^\"\\\n]|\\.)*\"", re.S)
_PATH = re.compile(r"(?<![\w.])(object|oldObject)((?:\s*\.\s*[A-Za-z_][A-Za-z0-9_]*)+)")
_SEGMENT = re.compile(r"\.\s*([A-Za-z_][A-Za-z0-9_]*)")


def gvk_string(group: str, version: str, kind: str) -> str:
    """Go's `schema.GroupVersionKind.String()`."""
    return f"{group}/{version}, Kind={kind}"


def expressions(spec: Obj) -> Iterator[tuple[str, str]]:
    """(field path, expression) of every CEL expression of a policy spec."""
    for i, v in enumerate(spec.get("validations") or []):
        if isinstance(v, dict):
            yield f"spec.validations[{i}].expression", str(v.get("expression") or "")
            if v.get("messageExpression"):
                yield f"spec.validations[{i}].messageExpression", str(v["messageExpression"])
    for i, a in enumerate(spec.get("auditAnnotations") or []):
        if isinstance(a, dict):
            yield f"spec.auditAnnotations[{i}].valueExpression", str(a.get("valueExpression") or "")
    for i, c in enumerate(spec.get("matchConditions") or []):
        if isinstance(c, dict):
            yield f"spec.matchConditions[{i}].expression", str(c.get("expression") or "")
    for i, v in enumerate(spec.get("variables") or []):
        if isinstance(v, dict):
            yield f"spec.variables[{i}].expression", str(v.get("expression") or "")


def matched_kinds(spec: Obj) -> list[tuple[str, str, str]]:
    """(group, version, resource) named by `matchConstraints.resourceRules` without wildcards (subresources
    are left out: their objects are not the resource's)."""
    out: list[tuple[str, str, str]] = []
    m = spec.get("matchConstraints")
    for rule in (m.get("resourceRules") or []) if isinstance(m, dict) else []:
        if not isinstance(rule, dict):
            continue
        for g in rule.get("apiGroups") or []:
            for v in rule.get("apiVersions") or []:
                for r in rule.get("resources") or []:
                    if "*" in (g, v) or "*" in str(r) or "/" in str(r):
                        continue
                    if (str(g), str(v), str(r)) not in out:
                        out.append((str(g), str(v), str(r)))
    return out


def _undefined(source: str, root: Node) -> list[tuple[int, str]]:
    """(offset of the '.', field name) of each field a path of `source` selects that `root` does not have."""
    masked = _LITERAL.sub(lambda m: " " * len(m.group(0)), source)
    found: list[tuple[int, str]] = []
    for m in _PATH.finditer(masked):
        node: Node | None = root
        start = m.start(2)
        tail = masked[m.end():].lstrip()
        segments = list(_SEGMENT.finditer(m.group(2)))
        if tail.startswith("("):  # the last name is a function called on the path: not a field
            segments = segments[:-1]
        for seg in segments:
            if node is None or node.tag != STRUCT:
                break  # maps, lists, scalars, preserved unknown fields: not checked
            name = seg.group(1)
            if name in node.props:
                node = node.props[name]
            elif name in node.plain:
                node = None
            else:
                found.append((start + seg.start(), name))
                break
    return found


def _location(source: str, offset: int) -> tuple[int, int, str]:
    """1-based line and column of `offset`, and that line's text."""
    line = source.count("\n", 0, offset) + 1
    begin = source.rfind("\n", 0, offset) + 1
    end = source.find("\n", offset)
    return line, offset - begin + 1, source[begin:end if end >= 0 else len(source)]


def check_expression(source: str, kinds: list[tuple[str, Node]]) -> str:
    """The warning text for one expression against each (gvk string, schema) (empty when none applies)."""
    parts = []
    for gvk, root in kinds:
        if root.tag in (ANY, MAP):
            continue
        errors = []
        for offset, name in _undefined(source, root):
            line, col, text = _location(source, offset)
            errors.append(f"ERROR: <input>:{line}:{col}: undefined field '{name}'\n | {text}\n | {'.' * (col - 1)}^")
        if errors:
            parts.append(f"{gvk}: " + "\n".join(errors))
    return "\n".join(parts)


def expression_warnings(spec: Obj, kinds: list[tuple[str, Node]]) -> list[Obj]:
    """`status.typeChecking.expressionWarnings` of a policy spec against the schemas of its matched kinds."""
    out = []
    for field, source in expressions(spec):
        warning = check_expression(source, kinds)
        if warning:
            out.append({"fieldRef": field, "warning": warning})
    return out
