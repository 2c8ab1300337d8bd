"""The OpenAPI v2 (Swagger 2.0) document at `/openapi/v2`, derived from the same data as `/openapi/v3`.

Role: kubectl before 1.27 and Helm 3 read `/openapi/v2` (kubectl 1.20 asks for the gnostic protobuf form,
`openapi_v2pb` encodes it) to validate objects, explain fields and find patch strategies. Upstream serves one
document holding every group-version; `swagger_document(v3_docs, crd_names)` merges lite's per-group-version
v3 documents into it: `components.schemas` become `definitions` (references rewritten to `#/definitions/`),
v3 operations become v2 ones (query and path parameters flattened, the request body a `body` parameter,
`consumes`/`produces` from the media types, one schema per response).

Invariants:
- Pure: the inputs are only read. The output refers only to definitions it contains, because kubectl 1.20
  rejects the whole document for one dangling `$ref`.
- v3-only constructs are turned into what upstream's v2 holds: `allOf: [{$ref}]` wrappers into a plain `$ref`
  (keeping the description), `nullable`, `oneOf`, `anyOf` and `not` dropped.
- Custom resources' schemas (named in `crd_names`) follow upstream's `ToStructuralOpenAPIV2` rules, so kubectl
  1.20 can parse them: a nullable or `x-kubernetes-preserve-unknown-fields` node loses its properties and items
  (a nullable one its type too, a preserve-unknown-fields object its `type: object`, so kubectl treats it as
  arbitrary and accepts nulls inside it), an array left without items loses its type, nullable properties
  leave `required`, `additionalProperties` is dropped. A custom resource without a schema or with
  `x-kubernetes-preserve-unknown-fields` at its root is published as upstream's builder publishes it for v2:
  `{type: object}` and its group-version-kind, nothing else.
- Every operation has `consumes` and `produces` as upstream's v2 document: operations without a body consume
  `*/*` on built-in kinds and JSON or YAML on custom resources (upstream's apiextensions builder).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

Obj = dict[str, Any]

V3_REF = "#/components/schemas/"
V2_REF = "#/definitions/"
_DROP = frozenset({"nullable", "oneOf", "anyOf", "not"})
_METHODS = ("get", "put", "post", "delete", "options", "head", "patch")
SECURITY_DEFINITIONS = {"BearerToken": {"description": "Bearer Token authentication", "in": "header",
                                        "name": "authorization", "type": "apiKey"}}


def swagger_document(v3_docs: Iterable[Obj], crd_names: frozenset[str] = frozenset()) -> Obj:
    """One Swagger 2.0 document from v3 group-version documents (later documents win on equal names)."""
    paths: Obj = {}
    definitions: Obj = {}
    for doc in v3_docs:
        for name, schema in ((doc.get("components") or {}).get("schemas") or {}).items():
            definitions[name] = schema_v2(crd_root_v2(schema) if name in crd_names else schema)
        for path, item in (doc.get("paths") or {}).items():
            paths[path] = path_item_v2(item, _gvk_name(item) in crd_names)
    return {
        "swagger": "2.0",
        "info": {"title": "Kubernetes", "version": "v1.32.0"},
        "paths": dict(sorted(paths.items())),
        "definitions": dict(sorted(definitions.items())),
        "securityDefinitions": SECURITY_DEFINITIONS,
        "security": [{"BearerToken": []}],
    }


def schema_v2(node: Any) -> Any:
    """A v3 schema (or any value inside one) in v2 form."""
    if isinstance(node, list):
        return [schema_v2(v) for v in node]
    if not isinstance(node, dict):
        return node
    all_of = node.get("allOf")
    if isinstance(all_of, list) and len(all_of) == 1 and isinstance(all_of[0], dict) and "$ref" in all_of[0]:
        out: Obj = {"$ref": _ref(all_of[0]["$ref"])}
        if "description" in node:
            out["description"] = node["description"]
        return out
    result: Obj = {}
    for key, value in node.items():
        if key in _DROP:
            continue
        if key == "$ref" and isinstance(value, str):
            result[key] = _ref(value)
        elif key in ("properties", "patternProperties", "definitions") and isinstance(value, dict):
            result[key] = {k: schema_v2(v) for k, v in value.items()}
        elif key in ("items", "additionalProperties", "allOf"):
            result[key] = schema_v2(value)
        else:
            result[key] = value  # scalars, enum, default, examples and x- extensions go as they are
    return result


def _ref(ref: str) -> str:
    return V2_REF + ref[len(V3_REF):] if ref.startswith(V3_REF) else ref


def _gvk_name(item: Obj) -> str:
    """The custom-resource schema name (`com.example.v1.Gadget`) of a path item's kind."""
    for value in item.values():
        gvk = value.get("x-kubernetes-group-version-kind") if isinstance(value, dict) else None
        if isinstance(gvk, dict) and gvk.get("group"):
            rev = ".".join(reversed(str(gvk["group"]).split(".")))
            return f"{rev}.{gvk.get('version')}.{gvk.get('kind')}"
    return ""


