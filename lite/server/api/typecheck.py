"""Type checks of request bodies against upstream's OpenAPI schemas, as Go's typed JSON decoding does them.

Role: a pure checker. `Compiler(schemas).named(name)` turns upstream component schemas (the reduced 1.32
data, see `builtin_schemas`) into shared `Node` trees once (recursion-safe, with the Go type names of named
fields from `go_types`); `check(node, obj)` walks one object and reports what
upstream's decoder would: the first wrong JSON type (upstream stops there: `json: cannot unmarshal string into
Go struct field DeploymentSpec.spec.replicas of type int32`), a bad quantity or timestamp, and every unknown
field with its strict-decoding path (`spec.template.spec.containers[0].imagePullPolcy`).

Invariants:
- A JSON null is never a type error (Go decodes it as "leave the zero value").
- Type-error paths are Go's: the JSON names of struct fields only (no list indices, no map keys), after the
  name of the innermost Go struct; unknown-field paths carry `[i]` indices and map keys, as sigs.k8s.io/json's
  strict errors do.
- Nodes are not changed after compilation and are shared by all requests; `check` only reads them. With
  `prune=True` unknown fields are deleted from the object (upstream's typed decode drops them).
- With `directives=True` (patch bodies) keys starting with `$` (strategic-merge directives) and unknown keys
  set to null (a merge patch removing what cannot be there) are not reported.
- `ssa_path` renders a strict path as server-side apply does (`.spec.containers[name="c"].x`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import field
from typing import Any

from lite.quantity import parse_quantity
from lite.records import dataclass

Obj = dict[str, Any]

ANY, STRUCT, MAP, ARRAY, STRING, INT32, INT64, FLOAT, BOOL, QUANTITY, INTSTR, TIME, MICROTIME, BYTES = range(14)

QUANTITY_ERROR = "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
_TIME_RE = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$")
_INT_RANGE = {INT32: (-(2**31), 2**31 - 1), INT64: (-(2**63), 2**63 - 1), INTSTR: (-(2**31), 2**31 - 1)}
_REF = "#/components/schemas/"
_SPECIAL = {
    "io.k8s.apimachinery.pkg.api.resource.Quantity": QUANTITY,
    "io.k8s.apimachinery.pkg.util.intstr.IntOrString": INTSTR,
    "io.k8s.apimachinery.pkg.apis.meta.v1.Time": TIME,
    "io.k8s.apimachinery.pkg.apis.meta.v1.MicroTime": MICROTIME,
    "io.k8s.apimachinery.pkg.apis.meta.v1.FieldsV1": ANY,
    "io.k8s.apimachinery.pkg.runtime.RawExtension": ANY,
    "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.JSON": ANY,
}


@dataclass(eq=False)
class Node:
    """One compiled schema: what JSON it takes and the Go type name upstream's messages use."""

    tag: int
    go: str = ""  # the Go type name: "string", "int32", "[]v1.Container", "v1.PodSpec"
    props: dict[str, Node] = field(default_factory=dict)  # STRUCT fields
    plain: dict[str, type] = field(default_factory=dict)  # STRUCT fields that are plain strings or booleans
    item: Node | None = None  # ARRAY element / MAP value
    keys: tuple[str, ...] = ()  # ARRAY: x-kubernetes-list-map-keys ("set" lists: ("",))


@dataclass
class Report:
    """What one check found."""

    type_error: str | None = None
    unknown: list[str] = field(default_factory=list)
    keys: int = -1  # the number of object keys in the checked value (-1: not counted), see dupkeys


class _TypeError(Exception):
    pass


def go_name(schema_name: str) -> str:
    """`io.k8s.api.core.v1.PodSpec` -> `v1.PodSpec` (package name and type, as Go prints it)."""
    parts = schema_name.split(".")
    return ".".join(parts[-2:])


