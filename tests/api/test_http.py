"""The HTTP API over the real stack: `build_api_app` → `Resources` → SQLite `Store` on tmp_path.

Covers status codes of CRUD and subresources, Status errors (400/404/405/409/413/415/422), body media
types (JSON, YAML apply patch, protobuf), Tables, and watch streaming including ERROR 410 and shutdown.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from lite.errors import too_many_requests
from lite.kinds import KindRegistry
from lite.server.api.http import API, build_api_app
from lite.server.api.registry_base import EvictionCheck
from lite.server.api.resources import Resources
from lite.server.api.strategies import default_strategies
from lite.server.store import Store

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "protobuf"
TOKEN = {"Authorization": "Bearer t0ken"}
JSON = {**TOKEN, "Content-Type": "application/json"}
TABLE_ACCEPT = ("application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;"
                "g=meta.k8s.io,application/json")
PODS = "/api/v1/namespaces/default/pods"
DEPLOYS = "/apis/apps/v1/namespaces/default/deployments"
GUARD = 10.0  # hang guard for stream reads, never a speed assertion


def _auth(request: web.Request) -> str | None:
    return "admin" if request.headers.get("Authorization") == TOKEN["Authorization"] else None


@dataclass
class Api:
    client: TestClient[web.Request, web.Application]
    store: Store

    async def call(self, method: str, path: str, body: Any = None, *, headers: dict[str, str] | None = None,
                   data: bytes | None = None) -> tuple[int, Any]:
        if data is None and body is not None:
            data = orjson.dumps(body)
        r = await self.client.request(method, path, data=data, headers=headers or JSON)
        raw = await r.read()
        return r.status, orjson.loads(raw) if raw else None


@contextlib.asynccontextmanager
async def serve_stack(tmp_path: Path, *, window: int = 10000,
                      eviction_check: EvictionCheck | None = None) -> AsyncIterator[Api]:
    store = await Store.open(str(tmp_path / "lite.db"), window=window)
    try:
        kinds = KindRegistry()
        resources = Resources(store, kinds, default_strategies(), eviction_check=eviction_check)
        await resources.start()  # creates the system namespaces, "default" among them
        app = build_api_app(resources, kinds, _auth, max_body_bytes=64 * 1024)
        async with TestClient(TestServer(app)) as client:
            yield Api(client, store)
    finally:
        await store.close()


@pytest.fixture
async def api(tmp_path: Path) -> AsyncIterator[Api]:
    async with serve_stack(tmp_path) as a:
        yield a


def pod(name: str, **labels: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels},
            "spec": {"containers": [{"name": "c", "image": "busybox"}]}}


def deployment(name: str, replicas: int = 1) -> dict[str, Any]:
    labels = {"app": name}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
            "spec": {"replicas": replicas, "selector": {"matchLabels": labels},
                     "template": {"metadata": {"labels": labels},
                                  "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}}


async def test_crud_status_codes(api: Api) -> None:
    status, created = await api.call("POST", f"{PODS}?fieldManager=kubectl-create&fieldValidation=Strict",
                                     pod("p1", app="a"))
    assert status == 201
    assert (created["kind"], created["apiVersion"], created["metadata"]["namespace"]) == ("Pod", "v1", "default")
    rv = created["metadata"]["resourceVersion"]

    status, got = await api.call("GET", f"{PODS}/p1")
    assert status == 200 and got["metadata"]["uid"] == created["metadata"]["uid"]

    status, err = await api.call("POST", PODS, pod("p1"))
    assert (status, err["kind"], err["reason"], err["code"]) == (409, "Status", "AlreadyExists", 409)

    got["metadata"]["labels"]["tier"] = "web"
    status, updated = await api.call("PUT", f"{PODS}/p1", got)
    assert status == 200 and updated["metadata"]["labels"]["tier"] == "web"

    got["metadata"]["resourceVersion"] = rv  # stale
    status, err = await api.call("PUT", f"{PODS}/p1", got)
    assert (status, err["reason"]) == (409, "Conflict")

    status, patched = await api.call("PATCH", f"{PODS}/p1", {"metadata": {"labels": {"x": "y"}}},
                                     headers={**TOKEN, "Content-Type": "application/merge-patch+json"})
    assert status == 200 and patched["metadata"]["labels"]["x"] == "y"

    status, err = await api.call("PATCH", f"{PODS}/nope", {"metadata": {}},
                                 headers={**TOKEN, "Content-Type": "application/merge-patch+json"})
    assert (status, err["reason"], err["details"]["name"]) == (404, "NotFound", "nope")

    status, lst = await api.call("GET", f"{PODS}?limit=500")
    assert status == 200 and lst["kind"] == "PodList" and [p["metadata"]["name"] for p in lst["items"]] == ["p1"]

    status, _ = await api.call("DELETE", f"{PODS}/p1", {"propagationPolicy": "Background",
                                                        "gracePeriodSeconds": 0})
    assert status == 200
    status, err = await api.call("GET", f"{PODS}/p1")
    assert (status, err["reason"], err["message"]) == (404, "NotFound", 'pods "p1" not found')


async def test_python_client_style_create_defaults_kind(api: Api) -> None:
    body = {"metadata": {"generateName": "py-"}, "spec": {"containers": [{"name": "c", "image": "x"}]}}
    status, created = await api.call("POST", PODS, body)
    assert status == 201
    assert created["kind"] == "Pod" and created["apiVersion"] == "v1"
    assert created["metadata"]["name"].startswith("py-") and len(created["metadata"]["name"]) == 8


async def test_body_errors(api: Api) -> None:
    status, err = await api.call("POST", PODS, data=b'{"metadata": {"name": ')
    assert (status, err["reason"], err["code"]) == (400, "BadRequest", 400)
    status, err = await api.call("POST", PODS, data=b"x" * (64 * 1024 + 1))
    assert (status, err["reason"], err["code"]) == (413, "RequestEntityTooLarge", 413)
    status, err = await api.call("POST", PODS, data=b"<pod/>", headers={**TOKEN, "Content-Type": "text/xml"})
    assert (status, err["reason"]) == (415, "UnsupportedMediaType")
    status, err = await api.call("PATCH", f"{PODS}/p", data=b"{}", headers=JSON)  # not a patch type
    assert (status, err["reason"]) == (415, "UnsupportedMediaType")
    status, err = await api.call("POST", PODS, {"apiVersion": "apps/v1", "kind": "Pod", "metadata": {"name": "a"}})
    assert (status, err["reason"]) == (400, "BadRequest")
    status, err = await api.call("POST", "/api/v1/namespaces/other/pods",
                                 {**pod("a"), "metadata": {"name": "a", "namespace": "default"}})
    assert (status, err["reason"]) == (400, "BadRequest")
    status, err = await api.call("POST", PODS, {"metadata": {"name": "Bad_Name"},
                                                "spec": {"containers": [{"name": "c", "image": "x"}]}})
    assert (status, err["reason"], err["code"]) == (422, "Invalid", 422)
    assert err["details"]["causes"]
    status, err = await api.call("POST", f"{PODS}?dryRun=Sometimes", pod("a"))
    assert (status, err["reason"]) == (422, "Invalid")  # upstream ValidateCreateOptions


async def test_unauthenticated_and_unknown(api: Api) -> None:
    status, err = await api.call("GET", PODS, headers={"Authorization": "Bearer wrong"})
    assert (status, err["reason"]) == (401, "Unauthorized")
    status, err = await api.call("GET", "/api/v1/namespaces/default/widgets")
    assert (status, err["reason"]) == (404, "NotFound")
    status, err = await api.call("POST", "/api/v1/pods", pod("a"))  # cluster-wide collection: list only
    assert (status, err["reason"]) == (405, "MethodNotAllowed")
    status, err = await api.call("DELETE", "/api/v1/namespaces")  # namespaces have no deletecollection
    assert (status, err["reason"]) == (405, "MethodNotAllowed")


async def test_dry_run_does_not_persist(api: Api) -> None:
    status, created = await api.call("POST", f"{PODS}?dryRun=All", pod("dry"))
    assert status == 201 and created["metadata"]["name"] == "dry"
    status, _ = await api.call("GET", f"{PODS}/dry")
    assert status == 404


async def test_cluster_wide_list_and_selectors(api: Api) -> None:
    assert (await api.call("POST", "/api/v1/namespaces", {"metadata": {"name": "other"}}))[0] == 201
    for ns, name, app in (("default", "a", "x"), ("other", "b", "x"), ("other", "c", "y")):
        assert (await api.call("POST", f"/api/v1/namespaces/{ns}/pods", pod(name, app=app)))[0] == 201
    _, lst = await api.call("GET", "/api/v1/pods?limit=500")
    assert sorted(p["metadata"]["name"] for p in lst["items"]) == ["a", "b", "c"]
    _, lst = await api.call("GET", "/api/v1/pods?labelSelector=app%3Dx")
    assert sorted(p["metadata"]["name"] for p in lst["items"]) == ["a", "b"]
    _, lst = await api.call("GET", "/api/v1/pods?fieldSelector=metadata.namespace%3Dother")
    assert sorted(p["metadata"]["name"] for p in lst["items"]) == ["b", "c"]
    status, err = await api.call("GET", "/api/v1/pods?labelSelector=a%20in%20(")
    assert (status, err["reason"]) == (400, "BadRequest")
    _, page = await api.call("GET", "/api/v1/pods?limit=1")
    assert len(page["items"]) == 1 and page["metadata"]["continue"]
    status, deleted = await api.call("DELETE", "/api/v1/namespaces/other/pods?labelSelector=app%3Dy",
                                     {"gracePeriodSeconds": 0})
    assert status == 200 and [p["metadata"]["name"] for p in deleted["items"]] == ["c"]


async def test_apply_patch_yaml_creates_201_then_200(api: Api) -> None:
    body = (b"apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\nspec:\n  replicas: 2\n"
            b"  selector:\n    matchLabels: {app: web}\n  template:\n    metadata:\n      labels: {app: web}\n"
            b"    spec:\n      containers:\n      - name: c\n        image: nginx:1.25\n")
    headers = {**TOKEN, "Content-Type": "application/apply-patch+yaml"}
    url = f"{DEPLOYS}/web?fieldManager=kubectl&fieldValidation=Strict&force=false"
    status, created = await api.call("PATCH", url, data=body, headers=headers)
    assert status == 201 and created["spec"]["replicas"] == 2
    status, again = await api.call("PATCH", url, data=body.replace(b"replicas: 2", b"replicas: 3"), headers=headers)
    assert status == 200 and again["spec"]["replicas"] == 3
    status, err = await api.call("PATCH", url, data=b"spec: [unclosed", headers=headers)
    assert (status, err["reason"]) == (400, "BadRequest")


async def test_json_and_strategic_patch(api: Api) -> None:
    assert (await api.call("POST", DEPLOYS, deployment("d")))[0] == 201
    status, out = await api.call("PATCH", f"{DEPLOYS}/d", [{"op": "replace", "path": "/spec/replicas", "value": 4}],
                                 headers={**TOKEN, "Content-Type": "application/json-patch+json"})
    assert status == 200 and out["spec"]["replicas"] == 4
    status, err = await api.call("PATCH", f"{DEPLOYS}/d", {"op": "replace"},
                                 headers={**TOKEN, "Content-Type": "application/json-patch+json"})
    assert (status, err["reason"]) == (400, "BadRequest")
    smp = {"spec": {"template": {"spec": {"$setElementOrder/containers": [{"name": "c"}],
                                          "containers": [{"name": "c", "image": "nginx:2"}]}}}}
    status, out = await api.call("PATCH", f"{DEPLOYS}/d?fieldManager=kubectl-client-side-apply", smp,
                                 headers={**TOKEN, "Content-Type": "application/strategic-merge-patch+json"})
    assert status == 200
    [container] = out["spec"]["template"]["spec"]["containers"]
    assert (container["name"], container["image"]) == ("c", "nginx:2")
    assert not any(k.startswith("$") for k in out["spec"]["template"]["spec"])


async def test_scale_and_status_subresources(api: Api) -> None:
    assert (await api.call("POST", DEPLOYS, deployment("s", 1)))[0] == 201
    status, scale = await api.call("GET", f"{DEPLOYS}/s/scale")
    assert status == 200 and (scale["kind"], scale["apiVersion"]) == ("Scale", "autoscaling/v1")
    status, scale = await api.call("PATCH", f"{DEPLOYS}/s/scale", {"spec": {"replicas": 3}},
                                   headers={**TOKEN, "Content-Type": "application/merge-patch+json"})
    assert status == 200 and scale["spec"]["replicas"] == 3
    _, d = await api.call("GET", f"{DEPLOYS}/s")
    assert d["spec"]["replicas"] == 3
    d["status"] = {"observedGeneration": d["metadata"]["generation"], "replicas": 3}
    status, out = await api.call("PUT", f"{DEPLOYS}/s/status", d)
    assert status == 200 and out["status"]["replicas"] == 3
    status, err = await api.call("GET", f"{DEPLOYS}/s/nothing")
    assert (status, err["reason"]) == (404, "NotFound")


async def test_eviction_answers_201(api: Api) -> None:
    assert (await api.call("POST", PODS, pod("ev")))[0] == 201
    body = {"kind": "Eviction", "apiVersion": "policy/v1", "metadata": {"name": "ev", "namespace": "default",
                                                                        "creationTimestamp": None},
            "deleteOptions": {}}
    status, out = await api.call("POST", f"{PODS}/ev/eviction", body)
    assert status == 201 and out["kind"] == "Status"


async def test_pod_log_without_agent_is_clear_status(api: Api) -> None:
    assert (await api.call("POST", PODS, pod("lg")))[0] == 201
    status, err = await api.call("GET", f"{PODS}/lg/log?container=c&follow=true")
    assert (status, err["reason"]) == (400, "BadRequest")
    assert err["message"] == 'container "c" in pod "lg" is waiting to start: ContainerCreating'
    status, err = await api.call("GET", f"{PODS}/missing/log")
    assert (status, err["reason"]) == (404, "NotFound")


async def test_protobuf_create(api: Api) -> None:
    body = (FIXTURES / "namespace.bin").read_bytes()
    status, out = await api.call("POST", "/api/v1/namespaces?fieldManager=kubectl-create&fieldValidation=Strict",
                                 data=body, headers={**TOKEN, "Content-Type": "application/vnd.kubernetes.protobuf",
                                                     "Accept": "application/vnd.kubernetes.protobuf,application/json"})
    assert status == 201 and out["kind"] == "Namespace" and out["metadata"]["name"]
    status, err = await api.call("POST", "/api/v1/namespaces", data=b"k8s\x00\xff\xff",
                                 headers={**TOKEN, "Content-Type": "application/vnd.kubernetes.protobuf"})
    assert status == 400 and err["kind"] == "Status"


async def test_tables(api: Api) -> None:
    assert (await api.call("POST", PODS, pod("t1", app="a")))[0] == 201
    headers = {**TOKEN, "Accept": TABLE_ACCEPT}
    status, table = await api.call("GET", f"{PODS}?limit=500", headers=headers)
    assert status == 200 and (table["kind"], table["apiVersion"]) == ("Table", "meta.k8s.io/v1")
    assert table["columnDefinitions"][0]["name"] == "Name"
    [row] = table["rows"]
    assert row["object"]["metadata"]["labels"] == {"app": "a"}
    assert table["metadata"]["resourceVersion"]
    status, one = await api.call("GET", f"{PODS}/t1", headers=headers)
    assert status == 200 and one["kind"] == "Table" and len(one["rows"]) == 1
    status, plain = await api.call("GET", f"{PODS}/t1")
    assert plain["kind"] == "Pod"


async def test_writes_answer_a_table_when_asked(api: Api) -> None:
    """upstream's transformResponseObject turns every write's answer into a one-row Table when Accept asks for
    one (create 201, update, patch, delete of a lingering object); a Status answer passes through as it is."""
    table_only = {**JSON, "Accept": "application/json;as=Table;v=v1;g=meta.k8s.io"}
    status, made = await api.call("POST", PODS, pod("tw", app="a"), headers=table_only)
    assert status == 201 and (made["kind"], made["apiVersion"]) == ("Table", "meta.k8s.io/v1"), made
    [row] = made["rows"]
    assert row["cells"][0] == "tw" and row["object"]["kind"] == "PartialObjectMetadata"
    assert row["object"]["metadata"]["labels"] == {"app": "a"}
    assert made["metadata"]["resourceVersion"] == row["object"]["metadata"]["resourceVersion"]
    assert made["columnDefinitions"][0]["name"] == "Name"
    _, plain = await api.call("GET", f"{PODS}/tw")
    status, put = await api.call("PUT", f"{PODS}/tw", plain, headers=table_only)
    assert status == 200 and put["kind"] == "Table" and put["rows"][0]["cells"][0] == "tw"
    status, patched = await api.call("PATCH", f"{PODS}/tw", {"metadata": {"labels": {"b": "c"}}}, headers={
        **table_only, "Content-Type": "application/merge-patch+json"})
    assert status == 200 and patched["kind"] == "Table"
    assert patched["rows"][0]["object"]["metadata"]["labels"] == {"app": "a", "b": "c"}
    status, deleted = await api.call("DELETE", f"{PODS}/tw", headers=table_only)  # graceful: the pod lingers
    assert status == 200 and deleted["kind"] == "Table", deleted
    assert (await api.call("POST", DEPLOYS, deployment("tw")))[0] == 201
    status, gone = await api.call("DELETE", f"{DEPLOYS}/tw", headers=table_only)
    assert status == 200 and (gone["kind"], gone["status"]) == ("Status", "Success"), gone  # passes through
    # includeObject as upstream's TableOptions: None, Metadata (default), Object; anything else is 400
    status, none = await api.call("POST", f"{PODS}?includeObject=None", pod("tw2"), headers=table_only)
    assert status == 201 and "object" not in none["rows"][0], none
    status, whole = await api.call("GET", f"{PODS}/tw2?includeObject=Object", headers=table_only)
    assert status == 200 and whole["rows"][0]["object"]["kind"] == "Pod"
    assert whole["rows"][0]["object"]["spec"]["containers"]
    status, listed = await api.call("GET", f"{PODS}?includeObject=None", headers=table_only)
    assert status == 200 and all("object" not in r for r in listed["rows"])
    status, bad = await api.call("POST", f"{PODS}?includeObject=All", pod("tw3"), headers=table_only)
    assert (status, bad["reason"]) == (400, "BadRequest")
    assert bad["message"] == ("Unable to convert to Table as requested: includeObject: Invalid value: \"All\": "
                              "must be 'Metadata', 'Object', 'None', or empty")
    assert (await api.call("GET", f"{PODS}/tw3"))[0] == 404  # refused before it was written
    status, scale = await api.call("PATCH", f"{DEPLOYS}/nope/scale", {"spec": {"replicas": 3}}, headers={
        **table_only, "Content-Type": "application/merge-patch+json"})
    assert status == 404 and scale["kind"] == "Status"


async def _read_line(resp: Any) -> dict[str, Any]:
    line = await asyncio.wait_for(resp.content.readline(), GUARD)
    assert line.endswith(b"\n"), line
    out: dict[str, Any] = orjson.loads(line)
    return out


async def test_watch_streams_events(api: Api) -> None:
    _, lst = await api.call("GET", PODS)
    rv = lst["metadata"]["resourceVersion"]
    async with api.client.get(f"{PODS}?watch=true&resourceVersion={rv}", headers=TOKEN) as resp:
        assert resp.status == 200
        assert resp.headers.get("Transfer-Encoding") == "chunked"
        assert (await api.call("POST", PODS, pod("w1")))[0] == 201
        ev = await _read_line(resp)
        assert ev["type"] == "ADDED"
        assert (ev["object"]["kind"], ev["object"]["metadata"]["name"]) == ("Pod", "w1")
        await api.call("PATCH", f"{PODS}/w1", {"metadata": {"labels": {"a": "b"}}},
                       headers={**TOKEN, "Content-Type": "application/merge-patch+json"})
        ev = await _read_line(resp)
        assert ev["type"] == "MODIFIED" and ev["object"]["metadata"]["labels"] == {"a": "b"}


async def test_watch_initial_state_table_rows(api: Api) -> None:
    assert (await api.call("POST", PODS, pod("tw")))[0] == 201
    url = f"{PODS}?fieldSelector=metadata.name%3Dtw&resourceVersion=0&watch=true"
    async with api.client.get(url, headers={**TOKEN, "Accept": TABLE_ACCEPT}) as resp:
        ev = await _read_line(resp)
        assert ev["type"] == "ADDED"
        assert ev["object"]["kind"] == "Table" and len(ev["object"]["rows"]) == 1
        assert ev["object"]["rows"][0]["object"]["metadata"]["name"] == "tw"


async def test_watch_named_object_and_timeout(api: Api) -> None:
    assert (await api.call("POST", PODS, pod("nm")))[0] == 201
    assert (await api.call("POST", PODS, pod("other")))[0] == 201
    async with api.client.get(f"{PODS}/nm?watch=true&timeoutSeconds=1", headers=TOKEN) as resp:
        ev = await _read_line(resp)
        assert (ev["type"], ev["object"]["metadata"]["name"]) == ("ADDED", "nm")
        rest = await asyncio.wait_for(resp.content.read(), GUARD)  # ends by itself after timeoutSeconds
        assert b'"other"' not in rest


async def test_watch_too_old_rv_gives_error_410(tmp_path: Path) -> None:
    async with serve_stack(tmp_path, window=3) as api:  # only the last 3 events stay watchable
        await _expect_410(api)


async def _expect_410(api: Api) -> None:
    for i in range(6):
        assert (await api.call("POST", PODS, pod(f"old{i}")))[0] == 201
    async with api.client.get(f"{PODS}?watch=true&resourceVersion=1", headers=TOKEN) as resp:
        assert resp.status == 200
        ev = await _read_line(resp)
        assert ev["type"] == "ERROR"
        assert ev["object"]["kind"] == "Status" and ev["object"]["code"] == 410
        assert ev["object"]["reason"] in ("Expired", "Gone")
        assert await asyncio.wait_for(resp.content.read(), GUARD) == b""


async def test_watch_bad_selector_is_plain_400(api: Api) -> None:
    status, err = await api.call("GET", f"{PODS}?watch=true&labelSelector=a%20in%20(")
    assert (status, err["reason"]) == (400, "BadRequest")


async def test_shutdown_ends_open_watches(api: Api) -> None:
    resp = await api.client.get(f"{PODS}?watch=true", headers=TOKEN)
    assert resp.status == 200
    assert len(api.client.app[API].watches) == 1
    await api.client.app.shutdown()  # what the runner does first on SIGTERM
    with contextlib.suppress(Exception):
        rest = await asyncio.wait_for(resp.content.read(), GUARD)
        assert b"ERROR" not in rest
    assert resp.content.at_eof()
    assert len(api.client.app[API].watches) == 0
    resp.release()


def _pb_field(num: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field (all lengths here are < 128)."""
    return bytes([num << 3 | 2, len(payload)]) + payload


