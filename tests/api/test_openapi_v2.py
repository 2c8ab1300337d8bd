"""`/openapi/v2`: the v3→v2 conversion (tables), the gnostic protobuf encoding (read back with a generic
wire-format reader), Accept negotiation and the ETag, over the real API stack."""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml
from apistack import api_client

from lite.server.api import negotiate
from lite.server.api.openapi_v2 import crd_root_v2, schema_v2, structural_v2, swagger_document
from lite.server.api.openapi_v2pb import encode_document, schema

AUTH = {"Authorization": "Bearer t"}
PB = "application/com.github.proto-openapi.spec.v2@v1.0+protobuf"
PB_DOT = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf"


# ---- a generic protobuf wire reader (field number -> list of raw values) -----------------------------------

def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    shift = value = 0
    while True:
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return value, pos


def fields(buf: bytes) -> dict[int, list[Any]]:
    out: dict[int, list[Any]] = {}
    pos = 0
    while pos < len(buf):
        key, pos = _varint(buf, pos)
        num, wire = key >> 3, key & 7
        value: Any
        if wire == 0:
            value, pos = _varint(buf, pos)
        elif wire == 1:
            value = struct.unpack("<d", buf[pos:pos + 8])[0]
            pos += 8
        elif wire == 2:
            n, pos = _varint(buf, pos)
            value = buf[pos:pos + n]
            pos += n
        else:
            raise AssertionError(f"unexpected wire type {wire}")
        out.setdefault(num, []).append(value)
    assert pos == len(buf)
    return out


def named(buf: bytes, field: int) -> dict[str, bytes]:
    """A gnostic map (repeated Named*{name=1, value=2}) as a dict."""
    out = {}
    for entry in fields(buf).get(field, []):
        f = fields(entry)
        out[f[1][0].decode()] = f[2][0]
    return out


# ---- conversion tables ------------------------------------------------------------------------------------

@pytest.mark.parametrize(("v3", "v2"), [
    ({"allOf": [{"$ref": "#/components/schemas/a.B"}], "default": {}, "description": "d"},
     {"$ref": "#/definitions/a.B", "description": "d"}),
    ({"$ref": "#/components/schemas/a.B"}, {"$ref": "#/definitions/a.B"}),
    ({"type": "array", "items": {"allOf": [{"$ref": "#/components/schemas/x"}], "default": {}}},
     {"type": "array", "items": {"$ref": "#/definitions/x"}}),
    ({"type": "object", "additionalProperties": {"allOf": [{"$ref": "#/components/schemas/q"}]}},
     {"type": "object", "additionalProperties": {"$ref": "#/definitions/q"}}),
    ({"type": "string", "nullable": True, "oneOf": [{}], "anyOf": [{}], "not": {}}, {"type": "string"}),
    ({"type": "object", "properties": {"p": {"type": "integer", "format": "int32"}},
      "x-kubernetes-patch-strategy": "merge"},
     {"type": "object", "properties": {"p": {"type": "integer", "format": "int32"}},
      "x-kubernetes-patch-strategy": "merge"}),
])
def test_schema_v2(v3: dict[str, Any], v2: dict[str, Any]) -> None:
    assert schema_v2(v3) == v2


@pytest.mark.parametrize(("crd", "v2"), [
    # preserve-unknown-fields: properties and items go (kubectl 1.20 would refuse unknown fields otherwise)
    # ... and an object's `type` too: kubectl 1.20 refuses a null anywhere in a typed map ("unknown object type
    # \"nil\""), an untyped node is arbitrary to it
    ({"type": "object", "x-kubernetes-preserve-unknown-fields": True, "properties": {"a": {"type": "string"}}},
     {"x-kubernetes-preserve-unknown-fields": True}),
    ({"type": "object", "properties": {"t": {"type": "object", "x-kubernetes-embedded-resource": True,
                                             "x-kubernetes-preserve-unknown-fields": True,
                                             "properties": {"kind": {"type": "string"}}}}},
     {"type": "object", "properties": {"t": {"x-kubernetes-embedded-resource": True,
                                             "x-kubernetes-preserve-unknown-fields": True}}}),
    # nullable: type, properties and items go; a nullable property leaves `required`
    ({"type": "object", "required": ["n", "m"], "properties": {"n": {"type": "string", "nullable": True},
                                                              "m": {"type": "integer"}}},
     {"type": "object", "required": ["m"], "properties": {"n": {}, "m": {"type": "integer"}}}),
    # an array left without items loses its type (kubectl cannot parse it otherwise)
    ({"type": "array", "x-kubernetes-preserve-unknown-fields": True, "items": {"type": "string"}},
     {"x-kubernetes-preserve-unknown-fields": True}),
    ({"type": "object", "additionalProperties": {"type": "string"}}, {"type": "object"}),
])
def test_structural_v2(crd: dict[str, Any], v2: dict[str, Any]) -> None:
    assert structural_v2(crd) == v2


