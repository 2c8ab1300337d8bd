"""Custom objects against their CRD's structural schema (openAPIV3Schema): pruning, defaults, validation.

Upstream order on every write: unknown fields are pruned (unless `x-kubernetes-preserve-unknown-fields`),
`default`s are filled in, then the object is validated. Covered: type (with `nullable`,
`x-kubernetes-int-or-string`), required, enum, minimum/maximum (+exclusive), minLength/maxLength, pattern,
minItems/maxItems, properties / additionalProperties / items, unique items of `x-kubernetes-list-type` set and
map lists. CEL rules (`x-kubernetes-validations`) are evaluated by `crcel.py` after this validation.

Invariants: apiVersion, kind and metadata at the root are never pruned; functions mutate only the object
they are given; error paths are JSON paths (`spec.size`, `spec.items[0].name`) with upstream messages.
"""

from __future__ import annotations

import re
from typing import Any

import orjson

from lite.errors import Cause, field_duplicate, field_invalid, field_not_supported, field_required
from lite.objects import deep_copy

Schema = dict[str, Any]
_ROOT_KEEP = ("apiVersion", "kind", "metadata")
_PY_TYPES = {"string": "string", "integer": "integer", "number": "number", "boolean": "boolean",
             "object": "object", "array": "array"}


def _type_of(v: Any) -> str:
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, int):
        return "integer"
    if isinstance(v, float):
        return "number"
    if isinstance(v, str):
        return "string"
    if isinstance(v, list):
        return "array"
    if isinstance(v, dict):
        return "object"
    return "null"


def prune_and_default(obj: Any, schema: Schema, root: bool = True) -> Any:
    """Drop fields the schema does not know and fill `default`s, in place where possible; returns obj."""
    if isinstance(obj, dict):
        props: dict[str, Schema] = schema.get("properties") or {}
        additional = schema.get("additionalProperties")
        preserve = schema.get("x-kubernetes-preserve-unknown-fields") is True or additional is True
        keep = _ROOT_KEEP if root or schema.get("x-kubernetes-embedded-resource") else ()
        for key in list(obj):
            if key in keep:
                continue
            if key in props:
                obj[key] = prune_and_default(obj[key], props[key], False)
            elif isinstance(additional, dict):
                obj[key] = prune_and_default(obj[key], additional, False)
            elif not preserve:
                del obj[key]
        for key, sub in props.items():
            if key not in obj and "default" in sub and key not in keep:
                obj[key] = prune_and_default(deep_copy({"d": sub["default"]})["d"], sub, False)
    elif isinstance(obj, list) and isinstance(schema.get("items"), dict):
        return [prune_and_default(v, schema["items"], False) for v in obj]
    return obj


def validate(obj: Any, schema: Schema, path: str = "") -> list[Cause]:
    """Causes for everything in `obj` the schema rejects (root: the whole custom object)."""
    if obj is None:
        return [] if schema.get("nullable") or not path else [field_invalid(path, "null", _must(path, schema))]
    causes = _check_type(obj, schema, path)
    if causes:
        return causes
    causes += _check_scalar(obj, schema, path)
    if isinstance(obj, dict):
        props: dict[str, Schema] = schema.get("properties") or {}
        for req in schema.get("required") or []:
            if req not in obj:
                causes.append(field_required(_join(path, req)))
        for key, value in obj.items():
            if not path and key in _ROOT_KEEP:
                continue
            sub = props.get(key)
            if sub is None and isinstance(schema.get("additionalProperties"), dict):
                sub = schema["additionalProperties"]
            if sub is not None:
                causes += validate(value, sub, _join(path, key))
    elif isinstance(obj, list):
        causes += _check_len(len(obj), schema, path, "minItems", "maxItems", "items")
        if isinstance(schema.get("items"), dict):
            for i, v in enumerate(obj):
                causes += validate(v, schema["items"], f"{path}[{i}]")
        causes += _check_unique(obj, schema, path)
    return causes