def _delete_options_pb(grace: int, policy: str) -> bytes:
    type_meta = _pb_field(1, b"v1") + _pb_field(2, b"DeleteOptions")
    raw = bytes([1 << 3, grace]) + _pb_field(4, policy.encode())
    return b"k8s\x00" + _pb_field(1, type_meta) + _pb_field(2, raw)


async def test_delete_with_protobuf_delete_options(api: Api) -> None:
    assert (await api.call("POST", PODS, pod("pbdel")))[0] == 201
    status, out = await api.call("DELETE", f"{PODS}/pbdel", data=_delete_options_pb(0, "Background"),
                                 headers={**TOKEN, "Content-Type": "application/vnd.kubernetes.protobuf"})
    assert status == 200 and out["metadata"]["name"] == "pbdel"
    status, _ = await api.call("GET", f"{PODS}/pbdel")
    assert status == 404  # grace 0 from the protobuf body: gone at once
    status, err = await api.call("DELETE", f"{PODS}/x", data=_delete_options_pb(0, "Sideways"),
                                 headers={**TOKEN, "Content-Type": "application/vnd.kubernetes.protobuf"})
    assert (status, err["reason"]) == (422, "Invalid")  # upstream ValidateDeleteOptions


async def test_delete_options_from_query(api: Api) -> None:
    assert (await api.call("POST", PODS, pod("qdel")))[0] == 201
    status, _ = await api.call("DELETE", f"{PODS}/qdel?gracePeriodSeconds=0&propagationPolicy=Foreground")
    assert status == 200
    assert (await api.call("GET", f"{PODS}/qdel"))[0] == 404
    status, err = await api.call("DELETE", f"{PODS}/qdel?gracePeriodSeconds=soon")
    assert (status, err["reason"]) == (400, "BadRequest")