_GVK = [{"group": "ex.com", "version": "v1", "kind": "Blob"}]


@pytest.mark.parametrize(("crd", "v2"), [
    # no schema, or unknown fields preserved at the root: upstream's builder publishes only the type and kind
    ({"type": "object", "x-kubernetes-preserve-unknown-fields": True, "description": "d",
      "properties": {"spec": {"type": "object"}}, "x-kubernetes-group-version-kind": _GVK},
     {"type": "object", "x-kubernetes-group-version-kind": _GVK}),
    ({"type": "object", "properties": {"spec": {"type": "string"}}, "x-kubernetes-group-version-kind": _GVK},
     {"type": "object", "properties": {"spec": {"type": "string"}}, "x-kubernetes-group-version-kind": _GVK}),
])
def test_crd_root_v2(crd: dict[str, Any], v2: dict[str, Any]) -> None:
    assert crd_root_v2(crd) == v2


def test_operations_become_v2() -> None:
    v3 = {"paths": {"/api/v1/namespaces/{namespace}/configmaps": {
        "parameters": [{"in": "path", "name": "namespace", "description": "ns", "required": True,
                        "schema": {"type": "string", "uniqueItems": True}}],
        "post": {"operationId": "createCoreV1NamespacedConfigMap", "description": "create a ConfigMap",
                 "parameters": [{"in": "query", "name": "dryRun", "schema": {"type": "string", "uniqueItems": True}}],
                 "requestBody": {"content": {"*/*": {"schema": {"$ref": "#/components/schemas/io.k8s.api.core.v1.X"}}},
                                 "required": True},
                 "responses": {"201": {"description": "Created", "content": {
                     "application/json": {"schema": {"$ref": "#/components/schemas/io.k8s.api.core.v1.X"}},
                     "application/yaml": {"schema": {"$ref": "#/components/schemas/io.k8s.api.core.v1.X"}}}},
                     "401": {"description": "Unauthorized"}},
                 "x-kubernetes-action": "post"}}},
          "components": {"schemas": {"io.k8s.api.core.v1.X": {"type": "object"}}}}
    doc = swagger_document([v3])
    assert doc["swagger"] == "2.0" and doc["definitions"] == {"io.k8s.api.core.v1.X": {"type": "object"}}
    item = doc["paths"]["/api/v1/namespaces/{namespace}/configmaps"]
    assert item["parameters"] == [{"in": "path", "name": "namespace", "description": "ns", "required": True,
                                   "type": "string", "uniqueItems": True}]
    post = item["post"]
    assert post["parameters"][0] == {"in": "body", "name": "body", "required": True,
                                     "schema": {"$ref": "#/definitions/io.k8s.api.core.v1.X"}}
    assert post["parameters"][1] == {"in": "query", "name": "dryRun", "type": "string", "uniqueItems": True}
    assert post["consumes"] == ["*/*"] and post["produces"] == ["application/json", "application/yaml"]
    assert post["responses"] == {"201": {"description": "Created",
                                         "schema": {"$ref": "#/definitions/io.k8s.api.core.v1.X"}},
                                 "401": {"description": "Unauthorized"}}
    assert post["x-kubernetes-action"] == "post"


