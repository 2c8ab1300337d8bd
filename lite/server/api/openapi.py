"""OpenAPI v3 documents of the served kinds: upstream's 1.32 schemas and upstream-shaped paths.

Role: `/openapi/v3` lists every served group-version with a content hash; `/openapi/v3/<gv path>` is an
OpenAPI 3 document whose `paths` are upstream's for the served kinds and verbs (collection, all-namespaces
list, object, status and scale; path and query parameters, request bodies, response codes: see
`openapi_paths`) and whose `components.schemas` hold upstream's schemas of those kinds, their lists and
everything they refer to (`builtin_schemas`), so `kubectl explain` prints upstream's descriptions and
kubectl's `-f` commands find the `fieldValidation` parameter (then send `fieldValidation=Strict`). CRD kinds
(and kinds upstream does not publish) use their own structural schema and a generated list schema.

Invariants:
- Documents are derived from the registry at call time and cached on the identity of its kinds (a CRD
  update replaces its `Kind`, which changes the key).
- The hash in each `serverRelativeURL` is a digest of that document's bytes: kubectl uses it as a cache
  key, so it must change whenever the document does.
"""

from __future__ import annotations

import hashlib
from typing import Any

import orjson

from lite.kinds import Kind, KindRegistry
from lite.records import dataclass
from lite.server.api.builtin_schemas import BuiltinSchemas

Obj = dict[str, Any]


@dataclass(frozen=True)
class _Docs:
    root: bytes
    by_path: dict[str, bytes]  # "api/v1" / "apis/apps/v1" -> document JSON


class SwaggerV2:
    """The `/openapi/v2` document of one set of kinds: JSON built at once, protobuf on first use; `etag` is a
    digest of the JSON (both forms carry the same content, so one tag serves both)."""

    def __init__(self, doc: Obj) -> None:
        self._doc: Obj | None = doc
        self.json = orjson.dumps(doc)
        self.etag = '"' + hashlib.sha512(self.json).hexdigest()[:64].upper() + '"'
        self._pb: bytes | None = None

    def protobuf(self) -> bytes:
        if self._pb is None:
            from lite.server.api.openapi_v2pb import encode_document  # loaded by the first protobuf request

            doc = self._doc if self._doc is not None else orjson.loads(self.json)
            self._pb = encode_document(doc)
            self._doc = None  # the JSON bytes are kept; the tree is not needed any more
        return self._pb


class OpenAPI:
    """OpenAPI v3 documents for one registry; a group-version's document is rebuilt only when its kinds
    change (a CRD update re-renders its own group-version, not the ~1 MB core one)."""

    def __init__(self, kinds: KindRegistry, schemas: BuiltinSchemas | None = None) -> None:
        self._kinds = kinds
        self.schemas = schemas if schemas is not None else BuiltinSchemas()
        self._key: tuple[int, ...] = ()
        self._held: tuple[Kind, ...] = ()  # keeps the keyed objects alive so ids stay unique
        self._docs: _Docs | None = None
        self._by_gv: dict[str, tuple[tuple[int, ...], bytes]] = {}
        self._v2: tuple[_Docs, SwaggerV2] | None = None

    def _current(self) -> _Docs:
        held = tuple(self._kinds)
        key = tuple(id(k) for k in held)
        if self._docs is None or key != self._key:
            self._docs = self._build(held)
            self._key, self._held = key, held
        return self._docs

    def root(self) -> bytes:
        """The `/openapi/v3` index as JSON bytes."""
        return self._current().root

    def v2(self) -> SwaggerV2:
        """The Swagger 2.0 document of every served group-version (rebuilt when any of them changes)."""
        docs = self._current()
        if self._v2 is None or self._v2[0] is not docs:
            from lite.server.api.openapi_v2 import swagger_document  # loaded by the first /openapi/v2

            crd_names: set[str] = set()
            for k in self._held:
                if k.crd:
                    crd_names.update((schema_name(k), schema_name(k) + "List"))
            doc = swagger_document((orjson.loads(b) for b in docs.by_path.values()), frozenset(crd_names))
            self._v2 = (docs, SwaggerV2(doc))
        return self._v2[1]

    def document(self, gv_path: str) -> bytes | None:
        """The document for `api/v1` or `apis/<group>/<version>`, or None when not served."""
        return self._current().by_path.get(gv_path.strip("/"))

    def _build(self, kinds: tuple[Kind, ...]) -> _Docs:
        by_gv: dict[str, list[Kind]] = {}
        for k in kinds:
            by_gv.setdefault(k.base_path.lstrip("/"), []).append(k)
        by_path: dict[str, bytes] = {}
        index: Obj = {}
        cache: dict[str, tuple[tuple[int, ...], bytes]] = {}
        upstream: tuple[dict[str, Any], dict[str, Any]] | None = None  # read only when a document changed
        for path in sorted(by_gv, key=lambda p: (not p.startswith("api/"), p)):
            key = tuple(id(k) for k in by_gv[path])
            held = self._by_gv.get(path)
            if held is not None and held[0] == key:
                doc = held[1]
            else:
                upstream = upstream or self.schemas.openapi_data()
                doc = orjson.dumps(_document(by_gv[path], self.schemas, *upstream), option=orjson.OPT_SORT_KEYS)
            cache[path] = (key, doc)
            by_path[path] = doc
            digest = hashlib.sha512(doc).hexdigest()[:64].upper()
            index[path] = {"serverRelativeURL": f"/openapi/v3/{path}?hash={digest}"}
        self._by_gv = cache
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


_META = "io.k8s.apimachinery.pkg.apis.meta.v1."
_ALWAYS = (f"{_META}Status", f"{_META}DeleteOptions", f"{_META}Patch", f"{_META}ListMeta", f"{_META}ObjectMeta")
_REF = "#/components/schemas/"


