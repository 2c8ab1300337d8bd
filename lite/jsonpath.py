"""kubectl's JSONPath (k8s.io/client-go/util/jsonpath): templates parsed once, evaluated over JSON values.

Role: pure. `parse(template)` turns a template such as `{.status.conditions[?(@.type=="Ready")].status}` or
`{range .items[*]}{.metadata.name}{"\\n"}{end}` into a `Template`; `Template.find(value)` gives, like client-go's
`FindResults`, one list of values per action at the top level; `Template.render(value)` prints the template
as `kubectl -o jsonpath` does. The CRD table convertor uses `find` on `{<column jsonPath>}`.

Grammar (client-go's subset): text outside `{...}`; inside an action `@`/`$` (the current value), fields
`.a` (also `.a-b`, `.a/b`), the wildcard `.*`, recursive descent `..a`, brackets `[n]` (negative counts from
the end), slices `[a:b:c]`, `[*]`, unions `[0,2]` and `['a','b.c']`, filters `[?(@.x == "y")]` with `==`,
`!=`, `<`, `>`, `<=`, `>=` or a bare path (exists), literals (quoted text, integers, floats, true/false),
`range`/`end` blocks.

Invariants:
- Parsing errors raise `JSONPathError` with client-go's reason where it has one; evaluation never raises
  for a missing key, a non-list under `[...]` or an index out of range when `allow_missing` (the table
  convertor's setting): the step yields nothing instead.
- Inputs are only read; values found are the input's own objects (callers must not mutate them).
"""

from __future__ import annotations

import json
import re
from dataclasses import field
from decimal import Decimal
from typing import Any

from lite.records import dataclass

_OPS = ("==", "!=", "<=", ">=", "<", ">")
_FIELD_CHARS = re.compile(r"[A-Za-z0-9_\-/]")
_NUMBER = re.compile(r"[+-]?\d+(\.\d+)?([eE][+-]?\d+)?")


class JSONPathError(ValueError):
    """A template that does not parse, or an evaluation error when missing keys are not allowed."""


# ---- nodes ----------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Field:
    name: str  # "*" is the wildcard


@dataclass(frozen=True)
class Recursive:
    pass


@dataclass(frozen=True)
class Index:
    start: int | None
    end: int | None
    step: int | None
    single: bool  # `[n]` rather than a slice


@dataclass(frozen=True)
class Union:
    branches: tuple[tuple[Any, ...], ...]  # each branch a tuple of steps


@dataclass(frozen=True)
class Filter:
    left: tuple[Any, ...]
    op: str  # one of _OPS, or "exists"
    right: tuple[Any, ...]


@dataclass(frozen=True)
class Literal:
    value: Any


@dataclass
class _Action:
    steps: tuple[Any, ...]


@dataclass
class _Range:
    steps: tuple[Any, ...]
    body: list[Any] = field(default_factory=list)


# ---- parsing --------------------------------------------------------------------------------------------

class _Cursor:
    def __init__(self, text: str) -> None:
        self.text, self.pos = text, 0

    def peek(self, n: int = 1) -> str:
        return self.text[self.pos:self.pos + n]

    def done(self) -> bool:
        return self.pos >= len(self.text)


def _quoted(c: _Cursor) -> str:
    quote = c.text[c.pos]
    c.pos += 1
    out: list[str] = []
    while not c.done():
        ch = c.text[c.pos]
        if ch == "\\" and c.pos + 1 < len(c.text):
            nxt = c.text[c.pos + 1]
            out.append({"n": "\n", "t": "\t", "r": "\r", "\\": "\\", '"': '"', "'": "'"}.get(nxt, "\\" + nxt))
            c.pos += 2
            continue
        if ch == quote:
            c.pos += 1
            return "".join(out)
        out.append(ch)
        c.pos += 1
    raise JSONPathError("unclosed quote")