class Compiler:
    """Compiles component schemas into shared `Node`s, each named schema once (recursion-safe)."""

    def __init__(self, schemas: Mapping[str, Any], *, structural: bool = False,
                 go_types: dict[str, dict[str, str]] | None = None) -> None:
        self._schemas = schemas
        self._go_types = go_types or {}
        self._named: dict[str, Node] = {}
        # CRD (structural) schemas: an object without properties keeps no field, where upstream's built-in
        # schemas use such objects for "anything" (FieldsV1 and the like)
        self._structural = structural

    def has(self, name: str) -> bool:
        """`name` is compiled already (`named` then reads no schema)."""
        return name in self._named

    def named(self, name: str) -> Node:
        node = self._named.get(name)
        if node is not None:
            return node
        if name in _SPECIAL:
            node = Node(_SPECIAL[name], "int32" if _SPECIAL[name] == INTSTR else "string")
            self._named[name] = node
            return node
        node = Node(ANY, go_name(name))
        self._named[name] = node  # before filling in: schemas may refer to themselves
        schema = self._schemas.get(name) or {}
        self._fill(node, schema, struct_name=True)
        self._name_go_types(node, schema, self._go_types.get(name, {}))
        return node

    @staticmethod
    def _name_go_types(node: Node, schema: Obj, names: dict[str, str]) -> None:
        """Give properties of named Go types (`[]v1.FinalizerName`, `v1.PullPolicy`) their Go names; only
        inline property nodes are touched (a `$ref` node is shared and already named)."""
        for prop, go in names.items():
            child = node.props.get(prop)
            if child is None or _ref_of((schema.get("properties") or {}).get(prop) or {}):
                continue
            child.go = go
            item_schema = ((schema.get("properties") or {}).get(prop) or {}).get("items")
            if child.tag == ARRAY and child.item is not None and go.startswith("[]") and \
                    isinstance(item_schema, dict) and not _ref_of(item_schema):
                child.item.go = go[2:]

    def inline(self, schema: Any) -> Node:
        if not isinstance(schema, dict):
            return Node(ANY)
        ref = _ref_of(schema)
        if ref:
            return self.named(ref)
        node = Node(ANY)
        self._fill(node, schema, struct_name=False)
        return node

    def _fill(self, node: Node, schema: Obj, *, struct_name: bool) -> None:
        if schema.get("x-kubernetes-preserve-unknown-fields") or schema.get("x-kubernetes-embedded-resource"):
            node.tag = ANY
            return
        if schema.get("x-kubernetes-int-or-string") or schema.get("format") == "int-or-string":
            node.tag, node.go = INTSTR, "int32"
            return
        typ = schema.get("type")
        fmt = schema.get("format", "")
        if typ == "object" or "properties" in schema:
            if "properties" in schema:
                node.tag = STRUCT
                if not struct_name:
                    node.go = "struct"
                node.props = {k: self.inline(v) for k, v in schema["properties"].items()}
                node.plain = {k: str if c.tag == STRING else bool for k, c in node.props.items()
                              if c.tag in (STRING, BOOL)}
            elif isinstance(schema.get("additionalProperties"), dict):
                node.tag = MAP
                node.item = self.inline(schema["additionalProperties"])
                # every quantity map upstream has is a core/v1 ResourceList (map[ResourceName]Quantity)
                node.go = "v1.ResourceList" if node.item.tag == QUANTITY else \
                    f"map[string]{node.item.go or 'interface {}'}"
            elif self._structural:
                node.tag = STRUCT
            else:
                node.tag = ANY  # a bare object (FieldsV1 and the like) takes anything
        elif typ == "array":
            node.tag = ARRAY
            node.keys = tuple(schema.get("x-kubernetes-list-map-keys") or ()) or (
                ("",) if schema.get("x-kubernetes-list-type") == "set" else ())
            node.item = self.inline(schema.get("items"))
            node.go = f"[]{node.item.go or 'interface {}'}"
        elif typ == "string":
            node.tag, node.go = (BYTES, "[]uint8") if fmt == "byte" else (STRING, "string")
        elif typ == "integer":
            node.tag, node.go = (INT32, "int32") if fmt == "int32" else (INT64, "int64")
        elif typ == "number":
            node.tag, node.go = FLOAT, "float64"
        elif typ == "boolean":
            node.tag, node.go = BOOL, "bool"


def _ref_of(schema: Obj) -> str:
    ref = schema.get("$ref")
    if not ref and isinstance(schema.get("allOf"), list) and len(schema["allOf"]) == 1:
        ref = (schema["allOf"][0] or {}).get("$ref")
    return ref[len(_REF):] if isinstance(ref, str) and ref.startswith(_REF) else ""


