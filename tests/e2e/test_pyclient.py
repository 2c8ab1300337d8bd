"""The official Python client (kubernetes 37, pydantic models) against a real lite server."""

from __future__ import annotations

import json
import urllib.request
from typing import Any

import pytest
from e2ekit import Cluster
from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException


def core(cluster: Cluster) -> client.CoreV1Api:
    return client.CoreV1Api(cluster.api)


def cm(name: str, data: dict[str, str] | None = None, labels: dict[str, str] | None = None) -> client.V1ConfigMap:
    return client.V1ConfigMap(metadata=client.V1ObjectMeta(name=name, labels=labels), data=data or {})


def status_of(err: ApiException) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(err.body)
    return body


def test_crud(cluster: Cluster, ns: str) -> None:
    v1 = core(cluster)
    made = v1.create_namespaced_config_map(ns, cm("crud", {"a": "1"}))
    assert made.metadata.uid and made.metadata.resource_version and made.metadata.creation_timestamp
    got = v1.read_namespaced_config_map("crud", ns)
    assert got.data == {"a": "1"} and got.metadata.uid == made.metadata.uid

    got.data["b"] = "2"
    updated = v1.replace_namespaced_config_map("crud", ns, got)
    assert updated.data == {"a": "1", "b": "2"}
    assert int(updated.metadata.resource_version) > int(made.metadata.resource_version)

    patched = v1.patch_namespaced_config_map("crud", ns, {"metadata": {"labels": {"x": "y"}}})
    assert patched.metadata.labels == {"x": "y"} and patched.data == {"a": "1", "b": "2"}

    v1.delete_namespaced_config_map("crud", ns)
    with pytest.raises(ApiException) as e:
        v1.read_namespaced_config_map("crud", ns)
    assert e.value.status == 404


def test_generate_name(cluster: Cluster, ns: str) -> None:
    made = core(cluster).create_namespaced_config_map(
        ns, client.V1ConfigMap(metadata=client.V1ObjectMeta(generate_name="gen-")))
    assert made.metadata.name.startswith("gen-") and len(made.metadata.name) > len("gen-")


def test_pagination(cluster: Cluster, ns: str) -> None:
    v1 = core(cluster)
    names = {f"page-{i:02d}" for i in range(7)}
    for n in names:
        v1.create_namespaced_config_map(ns, cm(n, labels={"set": "page"}))
    first = v1.list_namespaced_config_map(ns, label_selector="set=page", limit=3)
    assert len(first.items) == 3 and first.metadata.var_continue
    seen = [i.metadata.name for i in first.items]
    token = first.metadata.var_continue
    pages = 1
    while token:
        page = v1.list_namespaced_config_map(ns, label_selector="set=page", limit=3, _continue=token)
        assert len(page.items) <= 3
        seen += [i.metadata.name for i in page.items]
        token = page.metadata.var_continue
        pages += 1
    assert pages == 3 and sorted(seen) == sorted(names) and len(seen) == len(set(seen))


def test_pagination_is_a_snapshot(cluster: Cluster, ns: str) -> None:
    """Later pages read at the first page's revision: objects created, changed or deleted after the first page
    do not show, and the list keeps that revision."""
    v1 = core(cluster)
    sel = {"label_selector": "set=snap"}  # not the namespace's kube-root-ca.crt
    for i in range(6):
        v1.create_namespaced_config_map(ns, cm(f"snap-{i}", {"v": "1"}, {"set": "snap"}))
    first = v1.list_namespaced_config_map(ns, limit=2, **sel)
    assert [i.metadata.name for i in first.items] == ["snap-0", "snap-1"]
    v1.create_namespaced_config_map(ns, cm("snap-2a", labels={"set": "snap"}))
    v1.delete_namespaced_config_map("snap-3", ns)
    v1.patch_namespaced_config_map("snap-4", ns, {"data": {"v": "2"}})
    rest = v1.list_namespaced_config_map(ns, limit=3, _continue=first.metadata.var_continue, **sel)
    assert [(i.metadata.name, i.data) for i in rest.items] == [
        ("snap-2", {"v": "1"}), ("snap-3", {"v": "1"}), ("snap-4", {"v": "1"})]
    assert rest.metadata.resource_version == first.metadata.resource_version
    last = v1.list_namespaced_config_map(ns, limit=3, _continue=rest.metadata.var_continue, **sel)
    assert [i.metadata.name for i in last.items] == ["snap-5"] and not last.metadata.var_continue
    now = ["snap-0", "snap-1", "snap-2", "snap-2a", "snap-4", "snap-5"]
    assert [i.metadata.name for i in v1.list_namespaced_config_map(ns, **sel).items] == now
    # kubectl pages with its own continue loop (client-go's pager)
    out = cluster.kubectl("get", "configmaps", "-n", ns, "-l", "set=snap", "--chunk-size=4", "-o", "name").stdout
    assert out.split() == [f"configmap/{n}" for n in now]


def _events(cluster: Cluster, ns: str, rv: str, count: int) -> list[tuple[str, str, str]]:
    """(type, name, resourceVersion) of the first `count` events of a watch from `rv`."""
    w = watch.Watch()
    out = []
    for ev in w.stream(core(cluster).list_namespaced_config_map, ns, resource_version=rv, timeout_seconds=20):
        obj = ev["object"]
        out.append((ev["type"], obj.metadata.name, obj.metadata.resource_version))
        if len(out) == count:
            w.stop()
    return out