def _steps(expr: str) -> tuple[Any, ...]:
    """The steps of one path expression (the inside of an action, or one side of a filter)."""
    c = _Cursor(expr)
    steps: list[Any] = []
    while not c.done():
        ch = c.text[c.pos]
        if ch in " \t@$":
            c.pos += 1
        elif c.peek(2) == "..":
            c.pos += 1  # the second dot starts the field that follows
            steps.append(Recursive())
        elif ch == ".":
            c.pos += 1
            if c.peek() == "*":
                c.pos += 1
                steps.append(Field("*"))
                continue
            start = c.pos
            while not c.done() and (_FIELD_CHARS.match(c.text[c.pos]) or c.text[c.pos] == "\\"):
                c.pos += 2 if c.text[c.pos] == "\\" else 1
            name = c.text[start:c.pos].replace("\\.", ".")
            if name:
                steps.append(Field(name))
            elif c.done() and not steps:
                continue  # `{.}`: the value itself
            elif not c.done() and c.text[c.pos] not in ".[":
                raise JSONPathError(f"invalid field name at {c.text[c.pos:]!r}")
        elif ch == "[":
            steps.append(_bracket(c))
        elif ch in "'\"":
            steps.append(Literal(_quoted(c)))
        elif ch.isdigit() or ch in "+-":
            m = _NUMBER.match(c.text, c.pos)
            if m is None:
                raise JSONPathError(f"invalid number at {c.text[c.pos:]!r}")
            c.pos = m.end()
            steps.append(Literal(float(m.group()) if m.group(1) or m.group(2) else int(m.group())))
        elif c.text.startswith(("true", "false"), c.pos):
            word = "true" if c.text.startswith("true", c.pos) else "false"
            c.pos += len(word)
            steps.append(Literal(word == "true"))
        else:
            raise JSONPathError(f"unrecognized character in action: {ch!r}")
    return tuple(steps)


def _bracket_body(c: _Cursor) -> str:
    """The text between `[` and its matching `]` (quotes and nested brackets respected); moves past `]`."""
    c.pos += 1
    depth, start = 1, c.pos
    while not c.done():
        ch = c.text[c.pos]
        if ch in "'\"":
            _quoted(c)
            continue
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
            if depth == 0:
                body = c.text[start:c.pos]
                c.pos += 1
                return body
        c.pos += 1
    raise JSONPathError("unterminated array")


def _split_top(text: str, sep: str) -> list[str]:
    parts, depth, quote, start = [], 0, "", 0
    for i, ch in enumerate(text):
        if quote:
            if ch == quote and text[i - 1] != "\\":
                quote = ""
        elif ch in "'\"":
            quote = ch
        elif ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
        elif ch == sep and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return parts


def _int_or_none(text: str) -> int | None:
    text = text.strip()
    if not text:
        return None
    if not re.fullmatch(r"[+-]?\d+", text):
        raise JSONPathError(f"invalid array index {text}")
    return int(text)


def _bracket(c: _Cursor) -> Any:
    body = _bracket_body(c).strip()
    if body.startswith("?"):
        inner = body[1:].strip()
        if not (inner.startswith("(") and inner.endswith(")")):
            raise JSONPathError(f"invalid filter {body!r}")
        return _filter(inner[1:-1].strip())
    parts = [p.strip() for p in _split_top(body, ",")]
    if any(p[:1] in "'\"" for p in parts):
        names = []
        for p in parts:
            pc = _Cursor(p)
            if p[:1] not in "'\"":
                raise JSONPathError(f"invalid field union {body!r}")
            names.append(_quoted(pc))
        # as client-go: a quoted key is read as a path below the value (`['a.b']` is `.a.b`; escape dots)
        return Union(tuple(_steps("." + n) for n in names))
    indexes = []
    for p in parts:
        if p == "*":
            indexes.append(Index(None, None, None, False))
            continue
        bounds = p.split(":")
        if len(bounds) > 3 or not p:
            raise JSONPathError(f"invalid array index {p}")
        if len(bounds) == 1:
            n = _int_or_none(bounds[0])
            indexes.append(Index(n, None, None, True))
            continue
        step = _int_or_none(bounds[2]) if len(bounds) == 3 else None
        if step is not None and step <= 0:
            raise JSONPathError("step must be > 0")
        indexes.append(Index(_int_or_none(bounds[0]), _int_or_none(bounds[1]), step, False))
    if len(indexes) == 1:
        return indexes[0]
    return Union(tuple((i,) for i in indexes))


