"""SchedulingQueue: priority then arrival order, per-pod backoff, unschedulable parking and moves."""

from __future__ import annotations

import asyncio
import dataclasses
import sys

import orjson
import pytest
from plugkit import info, pod

from lite.client import Obj
from lite.server.scheduler.podinfo import NO_LABELS, PodInfo, SharedParts, pod_info, reparse, same_facts
from lite.server.scheduler.queue import QueuedPod, SchedulingQueue


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


async def pop_now(q: SchedulingQueue) -> str:
    async with asyncio.timeout(1):
        return (await q.pop()).name


def queue() -> tuple[SchedulingQueue, Clock]:
    clock = Clock()
    return SchedulingQueue(clock=clock), clock


async def test_higher_priority_first_then_arrival_order() -> None:
    q, clock = queue()
    for name, prio in [("low-1", 0), ("high", 100), ("low-2", 0), ("mid", 10)]:
        q.add(info(pod(name, priority=prio)))
        clock.t += 1
    assert [await pop_now(q) for _ in range(4)] == ["high", "mid", "low-1", "low-2"]
    q.close()


async def test_pop_waits_for_an_add() -> None:
    q, _ = queue()
    waiter = asyncio.create_task(q.pop())
    await asyncio.sleep(0)
    assert not waiter.done()
    q.add(info(pod("p")))
    async with asyncio.timeout(1):
        assert (await waiter).name == "p"
    q.close()


def test_backoff_doubles_from_one_second_to_ten() -> None:
    q, _ = queue()
    assert [q.backoff_for(n) for n in range(1, 7)] == [1, 2, 4, 8, 10, 10]


async def test_failed_pod_waits_out_its_backoff() -> None:
    q, clock = queue()
    q.add(info(pod("p")))
    await pop_now(q)
    q.requeue("default/p", unschedulable=False)
    assert q.pending()["backoff"] == ["default/p"]
    clock.t += 0.5
    q.flush()
    assert q.pending()["backoff"] == ["default/p"]
    clock.t += 0.6
    q.flush()
    assert q.pending()["active"] == ["default/p"]
    await pop_now(q)
    q.requeue("default/p", unschedulable=False)   # second attempt: 2 s
    clock.t += 1.5
    q.flush()
    assert q.pending()["backoff"] == ["default/p"]
    q.close()


async def test_unschedulable_pods_park_until_a_move_or_five_minutes() -> None:
    q, clock = queue()
    for name in ("a", "b"):
        q.add(info(pod(name)))
    await pop_now(q)
    await pop_now(q)
    q.requeue("default/a", unschedulable=True, plugins=frozenset({"NodeResourcesFit"}))
    q.requeue("default/b", unschedulable=True, plugins=frozenset({"InterPodAffinity"}))
    assert q.pending()["unschedulable"] == ["default/a", "default/b"]
    clock.t += 2
    q.move_all(frozenset({"InterPodAffinity"}))      # only helps b
    assert q.pending() == {"active": ["default/b"], "backoff": [], "unschedulable": ["default/a"], "inFlight": []}
    clock.t += 300
    q.flush()
    assert q.pending()["active"] == ["default/a", "default/b"]
    q.close()


async def test_move_during_the_cycle_sends_the_pod_to_backoff_not_unschedulable() -> None:
    q, _ = queue()
    q.add(info(pod("p")))
    await pop_now(q)
    q.move_all()                                     # a node appeared while p was being scheduled
    q.requeue("default/p", unschedulable=True)
    assert q.pending()["backoff"] == ["default/p"]
    q.close()