@pytest.mark.parametrize(("accept", "media"), [
    ("", "application/json"),
    ("*/*", "application/json"),
    ("application/json", "application/json"),
    (PB, PB),
    (PB_DOT, PB_DOT),
    (f"{PB}, application/json", PB),
    (f"application/json;q=0.5, {PB}", PB),
    ("application/*", "application/json"),
    ("text/html", None),
    ("application/json;q=0", None),
])
def test_negotiation(accept: str, media: str | None) -> None:
    assert negotiate.openapi_v2_media(accept, (PB, PB_DOT)) == media


# ---- protobuf ---------------------------------------------------------------------------------------------

def test_schema_protobuf_fields() -> None:
    s = {"type": "object", "description": "d", "required": ["a"], "properties": {"a": {"type": "string"}},
         "additionalProperties": False, "enum": ["x"], "default": {"k": 1},
         "x-kubernetes-group-version-kind": [{"group": "", "kind": "Pod", "version": "v1"}],
         "items": {"$ref": "#/definitions/i"}, "maxLength": 5, "minimum": 1.5}
    f = fields(schema(s))
    assert f[4] == [b"d"] and f[19] == [b"a"]
    assert fields(f[22][0])[1] == [b"object"]                       # TypeItem
    assert fields(f[21][0]) == {2: [0]}                              # additionalProperties: false is kept
    assert fields(fields(f[23][0])[1][0])[1] == [b"#/definitions/i"]  # ItemsItem -> Schema._ref
    assert yaml.safe_load(fields(f[20][0])[2][0]) == "x"            # enum Any{yaml}
    assert yaml.safe_load(fields(f[5][0])[2][0]) == {"k": 1}        # default Any{yaml}
    assert f[11] == [5] and f[9] == [1.5]
    props = named(f[25][0], 1)
    assert fields(fields(props["a"])[22][0])[1] == [b"string"]
    ext = fields(f[31][0])
    assert ext[1] == [b"x-kubernetes-group-version-kind"]
    assert yaml.safe_load(fields(ext[2][0])[2][0]) == [{"group": "", "kind": "Pod", "version": "v1"}]


def test_document_protobuf_reads_back() -> None:
    doc = swagger_document([{"paths": {"/api/v1/pods": {"get": {
        "operationId": "listCoreV1PodForAllNamespaces",
        "parameters": [{"in": "query", "name": "limit", "schema": {"type": "integer", "uniqueItems": True}}],
        "responses": {"200": {"description": "OK", "content": {"application/json": {"schema": {
            "$ref": "#/components/schemas/P"}}}}}}}},
        "components": {"schemas": {"P": {"type": "object", "properties": {"spec": {"type": "object"}}}}}}])
    f = fields(encode_document(doc))
    assert f[1] == [b"2.0"]
    assert fields(f[2][0])[1] == [b"Kubernetes"]
    definitions = named(f[9][0], 1)
    assert list(definitions) == ["P"]
    path_item = named(f[8][0], 2)["/api/v1/pods"]
    get = fields(fields(path_item)[2][0])
    assert get[5] == [b"listCoreV1PodForAllNamespaces"]
    query = fields(fields(fields(fields(get[8][0])[1][0])[2][0])[3][0])  # ParametersItem→Parameter→NonBody→Query
    assert query[4] == [b"limit"] and query[2] == [b"query"] and query[6] == [b"integer"] and query[20] == [1]
    response = fields(named(get[9][0], 1)["200"])[1][0]  # Responses → ResponseValue → Response
    assert fields(fields(fields(response)[2][0])[1][0])[1] == [b"#/definitions/P"]  # SchemaItem → Schema._ref
    security = named(f[13][0], 1)["BearerToken"]
    assert fields(fields(security)[2][0])[3] == [b"header"]


# ---- HTTP -------------------------------------------------------------------------------------------------

