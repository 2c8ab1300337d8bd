"""Garbage collector against the real in-process API: Background, Foreground, Orphan, dangling owners."""

from __future__ import annotations

from conftest import CM, POD, RS, Kit, configmap, replicaset, running

from lite.client import Obj
from lite.errors import ApiError
from lite.objects import owner_ref, uid_of
from lite.server.controllers.gc import FOREGROUND, ORPHAN, GarbageCollector


async def _exists(kit: Kit, kind: object, name: str) -> bool:
    try:
        await kit.api.get(kind, "default", name)  # type: ignore[arg-type]
    except ApiError as e:
        assert e.code == 404
        return False
    return True


async def _owner_and_dependents(kit: Kit, block: bool = True) -> Obj:
    rs = await kit.api.create(RS, "default", replicaset("owner", 0))
    for i in range(2):
        await kit.api.create(CM, "default", configmap(f"dep-{i}", owners=[owner_ref(rs, block=block)]))
    return rs


async def test_background_deletes_dependents_after_owner_is_gone(kit: Kit) -> None:
    gc = GarbageCollector(kit.api, kit.informers, kit.kinds)
    await _owner_and_dependents(kit)
    await kit.settle(gc)
    async with running(gc):
        await kit.api.delete(RS, "default", "owner")
        await kit.until(lambda: _none_left(kit))
    assert not await _exists(kit, RS, "owner")


async def _none_left(kit: Kit) -> bool:
    return not (await kit.api.list(CM, "default"))["items"]


async def test_foreground_waits_for_blocking_dependents(kit: Kit) -> None:
    gc = GarbageCollector(kit.api, kit.informers, kit.kinds)
    await _owner_and_dependents(kit)
    # A dependent that holds its own finalizer keeps the owner waiting.
    rs = await kit.api.get(RS, "default", "owner")
    await kit.api.create(CM, "default", configmap("held", owners=[owner_ref(rs)], finalizers=["example.com/hold"]))
    await kit.settle(gc)
    async with running(gc):
        await kit.api.delete(RS, "default", "owner", propagation_policy="Foreground")
        await kit.until(lambda: _only_held_left(kit))
        owner = await kit.api.get(RS, "default", "owner")
        assert FOREGROUND in owner["metadata"]["finalizers"] and owner["metadata"]["deletionTimestamp"]
        held = await kit.api.get(CM, "default", "held")
        assert held["metadata"]["deletionTimestamp"]
        await kit.api.patch(CM, "default", "held", {"metadata": {"finalizers": None}})
        await kit.until(lambda: _gone(kit, RS, "owner"))


async def _only_held_left(kit: Kit) -> bool:
    """Only "held" is left, and the collector has asked for its deletion (it keeps its own finalizer)."""
    items = (await kit.api.list(CM, "default"))["items"]
    return [c["metadata"]["name"] for c in items] == ["held"] and bool(items[0]["metadata"].get("deletionTimestamp"))


async def _gone(kit: Kit, kind: object, name: str) -> bool:
    return not await _exists(kit, kind, name)


async def test_foreground_does_not_wait_for_non_blocking_dependents(kit: Kit) -> None:
    gc = GarbageCollector(kit.api, kit.informers, kit.kinds)
    await _owner_and_dependents(kit, block=False)
    await kit.settle(gc)
    async with running(gc):
        await kit.api.delete(RS, "default", "owner", propagation_policy="Foreground")
        await kit.until(lambda: _gone(kit, RS, "owner"))
        await kit.until(lambda: _none_left(kit))


async def test_orphan_removes_owner_references_and_keeps_dependents(kit: Kit) -> None:
    gc = GarbageCollector(kit.api, kit.informers, kit.kinds)
    rs = await _owner_and_dependents(kit)
    other = await kit.api.create(RS, "default", replicaset("other", 0))
    await kit.api.patch(CM, "default", "dep-1", {"metadata": {"ownerReferences": [
        owner_ref(rs), owner_ref(other, controller=False)]}})
    await kit.settle(gc)
    async with running(gc):
        await kit.api.delete(RS, "default", "owner", propagation_policy="Orphan")
        assert ORPHAN in (await kit.api.get(RS, "default", "owner"))["metadata"]["finalizers"]
        await kit.until(lambda: _gone(kit, RS, "owner"))
    dep0 = await kit.api.get(CM, "default", "dep-0")
    dep1 = await kit.api.get(CM, "default", "dep-1")
    assert not dep0["metadata"].get("ownerReferences")
    assert [r["uid"] for r in dep1["metadata"]["ownerReferences"]] == [uid_of(other)]


