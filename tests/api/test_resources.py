"""Resources (the generic registry) over a real Store: create/get/list/update/patch/delete basics."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from lite.errors import ApiError
from lite.kinds import Kind, KindRegistry
from lite.server.api.resources import Resources

KINDS = KindRegistry()


def kind(plural: str, group: str = "", version: str = "v1") -> Kind:
    k = KINDS.by_resource(group, version, plural)
    assert k is not None
    return k


POD, CM, NS = kind("pods"), kind("configmaps"), kind("namespaces")
DEPLOY, SVC, SECRET = kind("deployments", "apps"), kind("services"), kind("secrets")




def pod(name: str = "p", **labels: str) -> dict:
    return {"metadata": {"name": name, "labels": labels}, "spec": {"containers": [{"name": "c", "image": "nginx"}]}}


async def test_start_creates_system_namespaces(res: Resources) -> None:
    names = [n["metadata"]["name"] for n in (await res.list(NS))["items"]]
    assert names == ["default", "kube-node-lease", "kube-public", "kube-system"]
    ns = await res.get(NS, "", "default")
    assert ns["status"]["phase"] == "Active"
    assert ns["spec"]["finalizers"] == ["kubernetes"]
    assert ns["metadata"]["labels"]["kubernetes.io/metadata.name"] == "default"


async def test_create_get_defaults(res: Resources) -> None:
    out = await res.create(POD, "default", pod())
    assert out["apiVersion"] == "v1" and out["kind"] == "Pod"
    meta = out["metadata"]
    assert meta["namespace"] == "default" and meta["uid"] and meta["creationTimestamp"]
    assert meta["generation"] == 1 and int(meta["resourceVersion"]) > 0
    got = await res.get(POD, "default", "p")
    assert got == out
    spec = got["spec"]
    assert spec["restartPolicy"] == "Always" and spec["dnsPolicy"] == "ClusterFirst"
    assert spec["schedulerName"] == "default-scheduler" and spec["terminationGracePeriodSeconds"] == 30
    assert spec["serviceAccountName"] == "default" and spec["enableServiceLinks"] is True
    # priority is the Priority admission plugin's (tests/api/test_resources_write.py), not the pod strategy's
    assert "priority" not in spec and spec["securityContext"] == {}
    c = spec["containers"][0]
    assert c["imagePullPolicy"] == "Always" and c["terminationMessagePath"] == "/dev/termination-log"
    assert {t["key"] for t in spec["tolerations"]} == {"node.kubernetes.io/not-ready",
                                                         "node.kubernetes.io/unreachable"}
    assert got["status"] == {"phase": "Pending", "qosClass": "BestEffort"}


async def test_create_errors(res: Resources) -> None:
    await res.create(CM, "default", {"metadata": {"name": "a"}})
    with pytest.raises(ApiError) as e:
        await res.create(CM, "default", {"metadata": {"name": "a"}})
    assert e.value.code == 409 and e.value.reason == "AlreadyExists"
    assert e.value.message == 'configmaps "a" already exists'
    with pytest.raises(ApiError) as e:
        await res.create(CM, "nope", {"metadata": {"name": "a"}})
    assert e.value.code == 404 and e.value.message == 'namespaces "nope" not found'
    with pytest.raises(ApiError) as e:
        await res.create(CM, "default", {"metadata": {"name": "a", "namespace": "other"}})
    assert e.value.code == 400
    assert e.value.message == "the namespace of the provided object does not match the namespace sent on the request"
    with pytest.raises(ApiError) as e:
        await res.create(CM, "default", {"metadata": {}})
    assert e.value.code == 422 and e.value.causes[0].field == "metadata.name"


async def test_get_missing_is_404(res: Resources) -> None:
    with pytest.raises(ApiError) as e:
        await res.get(DEPLOY, "default", "x")
    assert e.value.code == 404 and e.value.message == 'deployments.apps "x" not found'


async def test_update_conflict_and_generation(res: Resources) -> None:
    d = await res.create(DEPLOY, "default", deployment("web"))
    assert d["spec"]["replicas"] == 1 and d["metadata"]["generation"] == 1
    d["spec"]["replicas"] = 3
    d2 = await res.update(DEPLOY, "default", "web", d)
    assert d2["metadata"]["generation"] == 2
    assert int(d2["metadata"]["resourceVersion"]) > int(d["metadata"]["resourceVersion"])
    with pytest.raises(ApiError) as e:
        await res.update(DEPLOY, "default", "web", d)  # stale resourceVersion
    assert e.value.code == 409 and e.value.reason == "Conflict"
    assert e.value.message.startswith('Operation cannot be fulfilled on deployments.apps "web": the object has')
    # Label-only change: no generation bump. Status change via the main resource: ignored.
    d2["metadata"]["labels"] = {"x": "y"}
    d2["status"] = {"replicas": 5}
    d3 = await res.update(DEPLOY, "default", "web", d2)
    assert d3["metadata"]["generation"] == 2 and d3["status"] == {}
    # No-op update: nothing written.
    d4 = await res.update(DEPLOY, "default", "web", d3)
    assert d4["metadata"]["resourceVersion"] == d3["metadata"]["resourceVersion"]
    with pytest.raises(ApiError) as e:
        await res.update(CM, "default", "missing", {"metadata": {"name": "missing"}})
    assert e.value.code == 404


def deployment(name: str, replicas: int | None = None) -> dict:
    spec: dict = {"selector": {"matchLabels": {"app": name}},
                  "template": {"metadata": {"labels": {"app": name}},
                               "spec": {"containers": [{"name": "c", "image": "nginx:1.25"}]}}}
    if replicas is not None:
        spec["replicas"] = replicas
    return {"metadata": {"name": name}, "spec": spec}


async def test_delete_configmap(res: Resources) -> None:
    await res.create(CM, "default", {"metadata": {"name": "a"}})
    out = await res.delete(CM, "default", "a")
    assert out["metadata"]["name"] == "a"
    with pytest.raises(ApiError) as e:
        await res.get(CM, "default", "a")
    assert e.value.code == 404


async def _take(it: AsyncIterator, n: int) -> list:
    out = []
    async for ev in it:
        out.append(ev)
        if len(out) == n:
            break
    return out


async def test_watch_initial_then_live(res: Resources) -> None:
    await res.create(CM, "default", {"metadata": {"name": "a"}})
    w = res.watch(CM, "default")
    first = await _take(w, 1)
    assert first[0].type == "ADDED" and first[0].object["metadata"]["name"] == "a"
    await res.create(CM, "default", {"metadata": {"name": "b"}})
    await res.delete(CM, "default", "a")
    evs = await _take(w, 2)
    assert [(e.type, e.object["metadata"]["name"]) for e in evs] == [("ADDED", "b"), ("DELETED", "a")]
    assert evs[0].raw is not None  # store bytes forwarded unchanged
    await w.aclose()  # type: ignore[attr-defined]