async def test_field_validation(api: Api) -> None:
    typo = {**pod("fv"), "spc": {}}
    status, err = await api.call("POST", f"{PODS}?fieldValidation=Strict", typo)
    assert (status, err["reason"]) == (400, "BadRequest")
    assert err["message"] == ('Pod in version "v1" cannot be handled as a Pod: strict decoding error: '
                              'unknown field "spc"')
    bad_meta = {**pod("fv"), "metadata": {"name": "fv", "labelz": {}}}
    status, err = await api.call("POST", f"{PODS}?fieldValidation=Strict", bad_meta)
    assert status == 400 and 'unknown field "metadata.labelz"' in err["message"]
    r = await api.client.post(f"{PODS}?fieldValidation=Warn", data=orjson.dumps(typo), headers=JSON)
    assert r.status == 201 and r.headers["Warning"] == '299 - "unknown field \\"spc\\""'
    status, _ = await api.call("POST", f"{PODS}?fieldValidation=Ignore", {**pod("fv2"), "spc": {}})
    assert status == 201
    status, err = await api.call("POST", f"{PODS}?fieldValidation=Loose", pod("fv3"))
    assert (status, err["reason"]) == (422, "Invalid")  # upstream ValidateCreateOptions
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"a": "b"},
          "immutable": False}
    assert (await api.call("POST", "/api/v1/namespaces/default/configmaps?fieldValidation=Strict", cm))[0] == 201
    status, err = await api.call("PATCH", "/api/v1/namespaces/default/configmaps/c?fieldValidation=Strict",
                                 {"spec": {}}, headers={**TOKEN, "Content-Type": "application/merge-patch+json"})
    # upstream decodes the patched object strictly and answers 422 Invalid on field "patch"
    assert (status, err["reason"]) == (422, "Invalid")
    assert err["details"]["causes"][0]["field"] == "patch"
    assert 'strict decoding error: unknown field "spec"' in err["message"]


