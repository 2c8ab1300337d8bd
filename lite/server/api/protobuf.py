"""Decode Kubernetes protobuf request bodies (`application/vnd.kubernetes.protobuf`) into JSON dicts.

kubectl 1.31+ typed clients POST `k8s\\0` + a `runtime.Unknown` envelope {1: TypeMeta{apiVersion, kind},
2: raw object bytes, 3: contentEncoding, 4: contentType}. The raw bytes follow the upstream
`generated.proto` of the object's group; the field tables live in `protobuf_fields.py` (generated).

Invariants:
- The result equals what a JSON client would send for the same Go object: `apiVersion`/`kind` first;
  zero scalars omitted unless JSON keeps them (Go pointers such as `replicas: 0`, fields without
  `omitempty`); every present message kept (`{}` when empty, as Go JSON writes non-pointer structs);
  embedded (`inline`) structs merged into their parent; zero `Time` omitted (JSON `null`); bytes as
  base64; `IntOrString` as int or string; `Quantity` as its string; `RawExtension`/`FieldsV1` as JSON.
- Unknown field numbers are skipped (newer clients may send fields this table lacks).
- Unknown types raise 415 UnsupportedMediaType naming the type; malformed bytes raise 400 BadRequest.
- Pure, synchronous and bounded: no I/O, nesting depth capped.
- The generated tables are compact text (one string per message); a message's table is parsed the first time a
  body contains it and kept (`_table`, one entry per message type at most: ~400).
"""

from __future__ import annotations

import base64
import datetime as dt
import functools
import struct
from collections.abc import Callable, Iterator, Mapping
from types import MappingProxyType
from typing import Any

import orjson

from lite.errors import bad_request, unsupported_media_type
from lite.objects import rfc3339, rfc3339_micro
from lite.server.api.protobuf_fields import MESSAGES, ROOTS

MAGIC = b"k8s\x00"
MAX_DEPTH = 64

_VARINT, _FIXED64, _LEN, _FIXED32 = 0, 1, 2, 5
_INTS = frozenset({"int32", "int64", "uint32", "uint64", "bool"})
# The JSON zero value of each scalar type (bytes are base64 text by then).
_ZERO: Mapping[str, Any] = MappingProxyType({"string": "", "bytes": "", "int32": 0, "int64": 0, "uint32": 0,
                                             "uint64": 0, "bool": False, "double": 0.0, "float": 0.0})

Field = tuple[int, int, int | bytes]


def decode(body: bytes) -> dict[str, Any]:
    """The JSON object carried by a protobuf request body (any served kind)."""
    api_version, kind, raw = _envelope(body)
    if kind == "DeleteOptions":
        message = "apis.meta.v1.DeleteOptions"
    else:
        found = ROOTS.get(f"{api_version}/{kind}")
        if found is None:
            raise unsupported_media_type(
                f"protobuf decoding of {kind} ({api_version or 'no apiVersion'}) is not supported; send JSON")
        message = found
    obj = _message(message, raw, 0)
    assert isinstance(obj, dict)
    return {"apiVersion": api_version, "kind": kind, **obj}


def decode_delete_options(body: bytes) -> dict[str, Any]:
    """A DeleteOptions body (any apiVersion kubectl stamps on it) as its JSON dict."""
    api_version, kind, raw = _envelope(body)
    if kind != "DeleteOptions":
        raise bad_request(f"expected DeleteOptions in the request body, got {kind or 'no kind'}")
    obj = _message("apis.meta.v1.DeleteOptions", raw, 0)
    assert isinstance(obj, dict)
    return {"apiVersion": api_version or "v1", "kind": kind, **obj}


def _envelope(body: bytes) -> tuple[str, str, bytes]:
    """(apiVersion, kind, raw) of a `k8s\\0` + runtime.Unknown body."""
    if not body.startswith(MAGIC):
        raise bad_request("protobuf body does not start with the k8s\\0 magic prefix")
    api_version = kind = encoding = ""
    raw = b""
    for num, _, value in _fields(body[len(MAGIC):], {1: _LEN, 2: _LEN, 3: _LEN, 4: _LEN}):
        assert isinstance(value, bytes)
        if num == 1:
            for tnum, _, tval in _fields(value, {1: _LEN, 2: _LEN}):
                assert isinstance(tval, bytes)
                if tnum == 1:
                    api_version = _text(tval)
                elif tnum == 2:
                    kind = _text(tval)
        elif num == 2:
            raw = value
        elif num == 3:
            encoding = _text(value)
    if encoding:
        raise unsupported_media_type(f"protobuf contentEncoding {encoding!r} is not supported")
    return api_version, kind, raw


