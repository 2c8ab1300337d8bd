"""Resources: graceful pod deletion, finalizers, propagation policy, preconditions, deletecollection."""

from __future__ import annotations

from typing import Any

import pytest

from lite.errors import ApiError
from lite.kinds import Kind, KindRegistry
from lite.objects import parse_time
from lite.server.api.resources import Resources

KINDS = KindRegistry()


def kind(plural: str, group: str = "", version: str = "v1") -> Kind:
    k = KINDS.by_resource(group, version, plural)
    assert k is not None
    return k


POD, CM, DEPLOY, JOB = kind("pods"), kind("configmaps"), kind("deployments", "apps"), kind("jobs", "batch")




def pod(name: str, node: str = "", **extra: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "c", "image": "nginx"}], **extra}
    if node:
        spec["nodeName"] = node
    return {"metadata": {"name": name}, "spec": spec}


async def gone(res: Resources, k: Kind, name: str) -> bool:
    try:
        await res.get(k, "default", name)
    except ApiError as e:
        return e.code == 404
    return False


async def test_bound_pod_is_deleted_gracefully(res: Resources) -> None:
    await res.create(POD, "default", pod("p", node="n1", terminationGracePeriodSeconds=45))
    out = await res.delete(POD, "default", "p")
    meta = out["metadata"]
    assert meta["deletionGracePeriodSeconds"] == 45 and meta["generation"] == 2
    created = parse_time(meta["creationTimestamp"])
    assert (parse_time(meta["deletionTimestamp"]) - created).total_seconds() >= 44
    assert not await gone(res, POD, "p")
    # A delete that does not shorten the grace period returns the object unchanged.
    again = await res.delete(POD, "default", "p", grace_period_seconds=60)
    assert again["metadata"]["resourceVersion"] == meta["resourceVersion"]
    body, code = await res.delete_ex(POD, "default", "p", grace_period_seconds=10)
    assert body["metadata"]["deletionGracePeriodSeconds"] == 10 and code == 200
    # The node agent's final delete with grace 0 removes it.
    final = await res.delete(POD, "default", "p", grace_period_seconds=0)
    assert final["metadata"]["deletionGracePeriodSeconds"] == 0
    assert await gone(res, POD, "p")


async def test_default_grace_and_unbound_pods(res: Resources) -> None:
    await res.create(POD, "default", pod("bound", node="n1"))
    out = await res.delete(POD, "default", "bound")
    assert out["metadata"]["deletionGracePeriodSeconds"] == 30
    await res.create(POD, "default", pod("unbound"))
    await res.delete(POD, "default", "unbound")
    assert await gone(res, POD, "unbound")
    await res.create(POD, "default", pod("done", node="n1"))
    await res.patch(POD, "default", "done", {"status": {"phase": "Succeeded"}}, subresource="status")
    await res.delete(POD, "default", "done")
    assert await gone(res, POD, "done")


async def test_finalizers_flow(res: Resources) -> None:
    await res.create(CM, "default", {"metadata": {"name": "c", "finalizers": ["example.com/hold", "x.io/y"]}})
    out = await res.delete(CM, "default", "c")
    assert out["metadata"]["deletionTimestamp"] and out["metadata"]["deletionGracePeriodSeconds"] == 0
    assert not await gone(res, CM, "c")
    # A second delete returns the object as it is.
    assert (await res.delete(CM, "default", "c"))["metadata"]["resourceVersion"] == out["metadata"][
        "resourceVersion"]
    # Updates may not drop the deletionTimestamp.
    out = await res.patch(CM, "default", "c", {"metadata": {"deletionTimestamp": None, "finalizers": ["x.io/y"]}})
    assert out["metadata"]["deletionTimestamp"] and out["metadata"]["finalizers"] == ["x.io/y"]
    # Removing the last finalizer deletes the object.
    await res.patch(CM, "default", "c", [{"op": "remove", "path": "/metadata/finalizers"}], patch_type="json")
    assert await gone(res, CM, "c")


async def test_finalizer_on_graceful_pod(res: Resources) -> None:
    await res.create(POD, "default", {**pod("p", node="n1"), "metadata": {"name": "p", "finalizers": ["a.io/b"]}})
    await res.delete(POD, "default", "p", grace_period_seconds=0)
    assert not await gone(res, POD, "p")
    await res.patch(POD, "default", "p", {"metadata": {"finalizers": None}})
    assert await gone(res, POD, "p")