async def test_v2_served_with_etag_and_both_media_types(tmp_path: Path) -> None:
    async with api_client(tmp_path, "Bearer t") as (client, _):
        r = await client.get("/openapi/v2", headers=AUTH)
        assert r.status == 200 and r.headers["Content-Type"].startswith("application/json")
        doc = orjson.loads(await r.read())
        etag = r.headers["ETag"]
        assert doc["swagger"] == "2.0"
        dep = doc["definitions"]["io.k8s.api.apps.v1.Deployment"]
        assert dep["x-kubernetes-group-version-kind"] == [{"group": "apps", "kind": "Deployment", "version": "v1"}]
        assert dep["properties"]["metadata"]["$ref"] == "#/definitions/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
        assert "/apis/apps/v1/namespaces/{namespace}/deployments/{name}" in doc["paths"]
        refs: set[str] = set()

        def walk(node: Any) -> None:
            if isinstance(node, dict):
                if isinstance(node.get("$ref"), str):
                    refs.add(node["$ref"].removeprefix("#/definitions/"))
                for v in node.values():
                    walk(v)
            elif isinstance(node, list):
                for v in node:
                    walk(v)
        walk(doc)
        assert refs and refs <= set(doc["definitions"]), sorted(refs - set(doc["definitions"]))[:5]

        r = await client.get("/openapi/v2", headers={**AUTH, "If-None-Match": etag})
        assert r.status == 304
        for accept in (PB, PB_DOT):
            r = await client.get("/openapi/v2", headers={**AUTH, "Accept": accept})
            assert r.status == 200 and r.headers["Content-Type"] == PB_DOT and r.headers["ETag"] == etag
            f = fields(await r.read())
            assert f[1] == [b"2.0"] and "io.k8s.api.core.v1.Pod" in named(f[9][0], 1)
        r = await client.get("/openapi/v2", headers={**AUTH, "Accept": "text/html"})
        assert r.status == 406
        r = await client.get("/openapi/v2")
        assert r.status == 401


_CRD = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "blobs.ex.com"},
        "spec": {"group": "ex.com", "scope": "Namespaced", "names": {"plural": "blobs", "kind": "Blob"},
                 "versions": [{"name": "v1", "served": True, "storage": True,
                               "subresources": {"status": {}, "scale": {"specReplicasPath": ".spec.replicas",
                                                                        "statusReplicasPath": ".status.replicas"}},
                               "schema": {"openAPIV3Schema": {"type": "object",
                                                              "x-kubernetes-preserve-unknown-fields": True}}}]}}
_ALL_PATCH = {"application/apply-patch+yaml", "application/json-patch+json", "application/merge-patch+json",
              "application/strategic-merge-patch+json"}
_CR_PATCH = _ALL_PATCH - {"application/strategic-merge-patch+json"}


def _media(doc: dict[str, Any], v2: bool) -> dict[tuple[str, str], tuple[set[str], set[str]]]:
    """(path, method) -> (request media types, response media types) of every operation."""
    out = {}
    for path, item in doc["paths"].items():
        for method, op in item.items():
            if method == "parameters":
                continue
            if v2:
                out[(path, method)] = (set(op.get("consumes", ())), set(op.get("produces", ())))
            else:
                produces = {m for r in op["responses"].values() for m in r.get("content", {})}
                out[(path, method)] = (set(op.get("requestBody", {}).get("content", {})), produces)
    return out


