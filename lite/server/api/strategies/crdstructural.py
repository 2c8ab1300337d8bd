"""The logical junctors of a CRD schema (`allOf`, `anyOf`, `oneOf`, `not`) as a structural schema allows them:
upstream's `validateValueValidation`/`validateNestedValueValidation` (apiextensions-apiserver
`pkg/apiserver/schema/validation.go`), same messages and field paths.

Inside a junctor a schema may only add value validations (pattern, enum, bounds, required, ...) to what the
structure outside already specifies: no `type`, `additionalProperties`, `default`, `title`, `description`,
`nullable`, `externalDocs`, no `x-kubernetes-*` structure or CEL rules (upstream refuses
`x-kubernetes-validations` in every junctor of a CRD, since its validator would have to evaluate CEL per branch),
and no `metadata` property. The two IntOrString patterns (`anyOf: [{type: integer}, {type: string}]`, directly or
as the first `allOf` item) are the exceptions. Pure: no I/O.

The rest of structurality (every field specified outside the junctors, root metadata limits, ...) is not
checked here.
"""

from __future__ import annotations

from typing import Any

from lite.errors import Cause, field_forbidden

INT_OR_STRING = [{"type": "integer"}, {"type": "string"}]

# (key, message) refused inside a junctor when the value is "set" as upstream reads it
_SET = (
    ("type", "must be empty to be structural"),
    ("default", "must be undefined to be structural"),
    ("title", "must be empty to be structural"),
    ("description", "must be empty to be structural"),
    ("externalDocs", "must be undefined to be structural"),
    ("x-kubernetes-list-map-keys", "must be empty to be structural"),
    ("x-kubernetes-list-type", "must be undefined to be structural"),
    ("x-kubernetes-map-type", "must be undefined to be structural"),
    ("x-kubernetes-validations", "must be empty to be structural"),
)
_TRUE = (
    ("nullable", "must be false to be structural"),
    ("x-kubernetes-preserve-unknown-fields", "must be false to be structural"),
    ("x-kubernetes-embedded-resource", "must be false to be structural"),
    ("x-kubernetes-int-or-string", "must be false to be structural"),
)


def junctor_causes(schema: Any, path: str) -> list[Cause]:
    """Every cause of the junctors anywhere in `schema` (an openAPIV3Schema at `path`)."""
    if not isinstance(schema, dict):
        return []
    out = _value_validation(schema, path, _is_int_or_string(schema.get("anyOf")), _first_all_of_int_or_string(schema))
    items = schema.get("items")
    if isinstance(items, dict):
        out += junctor_causes(items, f"{path}.items")
    for name, prop in (schema.get("properties") or {}).items() if isinstance(schema.get("properties"), dict) else ():
        out += junctor_causes(prop, f"{path}.properties[{name}]")
    extra = schema.get("additionalProperties")
    if isinstance(extra, dict):
        out += junctor_causes(extra, f"{path}.additionalProperties")
    return out


def _is_int_or_string(any_of: Any) -> bool:
    return isinstance(any_of, list) and any_of == INT_OR_STRING


def _first_all_of_int_or_string(schema: dict[str, Any]) -> bool:
    all_of = schema.get("allOf")
    return isinstance(all_of, list) and bool(all_of) and isinstance(all_of[0], dict) \
        and _is_int_or_string(all_of[0].get("anyOf"))


def _value_validation(v: dict[str, Any], path: str, skip_any_of: bool, skip_first_all_of_any_of: bool) -> list[Cause]:
    out: list[Cause] = []
    if not skip_any_of:
        for i, sub in enumerate(_list(v.get("anyOf"))):
            out += _nested(sub, f"{path}.anyOf[{i}]", False)
    for i, sub in enumerate(_list(v.get("allOf"))):
        out += _nested(sub, f"{path}.allOf[{i}]", skip_first_all_of_any_of and i == 0)
    for i, sub in enumerate(_list(v.get("oneOf"))):
        out += _nested(sub, f"{path}.oneOf[{i}]", False)
    if isinstance(v.get("not"), dict):
        out += _nested(v["not"], f"{path}.not", False)
    return out


def _nested(v: Any, path: str, skip_any_of: bool) -> list[Cause]:
    if not isinstance(v, dict):
        return []
    out = _value_validation(v, path, skip_any_of, False)
    if isinstance(v.get("items"), dict):
        out += _nested(v["items"], f"{path}.items", False)
    raw = v.get("properties")
    props: dict[str, Any] = raw if isinstance(raw, dict) else {}
    for name, prop in props.items():
        out += _nested(prop, f"{path}.properties[{name}]", False)
    if "additionalProperties" in v and v["additionalProperties"] is not None:
        out.append(field_forbidden(f"{path}.additionalProperties", "must be undefined to be structural"))
    for key, message in _SET:
        if v.get(key) not in (None, "", [], {}) or (key == "default" and "default" in v and v[key] is not None):
            out.append(field_forbidden(f"{path}.{key}", message))
    for key, message in _TRUE:
        if v.get(key) is True:
            out.append(field_forbidden(f"{path}.{key}", message))
    if "metadata" in props:
        out.append(field_forbidden(f"{path}.properties[metadata]", "must not be specified in a nested context"))
    return out


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []
