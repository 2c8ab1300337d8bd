"""YAML request bodies turned into JSON values the way upstream's sigs.k8s.io/yaml (go-yaml v2) does.

Role: `load(body)` parses one YAML document with PyYAML's safe loader and returns plain JSON values, with
upstream's conversions instead of Python's:
- map keys that are integers, floats or booleans become their text ("1", "1.5", "true"); a null key or
  a key that is itself a collection is refused;
- timestamps stay the text they were written as (PyYAML would make datetimes);
- `!!binary` becomes the decoded bytes as text (invalid UTF-8 replaced), `!!set` a map of nulls;
- plain scalars are resolved as go-yaml resolves them (`yamlscalars`: `y`/`n` booleans, `0o17`, `1e3`,
  `1:20` as text); integers beyond 64 bits become floats; `.inf` and `.nan` cannot be JSON and are refused.

Invariants: pure, no I/O; every refusal is a 400 BadRequest `ApiError`; the result only holds dict, list,
str, int (within 64 bits), float (finite), bool and None, so it always encodes as JSON.
"""

from __future__ import annotations

import base64
import binascii
import math
from typing import Any

import yaml

from lite import errors
from lite.server.api import bodylimits, yamlscalars

_MAX_UINT64 = (1 << 64) - 1
_MIN_INT64 = -(1 << 63)

try:  # the C parser is ~10x faster; fall back to the pure-Python one where libyaml is missing
    _Base: Any = yaml.CSafeLoader
except AttributeError:  # pragma: no cover - depends on how PyYAML was built
    _Base = yaml.SafeLoader


class _Loader(_Base):  # type: ignore[misc]
    """The safe loader with go-yaml's readings of plain scalars, timestamps, `!!binary` and `!!set`."""

    def resolve(self, kind: Any, value: Any, implicit: Any) -> Any:
        if kind is yaml.ScalarNode and implicit[0]:
            tag = yamlscalars.resolve(value)
            if tag is not None:
                return tag
        return super().resolve(kind, value, implicit)


def _scalar(parse: Any, what: str) -> Any:
    def construct(loader: Any, node: Any) -> Any:
        text = str(loader.construct_scalar(node))
        value = parse(text)
        if value is None:
            raise ValueError(f"cannot decode {text!r} as {what}")
        return value
    return construct


def _binary(loader: Any, node: Any) -> bytes:
    text = str(loader.construct_scalar(node)).replace("\r", "").replace("\n", "")
    try:
        return base64.b64decode(text, validate=True)
    except binascii.Error:
        raise ValueError("!!binary value contains invalid base64 data") from None


_Loader.add_constructor(yamlscalars.INT, _scalar(yamlscalars.parse_int, "an integer"))
_Loader.add_constructor(yamlscalars.FLOAT, _scalar(yamlscalars.parse_float, "a float"))
_Loader.add_constructor(yamlscalars.BOOL, _scalar(yamlscalars.parse_bool, "a boolean"))
_Loader.add_constructor("tag:yaml.org,2002:timestamp", lambda loader, node: loader.construct_scalar(node))
_Loader.add_constructor("tag:yaml.org,2002:binary", _binary)
_Loader.add_constructor("tag:yaml.org,2002:set", lambda loader, node: loader.construct_mapping(node, deep=True))


def load(body: bytes) -> Any:
    """One YAML document as JSON values (see the module docstring); 400 BadRequest when it is not valid."""
    try:
        # Measured on its node graph before it is built: aliases must not expand into gigabytes (bodylimits).
        return to_json(bodylimits.load_yaml(body, _Loader))
    except yaml.YAMLError as e:
        raise errors.bad_request(f"error decoding YAML request body: {e}") from None
    except ValueError as e:  # e.g. a malformed !!binary payload inside the constructor
        raise errors.bad_request(f"error decoding YAML request body: {e}") from None
    except RecursionError:  # the constructors and `to_json` recurse once per nesting level
        raise errors.bad_request("error decoding YAML request body: the document is nested too deeply") from None


def _key(key: Any) -> str:
    if isinstance(key, str):
        return key
    if isinstance(key, bool):
        return "true" if key else "false"
    if isinstance(key, int):
        return str(key)
    if isinstance(key, float):
        return _float_text(key)
    raise errors.bad_request(f"error converting YAML to JSON: unsupported map key of type {_go_type(key)}: "
                             f"{key!r}")


def _float_text(value: float) -> str:
    if math.isinf(value) or math.isnan(value):
        raise errors.bad_request(f"error converting YAML to JSON: json: unsupported value: {value}")
    text = repr(value)
    return text[:-2] if text.endswith(".0") else text  # Go's 'g' format: 2.0 is "2"


def _go_type(value: Any) -> str:
    return "<nil>" if value is None else type(value).__name__


def to_json(value: Any) -> Any:
    """Plain JSON values from what PyYAML's safe loader constructed."""
    if isinstance(value, dict):
        return {_key(k): to_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [to_json(v) for v in value]
    if isinstance(value, (set, frozenset)):
        return {_key(k): None for k in value}
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, int):
        return value if _MIN_INT64 <= value <= _MAX_UINT64 else float(value)
    if isinstance(value, float):
        if math.isinf(value) or math.isnan(value):
            raise errors.bad_request(f"error converting YAML to JSON: json: unsupported value: {value}")
        return value
    raise errors.bad_request(f"error converting YAML to JSON: unsupported value of type {_go_type(value)}")