async def test_spec_update_moves_an_unschedulable_pod_and_delete_forgets_it() -> None:
    q, clock = queue()
    q.add(info(pod("p")))
    await pop_now(q)
    q.requeue("default/p", unschedulable=True)
    same = pod("p")
    same["status"] = {"conditions": [{"type": "PodScheduled", "status": "False"}]}
    q.update(info(same))                                 # a status write changes nothing that matters
    assert q.pending()["unschedulable"] == ["default/p"]
    q.update(info(pod("p", labels={"x": "y"})))         # changed: back, via backoff (1 s not over yet)
    assert q.pending()["backoff"] == ["default/p"]
    clock.t += 1
    q.flush()
    assert q.pending()["active"] == ["default/p"]
    q.delete("default/p")
    assert len(q) == 0 and q.pending()["active"] == []
    with pytest.raises(TimeoutError):
        await pop_now(q)
    q.close()


@pytest.mark.parametrize("unschedulable", [True, False])
async def test_requeue_of_a_deleted_pod_is_ignored(unschedulable: bool) -> None:
    q, _ = queue()
    q.add(info(pod("p")))
    await pop_now(q)
    q.delete("default/p")
    q.requeue("default/p", unschedulable=unschedulable)
    assert len(q) == 0
    q.close()


async def test_queued_pod_info_keeps_the_pods_json_and_spec_changes_still_move_it() -> None:
    """What the queue keeps of a pod: its JSON (decoded per use, never kept) and a fingerprint of the facts
    parsed from it, which a status write or the binding leaves alone and a label or spec change does not."""
    p = pod("p", labels={"app": "x"})
    raw = orjson.dumps(p)
    i = pod_info(p, encoded=raw)
    assert i.source is raw and i.obj == p and i.obj is not i.obj
    packed = pod_info(p, encoded=b"x" + raw, decoder=lambda b: orjson.loads(b[1:]))  # the informer's own form
    assert packed.obj == p and reparse(packed, p, encoded=b"x" + raw, decoder=packed.decoder).obj == p
    status_only = {**p, "status": {"conditions": [{"type": "PodScheduled", "status": "False"}]}}
    bound = {**p, "spec": {**p["spec"], "nodeName": "n1"}}
    tolerant = {**p, "spec": {**p["spec"], "tolerations": [{"operator": "Exists"}]}}
    assert same_facts(i, status_only) and same_facts(i, bound)
    assert not same_facts(i, {**p, "metadata": {**p["metadata"], "labels": {"app": "y"}}})
    assert not same_facts(i, tolerant)
    again = reparse(i, bound, encoded=orjson.dumps(bound))
    assert again.facts == i.facts and again.node_name == "n1" and again.obj == bound
    # reparse's copy is dataclasses.replace's: every other field kept
    assert again == dataclasses.replace(i, source=again.source, decoder=again.decoder, node_name="n1")
    q, _ = queue()
    q.add(i)
    await pop_now(q)
    q.requeue("default/p", unschedulable=True)
    q.update(pod_info(status_only, encoded=orjson.dumps(status_only)))
    assert q.pending()["unschedulable"] == ["default/p"]
    q.update(pod_info(tolerant, encoded=orjson.dumps(tolerant)))  # a spec change: out of unschedulable
    assert q.pending()["unschedulable"] == [] and len(q) == 1
    q.close()


def test_pod_infos_of_one_template_share_their_parsed_parts() -> None:
    """What the scheduler keeps per pending pod is small: with one `SharedParts`, pods made from one template
    (each with its own name, uid and token volume) share their parsed tolerations, requests, images and
    non-zero memory; the key is the interned string (the informer's); no nodeSelector or labels is one
    empty mapping; a queued pod has no per-instance dict."""
    tolerations = [{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute",
                    "tolerationSeconds": 300}]

    def templated(name: str) -> Obj:
        p = pod(name, cpu="100m", memory="64Mi", tolerations=tolerations,
                volumes=[{"name": f"kube-api-access-{name}", "projected": {"sources": []}}])
        p["metadata"] = {"name": name, "namespace": "default", "uid": f"uid-{name}"}
        return orjson.loads(orjson.dumps(p))  # decoded apart, as two informer events are: nothing shared yet

    parts = SharedParts()
    a, b = (pod_info(templated(n), parts=parts) for n in ("a", "b"))
    assert a.requests == b.requests and a.requests is b.requests and a.tolerations is b.tolerations
    assert a.images is b.images and a.nonzero_mem is b.nonzero_mem and a.host_ports is b.host_ports
    assert a.key is sys.intern("default/a") and a.labels is NO_LABELS and a.node_selector is NO_LABELS
    assert reparse(None, templated("c"), parts=parts).tolerations is a.tolerations
    apart = pod_info(templated("d"))
    assert apart.tolerations == a.tolerations  # without a SharedParts: equal (tolerations lists are memoised apart)
    assert not hasattr(QueuedPod(a, 0.0), "__dict__")
    small = SharedParts(limit=2)
    for i in range(5):
        small.share(("x", i))
    assert len(small) <= 2  # bounded