def json_kind(value: Any) -> str:
    """The JSON kind word Go's decoder puts in its messages."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return f"number {value}"
    if isinstance(value, float):
        return f"number {value!r}"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def _plain_kind(value: Any) -> str:
    return "number" if isinstance(value, (int, float)) and not isinstance(value, bool) else json_kind(value)


def _plainly_fine(tag: int, value: Any) -> bool:
    """A quick yes for the usual int32 values (strings and booleans have `Node.plain`)."""
    if tag == INT32:
        return type(value) is int and -2147483648 <= value <= 2147483647
    return False


def _all_str(values: Any) -> bool:
    return all(type(v) is str for v in values)


def count_keys(value: Any, depth: int = 0) -> int:
    """Keys in a decoded JSON value (dicts and lists only). A plain recursion is the fastest walk; past a
    depth of 200 an explicit stack takes over, so hostile nesting cannot exhaust the interpreter's stack."""
    if depth > 200:
        return _count_keys_deep(value)
    n = 0
    if type(value) is dict:
        n = len(value)
        items: Any = value.values()
    else:
        items = value
    for x in items:
        t = type(x)
        if t is dict or t is list:
            n += count_keys(x, depth + 1)
    return n


def _count_keys_deep(value: Any) -> int:
    n = 0
    stack = [value]
    while stack:
        v = stack.pop()
        if type(v) is dict:
            n += len(v)
            stack.extend(x for x in v.values() if type(x) is dict or type(x) is list)
        elif type(v) is list:
            stack.extend(x for x in v if type(x) is dict or type(x) is list)
    return n


