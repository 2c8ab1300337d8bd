"""CEL types of structural schemas (upstream's `SchemaDeclType`, k8s.io/apiserver/pkg/cel/common/schemas.go), and
their declaration to the runtime's type checker as protobuf messages.

`decl_type(schema, resource_root)` maps a structural schema to a `DeclType`, as upstream does:
- `x-kubernetes-int-or-string` -> `dyn` (checked at runtime only);
- the root of a resource (and of an `x-kubernetes-embedded-resource`) gets `apiVersion`, `kind` and a `metadata`
  of `name` and `generateName` only, whatever the schema says of them;
- `array` -> `list(T)` (no type when its items have none); `object` with an `additionalProperties` schema ->
  `map(string, T)`; any other `object` -> an object type with one field per property whose schema has a type,
  named as rules spell it (`__namespace__`, `a__dash__b`; a name that cannot be escaped is left out), unknown
  fields of `x-kubernetes-preserve-unknown-fields` objects not exposed;
- `string` -> `string`, or `bytes` (format byte), `google.protobuf.Duration` (duration),
  `google.protobuf.Timestamp` (date, date-time); `boolean` -> `bool`; `number` -> `double`; `integer` -> `int`;
- anything else (no type: a bare `x-kubernetes-preserve-unknown-fields`) -> None (not visible to rules).

`Declarations` turns DeclTypes into `cel.Type`s for `Environment(variables, messages=decls.files())`: each object
type is a proto2 message (`selfType<N>`) with one field per property (a reserved word's property also under its own
name, as Kubernetes 1.32 resolves `x.namespace` to `__namespace__`), so the runtime's checker resolves field
selections and operand types (`undefined field`, `found no matching overload`) as cel-go does with upstream's
DeclTypes. Protobuf cannot hold a list or map directly inside a list or map: such an inner value is declared
`google.protobuf.ListValue` / `Struct` (`list(dyn)` / `map(string, dyn)`), so what it holds is checked at runtime
only (never a false refusal, a weaker check). These types are for checking: the programs evaluated on objects are
compiled with `dyn` variables (a message-typed variable takes protobuf messages, not dicts).

Invariants: pure (`decl_type`); a `Declarations` only grows, one message per distinct object type.
"""

from __future__ import annotations

from typing import Any

from cel_expr_python import cel
from google.protobuf import descriptor_pb2, duration_pb2, struct_pb2, timestamp_pb2

from lite.cel.cost import RESERVED, escape
from lite.records import dataclass

_F = descriptor_pb2.FieldDescriptorProto
SCALARS = ("bool", "int", "double", "string", "bytes", "google.protobuf.Timestamp", "google.protobuf.Duration",
           "dyn")


@dataclass(frozen=True)
class DeclType:
    """A CEL type of a schema: `kind` is one of SCALARS, `list`, `map` (string keys) or `object` (`fields`:
    (escaped name, type) in the schema's order)."""

    kind: str
    elem: DeclType | None = None
    fields: tuple[tuple[str, DeclType], ...] = ()

    def __str__(self) -> str:
        """cel-go's spelling (`list(int)`, `map(string, dyn)`); objects are `object`."""
        if self.kind == "list":
            return f"list({self.elem})"
        if self.kind == "map":
            return f"map(string, {self.elem})"
        return self.kind

    def field(self, name: str) -> DeclType | None:
        return dict(self.fields).get(name)


DYN = DeclType("dyn")
STRING = DeclType("string")
_FORMATS = {"byte": "bytes", "duration": "google.protobuf.Duration", "date": "google.protobuf.Timestamp",
            "date-time": "google.protobuf.Timestamp"}
_SIMPLE = {"boolean": "bool", "number": "double", "integer": "int"}
_META = DeclType("object", fields=(("name", STRING), ("generateName", STRING)))


