"""Discovery, OpenAPI, /version, health and error rendering of the HTTP API (no store needed)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from lite.kinds import BUILTIN_KINDS, Kind, KindRegistry
from lite.server.api.http import build_api_app
from lite.server.api.negotiate import DISCOVERY_V2

V2_ACCEPT = ("application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,"
             "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json")
V2BETA1_ACCEPT = "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json"
AUTH = {"Authorization": "Bearer good"}


def _auth(request: web.Request) -> str | None:
    return "admin" if request.headers.get("Authorization") == "Bearer good" else None


class _NoClient:
    """Discovery never touches the resource layer: any call here is a test failure."""

    def __getattr__(self, name: str) -> Any:
        if name not in ("get", "list", "watch", "create", "update", "patch", "delete", "delete_collection"):
            raise AttributeError(name)

        def called(*args: Any, **kwargs: Any) -> Any:
            raise AssertionError(f"unexpected Client.{name} call")
        return called


@pytest.fixture
async def kinds() -> KindRegistry:
    return KindRegistry(BUILTIN_KINDS)


@pytest.fixture
async def client(kinds: KindRegistry) -> AsyncIterator[TestClient[web.Request, web.Application]]:
    app = build_api_app(_NoClient(), kinds, _auth)  # type: ignore[arg-type]
    async with TestClient(TestServer(app)) as c:
        yield c


async def _json(resp: Any) -> Any:
    return orjson.loads(await resp.read())


async def test_version_and_health_need_no_auth(client: TestClient[web.Request, web.Application]) -> None:
    r = await client.get("/version?timeout=5s")
    assert r.status == 200
    v = await _json(r)
    assert (v["major"], v["minor"], v["gitVersion"]) == ("1", "32", "v1.32.0+lite")
    for path in ("/healthz", "/livez", "/readyz"):
        r = await client.get(path)
        assert (r.status, await r.text()) == (200, "ok")


async def test_unauthenticated_is_401_status(client: TestClient[web.Request, web.Application]) -> None:
    r = await client.get("/api/v1/namespaces/default/pods")
    assert r.status == 401
    s = await _json(r)
    assert (s["kind"], s["apiVersion"], s["reason"], s["code"]) == ("Status", "v1", "Unauthorized", 401)


async def test_aggregated_discovery_v2_exact_content_type(
        client: TestClient[web.Request, web.Application]) -> None:
    r = await client.get("/api", headers={**AUTH, "Accept": V2_ACCEPT})
    assert r.status == 200
    assert r.headers["Content-Type"] == DISCOVERY_V2
    doc = await _json(r)
    assert doc["kind"] == "APIGroupDiscoveryList" and doc["apiVersion"] == "apidiscovery.k8s.io/v2"
    [core] = doc["items"]
    assert "name" not in core["metadata"]
    pods = next(res for res in core["versions"][0]["resources"] if res["resource"] == "pods")
    assert pods["scope"] == "Namespaced" and pods["shortNames"] == ["po"] and pods["categories"] == ["all"]
    assert pods["responseKind"]["kind"] == "Pod"
    subs = {s["subresource"]: s for s in pods["subresources"]}
    assert subs["eviction"]["responseKind"] == {"group": "policy", "version": "v1", "kind": "Eviction"}
    assert subs["status"]["responseKind"]["kind"] == "Pod"

    r = await client.get("/apis", headers={**AUTH, "Accept": V2_ACCEPT})
    assert r.headers["Content-Type"] == DISCOVERY_V2
    groups = {g["metadata"]["name"]: g for g in (await _json(r))["items"]}
    assert {"apps", "policy", "metrics.k8s.io", "batch"} <= set(groups)
    deploy = next(res for res in groups["apps"]["versions"][0]["resources"] if res["resource"] == "deployments")
    scale = next(s for s in deploy["subresources"] if s["subresource"] == "scale")
    assert scale["responseKind"] == {"group": "autoscaling", "version": "v1", "kind": "Scale"}
    metrics = groups["metrics.k8s.io"]["versions"][0]
    assert metrics["version"] == "v1beta1"
    assert all(res["verbs"] == ["get", "list"] for res in metrics["resources"])


async def test_v2beta1_only_gets_legacy_documents(client: TestClient[web.Request, web.Application]) -> None:
    r = await client.get("/api", headers={**AUTH, "Accept": V2BETA1_ACCEPT})
    assert r.headers["Content-Type"].startswith("application/json")
    assert "apidiscovery" not in r.headers["Content-Type"]
    doc = await _json(r)
    assert doc["kind"] == "APIVersions" and doc["versions"] == ["v1"]
    assert doc["serverAddressByClientCIDRs"][0]["clientCIDR"] == "0.0.0.0/0"
    r = await client.get("/apis", headers=AUTH)
    groups = {g["name"]: g for g in (await _json(r))["groups"]}
    assert groups["apps"]["preferredVersion"] == {"groupVersion": "apps/v1", "version": "v1"}


async def test_legacy_resource_lists(client: TestClient[web.Request, web.Application]) -> None:
    r = await client.get("/api/v1", headers=AUTH)
    doc = await _json(r)
    assert (doc["kind"], doc["groupVersion"]) == ("APIResourceList", "v1")
    by_name = {res["name"]: res for res in doc["resources"]}
    assert by_name["pods/eviction"] == {"name": "pods/eviction", "singularName": "", "namespaced": True,
                                        "kind": "Eviction", "verbs": ["create"], "group": "policy",
                                        "version": "v1"}
    assert by_name["pods"]["singularName"] == "pod" and by_name["nodes"]["namespaced"] is False
    assert by_name["serviceaccounts/token"]["group"] == "authentication.k8s.io"
    r = await client.get("/apis/apps/v1", headers=AUTH)
    by_name = {res["name"]: res for res in (await _json(r))["resources"]}
    assert by_name["deployments/scale"]["group"] == "autoscaling"
    assert "group" not in by_name["deployments/status"]
    r = await client.get("/apis/apps", headers=AUTH)
    assert (await _json(r))["kind"] == "APIGroup"
    r = await client.get("/apis/nope.example.com", headers=AUTH)
    assert r.status == 404 and (await _json(r))["reason"] == "NotFound"
    r = await client.get("/apis/apps/v7", headers=AUTH)
    assert r.status == 404


async def test_discovery_follows_registry_changes(kinds: KindRegistry,
                                                  client: TestClient[web.Request, web.Application]) -> None:
    crd = Kind("example.com", "v1", "Widget", "widgets", True, short_names=("wd",), crd=True)
    r = await client.get("/apis/example.com/v1", headers=AUTH)
    assert r.status == 404
    kinds.add(crd)
    r = await client.get("/apis/example.com/v1", headers=AUTH)
    assert [res["name"] for res in (await _json(r))["resources"]] == ["widgets"]
    r = await client.get("/apis", headers={**AUTH, "Accept": V2_ACCEPT})
    assert "example.com" in {g["metadata"]["name"] for g in (await _json(r))["items"]}
    r = await client.get("/openapi/v3", headers=AUTH)
    assert "apis/example.com/v1" in (await _json(r))["paths"]
    kinds.remove(crd)
    r = await client.get("/apis/example.com/v1", headers=AUTH)
    assert r.status == 404


async def test_openapi_v3_shape(client: TestClient[web.Request, web.Application]) -> None:
    r = await client.get("/openapi/v3", headers=AUTH)
    assert r.status == 200
    paths = (await _json(r))["paths"]
    assert {"api/v1", "apis/apps/v1", "apis/policy/v1", "apis/metrics.k8s.io/v1beta1"} <= set(paths)
    url = paths["apis/apps/v1"]["serverRelativeURL"]
    assert url.startswith("/openapi/v3/apis/apps/v1?hash=")
    r = await client.get(url + "&timeout=32s", headers=AUTH)
    doc = await _json(r)
    assert doc["openapi"].startswith("3.")
    item = doc["paths"]["/apis/apps/v1/namespaces/{namespace}/deployments/{name}"]
    patch = item["patch"]
    assert patch["x-kubernetes-group-version-kind"] == {"group": "apps", "version": "v1", "kind": "Deployment"}
    fv = [p for p in patch["parameters"] if p.get("name") == "fieldValidation"]
    assert fv and fv[0]["in"] == "query" and "$ref" not in fv[0]
    schemas = [s for s in doc["components"]["schemas"].values()
               if {"group": "apps", "version": "v1", "kind": "Deployment"}
               in s.get("x-kubernetes-group-version-kind", [])]
    assert len(schemas) == 1
    r = await client.get("/openapi/v3/api/v1", headers=AUTH)
    nodes = (await _json(r))["paths"]["/api/v1/nodes/{name}"]["patch"]
    assert nodes["x-kubernetes-group-version-kind"]["kind"] == "Node"
    r = await client.get("/openapi/v3/apis/nope/v1", headers=AUTH)
    assert r.status == 404


async def test_openapi_hash_changes_with_content(kinds: KindRegistry,
                                                 client: TestClient[web.Request, web.Application]) -> None:
    before = (await _json(await client.get("/openapi/v3", headers=AUTH)))["paths"]
    kinds.add(Kind("apps", "v1", "Gadget", "gadgets", True))
    after = (await _json(await client.get("/openapi/v3", headers=AUTH)))["paths"]
    assert before["apis/apps/v1"] != after["apis/apps/v1"]
    assert before["api/v1"] == after["api/v1"]


@pytest.mark.parametrize("path", [
    "/api/v1/nothings", "/apis/apps/v1/namespaces/default/nothings/x", "/api/v1/namespaces/default/nodes",
    "/api/v1/pods/x", "/api/v1/namespaces/default/pods/x/y/z", "/totally/unknown",
])
async def test_unknown_paths_are_404_status(client: TestClient[web.Request, web.Application], path: str) -> None:
    r = await client.get(path, headers=AUTH)
    assert r.status == 404
    s = await _json(r)
    assert (s["kind"], s["reason"], s["code"]) == ("Status", "NotFound", 404)


async def test_wrong_methods_are_405_status(client: TestClient[web.Request, web.Application]) -> None:
    for method, path in [("POST", "/api/v1/pods"), ("POST", "/api"), ("PUT", "/api/v1/namespaces/default/pods"),
                         ("DELETE", "/api/v1/namespaces"), ("POST", "/apis/metrics.k8s.io/v1beta1/nodes")]:
        r = await client.request(method, path, headers=AUTH, data=b"{}")
        assert r.status == 405, (method, path)
        s = await _json(r)
        assert (s["reason"], s["code"]) == ("MethodNotAllowed", 405)


async def test_metrics_without_provider_are_empty_lists(
        client: TestClient[web.Request, web.Application]) -> None:
    r = await client.get("/apis/metrics.k8s.io/v1beta1/namespaces/default/pods",
                         headers={**AUTH, "Accept": "application/vnd.kubernetes.protobuf, */*"})
    assert r.status == 200 and r.headers["Content-Type"].startswith("application/json")
    assert await _json(r) == {"kind": "PodMetricsList", "apiVersion": "metrics.k8s.io/v1beta1", "metadata": {},
                              "items": []}
    r = await client.get("/apis/metrics.k8s.io/v1beta1/nodes/n1", headers=AUTH)
    assert r.status == 404


async def test_metrics_provider_items(kinds: KindRegistry) -> None:
    class Metrics:
        async def pod_metrics(self, namespace: str, label_selector: str) -> list[dict[str, Any]]:
            return [{"metadata": {"name": "p", "namespace": namespace, "labels": {"sel": label_selector}},
                     "timestamp": "2026-11-22T00:00:00Z", "window": "30s",
                     "containers": [{"name": "c", "usage": {"cpu": "2m", "memory": "10Mi"}}]}]

        async def node_metrics(self, label_selector: str) -> list[dict[str, Any]]:
            return [{"metadata": {"name": "n1"}, "timestamp": "2026-11-22T00:00:00Z", "window": "30s",
                     "usage": {"cpu": "250m", "memory": "1Gi"}}]

    app = build_api_app(_NoClient(), kinds, _auth, metrics=Metrics())  # type: ignore[arg-type]
    async with TestClient(TestServer(app)) as c:
        r = await c.get("/apis/metrics.k8s.io/v1beta1/namespaces/ns1/pods?labelSelector=a%3Db", headers=AUTH)
        [item] = (await _json(r))["items"]
        assert item["kind"] == "PodMetrics" and item["metadata"]["namespace"] == "ns1"
        assert item["metadata"]["labels"] == {"sel": "a=b"}
        r = await c.get("/apis/metrics.k8s.io/v1beta1/nodes/n1", headers=AUTH)
        node = await _json(r)
        assert (node["kind"], node["apiVersion"], node["usage"]["cpu"]) == ("NodeMetrics",
                                                                           "metrics.k8s.io/v1beta1", "250m")


async def test_root_paths_and_health_subpaths(client: TestClient[web.Request, web.Application]) -> None:
    r = await client.get("/", headers=AUTH)
    paths = (await _json(r))["paths"]
    assert {"/api", "/api/v1", "/apis", "/apis/apps", "/apis/apps/v1", "/version"} <= set(paths)
    r = await client.get("/")
    assert r.status == 401
    r = await client.get("/readyz/ping")
    assert (r.status, await r.text()) == (200, "ok")
