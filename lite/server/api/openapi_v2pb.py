"""The protobuf form of the `/openapi/v2` document: gnostic's `openapi.v2.Document`, as kubectl before 1.27 asks
for it (`Accept: application/com.github.proto-openapi.spec.v2@v1.0+protobuf`).

Role: `encode_document(doc) -> bytes` writes a Swagger 2.0 JSON document (as `openapi_v2.swagger_document`
builds it) in the wire format of gnostic's `OpenAPIv2.proto`, the message kubectl 1.20's
`discovery.OpenAPISchema()` decodes before building its validation and `explain` models.

Invariants:
- Pure. Field numbers are those of gnostic's `openapiv2/OpenAPIv2.proto`; proto3 rules: scalar fields at
  their zero value are omitted, except inside a `oneof`, where the chosen member is always written (so
  `additionalProperties: false` survives).
- Maps are written as gnostic writes them, repeated `Named*` pairs in the document's key order.
- Vendor extensions (`x-...`), `default`, `example` and `enum` values become `Any{yaml}` holding the value as
  JSON text (JSON is YAML; kube-openapi reads `x-kubernetes-group-version-kind` and the patch strategy
  extensions back with a YAML decoder).
"""

from __future__ import annotations

import struct
from typing import Any

import orjson

Obj = dict[str, Any]

_VARINT, _I64, _LEN = 0, 1, 2


def _varint(n: int) -> bytes:
    if n < 0:
        n += 1 << 64
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _key(num: int, wire: int) -> bytes:
    return _varint(num << 3 | wire)


def _msg(num: int, payload: bytes) -> bytes:
    """A length-delimited field (always written: used for sub-messages that are present)."""
    return _key(num, _LEN) + _varint(len(payload)) + payload


def _str(num: int, value: Any) -> bytes:
    if not isinstance(value, str) or not value:
        return b""
    return _msg(num, value.encode())


def _strs(num: int, values: Any) -> bytes:
    if not isinstance(values, list):
        return b""
    return b"".join(_msg(num, v.encode()) for v in values if isinstance(v, str))


def _bool(num: int, value: Any, *, always: bool = False) -> bytes:
    if value is True:
        return _key(num, _VARINT) + b"\x01"
    return _key(num, _VARINT) + b"\x00" if always else b""


def _int(num: int, value: Any) -> bytes:
    if isinstance(value, bool) or not isinstance(value, int) or value == 0:
        return b""
    return _key(num, _VARINT) + _varint(value)


def _double(num: int, value: Any) -> bytes:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value == 0:
        return b""
    return _key(num, _I64) + struct.pack("<d", float(value))


def _any(value: Any) -> bytes:
    """gnostic `Any`: field 2 (`yaml`) holds the value's text."""
    return _str(2, orjson.dumps(value).decode())


def _named_any(name: str, value: Any) -> bytes:
    return _str(1, name) + _msg(2, _any(value))


def _extensions(num: int, obj: Obj) -> bytes:
    return b"".join(_msg(num, _named_any(k, v)) for k, v in obj.items() if k.startswith("x-"))


# ---- schemas ----------------------------------------------------------------------------------------------

def schema(s: Obj) -> bytes:
    """gnostic `Schema`."""
    out = [_str(1, s.get("$ref")), _str(2, s.get("format")), _str(3, s.get("title")),
           _str(4, s.get("description"))]
    if "default" in s:
        out.append(_msg(5, _any(s["default"])))
    out += [_double(6, s.get("multipleOf")), _double(7, s.get("maximum")), _bool(8, s.get("exclusiveMaximum")),
            _double(9, s.get("minimum")), _bool(10, s.get("exclusiveMinimum")), _int(11, s.get("maxLength")),
            _int(12, s.get("minLength")), _str(13, s.get("pattern")), _int(14, s.get("maxItems")),
            _int(15, s.get("minItems")), _bool(16, s.get("uniqueItems")), _int(17, s.get("maxProperties")),
            _int(18, s.get("minProperties")), _strs(19, s.get("required"))]
    for value in s.get("enum") or []:
        out.append(_msg(20, _any(value)))
    extra = s.get("additionalProperties")
    if isinstance(extra, bool):
        out.append(_msg(21, _bool(2, extra, always=True)))
    elif isinstance(extra, dict):
        out.append(_msg(21, _msg(1, schema(extra))))
    typ = s.get("type")
    if isinstance(typ, str) and typ:
        out.append(_msg(22, _str(1, typ)))
    elif isinstance(typ, list) and typ:
        out.append(_msg(22, _strs(1, typ)))
    items = s.get("items")
    if isinstance(items, dict):
        out.append(_msg(23, _msg(1, schema(items))))
    elif isinstance(items, list):
        out.append(_msg(23, b"".join(_msg(1, schema(i)) for i in items if isinstance(i, dict))))
    for sub in s.get("allOf") or []:
        if isinstance(sub, dict):
            out.append(_msg(24, schema(sub)))
    props = s.get("properties")
    if isinstance(props, dict):
        out.append(_msg(25, b"".join(_msg(1, _str(1, k) + _msg(2, schema(v)))
                                     for k, v in props.items() if isinstance(v, dict))))
    out += [_str(26, s.get("discriminator")), _bool(27, s.get("readOnly"))]
    if "example" in s:
        out.append(_msg(30, _any(s["example"])))
    out.append(_extensions(31, s))
    return b"".join(out)


# ---- paths ------------------------------------------------------------------------------------------------