def crd_root_v2(schema: Obj) -> Obj:
    """A custom resource's v2 definition: without a schema or with unknown fields preserved at the root, only
    `{type: object}` with its kind (kubectl would otherwise refuse every field it does not see declared)."""
    if schema.get("x-kubernetes-preserve-unknown-fields"):
        out: Obj = {"type": "object"}
        if "x-kubernetes-group-version-kind" in schema:
            out["x-kubernetes-group-version-kind"] = schema["x-kubernetes-group-version-kind"]
        return out
    return structural_v2(schema)


def structural_v2(schema: Obj) -> Obj:
    """A custom resource's v3 schema with upstream's `ToStructuralOpenAPIV2` rules applied."""
    out = dict(schema)
    nullable_fields: set[str] = set()
    props = out.get("properties")
    if isinstance(props, dict):
        nullable_fields = {k for k, v in props.items() if isinstance(v, dict) and v.get("nullable")}
        out["properties"] = {k: structural_v2(v) if isinstance(v, dict) else v for k, v in props.items()}
    items = out.get("items")
    if isinstance(items, dict):
        out["items"] = structural_v2(items)
    if schema.get("nullable"):
        out.pop("type", None)
        out.pop("items", None)
        out.pop("properties", None)
    if schema.get("x-kubernetes-preserve-unknown-fields"):
        out.pop("items", None)
        out.pop("properties", None)
        if schema.get("x-kubernetes-embedded-resource") and isinstance(out.get("required"), list):
            # upstream's v2 adds no embedded-resource fields to such a node (the v3 builder's kind/apiVersion)
            out["required"] = [r for r in out["required"] if r not in ("kind", "apiVersion")]
            if not out["required"]:
                del out["required"]
    if out.get("type") == "array" and not isinstance(out.get("items"), dict):
        out.pop("type")
    if schema.get("x-kubernetes-preserve-unknown-fields") and out.get("type") == "object":
        out.pop("type")  # kubectl 1.20 checks every value of a typed map, and refuses nulls there
    if nullable_fields and isinstance(out.get("required"), list):
        out["required"] = [r for r in out["required"] if r not in nullable_fields]
        if not out["required"]:
            del out["required"]
    out.pop("additionalProperties", None)
    for key in _DROP:
        out.pop(key, None)
    return out


def path_item_v2(item: Obj, crd: bool = False) -> Obj:
    out: Obj = {}
    for key, value in item.items():
        if key in _METHODS and isinstance(value, dict):
            out[key] = operation_v2(value, crd)
        elif key == "parameters" and isinstance(value, list):
            out[key] = [parameter_v2(p) for p in value]
        elif key.startswith("x-"):
            out[key] = value
    return out


def operation_v2(op: Obj, crd: bool = False) -> Obj:
    out: Obj = {}
    for key in ("description", "operationId", "tags", "deprecated", "summary"):
        if key in op:
            out[key] = op[key]
    params = [parameter_v2(p) for p in op.get("parameters") or []]
    consumes: list[str] = ["application/json", "application/yaml"] if crd else ["*/*"]
    body = op.get("requestBody")
    if isinstance(body, dict):
        content = body.get("content") or {}
        consumes = sorted(content)
        schema = _first_schema(content)
        if schema is not None:
            params.insert(0, {"in": "body", "name": "body", "required": bool(body.get("required", True)),
                              "schema": schema_v2(schema)})
    if consumes:
        out["consumes"] = consumes
    produces: set[str] = set()
    responses: Obj = {}
    for code, resp in (op.get("responses") or {}).items():
        content = resp.get("content") or {}
        produces.update(content)
        r: Obj = {"description": resp.get("description", "")}
        schema = _first_schema(content)
        if schema is not None:
            r["schema"] = schema_v2(schema)
        responses[code] = r
    if produces:
        out["produces"] = sorted(produces)
    if params:
        out["parameters"] = params
    out["responses"] = responses
    out["schemes"] = ["https"]
    for key, value in op.items():
        if key.startswith("x-"):
            out[key] = value
    return out


def _first_schema(content: Obj) -> Obj | None:
    for media in ("application/json", "*/*"):
        if isinstance(content.get(media), dict) and "schema" in content[media]:
            return dict(content[media]["schema"])
    for value in content.values():
        if isinstance(value, dict) and "schema" in value:
            return dict(value["schema"])
    return None


def parameter_v2(param: Obj) -> Obj:
    """A v3 query/path/header parameter flattened into v2's form (its schema's keys moved up)."""
    out: Obj = {k: v for k, v in param.items() if k not in ("schema", "content", "style", "explode")}
    schema = param.get("schema")
    if isinstance(schema, dict):
        for key, value in schema_v2(schema).items():
            out.setdefault(key, value)
    if out.get("in") == "path":
        out["required"] = True
    return out