async def test_dangling_owner_uid_is_collected_and_partial_refs_pruned(kit: Kit) -> None:
    gc = GarbageCollector(kit.api, kit.informers, kit.kinds)
    live = await kit.api.create(RS, "default", replicaset("live", 0))
    ghost = {**owner_ref(live), "name": "ghost", "uid": "00000000-0000-0000-0000-000000000000"}
    recreated = {**owner_ref(live), "uid": "11111111-1111-1111-1111-111111111111"}  # same name, other uid
    await kit.api.create(CM, "default", configmap("orphaned", owners=[ghost]))
    await kit.api.create(CM, "default", configmap("stale-uid", owners=[recreated]))
    await kit.api.create(CM, "default", configmap("mixed", owners=[ghost, owner_ref(live, controller=False)]))
    await kit.settle(gc)
    async with running(gc):
        await kit.until(lambda: _gone(kit, CM, "orphaned"))
        await kit.until(lambda: _gone(kit, CM, "stale-uid"))
        await kit.until(lambda: _refs_are(kit, "mixed", [uid_of(live)]))
    assert await _exists(kit, RS, "live")


async def _refs_are(kit: Kit, name: str, uids: list[str]) -> bool:
    cm = await kit.api.get(CM, "default", name)
    return [r["uid"] for r in cm["metadata"].get("ownerReferences") or []] == uids


async def test_pods_of_a_deleted_replicaset_are_collected(kit: Kit) -> None:
    from lite.server.controllers.replicaset import ReplicaSetController
    gc = GarbageCollector(kit.api, kit.informers, kit.kinds)
    rsc = ReplicaSetController(kit.api, kit.informers)
    await kit.api.create(RS, "default", replicaset("web", 2))
    await kit.settle(gc, rsc)
    async with running(gc, rsc):
        await kit.until(lambda: _pod_count(kit, 2))
        await kit.until(lambda: _rs_replicas(kit, 2))  # let the status write land (see the report: 409 race)
        await kit.api.delete(RS, "default", "web")
        await kit.until(lambda: _pod_count(kit, 0))


async def _pod_count(kit: Kit, n: int) -> bool:
    return len((await kit.api.list(POD, "default"))["items"]) == n


async def _rs_replicas(kit: Kit, n: int) -> bool:
    return ((await kit.api.get(RS, "default", "web")).get("status") or {}).get("replicas") == n


async def test_foreground_keeps_a_dependent_that_has_another_valid_owner(kit: Kit) -> None:
    """Upstream attemptToDeleteItem: a dependent with a solid owner only loses its references to the owner
    in foreground deletion (and any dangling ones); it is not deleted, and the owner is not kept waiting."""
    gc = GarbageCollector(kit.api, kit.informers, kit.kinds)
    going = await kit.api.create(RS, "default", replicaset("going", 0))
    staying = await kit.api.create(RS, "default", replicaset("staying", 0))
    owners = [owner_ref(going), owner_ref(staying, controller=False)]
    await kit.api.create(CM, "default", configmap("shared", owners=owners))
    await kit.api.create(CM, "default", configmap("only", owners=[owner_ref(going)]))
    await kit.settle(gc)
    async with running(gc):
        await kit.api.delete(RS, "default", "going", propagation_policy="Foreground")
        await kit.until(lambda: _gone(kit, RS, "going"))
        await kit.until(lambda: _gone(kit, CM, "only"))
        shared = await kit.api.get(CM, "default", "shared")
        assert not shared["metadata"].get("deletionTimestamp")
        assert [r["uid"] for r in shared["metadata"]["ownerReferences"]] == [uid_of(staying)]
