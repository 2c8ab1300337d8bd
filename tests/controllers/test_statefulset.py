"""StatefulSet controller against the real in-process API; the test plays the node (binding, Ready)."""

from __future__ import annotations

import datetime as dt
from typing import Any

from conftest import POD, Kit, pod_template, running

from lite.objects import controller_of, labels_of, meta, name_of, uid_of
from lite.server.controllers.history import HASH_LABEL
from lite.server.controllers.runtime import builtin
from lite.server.controllers.statefulset import StatefulSetController

STS = builtin("apps", "StatefulSet")
PVC = builtin("", "PersistentVolumeClaim")
CR = builtin("apps", "ControllerRevision")


def statefulset(name: str, replicas: int, **spec: Any) -> dict[str, Any]:
    labels = {"app": name}
    return {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": name, "namespace": "default"},
            "spec": {"replicas": replicas, "serviceName": name, "selector": {"matchLabels": labels},
                     "template": pod_template(labels), **spec}}


async def sync(kit: Kit, c: StatefulSetController, name: str) -> float | None:
    await kit.settle(c)
    return await c.reconcile(f"default/{name}")


async def names(kit: Kit) -> list[str]:
    return [name_of(p) for p in await kit.pods()]


async def gone(kit: Kit, name: str) -> None:
    """What the node does once a deleted pod's containers are stopped."""
    await kit.api.delete(POD, "default", name, grace_period_seconds=0)


async def test_ordered_ready_creation_with_identity_and_claims(kit: Kit) -> None:
    claim = {"metadata": {"name": "www"}, "spec": {"accessModes": ["ReadWriteOnce"],
                                                   "resources": {"requests": {"storage": "1Gi"}}}}
    sts = await kit.api.create(STS, "default", statefulset("web", 3, volumeClaimTemplates=[claim]))
    c = StatefulSetController(kit.api, kit.informers)
    await sync(kit, c, "web")
    assert await names(kit) == ["web-0"]
    await sync(kit, c, "web")
    assert await names(kit) == ["web-0"]  # web-0 is not Ready yet
    [p0] = await kit.pods()
    assert labels_of(p0)["statefulset.kubernetes.io/pod-name"] == "web-0"
    assert labels_of(p0)["apps.kubernetes.io/pod-index"] == "0"
    assert (p0["spec"]["hostname"], p0["spec"]["subdomain"]) == ("web-0", "web")
    assert {"name": "www", "persistentVolumeClaim": {"claimName": "www-web-0"}} in p0["spec"]["volumes"]
    assert (controller_of(p0) or {}).get("uid") == uid_of(sts)
    pvc = await kit.api.get(PVC, "default", "www-web-0")
    assert labels_of(pvc) == {"app": "web"}
    await kit.make_ready(p0)
    await sync(kit, c, "web")
    assert await names(kit) == ["web-0", "web-1"]
    p1 = (await kit.pods())[1]
    await kit.make_ready(p1, ready=False)  # scheduled and running, not Ready
    await sync(kit, c, "web")
    assert await names(kit) == ["web-0", "web-1"]
    await kit.make_ready(await kit.api.get(POD, "default", "web-1"))
    await sync(kit, c, "web")
    assert await names(kit) == ["web-0", "web-1", "web-2"]
    await kit.make_ready((await kit.pods())[2])
    await sync(kit, c, "web")
    got = await kit.api.get(STS, "default", "web")
    st = got["status"]
    assert (st["replicas"], st["readyReplicas"], st["availableReplicas"], st["updatedReplicas"]) == (3, 3, 3, 3)
    assert st["currentRevision"] == st["updateRevision"] and st["observedGeneration"] == 1
    revs = (await kit.api.list(CR, "default"))["items"]
    assert [name_of(r) for r in revs] == [st["updateRevision"]]
    assert all(labels_of(p)[HASH_LABEL] == st["updateRevision"] for p in await kit.pods())
    assert sorted(name_of(p) for p in (await kit.api.list(PVC, "default"))["items"]) == \
        ["www-web-0", "www-web-1", "www-web-2"]


async def ready_set(kit: Kit, c: StatefulSetController, name: str, n: int) -> None:
    for _ in range(n):
        await sync(kit, c, name)
        for p in await kit.pods():
            if not (p.get("status") or {}).get("conditions"):
                await kit.make_ready(p)
    await sync(kit, c, name)


async def test_scale_down_in_reverse_order(kit: Kit) -> None:
    await kit.api.create(STS, "default", statefulset("db", 3))
    c = StatefulSetController(kit.api, kit.informers)
    await ready_set(kit, c, "db", 3)
    assert await names(kit) == ["db-0", "db-1", "db-2"]
    await kit.api.patch(STS, "default", "db", {"spec": {"replicas": 1}})
    await sync(kit, c, "db")
    assert await names(kit) == ["db-0", "db-1"]  # db-2 is terminating
    await sync(kit, c, "db")
    assert await names(kit) == ["db-0", "db-1"]  # waits for db-2 to be gone
    await gone(kit, "db-2")
    await sync(kit, c, "db")
    assert await names(kit) == ["db-0"]


async def test_parallel_creates_all_at_once(kit: Kit) -> None:
    await kit.api.create(STS, "default", statefulset("par", 3, podManagementPolicy="Parallel"))
    c = StatefulSetController(kit.api, kit.informers)
    await sync(kit, c, "par")
    assert await names(kit) == ["par-0", "par-1", "par-2"]