def _refs(value: Any, out: set[str]) -> None:
    if isinstance(value, dict):
        ref = value.get("$ref")
        if isinstance(ref, str) and ref.startswith(_REF):
            out.add(ref[len(_REF):])
        for v in value.values():
            if isinstance(v, (dict, list)):
                _refs(v, out)
    elif isinstance(value, list):
        for v in value:
            _refs(v, out)


def _closure(names: set[str], upstream: dict[str, Any]) -> dict[str, Any]:
    """The named upstream schemas and every schema they refer to, transitively."""
    out: dict[str, Any] = {}
    todo = list(names)
    while todo:
        name = todo.pop()
        if name in out or name not in upstream:
            continue
        out[name] = upstream[name]
        found: set[str] = set()
        _refs(upstream[name], found)
        todo.extend(found - out.keys())
    return out


def _document(kinds: list[Kind], builtin: BuiltinSchemas, upstream: dict[str, Any], params: dict[str, Any]) -> Obj:
    from lite.server.api.openapi_paths import path_items  # loaded by the first /openapi/v3 document

    paths: Obj = {}
    schemas: Obj = {}
    wanted: set[str] = set(_ALWAYS)
    for k in kinds:
        name = builtin.schema_name(k)
        if name:
            wanted.add(name)
            list_name = builtin.schema_name(_list_kind(k)) or name
            wanted.add(list_name)
            if "scale" in k.subresources:
                wanted.add("io.k8s.api.autoscaling.v1.Scale")
        else:
            name, list_name = schema_name(k), schema_name(k) + "List"
            schemas[name] = _schema(k)
            schemas[list_name] = _list_schema(k, name)
        paths.update(path_items(k, f"{_REF}{name}", f"{_REF}{list_name}", params))
    schemas.update(_closure(wanted, upstream))
    return {
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": "v1.32.0"},
        "paths": paths,
        "components": {"schemas": schemas},
    }


def _list_kind(k: Kind) -> Kind:
    return Kind(k.group, k.version, k.list_kind, k.plural, k.namespaced)


def _list_schema(k: Kind, item: str) -> Obj:
    return {
        "description": f"{k.list_kind} is a list of {k.kind}",
        "type": "object",
        "required": ["items"],
        "properties": {
            "apiVersion": {"type": "string", "description": "APIVersion defines the versioned schema of this "
                                                           "representation of an object."},
            "items": {"type": "array", "description": f"List of {k.plural}.",
                      "items": {"$ref": f"{_REF}{item}"}},
            "kind": {"type": "string", "description": "Kind is a string value representing the REST resource "
                                                      "this object represents."},
            "metadata": {"allOf": [{"$ref": f"{_REF}{_META}ListMeta"}], "description": "Standard list metadata."},
        },
        "x-kubernetes-group-version-kind": [{"group": k.group, "version": k.version, "kind": k.list_kind}],
    }


_TYPE_META = {
    "apiVersion": {"type": "string", "description": "APIVersion defines the versioned schema of this representation "
                   "of an object. Servers should convert recognized schemas to the latest internal value, and may "
                   "reject unrecognized values. More info: https://git.k8s.io/community/contributors/devel/"
                   "sig-architecture/api-conventions.md#resources"},
    "kind": {"type": "string", "description": "Kind is a string value representing the REST resource this object "
             "represents. Servers may infer this from the endpoint the client submits requests to. Cannot be "
             "updated. In CamelCase. More info: https://git.k8s.io/community/contributors/devel/"
             "sig-architecture/api-conventions.md#types-kinds"},
    "metadata": {"allOf": [{"$ref": f"{_REF}{_META}ObjectMeta"}], "description": "Standard object's metadata. More "
                 "info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata"},
}


_EMBEDDED_META = {
    "apiVersion": {"type": "string", "description": "apiVersion defines the versioned schema of this representation "
                   "of an object. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/"
                   "api-conventions.md#resources"},
    "kind": {"type": "string", "description": "kind is a string value representing the type of this object. In "
             "CamelCase. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/"
             "api-conventions.md#types-kinds"},
    "metadata": _TYPE_META["metadata"],
}


def _embedded(node: Any) -> Any:
    """A CRD schema node with every `x-kubernetes-embedded-resource` object below it declaring apiVersion, kind
    and metadata (ObjectMeta) and requiring kind and apiVersion, as upstream's builder publishes embedded
    resources in v3 (their other properties kept). The v2 document drops them again from nodes that preserve
    unknown fields (`openapi_v2.structural_v2`), as upstream's v2 does."""
    if not isinstance(node, dict):
        return node
    out = dict(node)
    if isinstance(out.get("properties"), dict):
        out["properties"] = {n: _embedded(v) for n, v in out["properties"].items()}
    for key in ("items", "additionalProperties"):
        if isinstance(out.get(key), dict):
            out[key] = _embedded(out[key])
    if out.get("x-kubernetes-embedded-resource") is True:
        out["properties"] = {**dict(out.get("properties") or {}), **_EMBEDDED_META}
        required = list(out.get("required") or [])
        out["required"] = required + [r for r in ("kind", "apiVersion") if r not in required]
    return out


def _schema(k: Kind) -> Obj:
    if k.schema:
        base: Obj = dict(k.schema)
        # As upstream publishes a CRD's schema: apiVersion, kind and metadata (ObjectMeta) are always declared.
        props = dict(base.get("properties") or {})
        base["properties"] = {**props, **{n: v for n, v in _TYPE_META.items() if n not in props or n == "metadata"}}
        base["properties"] = {n: _embedded(v) for n, v in base["properties"].items()}
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