async def test_with_rebuild_a_parked_pod_keeps_no_pod_info_and_is_rebuilt_when_popped() -> None:
    """With `rebuild` (the scheduler's), an unschedulable pod is parked as its key, priority, facts and backoff
    state only; a move sends it back in its priority order and `pop` rebuilds its PodInfo (from the pod as it
    is then); a pod `rebuild` no longer finds is dropped; an update that changes nothing stays parked."""
    pods = {"default/low": pod("low", priority=1), "default/high": pod("high", priority=5)}
    rebuilt: list[str] = []

    def rebuild(key: str) -> PodInfo | None:
        rebuilt.append(key)
        p = pods.get(key)
        return info(p) if p is not None else None

    clock = Clock()
    q = SchedulingQueue(clock=clock, rebuild=rebuild)
    for p in pods.values():
        q.add(info(p))
    for _ in range(2):
        name = await pop_now(q)
        q.requeue(f"default/{name}", unschedulable=True, plugins=frozenset({"NodeResourcesFit"}))
    assert q.pending()["unschedulable"] == ["default/high", "default/low"]
    assert q.info("default/high") is None and q.info("default/low") is None and rebuilt == []
    assert q.unparsed("default/high") == (info(pods["default/high"]).facts, 5)
    parked = q._pods["default/high"]  # its one time is when it was parked: the backoff's end is computed
    assert [f for f in QueuedPod.__slots__ if isinstance(getattr(parked, f), float)] == ["timestamp"]
    q.update(info({**pods["default/low"], "status": {"phase": "Pending"}}))  # nothing the plugins read
    assert q.info("default/low") is None and q.pending()["unschedulable"] == ["default/high", "default/low"]
    pods["default/high"] = pod("high", priority=5, labels={"now": "this"})
    clock.t += 10                                                   # past their backoff
    q.move_all()
    assert q.pending()["active"] == ["default/high", "default/low"] and rebuilt == []
    got = await q.pop()
    assert got.name == "high" and got.labels == {"now": "this"} and rebuilt == ["default/high"]
    del pods["default/low"]                                         # gone meanwhile: dropped when its turn comes
    with pytest.raises(TimeoutError):
        await pop_now(q)
    assert "default/low" not in q and rebuilt == ["default/high", "default/low"]
    late = info(pod("late", priority=3))
    q.add_unparsed("default/late", 3, late.facts)                 # a new pod: parsed only when popped
    assert q.info("default/late") is None and q.unparsed("default/late") == (late.facts, 3)
    pods["default/late"] = pod("late", priority=3)
    assert (await q.pop()).name == "late" and rebuilt[-1] == "default/late"
    q.close()


async def test_the_active_set_is_small_again_once_emptied() -> None:
    """After a burst (a restart queues every pending pod at once) the queue's tables do not keep their size."""
    q, _ = queue()
    for i in range(3000):
        q.add(info(pod(f"p{i}")))
    for _ in range(3000):
        await pop_now(q)
    assert sys.getsizeof(q._active_keys) < 1024
    q.close()
