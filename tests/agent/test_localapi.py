"""The node-local API's pure parts (routing and refusals, selectors, the node's objects) and its HTTP front
(token, TLS the kubeconfig trusts, Tables and lists) served by a real `LocalApi` on 127.0.0.1.

The end-to-end run with the real kubectl and a real agent is tests/e2e/test_local_api.py.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import socket
import ssl
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from liteproc import find_free_port

from lite.agent.backend import AgentStreams
from lite.agent.localapi import view
from lite.agent.localapi.server import LocalApi, check_port
from lite.agent.streams.backend import StreamBackend
from lite.errors import ApiError

Obj = dict[str, Any]
STARTED = "2026-12-01T00:00:01Z"


def pod(name: str, ns: str = "default", *, node: str = "n1", phase: str = "Running", app: str = "web") -> Obj:
    return view.pod_object({"metadata": {"name": name, "namespace": ns, "uid": f"u-{name}", "labels": {"app": app},
                                         "creationTimestamp": "2026-12-01T00:00:00Z"},
                            "spec": {"nodeName": node, "containers": [{"name": "c", "image": "busybox"}]}},
                           {"phase": phase, "containerStatuses": [{"name": "c", "ready": True, "restartCount": 0,
                                                                   "state": {"running": {"startedAt": STARTED}}}]})


@pytest.mark.parametrize(("method", "path", "query", "expected"), [
    ("GET", "/api/v1/pods", {}, ("pods", "", "", "")),
    ("GET", "/api/v1/namespaces/default/pods", {}, ("pods", "default", "", "")),
    ("GET", "/api/v1/namespaces/default/pods/web", {}, ("pods", "default", "web", "")),
    ("HEAD", "/api/v1/nodes/n1", {}, ("nodes", "", "n1", "")),
    ("GET", "/api/v1/namespaces/default/pods/web/log", {"follow": "true"}, ("pods", "default", "web", "log")),
    ("POST", "/api/v1/namespaces/default/pods/web/exec", {}, ("pods", "default", "web", "exec")),
    ("GET", "/api/v1/namespaces/default/pods/web/portforward", {}, ("pods", "default", "web", "portforward")),
    ("GET", "/api/v1/namespaces/kube-system/configmaps", {"watch": "false"}, ("configmaps", "kube-system", "", "")),
    ("GET", "/api/v1/namespaces/default/events", {"fieldSelector": "involvedObject.name=web"},
     ("events", "default", "", "")),
    ("GET", "/apis/discovery.k8s.io/v1/endpointslices", {}, ("endpointslices", "", "", "")),
    ("GET", "/apis/discovery.k8s.io/v1/namespaces/default/endpointslices/web-x", {},
     ("endpointslices", "default", "web-x", "")),
])
def test_routes(method: str, path: str, query: Obj, expected: tuple[str, str, str, str]) -> None:
    r = view.route(method, path, query)
    assert (r.kind.plural, r.namespace, r.name, r.subresource) == expected


@pytest.mark.parametrize(("method", "path", "query", "code", "reason", "words"), [
    ("POST", "/api/v1/namespaces/default/pods", {}, 405, "MethodNotAllowed", "read-only"),
    ("DELETE", "/api/v1/namespaces/default/pods/web", {}, 405, "MethodNotAllowed", "read-only"),
    ("PATCH", "/api/v1/nodes/n1", {}, 405, "MethodNotAllowed", "read-only"),
    ("PUT", "/api/v1/namespaces/default/configmaps/c", {}, 405, "MethodNotAllowed", "read-only"),
    ("POST", "/api/v1/namespaces/default/pods/web/log", {}, 405, "MethodNotAllowed", "read-only"),
    ("PATCH", "/api/v1/namespaces/default/pods/web/status", {}, 405, "MethodNotAllowed", "read-only"),
    ("POST", "/api/v1/namespaces/default/pods/web/eviction", {}, 405, "MethodNotAllowed", "read-only"),
    ("GET", "/api/v1/namespaces/default/secrets", {}, 403, "Forbidden", "secrets are not served"),
    ("GET", "/api/v1/namespaces/default/secrets/s", {}, 403, "Forbidden", "secrets are not served"),
    ("GET", "/api/v1/secrets", {}, 403, "Forbidden", "secrets are not served"),
    ("GET", "/api/v1/pods", {"watch": "true"}, 405, "MethodNotAllowed", "watch is not supported"),
    ("GET", "/api/v1/pods", {"watch": "1"}, 405, "MethodNotAllowed", "watch is not supported"),
    ("GET", "/api/v1/persistentvolumeclaims", {}, 404, "NotFound", "does not serve persistentvolumeclaims"),
    ("GET", "/api/v1/namespaces", {}, 404, "NotFound", "namespaces are not served"),
    ("GET", "/api/v1/namespaces/default/nodes/n1", {}, 404, "NotFound", ""),
    ("GET", "/api/v1/namespaces/default/pods/web/status", {}, 404, "NotFound", "pods/status"),
    ("GET", "/apis/apps/v1/deployments", {}, 404, "NotFound", "does not serve deployments.apps/v1"),
    ("GET", "/apis/discovery.k8s.io/v1beta1/endpointslices", {}, 404, "NotFound", ""),
    ("DELETE", "/apis/discovery.k8s.io/v1/namespaces/default/endpointslices/web-x", {}, 405, "MethodNotAllowed",
     "read-only"),
    ("GET", "/apis/discovery.k8s.io/v1/namespaces/default/endpointslices/web-x/log", {}, 404, "NotFound", ""),
    ("GET", "/api/v1/namespaces/default/pods/web/exec/x", {}, 404, "NotFound", ""),
])
def test_refusals(method: str, path: str, query: Obj, code: int, reason: str, words: str) -> None:
    with pytest.raises(ApiError) as e:
        view.route(method, path, query)
    assert (e.value.code, e.value.reason) == (code, reason)
    assert words in e.value.message


def test_selectors_as_kubectl_sends_them() -> None:
    pods = view.route("GET", "/api/v1/pods", {}).kind
    items = [pod("a"), pod("b", app="db"), pod("c", node="n2"), pod("d", phase="Succeeded")]

    def names(query: Obj) -> list[str]:
        return [o["metadata"]["name"] for o in view.select(pods, items, query)]

    assert names({}) == ["a", "b", "c", "d"]
    assert names({"labelSelector": "app=web"}) == ["a", "c", "d"]
    assert names({"labelSelector": "app notin (web)"}) == ["b"]
    # `kubectl describe node n1` lists the node's pods so:
    assert names({"fieldSelector": "spec.nodeName=n1,status.phase!=Failed,status.phase!=Succeeded"}) == ["a", "b"]
    assert names({"fieldSelector": "metadata.name=b"}) == ["b"]
    with pytest.raises(ApiError) as e:
        names({"fieldSelector": "spec.hostname=x"})
    assert e.value.code == 400 and "field label not supported: spec.hostname" in e.value.message
    with pytest.raises(ApiError) as e:
        names({"labelSelector": "app in web"})
    assert e.value.code == 400


def test_pick_and_lists() -> None:
    pods = view.route("GET", "/api/v1/pods", {}).kind
    items = [pod("a"), pod("a", ns="other")]
    assert view.pick(pods, items, "other", "a")["metadata"]["namespace"] == "other"
    with pytest.raises(ApiError) as e:
        view.pick(pods, items, "default", "zz")
    assert (e.value.code, e.value.message) == (404, 'pods "zz" not found')
    listed = view.as_list(pods, view.in_namespace(items, ""))
    assert listed["kind"] == "PodList" and [o["metadata"]["namespace"] for o in listed["items"]] == ["default", "other"]
    assert all(o["kind"] == "Pod" and o["apiVersion"] == "v1" for o in listed["items"])


def test_node_object_from_what_the_agent_knows() -> None:
    taints = [{"key": "edge", "effect": "NoSchedule"}]
    node = view.node_object("n1", {"site": "plant-3", "kubernetes.io/os": "linux"}, taints, "10.42.3.0/24",
                            {"conditions": [{"type": "Ready", "status": "True"}]})
    assert node["metadata"]["labels"]["kubernetes.io/hostname"] == "n1"
    assert node["metadata"]["labels"]["site"] == "plant-3"
    assert node["spec"] == {"podCIDR": "10.42.3.0/24", "podCIDRs": ["10.42.3.0/24"], "taints": taints}
    assert node["spec"]["taints"][0] is not taints[0]
    assert "podCIDR" not in view.node_object("n1", {}, [], "", {})["spec"]


def test_discovery_lists_what_is_served_read_only() -> None:
    assert [g["name"] for g in view.api_groups()["groups"]] == ["discovery.k8s.io"]
    slices = view.group_resources("discovery.k8s.io", "v1")
    assert slices is not None and [r["name"] for r in slices["resources"]] == ["endpointslices"]
    assert view.group_resources("apps", "v1") is None
    resources = {r["name"]: r for r in view.core_resources()["resources"]}
    assert set(resources) == {"pods", "nodes", "configmaps", "services", "events", "secrets", "pods/log", "pods/exec",
                              "pods/attach", "pods/portforward"}
    assert resources["pods"]["verbs"] == ["get", "list"] and resources["nodes"]["namespaced"] is False
    assert "po" in resources["pods"]["shortNames"] and "all" in resources["pods"]["categories"]


def test_port_must_be_a_port() -> None:
    assert check_port(6448) == 6448
    for bad in (0, -1, 65536):
        with pytest.raises(ValueError, match="1-65535"):
            check_port(bad)


class Source:
    """The node's data as the agent hands it over (plain values, no behaviour to fake)."""

    node_name = "n1"

    def __init__(self) -> None:
        self.pods = [pod("web"), pod("db", ns="data", app="db")]

    def local_pods(self) -> list[Obj]:
        return self.pods

    def local_node(self) -> Obj:
        return view.node_object("n1", {}, [], "", {"conditions": [{"type": "Ready", "status": "True"}]})

    def local_objects(self, kind: str) -> list[Obj]:
        if kind == "EndpointSlice":
            return [{"metadata": {"name": "web-x", "namespace": "default"}, "addressType": "IPv4",
                     "endpoints": [{"addresses": ["10.42.0.5"]}], "ports": [{"port": 80}]}]
        if kind == "Service":
            return [{"metadata": {"name": "web", "namespace": "default"},
                     "spec": {"type": "ClusterIP", "clusterIP": "10.43.0.9", "ports": [{"port": 80}]}}]
        assert kind == "ConfigMap"
        return [{"metadata": {"name": "cfg", "namespace": "default"}, "data": {"k": "v"}}]

    @property
    def stream_backend(self) -> StreamBackend:
        return AgentStreams(dict)  # the agent's own backend, over no runners