def _check_unique(items: list[Any], schema: Schema, path: str) -> list[Cause]:
    """`x-kubernetes-list-type: set` items and `map` keys are unique (upstream: Duplicate value, at the later
    item; a map list's key shown as Go prints the key fields)."""
    list_type = schema.get("x-kubernetes-list-type")
    if list_type not in ("set", "map"):
        return []
    keys = [str(k) for k in schema.get("x-kubernetes-list-map-keys") or []]
    seen: set[str] = set()
    causes: list[Cause] = []
    for i, item in enumerate(items):
        if list_type == "map":
            if not isinstance(item, dict):
                continue
            fields = {k: item[k] for k in keys if k in item}
            ident = orjson.dumps(fields, option=orjson.OPT_SORT_KEYS).decode()
            if ident in seen:
                shown = ", ".join(f'"{k}":{_go_value(v)}' for k, v in sorted(fields.items()))
                causes.append(Cause("FieldValueDuplicate", f"Duplicate value: map[string]interface {{}}{{{shown}}}",
                                    f"{path}[{i}]"))
        else:
            ident = orjson.dumps(item, option=orjson.OPT_SORT_KEYS).decode()
            if ident in seen:
                causes.append(field_duplicate(f"{path}[{i}]", item))
        seen.add(ident)
    return causes


def _go_value(v: Any) -> str:
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _must(path: str, schema: Schema) -> str:
    return f"{path} in body must be of type {schema.get('type')}"


def _check_type(v: Any, schema: Schema, path: str) -> list[Cause]:
    want = schema.get("type")
    if schema.get("x-kubernetes-int-or-string"):
        ok = _type_of(v) in ("integer", "string")
        return [] if ok else [field_invalid(path, _type_of(v), f"{path} in body must be of type "
                                            f"integer-or-string: \"{_type_of(v)}\"")]
    if not want or want not in _PY_TYPES:
        return []
    got = _type_of(v)
    if got == want or (want == "number" and got == "integer"):
        return []
    return [field_invalid(path, got, f"{_must(path, schema)}: \"{got}\"")]


def _check_scalar(v: Any, schema: Schema, path: str) -> list[Cause]:
    causes: list[Cause] = []
    enum = schema.get("enum")
    if isinstance(enum, list) and v not in enum:
        causes.append(field_not_supported(path, v, [str(e) for e in enum]))
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        lo, hi = schema.get("minimum"), schema.get("maximum")
        if lo is not None and (v < lo or (schema.get("exclusiveMinimum") and v == lo)):
            rel = "greater than" if schema.get("exclusiveMinimum") else "greater than or equal to"
            causes.append(field_invalid(path, v, f"{path} in body should be {rel} {lo}"))
        if hi is not None and (v > hi or (schema.get("exclusiveMaximum") and v == hi)):
            rel = "less than" if schema.get("exclusiveMaximum") else "less than or equal to"
            causes.append(field_invalid(path, v, f"{path} in body should be {rel} {hi}"))
    if isinstance(v, str):
        causes += _check_len(len(v), schema, path, "minLength", "maxLength", "chars long", v)
        pattern = schema.get("pattern")
        if isinstance(pattern, str) and re.search(pattern, v) is None:
            causes.append(field_invalid(path, v, f'{path} in body should match \'{pattern}\''))
    return causes


def _check_len(n: int, schema: Schema, path: str, lo_key: str, hi_key: str, unit: str,
               value: Any = None) -> list[Cause]:
    shown = value if value is not None else n
    lo, hi = schema.get(lo_key), schema.get(hi_key)
    verb = "have" if unit == "items" else "be"
    if lo is not None and n < lo:
        return [field_invalid(path, shown, f"{path} in body should {verb} at least {lo} {unit}")]
    if hi is not None and n > hi:
        return [field_invalid(path, shown, f"{path} in body should {verb} at most {hi} {unit}")]
    return []


def has_rules(schema: Any) -> bool:
    """Whether a schema holds any CEL rule (`x-kubernetes-validations`) at any depth: callers load the CEL
    runtime (`crcel`) only for schemas where this is true."""
    if isinstance(schema, dict):
        if schema.get("x-kubernetes-validations"):
            return True
        return any(has_rules(v) for v in schema.values())
    if isinstance(schema, list):
        return any(has_rules(v) for v in schema)
    return False