def _filter(text: str) -> Filter:
    quote = ""
    for i, ch in enumerate(text):
        if quote:
            if ch == quote and text[i - 1] != "\\":
                quote = ""
            continue
        if ch in "'\"":
            quote = ch
            continue
        for op in _OPS:
            if text.startswith(op, i):
                left, right = text[:i].strip(), text[i + len(op):].strip()
                if not left or not right:
                    raise JSONPathError(f"invalid filter {text!r}")
                return Filter(_steps(left), op, _steps(right))
    return Filter(_steps(text), "exists", ())


def parse(template: str) -> Template:
    """A parsed template; raises `JSONPathError` when it does not parse."""
    root: list[Any] = []
    stack: list[list[Any]] = [root]
    pos = 0
    while pos < len(template):
        open_at = template.find("{", pos)
        if open_at < 0:
            stack[-1].append(template[pos:])
            break
        if open_at > pos:
            stack[-1].append(template[pos:open_at])
        c = _Cursor(template)
        c.pos = open_at + 1
        depth = 1
        while not c.done():
            ch = c.text[c.pos]
            if ch in "'\"":
                _quoted(c)
                continue
            if ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
                if depth == 0:
                    break
            c.pos += 1
        if c.done():
            raise JSONPathError("unclosed action")
        inside = template[open_at + 1:c.pos].strip()
        pos = c.pos + 1
        if inside.startswith("range ") or inside == "range":
            node = _Range(_steps(inside[len("range"):]))
            stack[-1].append(node)
            stack.append(node.body)
        elif inside == "end":
            if len(stack) == 1:
                raise JSONPathError("not in range, nothing to end")
            stack.pop()
        else:
            stack[-1].append(_Action(_steps(inside)))
    if len(stack) != 1:
        raise JSONPathError("unclosed range")
    return Template(tuple(root))


# ---- evaluation -----------------------------------------------------------------------------------------

def _type(v: Any) -> str:
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, int):
        return "int"
    if isinstance(v, float):
        return "float"
    return "string" if isinstance(v, str) else "other"


def _compare(op: str, left: Any, right: Any) -> bool:
    """Go template's eq/ne/lt/...: both sides of one basic type (an integer and a float do not compare)."""
    lt, rt = _type(left), _type(right)
    if lt != rt or lt == "other":
        raise JSONPathError("incompatible types for comparison")
    if op in ("==", "!="):
        return bool(left == right) == (op == "==")
    if lt == "bool":
        raise JSONPathError("invalid type for comparison")
    return bool({"<": left < right, ">": left > right, "<=": left <= right, ">=": left >= right}[op])


class Template:
    """A parsed template (see the module docstring)."""

    def __init__(self, nodes: tuple[Any, ...]) -> None:
        self._nodes = nodes

    def find(self, value: Any, *, allow_missing: bool = True) -> list[list[Any]]:
        """One list of found values per top-level action (text gives its own text; a range its body's)."""
        out: list[list[Any]] = []
        for node in self._nodes:
            if isinstance(node, str):
                out.append([node])
            elif isinstance(node, _Action):
                out.append(_eval(node.steps, [value], allow_missing))
            else:
                for item in _eval(node.steps, [value], allow_missing):
                    out.extend(Template(tuple(node.body)).find(item, allow_missing=allow_missing))
        return out

    def render(self, value: Any, *, allow_missing: bool = False) -> str:
        """The template printed as `kubectl -o jsonpath=...` prints it."""
        return "".join(" ".join(text(v) for v in values)
                       for values in self.find(value, allow_missing=allow_missing))


