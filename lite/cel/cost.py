"""Cost of CEL expressions: a small parser of CEL's grammar and an estimator modelled on cel-go's.

cel-expr-python exposes no AST and no cost tracking, so lite parses rules itself (`parse`) and estimates:
- statically, from schema bounds (`maxLength`, `maxItems`, `maxProperties`; unbounded sizes are estimated
  from the 3 MiB request limit as upstream does) - the figure checked against upstream's limits at CRD
  create/update;
- at runtime, from the same walk with the actual values substituted for the bounds (`Shape.values`), charged
  to the per-request budget.

This is an approximation of cel-go's cost model, not a copy: unit cost per identifier, selection, index, call
and operator; string traversals at 0.1 per character; comprehensions cost size(range) x (body + 1); list
membership is linear; equality and ordering (`==`, `!=`, `<`, ...) traverse the smaller operand at 0.1 per
character or element (two scalars, timestamps and durations included: 1), as cel-go. Figures are within a
small factor of upstream's for the rule shapes seen in real CRDs (and identical in what they make unbounded).

Invariants: pure functions; `parse` raises ValueError on text the estimator cannot read (callers compile first,
so the runtime's own error wins); the estimate of a node is an upper bound of the runtime figure for any value
that fits the schema.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import field
from typing import Any, NamedTuple

from lite.records import dataclass

MAX_REQUEST_SIZE_BYTES = 3 * 1024 * 1024
STRING_FACTOR = 0.1
Node = tuple[Any, ...]

_TOKEN = re.compile(r"""
    (?P<ws>\s+|//[^\n]*)
  | (?P<str>[rR]?[bB]?(?:'''(?:\\.|[^\\])*?'''|\"\"\"(?:\\.|[^\\])*?\"\"\"|'(?:\\.|[^'\\\n])*'|"(?:\\.|[^"\\\n])*"))
  | (?P<bstr>[bB][rR]?(?:'(?:\\.|[^'\\\n])*'|"(?:\\.|[^"\\\n])*"))
  | (?P<num>0x[0-9a-fA-F]+u?|(?:\d+\.\d*|\.\d+|\d+)(?:[eE][+-]?\d+)?u?)
  | (?P<id>[A-Za-z_][A-Za-z0-9_]*)
  | (?P<op>\|\||&&|==|!=|<=|>=|\.\?|\[\?|[-+*/%!<>?:.,()\[\]{}])
""", re.VERBOSE)


def tokenize(src: str) -> list[tuple[str, str, int, int]]:
    """(kind, text, start, end) of every token of `src`, then ("eof", "", n, n)."""
    out: list[tuple[str, str, int, int]] = []
    pos = 0
    while pos < len(src):
        m = _TOKEN.match(src, pos)
        if m is None:
            raise ValueError(f"unexpected character {src[pos]!r} at {pos}")
        pos = m.end()
        kind = m.lastgroup or ""
        if kind == "ws":
            continue
        out.append(("str" if kind == "bstr" else kind, m.group(), m.start(), m.end()))
    out.append(("eof", "", len(src), len(src)))
    return out


class Call(NamedTuple):
    """A call in a source text: `src[start:name_start]` is the receiver and its dot (empty for a global call),
    `args` the (start, end) of each argument, `end` just past the closing parenthesis."""

    name: str
    start: int
    name_start: int
    end: int
    args: list[tuple[int, int]]


class _Parser:
    def __init__(self, src: str) -> None:
        self.toks = tokenize(src)
        self.i = 0
        # (name, start, name start, end) of every member call `x.name(...)` and of `format.named(...)`
        self.calls: list[Call] = []
        self.last_args: list[tuple[int, int]] = []
        self.literals: list[Literal] = []  # list and map literals, for checking.mixed_literals

    def peek(self) -> tuple[str, str, int, int]:
        return self.toks[self.i]

    def take(self, text: str | None = None) -> tuple[str, str, int, int]:
        tok = self.toks[self.i]
        if text is not None and tok[1] != text:
            raise ValueError(f"expected {text!r}, got {tok[1]!r}")
        self.i += 1
        return tok

    def at(self, *texts: str) -> bool:
        tok = self.toks[self.i]
        return tok[0] in ("op", "id") and tok[1] in texts

    def expr(self) -> Node:
        cond = self.binary(0)
        if self.at("?"):
            self.take()
            a = self.expr()
            self.take(":")
            b = self.expr()
            return ("op", "?:", [cond, a, b])
        return cond

    _LEVELS = (("||",), ("&&",), ("==", "!=", "<", "<=", ">", ">=", "in"), ("+", "-"), ("*", "/", "%"))

    def binary(self, level: int) -> Node:
        if level == len(self._LEVELS):
            return self.unary()
        left = self.binary(level + 1)
        while self.at(*self._LEVELS[level]):
            op = self.take()[1]
            left = ("op", op, [left, self.binary(level + 1)])
        return left

    def unary(self) -> Node:
        if self.at("!", "-"):
            op = self.take()[1]
            return ("op", "u" + op, [self.unary()])
        return self.member()

    def args(self, close: str) -> list[Node]:
        out: list[Node] = []
        spans: list[tuple[int, int]] = []
        while not self.at(close):
            start = self.peek()[2]
            out.append(self.expr())
            spans.append((start, self.toks[self.i - 1][3]))
            if not self.at(close):
                self.take(",")
        self.take(close)
        self.last_args = spans
        return out

    def member(self) -> Node:
        start = self.peek()[2]
        node = self.primary()
        while True:
            if self.at(".", ".?"):
                dot = self.take()[2]
                _, name, name_start, _ = self.take()
                if self.at("("):
                    self.take()
                    node = ("call", name, node, self.args(")"))
                    self.calls.append(Call(name, start, name_start, self.toks[self.i - 1][3], self.last_args))
                else:
                    node = ("sel", node, name, dot)
            elif self.at("[", "[?"):
                self.take()
                key = self.expr()
                self.take("]")
                node = ("idx", node, key)
            elif self.at("{") and node[0] in ("id", "sel"):
                self.take()
                node = ("map", self.entries())
            else:
                return node

    def entries(self) -> list[Node]:
        out: list[Node] = []
        self.last_args = []
        spans: list[tuple[int, int]] = []
        while not self.at("}"):
            if self.at("?"):
                self.take()
            start = self.peek()[2]
            k = self.expr()
            spans.append((start, self.toks[self.i - 1][3]))
            self.take(":")
            start = self.peek()[2]
            out += [k, self.expr()]
            spans.append((start, self.toks[self.i - 1][3]))
            if not self.at("}"):
                self.take(",")
        self.take("}")
        self.last_args = spans
        return out

    def primary(self) -> Node:
        kind, text, at, _ = self.take()
        if kind == "op" and text == ".":
            kind, text, at, _ = self.take()
        if kind == "id":
            if text in ("true", "false", "null"):
                return ("lit", 1)
            if self.at("("):
                self.take()
                node = ("call", text, None, self.args(")"))
                self.calls.append(Call(text, at, at, self.toks[self.i - 1][3], self.last_args))
                return node
            return ("id", text)
        if kind == "str":
            return ("lit", len(text))
        if kind == "num":
            return ("lit", 1)
        if text == "(":
            e = self.expr()
            self.take(")")
            return e
        if text == "[":
            items: Node = ("list", self.args("]"))
            self.literals.append(Literal("list", at, self.last_args))
            return items
        if text == "{":
            entries: Node = ("map", self.entries())
            self.literals.append(Literal("map", at, self.last_args))
            return entries
        raise ValueError(f"unexpected {text!r}")


def parse(src: str) -> Node:
    return _parse(src)[0]


class Literal(NamedTuple):
    """A list or map literal in a source text: `kind` ("list"/"map"), the offset of its bracket, and the (start,
    end) of each element (of a map: key, value, key, value, ...)."""

    kind: str
    start: int
    elements: list[tuple[int, int]]


def aggregate_literals(src: str) -> list[Literal]:
    """Every list and map literal of `src`; raises ValueError on text lite cannot parse."""
    p = _Parser(src)
    p.expr()
    if p.peek()[0] != "eof":
        raise ValueError(f"unexpected {p.peek()[1]!r}")
    return p.literals


def _parse(src: str) -> tuple[Node, list[Call]]:
    p = _Parser(src)
    node = p.expr()
    if p.peek()[0] != "eof":
        raise ValueError(f"unexpected {p.peek()[1]!r}")
    return node, p.calls


def member_calls(src: str, names: tuple[str, ...]) -> list[Call]:
    """Each call of `names` in `src`, with its offsets: member calls `receiver.name(args)` and global calls
    `name(args)` (`start == name_start`)."""
    try:
        return [c for c in _parse(src)[1] if c[0] in names]
    except (ValueError, RecursionError):
        return []


# ---- sizes -----------------------------------------------------------------------------------------------


def min_serialized(schema: dict[str, Any]) -> int:
    """The smallest JSON a value of `schema` can serialize to, as upstream's CEL declared types count it: `""` for
    strings (3, 12, 21 for the duration, date, date-time formats), `true` for booleans, `0` for numbers and
    int-or-strings, `[]` and `{}` for lists and maps, and for objects `{}` plus `"name":` and the minimum of each
    required property without a default."""
    if schema.get("x-kubernetes-int-or-string"):
        return 1
    t = schema.get("type")
    if t == "string":
        return {"duration": 3, "date": 12, "date-time": 21}.get(str(schema.get("format") or ""), 2)
    if t == "boolean":
        return 4
    if t == "array":
        return 2
    if t == "object":
        props = schema.get("properties")
        if isinstance(schema.get("additionalProperties"), dict) or not isinstance(props, dict):
            return 2
        size = 2
        for name in schema.get("required") or ():
            prop = props.get(name)
            if isinstance(prop, dict) and "default" not in prop:
                size += len(str(name)) + min_serialized(prop) + 4
        return size
    return 1


def max_cardinality(schema: dict[str, Any]) -> int:
    """How many values of `schema` one request can hold at most (upstream's bound for a rule whose enclosing lists
    or maps declare no maxItems/maxProperties)."""
    return MAX_REQUEST_SIZE_BYTES // (min_serialized(schema) + 1)


def max_items(schema: dict[str, Any], key: str, elem: dict[str, Any] | None) -> int:
    """Declared bound, or upstream's estimate from the request size limit for an unbounded collection (each list
    item costs its minimum size and a comma; each map entry its minimum size, a quoted one-byte key, a colon and a
    comma)."""
    bound = schema.get(key)
    if isinstance(bound, int):
        return max(bound, 0)
    per = min_serialized(elem or {}) + (6 if key == "maxProperties" else 1)
    return (MAX_REQUEST_SIZE_BYTES - 2) // per


_SCALAR_FORMATS = ("date", "date-time", "duration")  # strings rules see as timestamps and durations (scalars)


def max_size(schema: dict[str, Any] | None) -> int:
    if not schema:
        return MAX_REQUEST_SIZE_BYTES
    t = schema.get("type")
    if t == "string" and schema.get("format") in _SCALAR_FORMATS and not schema.get("x-kubernetes-int-or-string"):
        return 1
    if t == "string" or schema.get("x-kubernetes-int-or-string"):
        bound = schema.get("maxLength")
        return bound if isinstance(bound, int) else MAX_REQUEST_SIZE_BYTES - 2
    if t == "array":
        return max_items(schema, "maxItems", schema.get("items"))
    if t == "object":
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict):
            return max_items(schema, "maxProperties", extra)
        if schema.get("x-kubernetes-preserve-unknown-fields"):
            return max_items(schema, "maxProperties", None)
        return len(schema.get("properties") or {})
    return 1


def _value_size(v: Any) -> int:
    if isinstance(v, (str, list, dict, bytes)):
        return len(v)
    return 1


RESERVED = frozenset({"true", "false", "null", "in", "as", "break", "const", "continue", "else", "for", "function",
                      "if", "import", "let", "loop", "package", "namespace", "return", "var", "void", "while"})
_ESCAPES = (("__", "__underscores__"), (".", "__dot__"), ("-", "__dash__"), ("/", "__slash__"))
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def escape(name: str) -> str | None:
    """A property name as CEL rules spell it (upstream's escaping: `__namespace__`, `a__dash__b`), or None
    when the name cannot be written as an identifier (such a property is not visible to rules)."""
    if name in RESERVED:
        return f"__{name}__"
    out = name
    for raw, esc in _ESCAPES:
        out = out.replace(raw, esc)
    return out if _IDENT.fullmatch(out) else None


def unescape(ident: str) -> str:
    """The property name an identifier of a rule refers to (inverse of `escape`)."""
    if ident.startswith("__") and ident.endswith("__") and ident[2:-2] in RESERVED:
        return ident[2:-2]
    if "__" not in ident:
        return ident
    out, i = [], 0
    while i < len(ident):
        for raw, esc in _ESCAPES:
            if ident.startswith(esc, i):
                out.append(raw)
                i += len(esc)
                break
        else:
            out.append(ident[i])
            i += 1
    return "".join(out)


@dataclass
class Shape:
    """What an expression may evaluate to: its schema (or None) and, at runtime, the candidate values."""

    schema: dict[str, Any] | None = None
    values: list[Any] | None = None
    size: int | None = None  # explicit size (literals, derived values)

    def max(self) -> int:
        if self.size is not None:
            return self.size
        if self.schema and self.schema.get("type") == "string" and self.schema.get("format") in _SCALAR_FORMATS:
            return 1  # a timestamp or duration, whatever its text
        if self.values is not None:
            return max((_value_size(v) for v in self.values), default=0)
        return max_size(self.schema)

    def child(self, name: str | None) -> Shape:
        """A field (`name`), or an element/value (`None`) of this object, map or list."""
        s = self.schema or {}
        sub: dict[str, Any] | None = None
        if s.get("type") == "array" or "items" in s:
            sub = s.get("items") if isinstance(s.get("items"), dict) else None
        elif name is not None and unescape(name) in (s.get("properties") or {}):
            sub = s["properties"][unescape(name)]
        elif isinstance(s.get("additionalProperties"), dict):
            sub = s["additionalProperties"]
        elif name is None and s.get("properties"):
            sub = {"type": "string"}  # iterating an object yields its keys
        values: list[Any] | None = None
        if self.values is not None:
            values = []
            for v in self.values:
                if isinstance(v, dict):
                    if name is not None:
                        if unescape(name) in v:
                            values.append(v[unescape(name)])
                    else:
                        values.extend(v.values())
                elif isinstance(v, list):
                    values.extend(v)
        return Shape(sub, values)


@dataclass(frozen=True)
class Cost:
    """Estimated cost range of one expression."""

    min: int
    max: int


SizeFn = Callable[[str], Shape]

_MACROS = {"all", "exists", "exists_one", "existsOne", "map", "filter", "transformList", "transformMap",
           "transformMapEntry"}
_LINEAR_STRING_FNS = {"contains", "startsWith", "endsWith", "lowerAscii", "upperAscii", "trim", "replace",
                      "split", "substring", "charAt", "indexOf", "lastIndexOf", "reverse", "quote", "join",
                      "url", "isURL", "ip", "isIP", "cidr", "isCIDR", "quantity", "isQuantity", "validate",
                      "format", "base64.encode", "base64.decode"}
_LIST_FNS = {"isSorted", "sum", "min", "max", "indexOf", "lastIndexOf", "sets.contains", "sets.equivalent",
             "sets.intersects", "join"}


# Functions whose result is a scalar (size 1 to cel-go's estimator, whatever the size of their arguments):
# `duration(s) < duration(t)` compares two durations, not two strings.
_SCALAR_RESULTS = {
    "duration", "timestamp", "int", "uint", "double", "bool", "size", "matches", "startsWith", "endsWith",
    "contains", "isSorted", "isURL", "isIP", "isCIDR", "isQuantity", "isInteger", "asInteger", "asApproximateFloat",
    "sign", "compareTo", "isLessThan", "isGreaterThan", "prefixLength", "family", "isUnspecified", "isLoopback",
    "isLinkLocalMulticast", "isLinkLocalUnicast", "isGlobalUnicast", "isCanonical", "containsIP", "containsCIDR",
    "sets.contains", "sets.equivalent", "sets.intersects", "getFullYear", "getMonth", "getDate", "getDayOfMonth",
    "getDayOfWeek", "getDayOfYear", "getHours", "getMinutes", "getSeconds", "getMilliseconds", "hasValue",
}


@dataclass
class _Estimator:
    scope: dict[str, Shape] = field(default_factory=dict)

    def walk(self, n: Node) -> tuple[float, Shape]:
        kind = n[0]
        if kind == "lit":
            return 0, Shape(size=n[1])
        if kind == "id":
            return 1, self.scope.get(n[1], Shape())
        if kind == "sel":
            c, s = self.walk(n[1])
            return c + 1, s.child(n[2])
        if kind == "idx":
            c, s = self.walk(n[1])
            ck, _ = self.walk(n[2])
            return c + ck + 1, s.child(None)
        if kind == "list":
            total, size = 0.0, 0
            for e in n[1]:
                c, s = self.walk(e)
                total += c
                size = max(size, s.max())
            return total + 10, Shape(size=len(n[1]))
        if kind == "map":
            total = sum(self.walk(e)[0] for e in n[1])
            return total + 30, Shape(size=len(n[1]) // 2)
        if kind == "op":
            return self.op(n[1], n[2])
        return self.call(n[1], n[2], n[3])

    def op(self, op: str, args: list[Node]) -> tuple[float, Shape]:
        parts = [self.walk(a) for a in args]
        cost = sum(c for c, _ in parts)
        shapes = [s for _, s in parts]
        if op in ("==", "!=", "<", "<=", ">", ">="):
            # cel-go: the traversal of the smaller operand (strings, bytes, lists, maps), 0.1 per element; two
            # scalars (size 1) cost 1
            smallest = min(shapes[0].max(), shapes[1].max())
            return cost + math.ceil(STRING_FACTOR * smallest), Shape(size=1)
        if op == "in":
            return cost + max(1, shapes[1].max()), Shape(size=1)
        if op == "+":
            size = shapes[0].max() + shapes[1].max()
            return cost + max(1, math.ceil(STRING_FACTOR * size)), Shape(size=size)
        if op == "?:":  # the condition, then the dearer branch (only one runs)
            return parts[0][0] + max(parts[1][0], parts[2][0]), \
                shapes[1] if shapes[1].max() >= shapes[2].max() else shapes[2]
        if op in ("&&", "||"):
            return cost, Shape(size=1)
        return cost + 1, Shape(size=1)

    def call(self, name: str, target: Node | None, args: list[Node]) -> tuple[float, Shape]:
        if name == "has" and target is None and args:
            # upstream (PresenceTestHasCost(false)): the presence test itself is free, its operand is not
            c, _ = self.walk(args[0][1] if args[0][0] == "sel" else args[0])
            return c, Shape(size=1)
        if target is not None and name in _MACROS and len(args) in (2, 3, 4) and args[0][0] == "id":
            return self.comprehension(name, target, args)
        if name == "bind" and target == ("id", "cel") and len(args) == 3 and args[0][0] == "id":
            ci, si = self.walk(args[1])
            saved = self.scope.get(args[0][1])
            self.scope[args[0][1]] = si
            cb, sb = self.walk(args[2])
            self._restore(args[0][1], saved)
            return ci + cb, sb
        if target is not None and target[0] == "id" and target[1] not in self.scope and \
                target[1] in ("format", "sets", "base64", "math", "strings", "optional", "ip"):
            name, target = f"{target[1]}.{name}", None
        cost, shape = self._call(name, target, args)
        return cost, Shape(size=1) if name in _SCALAR_RESULTS else shape

    def _call(self, name: str, target: Node | None, args: list[Node]) -> tuple[float, Shape]:
        parts = [self.walk(a) for a in ([target] if target is not None else []) + args]
        cost = sum(c for c, _ in parts) + 1
        sizes = [s.max() for _, s in parts]
        if name in ("startsWith", "endsWith") and target is not None and len(sizes) == 2:
            # cel-go: the traversal of the prefix or suffix, not of the string it is looked for in
            return cost + math.ceil(STRING_FACTOR * sizes[1]), Shape(size=1)
        if name in ("matches", "find", "findAll"):
            pattern = sizes[-1] if len(sizes) > 1 else 1
            return cost + math.ceil(STRING_FACTOR * sizes[0]) * max(1, math.ceil(pattern / 4)), \
                Shape(size=sizes[0])
        if name in _LIST_FNS and sizes:
            return cost + sizes[0], Shape(size=max(sizes))
        if name in _LINEAR_STRING_FNS and sizes:
            extra = math.ceil(STRING_FACTOR * sizes[0]) * (max(1, sizes[1]) if name == "contains" and
                                                           len(sizes) > 1 else 1)
            return cost + extra, Shape(size=sizes[0])
        if name == "size":
            return cost, Shape(size=1)
        return cost, Shape(size=max(sizes, default=1))

    def comprehension(self, name: str, target: Node, args: list[Node]) -> tuple[float, Shape]:
        cr, sr = self.walk(target)
        two = len(args) >= 3 and args[1][0] == "id" and (name not in ("map", "filter") or len(args) == 4)
        names = [args[0][1], args[1][1]] if two else [args[0][1]]
        shapes = [Shape(size=1), sr.child(None)] if two else [sr.child(None)]
        if two and not (sr.schema or {}).get("items") and sr.schema and sr.schema.get("type") == "object":
            shapes[0] = Shape({"type": "string"})  # a map's keys
        saved = [self.scope.get(v) for v in names]
        for v, shape in zip(names, shapes, strict=True):
            self.scope[v] = shape
        body = 0.0
        for a in args[len(names):]:
            body += self.walk(a)[0]
        for v, old in zip(names, saved, strict=True):
            self._restore(v, old)
        n = sr.max()
        return cr + n * (body + 1) + 1, Shape(sr.schema if name == "filter" else None, size=n)

    def _restore(self, var: str, saved: Shape | None) -> None:
        if saved is None:
            self.scope.pop(var, None)
        else:
            self.scope[var] = saved


def estimate_node(node: Node, scope: dict[str, Shape]) -> int:
    """Cost of a parsed expression, variables bound to `scope` (schema bounds or actual values)."""
    cost, _ = _Estimator(dict(scope)).walk(node)
    return min(math.ceil(cost), 2**63 - 1)


def estimate(src: str, sizes: SizeFn | None = None, variables: tuple[str, ...] = ()) -> Cost:
    """Static estimate of `src`; `sizes(name)` gives each variable's Shape (default: unknown, unbounded)."""
    try:
        node = parse(src)
    except (ValueError, RecursionError):
        return Cost(1, 1)
    scope = {v: (sizes(v) if sizes else Shape()) for v in variables or _free_ids(node)}
    high = estimate_node(node, scope)
    return Cost(1, high)


def _free_ids(node: Node) -> set[str]:
    out: set[str] = set()

    def visit(n: Any) -> None:
        if isinstance(n, tuple) and n:
            if n[0] == "id":
                out.add(n[1])
                return
            for x in n[1:]:
                visit(x)
        elif isinstance(n, list):
            for x in n:
                visit(x)
    visit(node)
    return out


# ---- runtime bounds (ValidatingAdmissionPolicy's per-call limit and per-evaluation budget) --------------------


@dataclass
class CappedShape(Shape):
    """A Shape whose unknown sizes are `cap` rather than the request-size bound: at runtime, no list, map or
    string the expression meets can be larger than the largest one its variables hold (`cap`, e.g. their JSON
    length), beyond what the expression itself builds (literals, `+`, `map`, which the estimator sizes)."""

    cap: int = 0

    def max(self) -> int:
        if self.size is not None or self.values is not None or self.schema:
            return Shape.max(self)
        return self.cap

    def child(self, name: str | None) -> Shape:
        c = Shape.child(self, name)
        return CappedShape(c.schema, c.values, None, cap=self.cap)


@dataclass
class _CappedEstimator(_Estimator):
    cap: int = 0

    def walk(self, n: Node) -> tuple[float, Shape]:
        cost, shape = super().walk(n)
        if not isinstance(shape, CappedShape):
            shape = CappedShape(shape.schema, shape.values, shape.size, cap=self.cap)
        return cost, shape


def bounded_cost(node: Node, scope: dict[str, Shape], cap: int) -> tuple[int, int]:
    """(cost, result size) of a parsed expression whose variables are `scope` (`CappedShape(values=[v],
    cap=cap)` for actual values, `CappedShape(cap=cap)` for any value no larger than `cap`), every size the
    walk cannot know taken as `cap`. Monotonic in `cap`; an upper bound of the runtime figure (see the module
    doc: comprehensions are charged every element, short-circuits are not credited)."""
    cost, shape = _CappedEstimator(dict(scope), cap).walk(node)
    return min(math.ceil(cost), 2**63 - 1), shape.max()