def decl_type(schema: Any, resource_root: bool = False) -> DeclType | None:
    """Pure: the CEL type rules see for values of `schema` (see the module docstring), None when not exposed."""
    if not isinstance(schema, dict):
        return None
    if schema.get("x-kubernetes-int-or-string"):
        return DYN
    t = schema.get("type")
    if t == "array":
        items = schema.get("items")
        elem = decl_type(items, _embedded(items)) if isinstance(items, dict) else None
        return DeclType("list", elem) if elem is not None else None
    if t == "object":
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict):
            elem = decl_type(extra, _embedded(extra))
            return DeclType("map", elem) if elem is not None else None
        fields: dict[str, DeclType] = {}
        props = schema.get("properties")
        for name, prop in (props.items() if isinstance(props, dict) else ()):
            ft = decl_type(prop, _embedded(prop))
            escaped = escape(str(name))
            if ft is not None and escaped is not None:
                fields[escaped] = ft
        if resource_root and not _has_type_and_object_meta(props):
            fields.update(apiVersion=STRING, kind=STRING, metadata=_META)
        return DeclType("object", fields=tuple(fields.items()))
    if t == "string":
        return DeclType(_FORMATS.get(str(schema.get("format") or ""), "string"))
    if t in _SIMPLE:
        return DeclType(_SIMPLE[t])
    return None


def _has_type_and_object_meta(props: Any) -> bool:
    """Upstream's `WithTypeAndObjectMeta` keeps a root whose schema already declares the string `kind` and
    `apiVersion` and a `metadata` object with string `name` and `generateName` (and whatever else it declares)."""
    if not isinstance(props, dict):
        return False
    meta = props.get("metadata")
    inner = meta.get("properties") if isinstance(meta, dict) else None
    return all(isinstance(props.get(k), dict) and props[k].get("type") == "string" for k in ("kind", "apiVersion")) \
        and isinstance(meta, dict) and meta.get("type") == "object" and isinstance(inner, dict) \
        and all(isinstance(inner.get(k), dict) and inner[k].get("type") == "string" for k in ("name", "generateName"))


def _camel(name: str) -> str:
    """protobuf's ToCamelCase of a field name (upper first): `a__dash__b` -> `ADashB`."""
    out, upper = [], True
    for ch in name:
        if ch == "_":
            upper = True
        else:
            out.append(ch.upper() if upper else ch)
            upper = False
    return "".join(out)


def _embedded(schema: Any) -> bool:
    return isinstance(schema, dict) and bool(schema.get("x-kubernetes-embedded-resource"))


# Reserved words a rule can select as a field name (`true`, `false`, `null` and `in` do not parse there).
_KEYWORD_FIELDS = RESERVED - {"true", "false", "null", "in"}
_SCALAR_FIELDS = {"bool": _F.TYPE_BOOL, "int": _F.TYPE_INT64, "double": _F.TYPE_DOUBLE, "string": _F.TYPE_STRING,
                  "bytes": _F.TYPE_BYTES}
_WELL_KNOWN = {"google.protobuf.Timestamp": ".google.protobuf.Timestamp",
               "google.protobuf.Duration": ".google.protobuf.Duration", "dyn": ".google.protobuf.Value"}
_CEL_SCALARS = {"bool": cel.Type.BOOL, "int": cel.Type.INT, "double": cel.Type.DOUBLE, "string": cel.Type.STRING,
                "bytes": cel.Type.BYTES, "google.protobuf.Timestamp": cel.Type.TIMESTAMP,
                "google.protobuf.Duration": cel.Type.DURATION, "dyn": cel.Type.DYN}