# --- wire format -------------------------------------------------------------------------------------


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(buf):
            raise bad_request("malformed protobuf body: truncated varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7
        if shift >= 70:
            raise bad_request("malformed protobuf body: varint too long")


def _fields(buf: bytes, expect: dict[int, int] | None = None) -> Iterator[Field]:
    """(number, wire type, value) of each field; value is an int, or bytes for length-delimited.

    `expect` maps field numbers to the wire type they must have (a mismatch is a malformed body)."""
    pos, end = 0, len(buf)
    while pos < end:
        key, pos = _varint(buf, pos)
        num, wire = key >> 3, key & 7
        if num == 0:
            raise bad_request("malformed protobuf body: field number 0")
        value: int | bytes
        if wire == _VARINT:
            value, pos = _varint(buf, pos)
        elif wire in (_FIXED64, _FIXED32):
            size = 8 if wire == _FIXED64 else 4
            if pos + size > end:
                raise bad_request("malformed protobuf body: truncated fixed-width field")
            value, pos = int.from_bytes(buf[pos:pos + size], "little"), pos + size
        elif wire == _LEN:
            size, pos = _varint(buf, pos)
            if pos + size > end:
                raise bad_request("malformed protobuf body: length runs past the end")
            value, pos = buf[pos:pos + size], pos + size
        else:
            raise bad_request(f"malformed protobuf body: unsupported wire type {wire}")
        if expect is not None and num in expect and expect[num] != wire:
            raise bad_request(f"malformed protobuf body: field {num} has wire type {wire}")
        yield num, wire, value


def _text(value: bytes) -> str:
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError as e:
        raise bad_request("malformed protobuf body: string is not UTF-8") from e


def _signed(value: int, bits: int) -> int:
    value &= (1 << bits) - 1
    return value - (1 << bits) if value >> (bits - 1) else value


# --- typed decoding ----------------------------------------------------------------------------------


def _scalar(typ: str, wire: int, value: int | bytes) -> Any:
    if typ == "string":
        return _text(_need_bytes(value))
    if typ == "bytes":
        return base64.b64encode(_need_bytes(value)).decode("ascii")
    if typ == "double" and wire == _FIXED64 and isinstance(value, int):
        return struct.unpack("<d", value.to_bytes(8, "little"))[0]
    if typ == "float" and wire == _FIXED32 and isinstance(value, int):
        return struct.unpack("<f", value.to_bytes(4, "little"))[0]
    if typ in _INTS and wire == _VARINT and isinstance(value, int):
        if typ == "bool":
            return value != 0
        if typ == "int32":
            return _signed(value, 32)
        return _signed(value, 64) if typ == "int64" else value
    raise bad_request(f"malformed protobuf body: wire type {wire} for a {typ} field")


def _need_bytes(value: int | bytes) -> bytes:
    if not isinstance(value, bytes):
        raise bad_request("malformed protobuf body: expected a length-delimited field")
    return value


def _repeated_scalars(typ: str, wire: int, value: int | bytes) -> list[Any]:
    """One occurrence of a repeated scalar: unpacked (one value) or packed (a run of values)."""
    if wire != _LEN or typ in ("string", "bytes"):
        return [_scalar(typ, wire, value)]
    assert isinstance(value, bytes)
    out: list[Any] = []
    pos = 0
    while pos < len(value):
        if typ in ("double", "float"):
            size = 8 if typ == "double" else 4
            chunk = value[pos:pos + size]
            if len(chunk) != size:
                raise bad_request("malformed protobuf body: truncated packed field")
            out.append(struct.unpack("<d" if size == 8 else "<f", chunk)[0])
            pos += size
        else:
            n, pos = _varint(value, pos)
            out.append(_scalar(typ, _VARINT, n))
    return out


def _value(typ: str, wire: int, value: int | bytes, depth: int) -> Any:
    if typ.lstrip("*") in _ZERO:
        return _scalar(typ.lstrip("*"), wire, value)
    return _message(typ, _need_bytes(value), depth + 1)


def _map_entry(typ: str, value: bytes, depth: int) -> tuple[str, Any]:
    key, val = "", None
    for num, wire, v in _fields(value):
        if num == 1:
            key = _text(_need_bytes(v))
        elif num == 2:
            val = _value(typ, wire, v, depth)
    if val is None:  # an entry without a value holds the zero value of its type
        val = _ZERO.get(typ) if typ in _ZERO else _message(typ, b"", depth + 1)
    return key, val


def _message(name: str, buf: bytes, depth: int) -> Any:
    if depth > MAX_DEPTH:
        raise bad_request("malformed protobuf body: nesting too deep")
    special = _SPECIAL.get(name)
    if special is not None:
        return special(buf)
    table = _table(name)
    if table is None:
        raise unsupported_media_type(f"protobuf decoding of {name} is not supported")
    out: dict[str, Any] = {}
    for num, wire, value in _fields(buf):
        spec = table.get(num)
        if spec is None:
            continue
        key, typ = spec
        if typ.startswith("map:"):
            k, v = _map_entry(typ[4:], _need_bytes(value), depth)
            out.setdefault(key, {})[k] = v
        elif typ.startswith("[]"):
            item = typ[2:]
            if item in _ZERO:
                out.setdefault(key, []).extend(_repeated_scalars(item, wire, value))
            else:
                out.setdefault(key, []).append(_value(item, wire, value, depth))
        elif key:
            out[key] = _value(typ, wire, value, depth)
        else:  # an embedded Go struct (json:",inline"): its fields belong to this object
            inner = _value(typ, wire, value, depth)
            if isinstance(inner, dict):
                out.update(inner)
    return _drop_zeros(table, out)


@functools.cache
def _table(name: str) -> Mapping[int, tuple[str, str]] | None:
    """Field number -> (JSON name, type) of message `name`, parsed from its `number jsonName type;...` text;
    None for a message the tables do not have. Read-only: shared by every decode."""
    text = MESSAGES.get(name)
    if text is None:
        return None
    table: dict[int, tuple[str, str]] = {}
    for item in text.split(";"):
        num, key, typ = item.split(" ")
        table[int(num)] = (key, typ)
    return MappingProxyType(table)


def _drop_zeros(table: Mapping[int, tuple[str, str]], out: dict[str, Any]) -> dict[str, Any]:
    """Remove what Go's JSON encoder would omit: zero non-pointer scalars and zero (null) times."""
    for key, typ in table.values():
        if key not in out:
            continue
        if (typ in _ZERO and out[key] == _ZERO[typ]) or out[key] is None:
            del out[key]
    return out


# --- well-known apimachinery types ------------------------------------------------------------------


def _seconds_nanos(buf: bytes) -> tuple[int, int]:
    seconds = nanos = 0
    for num, _, value in _fields(buf, {1: _VARINT, 2: _VARINT}):
        assert isinstance(value, int)
        if num == 1:
            seconds = _signed(value, 64)
        elif num == 2:
            nanos = _signed(value, 32)
    return seconds, nanos


def _moment(buf: bytes) -> dt.datetime | None:
    seconds, nanos = _seconds_nanos(buf)
    if seconds == 0 and nanos == 0:
        return None
    try:
        epoch = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
        return epoch + dt.timedelta(seconds=seconds, microseconds=nanos // 1000)
    except OverflowError as e:
        raise bad_request("malformed protobuf body: time out of range") from e


def _time(buf: bytes) -> str | None:
    t = _moment(buf)
    return None if t is None else rfc3339(t)


def _micro_time(buf: bytes) -> str | None:
    t = _moment(buf)
    return None if t is None else rfc3339_micro(t)


def _int_or_string(buf: bytes) -> int | str:
    kind, ival, sval = 0, 0, ""
    for num, wire, value in _fields(buf):
        if num == 1:
            kind = _scalar("int64", wire, value)
        elif num == 2:
            ival = _scalar("int32", wire, value)
        elif num == 3:
            sval = _scalar("string", wire, value)
    return sval if kind == 1 else ival


def _single_string(buf: bytes) -> str:
    out = ""
    for num, wire, value in _fields(buf):
        if num == 1:
            out = _scalar("string", wire, value)
    return out


def _raw_json(buf: bytes) -> Any:
    raw = b""
    for num, _, value in _fields(buf):
        if num == 1:
            raw = _need_bytes(value)
    if not raw:
        return None
    if raw.startswith(MAGIC):
        return decode(raw)
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as e:
        raise bad_request("malformed protobuf body: embedded object is not JSON") from e


def _string_list(buf: bytes) -> list[str]:
    return [_scalar("string", wire, value) for num, wire, value in _fields(buf) if num == 1]


# Types whose JSON form is not an object of their proto fields (read-only table).
_SPECIAL: Mapping[str, Callable[[bytes], Any]] = MappingProxyType({
    "apis.meta.v1.Time": _time,
    "apis.meta.v1.MicroTime": _micro_time,
    "util.intstr.IntOrString": _int_or_string,
    "api.resource.Quantity": _single_string,
    "runtime.RawExtension": _raw_json,
    "apis.meta.v1.FieldsV1": _raw_json,
    "authentication.v1.ExtraValue": _string_list,
    "authorization.v1.ExtraValue": _string_list,
    "certificates.v1.ExtraValue": _string_list,
})

__all__ = ["MAGIC", "decode", "decode_delete_options"]