async def _running_pod(api: Api, name: str) -> None:
    assert (await api.call("POST", PODS, pod(name)))[0] == 201
    _, live = await api.call("GET", f"{PODS}/{name}")
    live["status"] = {"phase": "Running"}
    assert (await api.call("PUT", f"{PODS}/{name}/status", live))[0] == 200


EVICTION = {"kind": "Eviction", "apiVersion": "policy/v1", "metadata": {"name": "busy"}, "deleteOptions": {}}


async def test_too_many_requests_carries_retry_after(tmp_path: Path) -> None:
    async def pdb_blocks(pod: dict[str, Any], eviction: dict[str, Any]) -> None:
        raise too_many_requests("Cannot evict pod as it would violate the pod's disruption budget.", 7)

    async with serve_stack(tmp_path, eviction_check=pdb_blocks) as api:
        await _running_pod(api, "busy")
        r = await api.client.post(f"{PODS}/busy/eviction", data=orjson.dumps(EVICTION), headers=JSON)
        assert r.status == 429 and r.headers["Retry-After"] == "7"
        err = orjson.loads(await r.read())
        assert (err["reason"], err["code"], err["details"]["retryAfterSeconds"]) == ("TooManyRequests", 429, 7)


async def test_unexpected_exception_is_500_status(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    async def broken(pod: dict[str, Any], eviction: dict[str, Any]) -> None:
        raise RuntimeError("disruption check crashed")

    async with serve_stack(tmp_path, eviction_check=broken) as api:
        await _running_pod(api, "busy")
        status, err = await api.call("POST", f"{PODS}/busy/eviction", EVICTION)
        assert (status, err["kind"], err["reason"], err["code"]) == (500, "Status", "InternalError", 500)
        assert "crashed" not in err["message"]  # internals stay in the log
        assert sum("disruption check crashed" in r.exc_text for r in caplog.records if r.exc_text) == 1


async def test_yaml_create_body(api: Api) -> None:
    body = b"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: y1\ndata:\n  k: v\n"
    status, out = await api.call("POST", "/api/v1/namespaces/default/configmaps", data=body,
                                 headers={**TOKEN, "Content-Type": "application/yaml"})
    assert status == 201 and out["data"] == {"k": "v"}
    status, err = await api.call("POST", "/api/v1/namespaces/default/configmaps", data=b"a: [b",
                                 headers={**TOKEN, "Content-Type": "application/yaml"})
    assert (status, err["reason"]) == (400, "BadRequest")
