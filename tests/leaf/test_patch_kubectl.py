"""Strategic merge patches sent by the real kubectl (1.32), applied with `lite.patch.strategic_merge`.

A small in-test aiohttp server plays the API server for one Deployment: it serves discovery, GET, POST
(create) and PATCH, applying each strategic merge patch body with lite's implementation. kubectl computes
its patches from the object it reads, so the final object only comes out right if lite merged every
earlier patch exactly as the real API server would. Nothing here is timed.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp import web

from lite.errors import ApiError
from lite.patch import apply, merge_patch, schema_for, strategic_merge

KUBECTL = shutil.which("kubectl")
pytestmark = pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed")

DEPLOY_PATH = "/apis/apps/v1/namespaces/default/deployments/web"
RESOURCES = {
    "/api/v1": {"kind": "APIResourceList", "groupVersion": "v1", "resources": [
        {"name": "pods", "singularName": "pod", "namespaced": True, "kind": "Pod", "verbs": ["get", "list"]}]},
    "/apis/apps/v1": {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "apps/v1", "resources": [
        {"name": "deployments", "singularName": "deployment", "namespaced": True, "kind": "Deployment",
         "shortNames": ["deploy"], "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"]}]},
}


@dataclass
class FakeServer:
    obj: dict[str, Any] | None = None
    patches: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    rv: int = 1

    def stored(self, obj: dict[str, Any]) -> dict[str, Any]:
        self.rv += 1
        obj.setdefault("metadata", {}).update(resourceVersion=str(self.rv), uid="u-1", namespace="default")
        self.obj = obj
        return obj

    async def handle(self, request: web.Request) -> web.Response:
        path = request.path
        if path == "/version":
            return web.json_response({"major": "1", "minor": "32", "gitVersion": "v1.32.4"})
        if path == "/api":
            return web.json_response({"kind": "APIVersions", "versions": ["v1"]})
        if path == "/apis":
            return web.json_response({"kind": "APIGroupList", "apiVersion": "v1", "groups": [
                {"name": "apps", "versions": [{"groupVersion": "apps/v1", "version": "v1"}],
                 "preferredVersion": {"groupVersion": "apps/v1", "version": "v1"}}]})
        if path in RESOURCES:
            return web.json_response(RESOURCES[path])
        if path.rstrip("/").endswith("/deployments") and request.method == "POST":
            return web.json_response(self.stored(await request.json()), status=201)
        if path == DEPLOY_PATH and request.method == "GET":
            if self.obj is None:
                return web.json_response({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                                          "reason": "NotFound", "code": 404,
                                          "details": {"name": "web", "group": "apps", "kind": "deployments"},
                                          "message": 'deployments.apps "web" not found'}, status=404)
            return web.json_response(self.obj)
        if path == DEPLOY_PATH and request.method == "PATCH" and \
                request.content_type == "application/apply-patch+yaml":
            return await self.server_side_apply(request)
        if path == DEPLOY_PATH and request.method == "PATCH" and self.obj is not None:
            ctype = request.content_type
            body = await request.json()
            self.patches.append((ctype, body))
            if ctype == "application/merge-patch+json":
                return web.json_response(self.stored(merge_patch(self.obj, body)))
            assert ctype == "application/strategic-merge-patch+json", ctype
            return web.json_response(self.stored(strategic_merge(self.obj, body, schema_for("Deployment"))))
        return web.json_response({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 404,
                                  "reason": "NotFound", "message": "the server could not find the requested "
                                  "resource"}, status=404)


    async def server_side_apply(self, request: web.Request) -> web.Response:
        body = yaml.safe_load(await request.text())
        self.patches.append((request.content_type, body))
        created = self.obj is None
        try:
            out = apply(self.obj, body, manager=request.query.get("fieldManager", ""),
                        force=request.query.get("force") == "true", api_version="apps/v1",
                        now="2026-01-01T00:00:00Z", schema=schema_for("Deployment"))
        except ApiError as e:
            return web.json_response(e.status(), status=e.code)
        return web.json_response(self.stored(out), status=201 if created else 200)


@pytest.fixture
async def kubectl(tmp_path: Path) -> AsyncIterator[tuple[FakeServer, Any]]:
    server = FakeServer()
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", server.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": f"http://127.0.0.1:{port}"}}],
        "users": [{"name": "u", "user": {"token": "x"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u", "namespace": "default"}}]}))

    async def run(*args: str, stdin: str = "", ok: bool = True) -> str:
        assert KUBECTL is not None
        proc = await asyncio.create_subprocess_exec(
            KUBECTL, "--kubeconfig", str(kubeconfig), "--cache-dir", str(tmp_path / "cache"), *args,
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            env={**os.environ, "HOME": str(tmp_path)})
        out, err = await proc.communicate(stdin.encode())
        assert (proc.returncode == 0) is ok, err.decode()
        return out.decode() if ok else err.decode()

    try:
        yield server, run
    finally:
        await runner.cleanup()


def manifest(image: str, env: list[dict[str, str]], labels: dict[str, str], containers: list[dict[str, Any]],
             strategy: dict[str, Any]) -> str:
    return json.dumps({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "default", "labels": labels},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}}, "strategy": strategy,
                 "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [
                     {"name": "nginx", "image": image, "env": env, "ports": [{"containerPort": 80}]},
                     *containers]}}}})


async def test_kubectl_apply_set_image_label_restart(kubectl: tuple[FakeServer, Any]) -> None:
    server, run = kubectl
    rolling = {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1}}
    first = manifest("nginx:1.25", [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
                     {"app": "web", "tier": "front"}, [{"name": "side", "image": "busybox"}], rolling)
    await run("apply", "--validate=false", "-f", "-", stdin=first)
    assert server.obj is not None and not server.patches
    # something else (a controller) adds a field kubectl never applied: it must survive every patch
    server.obj["spec"]["template"]["spec"]["containers"][0]["terminationMessagePath"] = "/dev/termination-log"

    second = manifest("nginx:1.26", [{"name": "A", "value": "1"}], {"app": "web"},
                      [{"name": "side", "image": "busybox"}, {"name": "log", "image": "fluentd"}],
                      {"type": "Recreate"})
    await run("apply", "--validate=false", "-f", "-", stdin=second)
    _, body = server.patches[-1]
    spec = body["spec"]["template"]["spec"]
    assert spec["$setElementOrder/containers"] == [{"name": "nginx"}, {"name": "side"}, {"name": "log"}]
    assert body["spec"]["strategy"]["$retainKeys"] == ["type"]
    obj = server.obj
    assert obj["metadata"]["labels"] == {"app": "web"}
    assert obj["spec"]["strategy"] == {"type": "Recreate"}
    c = obj["spec"]["template"]["spec"]["containers"]
    assert [x["name"] for x in c] == ["nginx", "side", "log"]
    assert c[0] == {"name": "nginx", "image": "nginx:1.26", "env": [{"name": "A", "value": "1"}],
                    "ports": [{"containerPort": 80}], "terminationMessagePath": "/dev/termination-log"}
    assert "$" not in json.dumps(obj).replace("$(", "")

    await run("set", "image", "deployment/web", "side=busybox:1.36")
    c = server.obj["spec"]["template"]["spec"]["containers"]
    assert [(x["name"], x["image"]) for x in c] == [("nginx", "nginx:1.26"), ("side", "busybox:1.36"),
                                                    ("log", "fluentd")]

    await run("label", "deployment", "web", "team=blue")
    await run("label", "deployment", "web", "app-")
    assert server.obj["metadata"]["labels"] == {"team": "blue"}

    await run("rollout", "restart", "deployment/web")
    annotations = server.obj["spec"]["template"]["metadata"]["annotations"]
    assert "kubectl.kubernetes.io/restartedAt" in annotations
    assert server.obj["spec"]["template"]["metadata"]["labels"] == {"app": "web"}

    # a third apply goes back to the first manifest: env B, the label and the rolling update return
    await run("apply", "--validate=false", "-f", "-", stdin=first)
    obj = server.obj
    assert obj["spec"]["strategy"] == rolling
    c = obj["spec"]["template"]["spec"]["containers"]
    assert [x["name"] for x in c] == ["nginx", "side"]
    assert c[0]["env"] == [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]
    assert c[0]["image"] == "nginx:1.25" and c[1]["image"] == "busybox"
    assert obj["metadata"]["labels"]["tier"] == "front"
    # apply, set image and rollout restart send strategic merge patches; label sends a JSON merge patch
    assert [t.split("/")[1] for t, _ in server.patches] == [
        "strategic-merge-patch+json", "strategic-merge-patch+json", "merge-patch+json", "merge-patch+json",
        "strategic-merge-patch+json", "strategic-merge-patch+json"]
    assert server.patches[1][1] == {"spec": {"template": {"spec": {
        "$setElementOrder/containers": [{"name": "nginx"}, {"name": "side"}, {"name": "log"}],
        "containers": [{"image": "busybox:1.36", "name": "side"}]}}}}
    assert server.patches[-1][1]["spec"]["template"]["spec"]["containers"][-1] == {"$patch": "delete",
                                                                                  "name": "log"}


async def test_kubectl_server_side_apply(kubectl: tuple[FakeServer, Any]) -> None:
    server, run = kubectl
    rolling = {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1}}
    first = manifest("nginx:1.25", [{"name": "A", "value": "1"}], {"app": "web"}, [], rolling)
    await run("apply", "--server-side", "--validate=false", "-f", "-", stdin=first)
    assert server.patches[0][0] == "application/apply-patch+yaml"
    obj = server.obj
    assert obj is not None
    (entry,) = obj["metadata"]["managedFields"]
    assert (entry["manager"], entry["operation"]) == ("kubectl", "Apply")
    assert entry["fieldsV1"]["f:spec"]["f:replicas"] == {}

    # another manager changing replicas is refused, and kubectl shows upstream's conflict text
    other = json.loads(first)
    other["spec"]["replicas"] = 5
    err = await run("apply", "--server-side", "--field-manager=ops", "--validate=false", "-f", "-",
                    stdin=json.dumps(other), ok=False)
    assert 'conflict with "kubectl"' in err and ".spec.replicas" in err
    assert server.obj is not None and server.obj["spec"]["replicas"] == 2

    await run("apply", "--server-side", "--force-conflicts", "--field-manager=ops", "--validate=false",
              "-f", "-", stdin=json.dumps(other))
    obj = server.obj
    assert obj["spec"]["replicas"] == 5
    managers = {e["manager"]: e["fieldsV1"] for e in obj["metadata"]["managedFields"]}
    assert "f:replicas" in managers["ops"]["f:spec"] and "f:replicas" not in managers["kubectl"]["f:spec"]

    # the first manager drops replicas (no longer its field) and env A: env A stays because ops applied it
    # too, while a field only kubectl owned (the label) goes
    dropped = json.loads(manifest("nginx:1.25", [], {}, [], rolling))
    del dropped["spec"]["replicas"]
    await run("apply", "--server-side", "--validate=false", "-f", "-", stdin=json.dumps(dropped))
    obj = server.obj
    assert obj["spec"]["replicas"] == 5
    assert obj["spec"]["template"]["spec"]["containers"][0]["env"] == [{"name": "A", "value": "1"}]
    assert obj["metadata"]["labels"] == {"app": "web"}  # ops applied the same label: shared, so kept

    # without a shared owner a dropped field is removed
    await run("apply", "--server-side", "--validate=false", "--field-manager=ops", "-f", "-",
              stdin=json.dumps(dropped))
    await run("apply", "--server-side", "--validate=false", "-f", "-", stdin=json.dumps(dropped))
    obj = server.obj
    assert not obj["spec"]["template"]["spec"]["containers"][0].get("env")
    assert "replicas" not in obj["spec"]