def _eval(steps: tuple[Any, ...], values: list[Any], allow_missing: bool) -> list[Any]:
    for step in steps:
        values = _step(step, values, allow_missing)
    return values


def _step(step: Any, values: list[Any], allow_missing: bool) -> list[Any]:
    out: list[Any] = []
    if isinstance(step, Literal):
        return [step.value]
    if isinstance(step, Field):
        for v in values:
            if not isinstance(v, dict):
                continue
            if step.name == "*":
                out.extend(v[k] for k in sorted(v))
            elif step.name in v:
                out.append(v[step.name])
        if not out and values and not allow_missing and step.name != "*":
            raise JSONPathError(f"{step.name} is not found")
        return out
    if isinstance(step, Recursive):
        def walk(v: Any) -> None:
            out.append(v)
            children = [v[k] for k in sorted(v)] if isinstance(v, dict) else v if isinstance(v, list) else []
            for child in children:
                walk(child)
        for v in values:
            walk(v)
        return out
    if isinstance(step, Index):
        for v in values:
            if not isinstance(v, list):
                if not allow_missing:
                    raise JSONPathError(f"{v!r} is not array or slice")
                continue
            n = len(v)
            if step.single:
                i = step.start if step.start is not None else 0
                i = i + n if i < 0 else i
                if 0 <= i < n:
                    out.append(v[i])
                elif not allow_missing:
                    raise JSONPathError(f"array index out of bounds: index {step.start}, length {n}")
                continue
            start = 0 if step.start is None else (step.start + n if step.start < 0 else step.start)
            end = n if step.end is None else (step.end + n if step.end < 0 else step.end)
            start, end = max(0, min(start, n)), max(0, min(end, n))
            out.extend(v[start:end:step.step or 1])
        return out
    if isinstance(step, Union):
        for branch in step.branches:
            out.extend(_eval(branch, values, allow_missing))
        return out
    if isinstance(step, Filter):
        for v in values:
            if not isinstance(v, list):
                if not allow_missing:
                    raise JSONPathError(f"{v!r} is not array or slice")
                continue
            for item in v:
                lefts = _eval(step.left, [item], True)
                if step.op == "exists":
                    if lefts:
                        out.append(item)
                    continue
                rights = _eval(step.right, [item], True)
                if lefts and rights and _compare(step.op, lefts[0], rights[0]):
                    out.append(item)
        return out
    raise JSONPathError(f"unknown step {step!r}")


# ---- printing -------------------------------------------------------------------------------------------

def go_float(f: float) -> str:
    """A float as Go's `fmt.Sprint` prints a float64: shortest digits, exponent form below 1e-4 and from 1e21."""
    if f != f or f in (float("inf"), float("-inf")):
        return {"nan": "NaN", "inf": "+Inf", "-inf": "-Inf"}[repr(f)]
    d = Decimal(repr(f))
    exp = d.adjusted()
    if exp < -4 or exp >= 21:
        sign, digits, _ = d.normalize().as_tuple()
        mantissa = str(digits[0]) + ("." + "".join(map(str, digits[1:])) if len(digits) > 1 else "")
        return f"{'-' if sign else ''}{mantissa}e{'-' if exp < 0 else '+'}{abs(exp):02d}"
    text = format(d, "f")
    return text.rstrip("0").rstrip(".") if "." in text else text


def text(value: Any) -> str:
    """A found value as client-go's `PrintResults` prints it: text as is, objects and lists as compact JSON."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return go_float(value)
    if isinstance(value, dict | list):
        return json.dumps(value, separators=(",", ":"), sort_keys=True, ensure_ascii=False).replace(
            "<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    if value is None:
        return "<nil>"
    return str(value)
