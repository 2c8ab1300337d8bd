"""ReplicaSet / ReplicationController controller against the real in-process API."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from conftest import EVENT, POD, RC, RS, Kit, bare_pod, pod_template, replicaset

from lite.errors import ApiError
from lite.objects import Obj, controller_of, labels_of, name_of, uid_of
from lite.server.controllers.replicaset import ReplicaSetController, ReplicationControllerController
from lite.server.controllers.replicaset_pods import facts_available, is_pod_available, pod_facts, pods_to_delete


async def test_creates_pods_from_template_with_owner_and_status(kit: Kit) -> None:
    rs = await kit.api.create(RS, "default", replicaset("web", 3))
    c = ReplicaSetController(kit.api, kit.informers)
    await kit.settle(c)
    await c.reconcile("default/web")
    pods = await kit.pods()
    assert len(pods) == 3
    for p in pods:
        assert name_of(p).startswith("web-")
        ref = controller_of(p)
        assert ref is not None and ref["uid"] == uid_of(rs) and ref["kind"] == "ReplicaSet"
        assert ref["blockOwnerDeletion"] is True
        assert labels_of(p) == {"app": "web"}
    await kit.settle(c)
    await c.reconcile("default/web")
    got = await kit.api.get(RS, "default", "web")
    assert got["status"]["replicas"] == 3
    assert got["status"]["fullyLabeledReplicas"] == 3
    assert got["status"]["readyReplicas"] == 0
    assert got["status"]["availableReplicas"] == 0
    assert got["status"]["observedGeneration"] == 1
    events = (await kit.api.list(EVENT, "default"))["items"]
    assert sum(e["count"] for e in events if e["reason"] == "SuccessfulCreate") == 3
    assert all(e["involvedObject"]["uid"] == uid_of(rs) for e in events)


async def test_expectations_prevent_double_create(kit: Kit) -> None:
    await kit.api.create(RS, "default", replicaset("web", 2))
    c = ReplicaSetController(kit.api, kit.informers)
    await kit.settle(c)
    await c.reconcile("default/web")
    # The pod cache may not have seen the creations yet; a second sync right away must not add more.
    c.expectations.expect_creations("default/web", 2)  # as if none had been observed yet
    await c.reconcile("default/web")
    assert len(await kit.pods()) == 2
    await kit.settle(c)
    await c.reconcile("default/web")
    assert len(await kit.pods()) == 2


async def test_scale_down_prefers_unready_and_unscheduled(kit: Kit) -> None:
    await kit.api.create(RS, "default", replicaset("web", 4))
    c = ReplicaSetController(kit.api, kit.informers)
    await kit.settle(c)
    await c.reconcile("default/web")
    pods = await kit.pods()
    ready = [await kit.make_ready(p) for p in pods[:2]]
    await kit.make_ready(pods[2], ready=False)  # scheduled, not ready; pods[3] stays unscheduled
    await kit.api.patch(RS, "default", "web", {"spec": {"replicas": 2}})
    await kit.settle(c)
    await c.reconcile("default/web")
    left = await kit.pods()
    assert sorted(map(name_of, left)) == sorted(map(name_of, ready))
    events = (await kit.api.list(EVENT, "default"))["items"]
    assert sum(e["count"] for e in events if e["reason"] == "SuccessfulDelete") == 2


async def test_ready_and_available_with_min_ready_seconds(kit: Kit) -> None:
    await kit.api.create(RS, "default", replicaset("web", 2, minReadySeconds=30))
    c = ReplicaSetController(kit.api, kit.informers)
    await kit.settle(c)
    await c.reconcile("default/web")
    pods = await kit.pods()
    await kit.make_ready(pods[0], since=dt.datetime.now(dt.UTC) - dt.timedelta(seconds=60))
    await kit.make_ready(pods[1])
    await kit.settle(c)
    again = await c.reconcile("default/web")
    status = (await kit.api.get(RS, "default", "web"))["status"]
    assert (status["readyReplicas"], status["availableReplicas"]) == (2, 1)
    assert again == 30.0


async def test_adopts_matching_orphans_and_releases_mismatched(kit: Kit) -> None:
    await kit.api.create(POD, "default", bare_pod("orphan", {"app": "web"}))
    await kit.api.create(POD, "default", bare_pod("other", {"app": "db"}))
    rs = await kit.api.create(RS, "default", replicaset("web", 2))
    c = ReplicaSetController(kit.api, kit.informers)
    await kit.settle(c)
    await c.reconcile("default/web")
    orphan = await kit.api.get(POD, "default", "orphan")
    assert (controller_of(orphan) or {}).get("uid") == uid_of(rs)
    assert controller_of(await kit.api.get(POD, "default", "other")) is None
    assert len([p for p in await kit.pods() if labels_of(p) == {"app": "web"}]) == 2
    # Relabel the adopted pod: it is released and replaced.
    await kit.api.patch(POD, "default", "orphan", {"metadata": {"labels": {"app": "gone"}}})
    await kit.settle(c)
    await c.reconcile("default/web")
    assert controller_of(await kit.api.get(POD, "default", "orphan")) is None
    await kit.settle(c)
    await c.reconcile("default/web")
    assert len([p for p in await kit.pods() if labels_of(p) == {"app": "web"}]) == 2


async def test_replication_controller_shares_the_code(kit: Kit) -> None:
    await kit.api.create(RC, "default", {
        "apiVersion": "v1", "kind": "ReplicationController", "metadata": {"name": "rc"},
        "spec": {"replicas": 2, "selector": {"app": "rc"}, "template": pod_template({"app": "rc"})}})
    c = ReplicationControllerController(kit.api, kit.informers)
    await kit.settle(c)
    await c.reconcile("default/rc")
    pods = await kit.pods()
    assert len(pods) == 2 and all((controller_of(p) or {}).get("kind") == "ReplicationController" for p in pods)
    await kit.settle(c)
    await c.reconcile("default/rc")
    assert (await kit.api.get(RC, "default", "rc"))["status"]["replicas"] == 2


async def test_burst_and_slow_start(kit: Kit) -> None:
    await kit.api.create(RS, "default", replicaset("web", 7))
    c = ReplicaSetController(kit.api, kit.informers, burst=5)
    await kit.settle(c)
    await c.reconcile("default/web")
    assert len(await kit.pods()) == 5  # capped at the burst per sync
    await kit.settle(c)
    await c.reconcile("default/web")
    assert len(await kit.pods()) == 7


def test_deletion_order() -> None:
    def pod(name: str, node: str = "", phase: str = "Pending", ready: bool = False,
            created: str = "2024-01-01T00:00:00Z", restarts: int = 0) -> dict[str, object]:
        return {"metadata": {"name": name, "creationTimestamp": created},
                "spec": {"nodeName": node},
                "status": {"phase": phase, "containerStatuses": [{"restartCount": restarts}],
                           "conditions": [{"type": "Ready", "status": "True" if ready else "False",
                                           "lastTransitionTime": created}]}}
    pods = [pod("running-ready-old", "n1", "Running", True), pod("unscheduled"),
            pod("pending", "n1"), pod("running-unready", "n1", "Running"),
            pod("running-ready-new", "n1", "Running", True, "2024-02-01T00:00:00Z"),
            pod("unknown", "n1", "Unknown")]
    order = [name_of(p) for p in pods_to_delete(pods, pods, 5)]
    assert order == ["unscheduled", "pending", "unknown", "running-unready", "running-ready-new"]
    # Among equals, a pod on a node crowded with pods of the same owner goes first.
    alone, crowded = pod("alone", "n2", "Running", True), pod("crowded", "n1", "Running", True)
    assert [name_of(p) for p in pods_to_delete([alone, crowded], [*pods, alone, crowded], 1)] == ["crowded"]


async def test_failed_creates_stop_slow_start_and_set_replica_failure(kit: Kit) -> None:
    from lite.errors import forbidden
    from lite.server.api.strategies import Admission

    attempts: list[str] = []
    allow = {"n": 0}

    async def quota(review: Admission) -> None:
        if review.kind.kind == "Pod" and review.operation == "CREATE":
            attempts.append(review.name)
            if allow["n"] <= 0:
                raise forbidden('pods "x" is forbidden: exceeded quota', "pods")
            allow["n"] -= 1

    kit.api.strategies.add_admission(quota)
    await kit.api.create(RS, "default", replicaset("web", 10))
    c = ReplicaSetController(kit.api, kit.informers)
    await kit.settle(c)
    allow["n"] = 3  # batches 1 and 2 succeed, the batch of 4 fails: no batch of 8 is tried
    try:
        await c.reconcile("default/web")
    except ApiError as e:
        assert e.code == 403
    else:
        raise AssertionError("the failed create must fail the sync (so it is retried)")
    assert len(attempts) == 1 + 2 + 4
    assert len(await kit.pods()) == 3
    status = (await kit.api.get(RS, "default", "web"))["status"]
    [failure] = status["conditions"]
    assert (failure["type"], failure["reason"]) == ("ReplicaFailure", "FailedCreate")
    assert "exceeded quota" in failure["message"]
    warnings = [e for e in (await kit.api.list(EVENT, "default"))["items"] if e["reason"] == "FailedCreate"]
    assert warnings and warnings[0]["type"] == "Warning"
    # The creations that never happened were taken off the expectations: the next sync tries again.
    await kit.settle(c)
    assert c.expectations.pending("default/web") == (0, 0)
    allow["n"] = 100
    await c.reconcile("default/web")
    assert len(await kit.pods()) == 10
    await kit.settle(c)
    await c.reconcile("default/web")
    assert "conditions" not in (await kit.api.get(RS, "default", "web"))["status"]


def test_counts_only_change() -> None:
    from lite.server.controllers.replicaset_pods import counts_only_change

    ref = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web", "uid": "u1", "controller": True}
    base = {"metadata": {"name": "web-a", "labels": {"app": "web"}, "ownerReferences": [ref]},
            "spec": {}, "status": {"phase": "Pending"}}

    def changed(**parts: dict[str, object]) -> dict[str, object]:
        return {k: {**v, **parts.get(k, {})} for k, v in base.items()}  # type: ignore[dict-item]

    ready = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
    cases = [
        (base, True),  # the same object (a resync)
        (changed(spec={"nodeName": "n1"}), True),  # bound
        (changed(status=ready), True),  # Running and Ready
        (changed(status={"phase": "Failed"}), False),  # terminal: the set must replace it now
        (changed(status={"phase": "Succeeded"}), False),
        (changed(metadata={"labels": {"app": "other"}}), False),  # may be released
        (changed(metadata={"ownerReferences": []}), False),  # orphaned
        (changed(metadata={"deletionTimestamp": "2024-01-01T00:00:00Z"}), False),
    ]
    for new, want in cases:
        assert counts_only_change(base, new) is want, new
    deleting = changed(metadata={"deletionTimestamp": "2024-01-01T00:00:00Z"})
    assert counts_only_change(deleting, {**deleting, "status": ready}) is False


async def test_status_only_pod_changes_sync_the_set_later_once(kit: Kit) -> None:
    c, (a, b) = await _synced_set(kit, 0.05)
    # Bound, then Running and Ready: only the counts can move, so the set is synced a little later, once.
    c._pod_updated(a, {**a, "spec": {**a["spec"], "nodeName": "n1"}})
    c._pod_updated(b, {**b, "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}})
    assert len(c.queue) == 0
    await kit.until(lambda: len(c.queue) == 1)
    assert await c.queue.get() == "default/web"
    c.queue.done("default/web")
    # A pod gone terminal must be replaced at once.
    c._pod_updated(a, {**a, "status": {"phase": "Failed"}})
    assert len(c.queue) == 1


async def test_min_ready_recheck_survives_coalesced_syncs(kit: Kit) -> None:
    c, (a, b) = await _synced_set(kit, 0.05, minReadySeconds=30)
    c._pod_updated(a, {**a, "spec": {**a["spec"], "nodeName": "n1"}})  # a coalesced sync is pending
    c._pod_updated(b, {**b, "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}})
    # Became Ready: synced now, and again once minReadySeconds have passed (not swallowed by the pending one).
    assert len(c.queue) == 1
    await kit.until(lambda: not c._counts_due)  # the coalesced sync came due...
    assert c.queue.waiting() == 1  # ...and the minReadySeconds re-check still waits


async def _synced_set(kit: Kit, status_delay: float, **spec: Any) -> tuple[ReplicaSetController, list[Obj]]:
    """A set "web" of 2 replicas synced once by a controller with a live queue (as while leading; workers are not
    run: the test takes keys), its queue drained; the controller and its two pods."""
    from lite.workqueue import WorkQueue

    await kit.api.create(RS, "default", replicaset("web", 2, **spec))
    c = ReplicaSetController(kit.api, kit.informers, status_delay=status_delay)
    c.queue = WorkQueue(name="test")
    await kit.settle(c)
    await c.reconcile("default/web")
    await kit.settle(c)
    await _drain(c)
    return c, await kit.pods()


async def _drain(c: ReplicaSetController) -> None:
    """Take every queued key (the informers' add events for the created pods) off the controller's queue."""
    while len(c.queue):
        c.queue.done(await c.queue.get())


async def test_create_batches_do_not_wait_for_their_events(kit: Kit) -> None:
    import asyncio

    from lite.server.api.strategies import Admission

    release = asyncio.Event()

    async def slow_events(review: Admission) -> None:
        if review.kind.kind == "Event" and review.operation == "CREATE":
            await release.wait()

    kit.api.strategies.add_admission(slow_events)
    await kit.api.create(RS, "default", replicaset("web", 7))
    c = ReplicaSetController(kit.api, kit.informers)
    await kit.settle(c)
    sync = asyncio.create_task(c.reconcile("default/web"))
    # Batches 1, 2 and 4 are all created while no SuccessfulCreate event could be written yet...
    await kit.until(lambda: _count(kit))
    assert not sync.done()  # ...and the sync still waits for the events before it ends
    release.set()
    await sync
    events = (await kit.api.list(EVENT, "default"))["items"]
    assert sum(e["count"] for e in events if e["reason"] == "SuccessfulCreate") == 7


async def _count(kit: Kit) -> bool:
    return len(await kit.pods()) == 7


async def test_creates_seen_mid_burst_sync_later_the_last_at_once(kit: Kit) -> None:
    c, (a, b) = await _synced_set(kit, 30)
    c.expectations.expect_creations("default/web", 2)  # as if the burst's creates were not seen yet
    c._pod_added(a)  # one of two seen: a sync now could only recount
    assert len(c.queue) == 0 and "default/web" in c._counts_due
    c._pod_added(b)  # the burst is all seen: the next one may start at once
    assert len(c.queue) == 1
    assert c.expectations.satisfied("default/web")
    c.on_start()  # a new leadership term drops the pending timer
    assert not c._counts_due


async def test_sync_counts_pods_without_decoding_them(kit: Kit, monkeypatch: pytest.MonkeyPatch) -> None:
    # The status comes from the per-pod facts the handlers keep, not from the pods themselves: a sync of a set
    # at its size reads no pod from the informer (a compact one would decode each on every sync).
    await kit.api.create(RS, "default", replicaset("web", 3, minReadySeconds=30))
    c = ReplicaSetController(kit.api, kit.informers)
    await kit.settle(c)
    await c.reconcile("default/web")
    pods = await kit.pods()
    await kit.make_ready(pods[0], since=dt.datetime.now(dt.UTC) - dt.timedelta(seconds=60))
    await kit.make_ready(pods[1])
    await kit.api.patch(POD, "default", name_of(pods[2]), {"metadata": {"labels": {"app": "web", "x": "y"}}})
    await kit.settle(c)
    for reader in ("get", "peek", "list", "iter_objects", "by_index"):
        monkeypatch.setattr(c.pods, reader, lambda *a, r=reader: pytest.fail(f"the sync read a pod with {r}"))
    await c.reconcile("default/web")
    monkeypatch.undo()
    st = (await kit.api.get(RS, "default", "web"))["status"]
    assert (st["replicas"], st["fullyLabeledReplicas"], st["readyReplicas"], st["availableReplicas"]) == (3, 3, 2, 1)
    # A pod being deleted leaves the count at once (and is replaced), still without decoding the others.
    await kit.api.delete(POD, "default", name_of(pods[1]))
    await kit.settle(c)
    await c.reconcile("default/web")
    st = (await kit.api.get(RS, "default", "web"))["status"]
    assert (st["replicas"], st["readyReplicas"], st["availableReplicas"]) == (2, 1, 1)
    assert len(await kit.pods()) == 3


async def test_unready_pods_of_one_set_share_one_facts_tuple(kit: Kit) -> None:
    # Pending pods of one owner and labels have equal facts: they share one tuple (10,000 pending pods cost no
    # tuple each); a Ready pod gets its own, and the counts still come out right.
    await kit.api.create(RS, "default", replicaset("web", 3))
    c = ReplicaSetController(kit.api, kit.informers)
    await kit.settle(c)
    await c.reconcile("default/web")
    await kit.settle(c)
    pods = await kit.pods()
    a, b, d = (c._facts[f"default/{name_of(p)}"] for p in pods)
    assert a is b is d
    await kit.make_ready(pods[0])
    await kit.settle(c)
    ready = c._facts[f"default/{name_of(pods[0])}"]
    assert ready is not a and ready[2] is not None and ready[:2] == a[:2]
    await c.reconcile("default/web")
    st = (await kit.api.get(RS, "default", "web"))["status"]
    assert (st["replicas"], st["readyReplicas"]) == (3, 1)


def test_pod_facts_agree_with_the_pod_predicates() -> None:
    t = dt.datetime(2024, 1, 1, 0, 1, tzinfo=dt.UTC)
    ready = {"type": "Ready", "status": "True", "lastTransitionTime": "2024-01-01T00:00:00Z"}
    table: list[tuple[dict[str, object], object]] = [
        ({}, (None, None, None)),
        ({"status": {"phase": "Running", "conditions": [ready]}}, (None, None, "2024-01-01T00:00:00Z")),
        ({"status": {"conditions": [{"type": "Ready", "status": "True"}]}}, (None, None, "")),
        ({"status": {"conditions": [{**ready, "status": "False"}, ready]}}, (None, None, None)),  # the first counts
        ({"metadata": {"labels": {"a": "b"}, "ownerReferences": [{"uid": "x"}, {"uid": "u", "controller": True}]}},
         ("u", {"a": "b"}, None)),
        ({"status": {"phase": "Succeeded"}}, None),
        ({"status": {"phase": "Failed"}}, None),
        ({"metadata": {"deletionTimestamp": "2024-01-01T00:00:00Z"}}, None),
    ]
    for pod, want in table:
        facts = pod_facts(pod)
        assert facts == want, pod
        if facts is not None:
            for min_ready in (0, 30, 60, 61):
                assert facts_available(facts[2], min_ready, t) == is_pod_available(pod, min_ready, t), (pod, min_ready)