async def test_media_types_per_kind_as_upstream(tmp_path: Path) -> None:
    """Custom resources: JSON/YAML only and no strategic merge patch (kubectl 1.32 then sends a merge patch on
    apply); built-in kinds: protobuf too, `*/*` bodies, all four patch types, lists also as watch streams."""
    async with api_client(tmp_path, "Bearer t") as (client, _):
        r = await client.post("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", json=_CRD, headers=AUTH)
        assert r.status == 201, await r.text()
        v3 = orjson.loads(await (await client.get("/openapi/v3/apis/ex.com/v1", headers=AUTH)).read())
        v2 = orjson.loads(await (await client.get("/openapi/v2", headers=AUTH)).read())
        apps = orjson.loads(await (await client.get("/openapi/v3/apis/apps/v1", headers=AUTH)).read())
    json_yaml = {"application/json", "application/yaml"}
    for doc, is_v2 in ((v3, False), (v2, True)):
        ops = {k: v for k, v in _media(doc, is_v2).items() if k[0].startswith("/apis/ex.com/")}
        assert len(ops) == 14, sorted(ops)  # 2 lists, create, deletecollection, 4 on the object, 3+3 subresources
        for (path, method), (consumes, produces) in ops.items():
            assert produces == json_yaml, (path, method, produces)
            if method == "patch":
                assert consumes == _CR_PATCH, (path, consumes)
            elif is_v2 or method in ("post", "put") or (method == "delete" and path.endswith("{name}")):
                assert consumes == json_yaml, (path, method, consumes)
            else:  # reads, and deletecollection (upstream's CRD builder gives it no body)
                assert consumes == set(), (path, method, consumes)
    assert v2["definitions"]["ex.com.v1.Blob".replace("ex.com", "com.ex")] == {
        "type": "object", "x-kubernetes-group-version-kind": [{"group": "ex.com", "kind": "Blob", "version": "v1"}]}
    built_in = _media(apps, False)
    proto = {"application/json", "application/yaml", "application/vnd.kubernetes.protobuf"}
    assert built_in[("/apis/apps/v1/namespaces/{namespace}/deployments/{name}", "patch")] == (_ALL_PATCH, proto)
    assert built_in[("/apis/apps/v1/namespaces/{namespace}/deployments/{name}/scale", "patch")] == (_ALL_PATCH, proto)
    assert built_in[("/apis/apps/v1/namespaces/{namespace}/deployments", "post")] == ({"*/*"}, proto)
    assert built_in[("/apis/apps/v1/namespaces/{namespace}/deployments", "get")] == (set(), proto | {
        "application/json;stream=watch", "application/vnd.kubernetes.protobuf;stream=watch"})
    crd_ops = v3["paths"]["/apis/ex.com/v1/namespaces/{namespace}/blobs/{name}"]
    assert crd_ops["delete"]["requestBody"]["required"] is False and crd_ops["put"]["requestBody"]["required"]
    collection = v3["paths"]["/apis/ex.com/v1/namespaces/{namespace}/blobs"]["delete"]
    assert "requestBody" not in collection and "propagationPolicy" not in [p["name"] for p in collection["parameters"]]
    v2_built_in = _media(v2, True)
    assert v2_built_in[("/apis/apps/v1/namespaces/{namespace}/deployments/{name}", "get")] == ({"*/*"}, proto)


async def test_embedded_resources_as_upstream_publishes_them(tmp_path: Path) -> None:
    """v3: every x-kubernetes-embedded-resource object declares apiVersion/kind/metadata and requires kind and
    apiVersion; v2: the same, except on objects that preserve unknown fields (untyped there, nothing added)."""
    crd = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
           "metadata": {"name": "boxes.ex.com"},
           "spec": {"group": "ex.com", "scope": "Namespaced", "names": {"plural": "boxes", "kind": "Box"},
                    "versions": [{"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": {
                        "type": "object", "properties": {"spec": {"type": "object", "properties": {
                            "strict": {"type": "object", "x-kubernetes-embedded-resource": True,
                                       "properties": {"spec": {"type": "object"}}},
                            "free": {"type": "object", "x-kubernetes-embedded-resource": True,
                                     "x-kubernetes-preserve-unknown-fields": True}}}}}}}]}}
    async with api_client(tmp_path, "Bearer t") as (client, _):
        r = await client.post("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", json=crd, headers=AUTH)
        assert r.status == 201, await r.text()
        v3 = orjson.loads(await (await client.get("/openapi/v3/apis/ex.com/v1", headers=AUTH)).read())
        v2 = orjson.loads(await (await client.get("/openapi/v2", headers=AUTH)).read())
    spec3 = v3["components"]["schemas"]["com.ex.v1.Box"]["properties"]["spec"]["properties"]
    for name in ("strict", "free"):
        assert set(spec3[name]["properties"]) >= {"apiVersion", "kind", "metadata"}, name
        assert spec3[name]["required"] == ["kind", "apiVersion"], name
    assert spec3["strict"]["properties"]["kind"]["description"].startswith("kind is a string value representing")
    spec2 = v2["definitions"]["com.ex.v1.Box"]["properties"]["spec"]["properties"]
    assert spec2["strict"]["required"] == ["kind", "apiVersion"]
    assert spec2["strict"]["properties"]["metadata"]["$ref"] == \
        "#/definitions/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
    assert spec2["free"] == {"x-kubernetes-embedded-resource": True, "x-kubernetes-preserve-unknown-fields": True}