class Declarations:
    """Protobuf messages for the object types of some DeclTypes (one file, messages `selfType<N>`)."""

    def __init__(self, prefix: str = "selfType") -> None:
        self._prefix = prefix
        self._file = descriptor_pb2.FileDescriptorProto(
            name=f"lite_{prefix}.proto", syntax="proto2",  # with JSON names of their own, `a_b` and `aB` do not clash
            dependency=["google/protobuf/timestamp.proto", "google/protobuf/duration.proto",
                        "google/protobuf/struct.proto"])
        self._names: dict[DeclType, str] = {}

    def cel_type(self, t: DeclType) -> cel.Type:
        """`t` as the runtime's type (objects become messages of this declaration set)."""
        if t.kind == "list":
            assert t.elem is not None
            return cel.Type.List(self.cel_type(t.elem))
        if t.kind == "map":
            assert t.elem is not None
            return cel.Type.Map(cel.Type.STRING, self.cel_type(t.elem))
        if t.kind == "object":
            return cel.Type(self._message(t))
        return _CEL_SCALARS[t.kind]

    def probe(self) -> tuple[str, str] | None:
        """(message, field) of some declared message with a field: an environment that resolves
        `has(x.field)` for `x` of that type has taken these declarations (the runtime silently drops a file it
        finds invalid)."""
        for m in self._file.message_type:
            if m.field:
                return str(m.name), str(m.field[0].name)
        return None

    def files(self) -> list[descriptor_pb2.FileDescriptorProto]:
        """The files to add to the environment's descriptor pool (well-known types first)."""
        out = []
        for module in (timestamp_pb2, duration_pb2, struct_pb2):
            fdp = descriptor_pb2.FileDescriptorProto()
            module.DESCRIPTOR.CopyToProto(fdp)
            out.append(fdp)
        return [*out, self._file]

    def _message(self, t: DeclType) -> str:
        name = self._names.get(t)
        if name is not None:
            return name
        name = f"{self._prefix}{len(self._names)}"
        self._names[t] = name
        msg = self._file.message_type.add(name=name)
        for number, (field_name, ft) in enumerate(t.fields, start=1):
            self._field(msg, field_name, number, ft)
        # Kubernetes 1.32 also resolves a reserved word selected as a field (`x.namespace`) to its escaped
        # property (`__namespace__`): the same field under its own name too
        names = {f for f, _ in t.fields}
        number = len(t.fields)
        for field_name, ft in t.fields:
            word = field_name[2:-2]
            if field_name == f"__{word}__" and word in _KEYWORD_FIELDS and word not in names:
                number += 1
                self._field(msg, word, number, ft)
        return name

    def _field(self, msg: Any, name: str, number: int, t: DeclType) -> None:
        label = _F.LABEL_OPTIONAL
        if t.kind == "list":
            assert t.elem is not None
            label, t = _F.LABEL_REPEATED, t.elem
            if t.kind in ("list", "map"):  # a list in a list: what protobuf can hold
                t = DeclType("google.protobuf.ListValue" if t.kind == "list" else "google.protobuf.Struct")
        elif t.kind == "map":
            assert t.elem is not None
            entry_name = _camel(name) + "Entry"  # protobuf's required name of a map field's entry type
            entry = msg.nested_type.add(name=entry_name)
            entry.options.map_entry = True
            entry.field.add(name="key", number=1, type=_F.TYPE_STRING, label=_F.LABEL_OPTIONAL)
            value = t.elem
            if value.kind in ("list", "map"):
                value = DeclType("google.protobuf.ListValue" if value.kind == "list" else "google.protobuf.Struct")
            self._scalar_or_message(entry, "value", 2, value, _F.LABEL_OPTIONAL)
            msg.field.add(name=name, number=number, type=_F.TYPE_MESSAGE, label=_F.LABEL_REPEATED, json_name=name,
                          type_name=f".{msg.name}.{entry_name}")
            return
        self._scalar_or_message(msg, name, number, t, label)

    def _scalar_or_message(self, msg: Any, name: str, number: int, t: DeclType, label: int) -> None:
        if t.kind in _SCALAR_FIELDS:
            msg.field.add(name=name, number=number, type=_SCALAR_FIELDS[t.kind], label=label, json_name=name)
            return
        if t.kind == "object":
            type_name = f".{self._message(t)}"
        elif t.kind in _WELL_KNOWN:
            type_name = _WELL_KNOWN[t.kind]
        else:
            type_name = f".{t.kind}"
        msg.field.add(name=name, number=number, type=_F.TYPE_MESSAGE, label=label, type_name=type_name,
                      json_name=name)