def test_watch_from_resource_version_and_resume(cluster: Cluster, ns: str) -> None:
    v1 = core(cluster)
    v1.create_namespaced_config_map(ns, cm("before"))
    rv = v1.list_namespaced_config_map(ns).metadata.resource_version
    v1.create_namespaced_config_map(ns, cm("w-a"))
    v1.create_namespaced_config_map(ns, cm("w-b"))
    first = _events(cluster, ns, rv, 2)
    assert [(t, n) for t, n, _ in first] == [("ADDED", "w-a"), ("ADDED", "w-b")]  # "before" is not replayed

    v1.patch_namespaced_config_map("w-a", ns, {"data": {"k": "v"}})
    v1.delete_namespaced_config_map("w-b", ns)
    resumed = _events(cluster, ns, first[-1][2], 2)
    assert [(t, n) for t, n, _ in resumed] == [("MODIFIED", "w-a"), ("DELETED", "w-b")]
    assert int(resumed[0][2]) > int(first[-1][2])


def test_conflict_on_stale_update(cluster: Cluster, ns: str) -> None:
    v1 = core(cluster)
    v1.create_namespaced_config_map(ns, cm("stale", {"v": "1"}))
    old = v1.read_namespaced_config_map("stale", ns)
    fresh = v1.read_namespaced_config_map("stale", ns)
    fresh.data["v"] = "2"
    v1.replace_namespaced_config_map("stale", ns, fresh)
    old.data["v"] = "3"
    with pytest.raises(ApiException) as e:
        v1.replace_namespaced_config_map("stale", ns, old)
    assert e.value.status == 409 and status_of(e.value)["reason"] == "Conflict"
    assert v1.read_namespaced_config_map("stale", ns).data == {"v": "2"}


def test_invalid_name_is_422(cluster: Cluster, ns: str) -> None:
    with pytest.raises(ApiException) as e:
        core(cluster).create_namespaced_config_map(ns, cm("Not_A_Valid_Name"))
    status = status_of(e.value)
    assert e.value.status == 422 and status["reason"] == "Invalid" and status["code"] == 422
    assert any(c.get("field") == "metadata.name" for c in status["details"]["causes"])


def test_not_found(cluster: Cluster, ns: str) -> None:
    with pytest.raises(ApiException) as e:
        core(cluster).read_namespaced_config_map("no-such-thing", ns)
    status = status_of(e.value)
    assert e.value.status == 404 and status["reason"] == "NotFound"
    assert status["details"]["name"] == "no-such-thing" and status["details"]["kind"] == "configmaps"


def test_already_exists(cluster: Cluster, ns: str) -> None:
    v1 = core(cluster)
    v1.create_namespaced_config_map(ns, cm("twice"))
    with pytest.raises(ApiException) as e:
        v1.create_namespaced_config_map(ns, cm("twice"))
    assert e.value.status == 409 and status_of(e.value)["reason"] == "AlreadyExists"


def test_deployment_roundtrip(cluster: Cluster, ns: str) -> None:
    apps = client.AppsV1Api(cluster.api)
    spec = client.V1DeploymentSpec(
        replicas=2, selector=client.V1LabelSelector(match_labels={"app": "py"}),
        template=client.V1PodTemplateSpec(
            metadata=client.V1ObjectMeta(labels={"app": "py"}),
            spec=client.V1PodSpec(containers=[client.V1Container(name="c", image="busybox:1")])))
    created = apps.create_namespaced_deployment(ns, client.V1Deployment(metadata=client.V1ObjectMeta(name="py"),
                                                                        spec=spec))
    assert created.metadata.generation == 1
    # The deployment controller may already have annotated it (an annotation change moves generation, as
    # upstream): read back only what this test owns.
    got = apps.read_namespaced_deployment("py", ns)
    assert got.spec.replicas == 2 and got.metadata.generation >= 1
    scale = apps.read_namespaced_deployment_scale("py", ns)
    assert scale.spec.replicas == 2
    apps.patch_namespaced_deployment_scale("py", ns, {"spec": {"replicas": 4}})
    assert apps.read_namespaced_deployment("py", ns).spec.replicas == 4


def test_tokens(cluster: Cluster) -> None:
    server = cluster.server
    join = (server.data_dir / "token").read_text().strip()
    # the join token authenticates (user "node") but is authorised for nothing: it only buys node certificates
    status, body = server.request("/api/v1/nodes", token=join)
    assert status == 403 and 'User "node" cannot list resource "nodes"' in body["message"]
    status, body = server.request("/api/v1/namespaces", token="not-a-token")
    assert status == 401 and body["kind"] == "Status" and body["reason"] == "Unauthorized"
    # probes need no credentials (anonymous may read them); a credential that fails is 401 there too, as upstream
    req = urllib.request.Request(server.url + "/readyz")
    with urllib.request.urlopen(req, context=server.ssl_context(), timeout=10) as resp:
        assert resp.status == 200
    assert server.request("/readyz", token="not-a-token")[0] == 401