def _primitive_fields(p: Obj, first: int) -> bytes:
    """The shared tail of gnostic's non-body parameter messages, from `type` (field `first`) on."""
    n = first
    out = [_str(n, p.get("type")), _str(n + 1, p.get("format"))]
    if isinstance(p.get("items"), dict):
        out.append(_msg(n + 2, _primitives_items(p["items"])))
    out.append(_str(n + 3, p.get("collectionFormat")))
    if "default" in p:
        out.append(_msg(n + 4, _any(p["default"])))
    out += [_double(n + 5, p.get("maximum")), _bool(n + 6, p.get("exclusiveMaximum")),
            _double(n + 7, p.get("minimum")), _bool(n + 8, p.get("exclusiveMinimum")),
            _int(n + 9, p.get("maxLength")), _int(n + 10, p.get("minLength")), _str(n + 11, p.get("pattern")),
            _int(n + 12, p.get("maxItems")), _int(n + 13, p.get("minItems")), _bool(n + 14, p.get("uniqueItems"))]
    for value in p.get("enum") or []:
        out.append(_msg(n + 15, _any(value)))
    out += [_double(n + 16, p.get("multipleOf")), _extensions(n + 17, p)]
    return b"".join(out)


def _primitives_items(p: Obj) -> bytes:
    return _primitive_fields(p, 1)


def _non_body(p: Obj) -> bytes:
    where = p.get("in")
    head = _bool(1, p.get("required")) + _str(2, where) + _str(3, p.get("description")) + _str(4, p.get("name"))
    if where in ("query", "formData"):
        sub = head + _bool(5, p.get("allowEmptyValue")) + _primitive_fields(p, 6)
        return _msg(3 if where == "query" else 2, sub)
    sub = head + _primitive_fields(p, 5)
    return _msg(4 if where == "path" else 1, sub)


def parameter(p: Obj) -> bytes:
    """gnostic `ParametersItem` (a `$ref` or a body/non-body `Parameter`)."""
    if "$ref" in p:
        return _msg(2, _str(1, p["$ref"]) + _str(2, p.get("description")))
    if p.get("in") == "body":
        body = (_str(1, p.get("description")) + _str(2, p.get("name")) + _str(3, "body") + _bool(4, p.get("required"))
                + (_msg(5, schema(p["schema"])) if isinstance(p.get("schema"), dict) else b"") + _extensions(6, p))
        return _msg(1, _msg(1, body))
    return _msg(1, _msg(2, _non_body(p)))


def _response(r: Obj) -> bytes:
    out = _str(1, r.get("description"))
    if isinstance(r.get("schema"), dict):
        out += _msg(2, _msg(1, schema(r["schema"])))
    return out + _extensions(5, r)


def operation(op: Obj) -> bytes:
    out = [_strs(1, op.get("tags")), _str(2, op.get("summary")), _str(3, op.get("description")),
           _str(5, op.get("operationId")), _strs(6, op.get("produces")), _strs(7, op.get("consumes"))]
    out += [_msg(8, parameter(p)) for p in op.get("parameters") or [] if isinstance(p, dict)]
    responses = b"".join(_msg(1, _str(1, code) + _msg(2, _msg(1, _response(r))))
                         for code, r in (op.get("responses") or {}).items() if isinstance(r, dict))
    out += [_msg(9, responses), _strs(10, op.get("schemes")), _bool(11, op.get("deprecated")),
            _extensions(13, op)]
    return b"".join(out)


_OPS = {"get": 2, "put": 3, "post": 4, "delete": 5, "options": 6, "head": 7, "patch": 8}


def path_item(item: Obj) -> bytes:
    out = [_str(1, item.get("$ref"))]
    out += [_msg(num, operation(item[name])) for name, num in _OPS.items() if isinstance(item.get(name), dict)]
    out += [_msg(9, parameter(p)) for p in item.get("parameters") or [] if isinstance(p, dict)]
    out.append(_extensions(10, item))
    return b"".join(out)


# ---- the document -----------------------------------------------------------------------------------------

def _security_item(value: Obj) -> bytes:
    if value.get("type") != "apiKey":
        return b""
    key = (_str(1, value.get("type")) + _str(2, value.get("name")) + _str(3, value.get("in"))
           + _str(4, value.get("description")) + _extensions(5, value))
    return _msg(2, key)


def encode_document(doc: Obj) -> bytes:
    """gnostic `Document` bytes of a Swagger 2.0 document."""
    info = doc.get("info") or {}
    out = [_str(1, doc.get("swagger")),
           _msg(2, _str(1, info.get("title")) + _str(2, info.get("version")) + _str(3, info.get("description"))),
           _str(3, doc.get("host")), _str(4, doc.get("basePath")), _strs(5, doc.get("schemes")),
           _strs(6, doc.get("consumes")), _strs(7, doc.get("produces"))]
    paths = doc.get("paths") or {}
    out.append(_msg(8, b"".join(_msg(2, _str(1, p) + _msg(2, path_item(v)))
                                for p, v in paths.items() if isinstance(v, dict))))
    definitions = doc.get("definitions") or {}
    out.append(_msg(9, b"".join(_msg(1, _str(1, n) + _msg(2, schema(v)))
                                for n, v in definitions.items() if isinstance(v, dict))))
    for requirement in doc.get("security") or []:
        pairs = b"".join(_msg(1, _str(1, n) + _msg(2, _strs(1, scopes))) for n, scopes in requirement.items())
        out.append(_msg(12, pairs))
    security = doc.get("securityDefinitions") or {}
    if security:
        out.append(_msg(13, b"".join(_msg(1, _str(1, n) + _msg(2, _security_item(v)))
                                     for n, v in security.items() if isinstance(v, dict))))
    out.append(_extensions(16, doc))
    return b"".join(out)