class _Walk:
    __slots__ = ("directives", "keys", "prune", "report", "to_drop", "types")

    def __init__(self, prune: bool, directives: bool, types: bool) -> None:
        self.prune = prune
        self.directives = directives
        self.types = types
        self.keys = 0  # object keys seen, for the duplicate-key screening (counting while walking is cheaper)
        self.report = Report()
        self.to_drop: list[tuple[Obj, str]] = []

    def fail(self, value: Any, struct: str, gopath: str, go: str, plain: bool = True) -> None:
        """Record the type error and stop the walk; without type checks, only skip the value."""
        if not self.types:
            return
        what = _plain_kind(value) if plain else json_kind(value)
        where = f"Go struct field {struct}.{gopath}" if gopath else "Go value"
        self.report.type_error = f"json: cannot unmarshal {what} into {where} of type {go}"
        raise _TypeError

    def walk(self, node: Node, value: Any, struct: str, gopath: str, spath: str) -> None:
        if value is None:
            return
        tag = node.tag
        if tag == STRUCT:
            if not isinstance(value, dict):
                return self.fail(value, struct, gopath, node.go)
            props, plain = node.props, node.plain
            inner = node.go.rpartition(".")[2] or struct
            self.keys += len(value)
            for key, sub in value.items():
                kind = plain.get(key)
                if kind is not None and type(sub) is kind:
                    continue  # the common case, without building the paths
                child = props.get(key)
                if child is None:
                    if type(sub) is dict or type(sub) is list:
                        self.keys += count_keys(sub)
                    if self.directives and (key.startswith("$") or sub is None):
                        continue  # a patch directive, or a patch removing a field that is not there
                    self.report.unknown.append(f"{spath}.{key}" if spath else key)
                    if self.prune:
                        self.to_drop.append((value, key))
                    continue
                if sub is None:
                    continue
                if child.tag == ANY:
                    if type(sub) is dict or type(sub) is list:
                        self.keys += count_keys(sub)
                    continue
                if _plainly_fine(child.tag, sub):
                    continue
                self.walk(child, sub, inner, f"{gopath}.{key}" if gopath else key,
                          f"{spath}.{key}" if spath else key)
        elif tag == STRING:
            if not isinstance(value, str):
                self.fail(value, struct, gopath, node.go)
        elif tag == ARRAY:
            if not isinstance(value, list):
                return self.fail(value, struct, gopath, node.go)
            item = node.item
            if item is None or item.tag == ANY:
                self.keys += count_keys(value)
            elif not (item.tag == STRING and _all_str(value)):
                for i, sub in enumerate(value):
                    if sub is not None:
                        self.walk(item, sub, struct, gopath, f"{spath}[{i}]")
        elif tag == MAP:
            if not isinstance(value, dict):
                return self.fail(value, struct, gopath, node.go)
            item = node.item
            if item is None or item.tag == ANY:
                self.keys += count_keys(value)
            elif item.tag == STRING and _all_str(value.values()):
                self.keys += len(value)
            else:
                self.keys += len(value)
                for key, sub in value.items():
                    if sub is not None:
                        self.walk(item, sub, struct, gopath, f"{spath}.{key}")
        elif self.types:
            self.scalar(node, value, struct, gopath)
        return None

    def scalar(self, node: Node, value: Any, struct: str, gopath: str) -> None:
        tag = node.tag
        if tag in (INT32, INT64, INTSTR):
            if tag == INTSTR and isinstance(value, str):
                return
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                self.fail(value, struct, gopath, node.go)
            lo, hi = _INT_RANGE[tag]
            if isinstance(value, float) or not lo <= value <= hi:
                self.fail(value, struct, gopath, node.go, plain=False)
        elif tag == BOOL:
            if not isinstance(value, bool):
                self.fail(value, struct, gopath, node.go)
        elif tag == FLOAT:
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                self.fail(value, struct, gopath, node.go)
        elif tag == QUANTITY:
            text = value if isinstance(value, str) else (
                str(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else "")
            try:
                parse_quantity(text)
            except ValueError:
                self.report.type_error = QUANTITY_ERROR
                raise _TypeError from None
        elif tag in (TIME, MICROTIME):
            if not isinstance(value, str):
                self.fail(value, struct, gopath, "string")
            if value and not _TIME_RE.match(value):
                layout = "2006-01-02T15:04:05Z07:00" if tag == TIME else "2006-01-02T15:04:05.000000Z07:00"
                self.report.type_error = f'parsing time "{value}" as "{layout}": cannot parse "{value}" as "2006"'
                raise _TypeError
        elif tag == BYTES and not isinstance(value, str):
            self.fail(value, struct, gopath, node.go)


def check(node: Node, obj: Any, *, prune: bool = False, directives: bool = False, types: bool = True,
          at: tuple[str, str, str] | None = None) -> Report:
    """Check `obj` against `node` (see the module docstring). With `prune`, unknown fields are removed from
    `obj` when no type error was found. With `types=False` only unknown fields are looked for (values of the
    wrong shape are skipped, as for custom resources, whose types their CRD validation checks). `at` is
    (struct, Go path, strict path) of a value inside an object (from `at_pointer`); by default `obj` is a whole
    object of `node`'s type."""
    w = _Walk(prune, directives, types)
    struct, gopath, spath = at or (node.go.rpartition(".")[2], "", "")
    try:
        w.walk(node, obj, struct, gopath, spath)
    except _TypeError:
        return w.report
    w.report.keys = w.keys
    for parent, key in w.to_drop:
        parent.pop(key, None)
    return w.report


def at_pointer(node: Node, tokens: list[str]) -> tuple[Node | None, tuple[str, str, str]]:
    """The node a JSON pointer (as tokens) leads to, with (struct, Go path, strict path) for `check`; the node
    is None when the pointer names an unknown field (its strict path is then the unknown field)."""
    struct, gopath, spath = node.go.rpartition(".")[2], "", ""
    for tok in tokens:
        if node.tag == STRUCT:
            child = node.props.get(tok)
            spath = f"{spath}.{tok}" if spath else tok
            if child is None:
                return None, (struct, gopath, spath)
            struct = node.go.rpartition(".")[2] or struct
            gopath = f"{gopath}.{tok}" if gopath else tok
            node = child
        elif node.tag == ARRAY and node.item is not None:
            node, spath = node.item, f"{spath}[{tok}]"
        elif node.tag == MAP and node.item is not None:
            node, spath = node.item, f"{spath}.{tok}"
        else:
            return Node(ANY), (struct, gopath, spath)
    return node, (struct, gopath, spath)


_STEP = re.compile(r"\[(\d+)\]|\.?([^.\[]+)")


def ssa_path(node: Node, obj: Any, strict_path: str) -> str:
    """A strict path (`spec.containers[0].x`) as server-side apply names it (`.spec.containers[name="c"].x`):
    elements of associative lists by their keys, of sets by their value, others by index."""
    out = []
    value: Any = obj
    cur: Node | None = node
    for m in _STEP.finditer(strict_path):
        index, key = m.group(1), m.group(2)
        if index is not None:
            i = int(index)
            elem = value[i] if isinstance(value, list) and i < len(value) else None
            keys = cur.keys if cur is not None else ()
            if keys == ("",) and elem is not None:
                out.append(f"[={_json(elem)}]")
            elif keys and isinstance(elem, dict):
                out.append("[" + ",".join(f"{k}={_json(elem.get(k))}" for k in keys if k in elem) + "]")
            else:
                out.append(f"[{i}]")
            value, cur = elem, cur.item if cur is not None else None
        else:
            out.append(f".{key}")
            value = value.get(key) if isinstance(value, dict) else None
            if cur is not None and cur.tag == STRUCT:
                cur = cur.props.get(key)
            elif cur is not None and cur.tag == MAP:
                cur = cur.item
            else:
                cur = None
    return "".join(out)


def _json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))