async def test_propagation_policy_finalizers(res: Resources) -> None:
    spec = {"selector": {"matchLabels": {"a": "b"}},
            "template": {"metadata": {"labels": {"a": "b"}}, "spec": {"containers": [{"name": "c", "image": "i"}]}}}
    await res.create(DEPLOY, "default", {"metadata": {"name": "o"}, "spec": spec})
    out = await res.delete(DEPLOY, "default", "o", propagation_policy="Orphan")
    assert out["metadata"]["finalizers"] == ["orphan"] and out["metadata"]["deletionTimestamp"]
    await res.create(DEPLOY, "default", {"metadata": {"name": "f"}, "spec": spec})
    out = await res.delete(DEPLOY, "default", "f", propagation_policy="Foreground")
    assert out["metadata"]["finalizers"] == ["foregroundDeletion"]
    await res.create(DEPLOY, "default", {"metadata": {"name": "b"}, "spec": spec})
    body, _ = await res.delete_ex(DEPLOY, "default", "b", propagation_policy="Background")
    assert body["kind"] == "Status" and body["status"] == "Success" and body["details"]["kind"] == "deployments"
    assert await gone(res, DEPLOY, "b")
    # Kinds that cannot own dependents get no GC finalizer.
    await res.create(CM, "default", {"metadata": {"name": "c"}})
    await res.delete(CM, "default", "c", propagation_policy="Orphan")
    assert await gone(res, CM, "c")
    # batch/v1 Jobs orphan by default.
    await res.create(JOB, "default", {"metadata": {"name": "j"}, "spec": {"template": {"spec": {
        "restartPolicy": "Never", "containers": [{"name": "c", "image": "i"}]}}}})
    assert (await res.delete(JOB, "default", "j"))["metadata"]["finalizers"] == ["orphan"]


async def test_preconditions(res: Resources) -> None:
    c = await res.create(CM, "default", {"metadata": {"name": "c"}})
    with pytest.raises(ApiError) as e:
        await res.delete(CM, "default", "c", preconditions={"uid": "nope"})
    assert e.value.code == 409 and e.value.reason == "Conflict"
    assert "the UID in the precondition (nope) does not match the UID in record" in e.value.message
    with pytest.raises(ApiError) as e:
        await res.delete(CM, "default", "c", preconditions={"resourceVersion": "1"})
    assert e.value.code == 409
    await res.delete(CM, "default", "c", preconditions={"uid": c["metadata"]["uid"],
                                                        "resourceVersion": c["metadata"]["resourceVersion"]})
    assert await gone(res, CM, "c")
    with pytest.raises(ApiError) as e:
        await res.delete(CM, "default", "c")
    assert e.value.code == 404


async def test_delete_collection(res: Resources) -> None:
    for name, app in (("a", "x"), ("b", "x"), ("c", "y")):
        await res.create(CM, "default", {"metadata": {"name": name, "labels": {"app": app}}})
    out = await res.delete_collection(CM, "default", label_selector="app=x")
    assert out["kind"] == "ConfigMapList" and [i["metadata"]["name"] for i in out["items"]] == ["a", "b"]
    left = await res.list(CM, "default")
    assert [i["metadata"]["name"] for i in left["items"]] == ["c"]
    with pytest.raises(ApiError) as e:
        await res.delete_collection(kind("services"), "default")
    assert e.value.code == 405


async def test_removed_hooks_see_final_removal_only(res: Resources) -> None:
    removed: list[str] = []

    async def hook(k: Kind, obj: dict[str, Any]) -> None:
        removed.append(f"{k.plural}/{obj['metadata']['name']}")

    res.strategies.add_removed_hook(hook)
    await res.create(CM, "default", {"metadata": {"name": "a"}})
    await res.create(CM, "default", {"metadata": {"name": "held", "finalizers": ["x.io/y"]}})
    await res.delete(CM, "default", "a", dry_run=True)
    assert removed == []
    await res.delete(CM, "default", "a")
    await res.delete(CM, "default", "held")
    assert removed == ["configmaps/a"]
    await res.patch(CM, "default", "held", {"metadata": {"finalizers": []}})
    assert removed == ["configmaps/a", "configmaps/held"]
