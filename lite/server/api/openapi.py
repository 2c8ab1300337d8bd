"""A small OpenAPI v3 description of the served kinds: enough for kubectl, not a full schema.

Role: `/openapi/v3` lists every served group-version with a content hash; `/openapi/v3/<gv path>` is an
OpenAPI 3 document whose `paths` hold, per kind, the object path item with a `patch` operation carrying
`x-kubernetes-group-version-kind` and an inline `fieldValidation` query parameter. kubectl's `-f`
commands only check that this parameter exists for the kind (then send `fieldValidation=Strict` and
leave validation to the server). `components.schemas` holds one open object schema per kind, tagged with
its GVK, so `kubectl explain` has something to print; CRD kinds use their own structural schema.

Invariants:
- Documents are derived from the registry at call time and cached on the identity of its kinds (a CRD
  update replaces its `Kind`, which changes the key).
- The hash in each `serverRelativeURL` is a digest of that document's bytes: kubectl uses it as a cache
  key, so it must change whenever the document does.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

import orjson

from lite.kinds import Kind, KindRegistry
from lite.server.api.builtin_schemas import BuiltinSchemas

Obj = dict[str, Any]

_FIELD_VALIDATION: Obj = {
    "name": "fieldValidation", "in": "query", "uniqueItems": True, "schema": {"type": "string"},
    "description": "Ignore, Warn or Strict: how the server treats unknown or duplicate fields.",
}
_QUERY = ("dryRun", "fieldManager", "force")


@dataclass(frozen=True)
class _Docs:
    root: bytes
    by_path: dict[str, bytes]  # "api/v1" / "apis/apps/v1" -> document JSON


class OpenAPI:
    """OpenAPI v3 documents for one registry, rebuilt whenever its kinds change."""

    def __init__(self, kinds: KindRegistry, schemas: BuiltinSchemas | None = None) -> None:
        self._kinds = kinds
        self.schemas = schemas if schemas is not None else BuiltinSchemas()
        self._key: tuple[int, ...] = ()
        self._held: tuple[Kind, ...] = ()  # keeps the keyed objects alive so ids stay unique
        self._docs: _Docs | None = None

    def _current(self) -> _Docs:
        held = tuple(self._kinds)
        key = tuple(id(k) for k in held)
        if self._docs is None or key != self._key:
            self._docs = _build(held)
            self._key, self._held = key, held
        return self._docs

    def root(self) -> bytes:
        """The `/openapi/v3` index as JSON bytes."""
        return self._current().root

    def document(self, gv_path: str) -> bytes | None:
        """The document for `api/v1` or `apis/<group>/<version>`, or None when not served."""
        return self._current().by_path.get(gv_path.strip("/"))


def _build(kinds: tuple[Kind, ...]) -> _Docs:
    by_gv: dict[str, list[Kind]] = {}
    for k in kinds:
        by_gv.setdefault(k.base_path.lstrip("/"), []).append(k)
    by_path: dict[str, bytes] = {}
    index: Obj = {}
    for path in sorted(by_gv, key=lambda p: (not p.startswith("api/"), p)):
        doc = orjson.dumps(_document(by_gv[path]), option=orjson.OPT_SORT_KEYS)
        by_path[path] = doc
        digest = hashlib.sha512(doc).hexdigest()[:64].upper()
        index[path] = {"serverRelativeURL": f"/openapi/v3/{path}?hash={digest}"}
    return _Docs(root=orjson.dumps({"paths": index}), by_path=by_path)


def schema_name(k: Kind) -> str:
    """Component name in the upstream style, e.g. `io.k8s.api.apps.v1.Deployment`."""
    if k.crd or ("." in k.group and not k.group.endswith(".k8s.io")):
        rev = ".".join(reversed(k.group.split(".")))
        return f"{rev}.{k.version}.{k.kind}"
    group = (k.group or "core").removesuffix(".k8s.io")
    return f"io.k8s.api.{group}.{k.version}.{k.kind}"


def _gvk(k: Kind) -> Obj:
    return {"group": k.group, "version": k.version, "kind": k.kind}


def _document(kinds: list[Kind]) -> Obj:
    paths: Obj = {}
    schemas: Obj = {}
    for k in kinds:
        ref = {"$ref": f"#/components/schemas/{schema_name(k)}"}
        schemas[schema_name(k)] = _schema(k)
        name_param = {"name": "name", "in": "path", "required": True, "schema": {"type": "string"}}
        params = [name_param]
        if k.namespaced:
            params.append({"name": "namespace", "in": "path", "required": True, "schema": {"type": "string"}})
        item_path = k.path("{namespace}", "{name}")
        paths[item_path] = {"parameters": params, **_item_ops(k, ref)}
        collection = k.path("{namespace}") if k.namespaced else k.path()
        paths[collection] = {
            "get": _op(k, "list", ref),
            **({"post": _op(k, "post", ref)} if "create" in k.verbs else {}),
        }
    return {
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": "v1.32.0"},
        "paths": paths,
        "components": {"schemas": schemas},
    }


def _item_ops(k: Kind, ref: Obj) -> Obj:
    ops: Obj = {"get": _op(k, "get", ref)}
    if "update" in k.verbs:
        ops["put"] = _op(k, "put", ref)
    if "patch" in k.verbs:
        ops["patch"] = _op(k, "patch", ref)
    if "delete" in k.verbs:
        ops["delete"] = _op(k, "delete", ref)
    return ops


def _op(k: Kind, action: str, ref: Obj) -> Obj:
    op: Obj = {
        "operationId": f"{action}{k.kind}",
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": _gvk(k),
        "responses": {"200": {"description": "OK", "content": {"application/json": {"schema": ref}}}},
    }
    if action in ("patch", "put", "post"):
        op["parameters"] = [dict(_FIELD_VALIDATION)] + [
            {"name": q, "in": "query", "schema": {"type": "string"}} for q in _QUERY]
        media = "application/merge-patch+json" if action == "patch" else "application/json"
        op["requestBody"] = {"content": {media: {"schema": ref if action != "patch" else {"type": "object"}}}}
    return op


def _schema(k: Kind) -> Obj:
    if k.schema:
        base: Obj = dict(k.schema)
    else:
        base = {
            "description": f"{k.kind} ({k.api_version}) as served by lite; fields are not described here.",
            "type": "object",
            "properties": {
                "apiVersion": {"type": "string", "description": "The versioned schema of this object."},
                "kind": {"type": "string", "description": "The REST resource this object represents."},
                "metadata": {"type": "object", "description": "Standard object metadata.",
                             "x-kubernetes-preserve-unknown-fields": True},
                "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
            },
            "x-kubernetes-preserve-unknown-fields": True,
        }
    base["x-kubernetes-group-version-kind"] = [_gvk(k)]
    return base