@pytest.fixture
async def api(tmp_path: Path) -> AsyncIterator[LocalApi]:
    local = LocalApi(Source(), find_free_port(), tmp_path)
    task = asyncio.create_task(local.run())
    kubeconfig = tmp_path / "local-api" / "kubeconfig"
    for _ in range(200):
        if kubeconfig.exists():
            break
        await asyncio.sleep(0.05)
    try:
        yield local
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def _get(api: LocalApi, tmp_path: Path, path: str, token: str | None = None, accept: str = "") -> tuple[int, Obj]:
    cfg = yaml.safe_load((tmp_path / "local-api" / "kubeconfig").read_text())
    ctx = ssl.create_default_context(cadata=base64.b64decode(cfg["clusters"][0]["cluster"]
                                                             ["certificate-authority-data"]).decode())
    req = urllib.request.Request(cfg["clusters"][0]["cluster"]["server"] + path)
    given = cfg["users"][0]["user"]["token"] if token is None else token
    if given:
        req.add_header("Authorization", f"Bearer {given}")
    if accept:
        req.add_header("Accept", accept)
    try:
        with urllib.request.urlopen(req, context=ctx, timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


async def test_token_tls_and_answers(api: LocalApi, tmp_path: Path) -> None:
    def get(path: str, token: str | None = None, accept: str = "") -> tuple[int, Obj]:
        return _get(api, tmp_path, path, token, accept)

    for mode, path in ((0o700, tmp_path / "local-api"), (0o600, tmp_path / "local-api" / "kubeconfig"),
                       (0o600, tmp_path / "local-api" / "serving.key")):
        assert path.stat().st_mode & 0o777 == mode, path
    cfg = yaml.safe_load((tmp_path / "local-api" / "kubeconfig").read_text())
    assert cfg["clusters"][0]["cluster"]["server"] == f"https://127.0.0.1:{api.port}"
    # the certificate verifies for 127.0.0.1 with the kubeconfig's CA (a wrong name would fail the handshake)
    for token in ("", "wrong", api.token + "x"):
        code, body = await asyncio.to_thread(get, "/api/v1/pods", token)
        assert (code, body["reason"]) == (401, "Unauthorized")
    code, body = await asyncio.to_thread(get, "/version")
    assert code == 200 and body["gitVersion"].startswith("v1.32")
    code, body = await asyncio.to_thread(get, "/api/v1/pods")
    assert code == 200 and [o["metadata"]["name"] for o in body["items"]] == ["db", "web"]
    code, body = await asyncio.to_thread(get, "/api/v1/namespaces/data/pods?labelSelector=app%3Ddb")
    assert code == 200 and [o["metadata"]["name"] for o in body["items"]] == ["db"]
    table = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"
    code, body = await asyncio.to_thread(get, "/api/v1/namespaces/default/pods/web", None, table)
    assert code == 200 and body["kind"] == "Table"
    assert [c["name"] for c in body["columnDefinitions"]][:5] == ["Name", "Ready", "Status", "Restarts", "Age"]
    assert body["rows"][0]["cells"][:3] == ["web", "1/1", "Running"]
    code, body = await asyncio.to_thread(get, "/api/v1/nodes", None, table)
    assert code == 200 and body["rows"][0]["cells"][:2] == ["n1", "Ready"]
    code, body = await asyncio.to_thread(get, "/api/v1/namespaces/default/configmaps/cfg")
    assert code == 200 and body["data"] == {"k": "v"}
    code, body = await asyncio.to_thread(get, "/api/v1/services", None, table)
    assert code == 200 and body["rows"][0]["cells"][:4] == ["web", "ClusterIP", "10.43.0.9", "<none>"]
    code, body = await asyncio.to_thread(get, "/apis/discovery.k8s.io/v1", None)
    assert code == 200 and body["groupVersion"] == "discovery.k8s.io/v1"
    code, body = await asyncio.to_thread(get, "/apis/discovery.k8s.io/v1/endpointslices", None, table)
    assert code == 200 and body["rows"][0]["cells"][:4] == ["web-x", "IPv4", "80", "10.42.0.5"]
    code, body = await asyncio.to_thread(get, "/apis/discovery.k8s.io/v1/namespaces/default/endpointslices/web-x")
    assert code == 200 and (body["kind"], body["apiVersion"]) == ("EndpointSlice", "discovery.k8s.io/v1")
    code, body = await asyncio.to_thread(get, "/apis/apps/v1", None)
    assert code == 404
    code, body = await asyncio.to_thread(get, "/api/v1/namespaces/default/secrets/s")
    assert (code, body["reason"]) == (403, "Forbidden")
    code, body = await asyncio.to_thread(get, "/api/v1/namespaces/default/pods/nope")
    assert (code, body["reason"]) == (404, "NotFound")
    # streams: upstream's checks, then the agent's StreamServer through the in-process tunnel (which has no
    # runner for the pod here, so the backend's refusal comes back as the answer's Status)
    code, body = await asyncio.to_thread(get, "/api/v1/namespaces/default/pods/web/log?tailLines=1")
    assert (code, body["message"]) == (404, 'pods "web" not found')
    code, body = await asyncio.to_thread(get, "/api/v1/namespaces/default/pods/web/log?tailLines=-1")
    assert (code, body["reason"]) == (400, "BadRequest")
    code, body = await asyncio.to_thread(get, "/api/v1/namespaces/default/pods/web/exec?stdout=1")
    assert (code, body["message"]) == (400, "you must specify at least 1 command")


async def test_binds_loopback_only(api: LocalApi) -> None:
    """Nothing answers on the host's other addresses: the listener is 127.0.0.1 alone."""
    with pytest.raises(OSError):
        await asyncio.wait_for(asyncio.open_connection("127.0.0.2", api.port), 5)


@pytest.mark.parametrize("command", ["agent", "server"])
def test_flags_on_agent_and_server(command: str) -> None:
    from lite.cli.main import build_parser, local_api_port

    parse = build_parser().parse_args
    assert local_api_port(parse([command])) == 0  # off unless asked for
    assert local_api_port(parse([command, "--local-api-port", "7000"])) == 0
    assert local_api_port(parse([command, "--local-api"])) == 6448
    assert local_api_port(parse([command, "--local-api", "--local-api-port", "7000"])) == 7000
    with pytest.raises(SystemExit, match="1-65535"):
        local_api_port(parse([command, "--local-api", "--local-api-port", "70000"]))


async def test_a_taken_port_is_retried_not_fatal(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The agent never dies for its local API: a port in use is logged once and taken when it frees."""
    caplog.set_level(logging.INFO, "lite.agent.localapi")
    holder = socket.create_server(("127.0.0.1", 0))
    port = holder.getsockname()[1]
    local = LocalApi(Source(), port, tmp_path, retry=0.05)
    task = asyncio.create_task(local.run())
    try:
        for _ in range(200):
            if "cannot listen" in caplog.text:
                break
            await asyncio.sleep(0.05)
        assert not task.done() and caplog.text.count("cannot listen on 127.0.0.1") == 1
        holder.close()
        for _ in range(200):
            if "read-only API on" in caplog.text:
                break
            await asyncio.sleep(0.05)
        assert "read-only API on" in caplog.text
        code, body = await asyncio.to_thread(_get, local, tmp_path, "/api/v1/nodes")
        assert code == 200 and body["items"][0]["metadata"]["name"] == "n1"
    finally:
        holder.close()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def test_the_agent_never_maps_cryptography_for_its_certificate(tmp_path: Path) -> None:
    """The certificate is made in a forked child: `cryptography` (+7.7 MB RSS, never unloaded) stays out of the
    agent, and the pair it made serves TLS that the kubeconfig's CA verifies."""
    code = ("import sys; from pathlib import Path; import lite.agent.localapi.server as s\n"
            f"ctx, path = s.prepare(Path({str(tmp_path)!r}), 6448, 'tok', 'n1')\n"
            "assert 'cryptography' not in sys.modules, 'cryptography was imported'\n")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
    cfg = yaml.safe_load((tmp_path / "kubeconfig").read_text())
    ca = base64.b64decode(cfg["clusters"][0]["cluster"]["certificate-authority-data"])
    assert ca == (tmp_path / "serving.crt").read_bytes() and cfg["users"][0]["user"]["token"] == "tok"
    ssl.create_default_context(cadata=ca.decode())  # a parseable certificate


def test_the_catalog_keeps_what_the_proxy_feed_relays() -> None:
    """The agent's ServiceCatalog (a proxy feed sink) holds Services and EndpointSlices for the local API."""
    from lite.agent.serviceenv import ServiceCatalog

    def obj(name: str) -> Obj:
        return {"metadata": {"name": name, "namespace": "default"}}

    catalog = ServiceCatalog()
    catalog.set_service(obj("web"))
    catalog.set_slice(obj("web-a"))
    catalog.set_slice(obj("web-b"))
    catalog.delete_slice("default", "web-a")
    assert list(catalog.services) == [("default", "web")] and list(catalog.slices) == [("default", "web-b")]
    catalog.replace([obj("db")], [obj("db-a")])  # a resync from the server: only what it sent is left
    assert list(catalog.services) == [("default", "db")] and list(catalog.slices) == [("default", "db-a")]