async def test_rolling_update_with_partition(kit: Kit) -> None:
    await kit.api.create(STS, "default", statefulset("ru", 3))
    c = StatefulSetController(kit.api, kit.informers)
    await ready_set(kit, c, "ru", 3)
    old_rev = (await kit.api.get(STS, "default", "ru"))["status"]["currentRevision"]
    await kit.api.patch(STS, "default", "ru", {"spec": {
        "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"partition": 1}},
        "template": {"spec": {"containers": [{"name": "c", "image": "nginx:2"}]}}}})
    for victim in ("ru-2", "ru-1"):
        await sync(kit, c, "ru")
        assert meta(await kit.api.get(POD, "default", victim)).get("deletionTimestamp")
        await gone(kit, victim)
        await sync(kit, c, "ru")
        new = await kit.api.get(POD, "default", victim)
        assert new["spec"]["containers"][0]["image"] == "nginx:2"
        await kit.make_ready(new)
    await sync(kit, c, "ru")
    pods = {name_of(p): p for p in await kit.pods()}
    st = (await kit.api.get(STS, "default", "ru"))["status"]
    assert st["updateRevision"] != old_rev and st["currentRevision"] == old_rev
    assert labels_of(pods["ru-0"])[HASH_LABEL] == old_rev
    assert pods["ru-0"]["spec"]["containers"][0]["image"] == "nginx:1"
    assert (st["updatedReplicas"], st["currentReplicas"]) == (2, 1)
    # Partition 0 finishes the rollout; then the current revision becomes the update revision.
    await kit.api.patch(STS, "default", "ru", {"spec": {"updateStrategy": {"rollingUpdate": {"partition": 0}}}})
    await sync(kit, c, "ru")
    await gone(kit, "ru-0")
    await sync(kit, c, "ru")
    await kit.make_ready(await kit.api.get(POD, "default", "ru-0"))
    await sync(kit, c, "ru")
    st = (await kit.api.get(STS, "default", "ru"))["status"]
    assert st["currentRevision"] == st["updateRevision"] and st["updatedReplicas"] == 3


async def test_ordered_rollout_under_its_own_workers(kit: Kit) -> None:
    c = StatefulSetController(kit.api, kit.informers)
    await kit.settle(c)
    async with running(c):
        await kit.api.create(STS, "default", statefulset("live", 3))
        for i in range(3):
            await kit.until(lambda i=i: _has(kit, f"live-{i}"))
            assert await names(kit) == [f"live-{j}" for j in range(i + 1)]  # nothing ahead of a non-Ready pod
            await kit.make_ready(await kit.api.get(POD, "default", f"live-{i}"))
        await kit.until(lambda: _ready(kit, "live", 3))


async def _has(kit: Kit, name: str) -> bool:
    return name in await names(kit)


async def _ready(kit: Kit, name: str, n: int) -> bool:
    return ((await kit.api.get(STS, "default", name)).get("status") or {}).get("readyReplicas") == n


async def test_min_ready_seconds_holds_the_next_ordinal(kit: Kit) -> None:
    await kit.api.create(STS, "default", statefulset("slow", 2, minReadySeconds=30))
    c = StatefulSetController(kit.api, kit.informers)
    await sync(kit, c, "slow")
    await kit.make_ready((await kit.pods())[0])
    wait = await sync(kit, c, "slow")
    assert wait is not None and 0 < wait <= 30
    assert await names(kit) == ["slow-0"]  # Ready but not yet available
    long_ago = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=60)
    await kit.api.patch(POD, "default", "slow-0", {"status": {"conditions": [
        {"type": "Ready", "status": "True", "lastTransitionTime": long_ago.strftime("%Y-%m-%dT%H:%M:%SZ")}]}},
        subresource="status")
    await sync(kit, c, "slow")
    assert await names(kit) == ["slow-0", "slow-1"]


async def test_on_delete_replaces_only_deleted_pods(kit: Kit) -> None:
    await kit.api.create(STS, "default", statefulset("od", 2, updateStrategy={"type": "OnDelete"}))
    c = StatefulSetController(kit.api, kit.informers)
    await ready_set(kit, c, "od", 2)
    await kit.api.patch(STS, "default", "od", {"spec": {"template": {"metadata": {"labels": {"v": "2"}}}}})
    await sync(kit, c, "od")
    assert all("v" not in labels_of(p) for p in await kit.pods())
    await gone(kit, "od-1")
    await sync(kit, c, "od")
    assert labels_of(await kit.api.get(POD, "default", "od-1"))["v"] == "2"
    assert "v" not in labels_of(await kit.api.get(POD, "default", "od-0"))
    st = (await kit.api.get(STS, "default", "od"))["status"]
    assert st["currentRevision"] != st["updateRevision"] and (st["currentReplicas"], st["updatedReplicas"]) == (1, 1)


async def test_failed_or_succeeded_pod_is_deleted_and_recreated(kit: Kit) -> None:
    """upstream `isFailed`/`isSucceeded` in updateStatefulSet: a pod the node rejected or evicted (phase Failed),
    or one that ended (Succeeded), is deleted and re-created under the same name with a new uid."""
    await kit.api.create(STS, "default", statefulset("ev", 2))
    c = StatefulSetController(kit.api, kit.informers)
    await ready_set(kit, c, "ev", 2)
    assert await names(kit) == ["ev-0", "ev-1"]
    for phase in ("Failed", "Succeeded"):
        old = await kit.api.get(POD, "default", "ev-0")
        await kit.api.patch(POD, "default", "ev-0", {"status": {"phase": phase, "reason": "Evicted"}},
                            subresource="status")
        await sync(kit, c, "ev")  # deleted at once: a pod in a terminal phase has no grace period
        assert await names(kit) == ["ev-1"]
        await sync(kit, c, "ev")
        assert await names(kit) == ["ev-0", "ev-1"]
        new = await kit.api.get(POD, "default", "ev-0")
        assert uid_of(new) != uid_of(old) and (new.get("status") or {}).get("phase") != phase
        await kit.make_ready(new)
        await sync(kit, c, "ev")
