"""Leader election (lite.server.leaderelection): the pure decisions as tables, then electors, the controller manager
and the scheduler against the real in-process API over a real SQLite store, with short durations.

Times are never asserted as upper bounds (a loaded machine is slow); conditions are awaited under a hang guard.
The one lower bound checked (a standby does not take a live lease before it expired by its own clock) can only
fail if the code is wrong, never because the machine is slow.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Coroutine
from typing import Any

import pytest
from conftest import LEASE, POD, RS, Kit, replicaset

from lite.client import Obj
from lite.errors import ApiError
from lite.objects import rfc3339_micro
from lite.server.api.resources import Resources
from lite.server.controllers.manager import build_controller_manager
from lite.server.controllers.runtime import builtin
from lite.server.leaderelection import (
    CONTROLLER_MANAGER_LEASE,
    SCHEDULER_LEASE,
    LeaderElector,
    LostLease,
    Observation,
    Record,
    Verdict,
    decide,
    next_spec,
    observe,
    record_of,
    released_spec,
    retry_delay,
    run_elected,
    stepped_down,
)
from lite.server.scheduler.scheduler import build_scheduler

NS = "kube-system"
FAST = {"lease_duration": 1.0, "renew_interval": 0.1, "renew_deadline": 0.6, "retry_period": 0.05}
NODE = builtin("", "Node")


def rec(holder: str = "a", duration: int = 15, transitions: int = 3, acquire: str = "T0", renew: str = "T1") -> Record:
    return Record(holder, duration, acquire, renew, transitions)


# -- the pure part ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("record", "seen_at", "now", "sole", "want"), [
    (None, 0.0, 0.0, False, Verdict.CREATE),  # no Lease: create it
    (rec("me"), 0.0, 1000.0, False, Verdict.RENEW),  # ours, even long expired: renew
    (rec("me"), 0.0, 1.0, True, Verdict.RENEW),
    (rec(""), 100.0, 100.0, False, Verdict.TAKE),  # released: at once
    (rec("a"), 100.0, 100.0, False, Verdict.WAIT),  # someone else's, just seen
    (rec("a"), 100.0, 114.9, False, Verdict.WAIT),  # ... not yet expired by our clock
    (rec("a"), 100.0, 115.0, False, Verdict.TAKE),  # ... expired by our clock (client-go: held while seen+d > now)
    (rec("a", duration=1), 100.0, 100.5, False, Verdict.WAIT),  # the record's duration counts, not ours
    (rec("a", duration=1), 100.0, 101.0, False, Verdict.TAKE),
    (rec("a", duration=0), 100.0, 100.0, False, Verdict.TAKE),  # a malformed zero duration protects nothing
    (rec("a"), 100.0, 100.0, True, Verdict.TAKE),  # sole: a foreign holder is our dead previous incarnation
])
def test_decide(record: Record | None, seen_at: float, now: float, sole: bool, want: Verdict) -> None:
    assert decide(Observation(record, seen_at), "me", now, sole=sole) is want


def test_expiry_runs_from_our_observation_not_from_the_renew_time() -> None:
    """A renewTime hours old (a skewed clock elsewhere) protects the holder for a full duration from when we saw
    the record change; an unchanged record keeps its first observation time, a changed one restarts it."""
    old = rec("a", renew="2001-01-01T00:00:00.000000Z")
    first = observe(None, old, 50.0)
    assert decide(first, "me", 60.0) is Verdict.WAIT
    same = observe(first, rec("a", renew="2001-01-01T00:00:00.000000Z"), 60.0)
    assert same.at == 50.0 and decide(same, "me", 65.0) is Verdict.TAKE
    renewed = observe(same, rec("a", renew="2001-01-01T00:00:05.000000Z"), 64.0)
    assert renewed.at == 64.0 and decide(renewed, "me", 65.0) is Verdict.WAIT
    assert observe(None, None, 3.0) == Observation(None, 3.0)
    assert observe(Observation(None, 1.0), None, 3.0).at == 1.0


@pytest.mark.parametrize(("record", "verdict", "acquire", "transitions"), [
    (None, Verdict.CREATE, "NOW", 0),
    (rec("me", acquire="T0", transitions=3), Verdict.RENEW, "T0", 3),  # a renewal keeps the term's start
    (rec("a", transitions=3), Verdict.TAKE, "NOW", 4),  # a new holder: one more transition
    (rec("", transitions=3), Verdict.TAKE, "NOW", 4),
])
def test_next_spec(record: Record | None, verdict: Verdict, acquire: str, transitions: int) -> None:
    assert next_spec(record, verdict, "me", "NOW", 15) == {
        "holderIdentity": "me", "leaseDurationSeconds": 15, "acquireTime": acquire, "renewTime": "NOW",
        "leaseTransitions": transitions}
    with pytest.raises(ValueError):
        next_spec(record, Verdict.WAIT, "me", "NOW", 15)


def test_release_and_records() -> None:
    assert released_spec(rec("me", transitions=7), "NOW") == {
        "holderIdentity": "", "leaseDurationSeconds": 1, "acquireTime": "NOW", "renewTime": "NOW",
        "leaseTransitions": 7}
    assert record_of(None) is None
    assert record_of({"spec": {}}) == Record("", 0, "", "", 0)
    assert record_of({"spec": {"holderIdentity": "x", "leaseDurationSeconds": 15, "leaseTransitions": 2,
                               "acquireTime": "A", "renewTime": "R"}}) == Record("x", 15, "A", "R", 2)


@pytest.mark.parametrize(("renewed_at", "now", "down"), [
    (10.0, 10.0, False), (10.0, 19.9, False), (10.0, 20.0, True), (float("-inf"), 0.0, True)])
def test_stepped_down(renewed_at: float, now: float, down: bool) -> None:
    assert stepped_down(renewed_at, now, 10.0) is down


@pytest.mark.parametrize(("obs", "now", "want"), [
    (None, 5.0, 2.0),  # nothing observed: the retry period
    (Observation(None, 0.0), 5.0, 2.0),  # no Lease
    (Observation(rec(""), 0.0), 5.0, 2.0),  # released (taken at the next try anyway)
    (Observation(rec("a", duration=15), 100.0), 101.0, 2.0),  # expires in 14 s: the retry comes first
    (Observation(rec("a", duration=15), 100.0), 114.0, 1.01),  # expires in 1 s: wake just after it
    (Observation(rec("a", duration=15), 100.0), 120.0, 0.0),  # expired already: at once
])
def test_retry_delay(obs: Observation | None, now: float, want: float) -> None:
    assert retry_delay(obs, now, 2.0) == pytest.approx(want)


def test_durations_are_checked() -> None:
    with pytest.raises(ValueError):
        LeaderElector(None, "me", name="x", lease_duration=10, renew_deadline=10)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        LeaderElector(None, "me", name="x", renew_interval=10, renew_deadline=10)  # type: ignore[arg-type]


# -- electors over the real API ---------------------------------------------------------------------------------

class Partition:
    """The API as one server sees it, with a switch that makes every call fail as an unreachable API would."""

    def __init__(self, api: Resources) -> None:
        self.api = api
        self.cut = False

    def __getattr__(self, verb: str) -> Any:
        real = getattr(self.api, verb)

        async def call(*args: Any, **kwargs: Any) -> Any:
            if self.cut:
                raise ApiError(503, "ServiceUnavailable", "partitioned")
            return await real(*args, **kwargs)

        return call


def elector(api: Any, identity: str, name: str = "test-lease", **durations: float) -> LeaderElector:
    return LeaderElector(api, identity, name=name, **{**FAST, **durations})


@contextlib.asynccontextmanager
async def running(coro: Coroutine[Any, Any, None]) -> AsyncIterator[asyncio.Task[None]]:
    task = asyncio.create_task(coro)
    try:
        yield task
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def idle() -> None:
    await asyncio.Event().wait()


async def holder(kit: Kit, name: str = "test-lease") -> str:
    return str((await kit.api.get(LEASE, NS, name))["spec"].get("holderIdentity") or "")


async def test_one_leads_the_other_waits_then_takes_over_a_crashed_leader(kit: Kit) -> None:
    net = Partition(kit.api)
    a, b = elector(net, "a"), elector(kit.api, "b")
    async with running(run_elected(a, idle, what="a")) as task_a:
        await kit.until(lambda: a.is_leader)
        async with running(run_elected(b, idle, what="b")):
            # b keeps trying while a renews: one and a half lease durations later a still leads and b does not.
            seen = (await kit.api.get(LEASE, NS, "test-lease"))["spec"]["renewTime"]
            before = time.monotonic()
            await kit.until(lambda: time.monotonic() > before + 1.5 * a.lease_duration)
            assert await holder(kit) == "a" and a.is_leader and not b.is_leader
            assert (await kit.api.get(LEASE, NS, "test-lease"))["spec"]["renewTime"] != seen  # a renewed
            # a crashes: cut from the API, then gone, so it neither renews nor releases.
            net.cut = True
            task_a.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task_a
            assert await holder(kit) == "a"
            await kit.until(lambda: b.is_leader)  # once the lease expired by b's clock (lower bound: next test)
            lease = (await kit.api.get(LEASE, NS, "test-lease"))["spec"]
            assert lease["holderIdentity"] == "b" and lease["leaseTransitions"] == 1


async def test_a_sole_server_takes_its_dead_incarnations_lease_at_once(kit: Kit) -> None:
    """On a store no other server can share, a foreign holder is this server's previous, dead, incarnation: its
    Lease (an hour long here) is taken at once instead of after it expires."""
    await kit.api.create(LEASE, NS, {
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "test-lease", "namespace": NS},
        "spec": {"holderIdentity": "host_previous", "leaseDurationSeconds": 3600, "renewTime": rfc3339_micro(),
                 "acquireTime": rfc3339_micro(), "leaseTransitions": 2}})
    shared = elector(kit.api, "host_new")
    assert not await shared.try_acquire_or_renew()  # without `sole` it waits, as it must when servers share a store
    sole = LeaderElector(kit.api, "host_new", name="test-lease", sole=True)  # default durations
    await asyncio.wait_for(sole.acquire(), 10)
    lease = (await kit.api.get(LEASE, NS, "test-lease"))["spec"]
    assert lease["holderIdentity"] == "host_new" and lease["leaseTransitions"] == 3
    assert lease["leaseDurationSeconds"] == 15


async def test_a_standby_never_takes_a_live_lease_early(kit: Kit) -> None:
    """Lower bound: a lease seen held is taken only after a full lease duration of the standby's own clock."""
    a = elector(kit.api, "a")
    assert await a.try_acquire_or_renew()  # a takes it, then dies without renewing
    b = elector(kit.api, "b", lease_duration=1.0)
    start = time.monotonic()
    await asyncio.wait_for(b.acquire(), 10)
    assert time.monotonic() - start >= 1.0  # leaseDurationSeconds 1, timed from b's first read
    assert await holder(kit) == "b"


async def test_graceful_release_hands_over_at_once(kit: Kit) -> None:
    """The leader's lease is long (30 s, three times the hang guard): b can only lead in time if a released it."""
    a = elector(kit.api, "a", lease_duration=30.0, renew_deadline=20.0)
    b = elector(kit.api, "b")
    async with running(run_elected(a, idle, what="a")) as task_a, running(run_elected(b, idle, what="b")):
        await kit.until(lambda: a.is_leader)
        await kit.until(lambda: b.observed is not None and b.observed.record is not None)
        task_a.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task_a
        await kit.until(lambda: b.is_leader)
        lease = (await kit.api.get(LEASE, NS, "test-lease"))["spec"]
        assert lease["holderIdentity"] == "b" and lease["leaseTransitions"] == 1


class LateRenewal:
    """The API as the leader sees it, where its first release write meets the lease changed since its read (as by
    a renewal of its own, cancelled in flight, that still commits): the first `update` after `arm` writes the
    lease once through the real API (a new renewTime), then goes on with the leader's now stale object."""

    def __init__(self, api: Resources) -> None:
        self.api = api
        self.armed = False

    def __getattr__(self, verb: str) -> Any:
        return getattr(self.api, verb)

    async def update(self, kind: Any, namespace: str, name: str, obj: Any) -> Any:
        if self.armed:
            self.armed = False
            current = await self.api.get(kind, namespace, name)
            current["spec"]["renewTime"] = rfc3339_micro()
            await self.api.update(kind, namespace, name, current)
        return await self.api.update(kind, namespace, name, obj)


async def test_release_rereads_a_lease_changed_under_it(kit: Kit) -> None:
    """A release that meets a Conflict (the lease written after its read) reads again and releases what is
    still its own: the standby leads at once, not after the 30 s lease runs out."""
    late = LateRenewal(kit.api)
    a = elector(late, "a", lease_duration=30.0, renew_deadline=20.0)
    b = elector(kit.api, "b")
    async with running(run_elected(a, idle, what="a")) as task_a, running(run_elected(b, idle, what="b")):
        await kit.until(lambda: a.is_leader)
        await kit.until(lambda: b.observed is not None and b.observed.record is not None)
        late.armed = True
        task_a.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task_a
        assert not late.armed  # the release did meet the changed lease
        await kit.until(lambda: b.is_leader)
        lease = (await kit.api.get(LEASE, NS, "test-lease"))["spec"]
        assert lease["holderIdentity"] == "b"


async def test_a_partitioned_leader_stops_within_the_renew_deadline(kit: Kit) -> None:
    """A leader that cannot reach the API stops its work once the renew deadline has passed since its last good
    renewal; the standby takes over only after the lease expired, and the old leader leads again once it can
    reach the API and the lease is free."""
    net = Partition(kit.api)
    # renewals 0.5 s apart, deadline 0.6 s, lease 1 s: the deadline must run from the last good renewal
    a, b = elector(net, "a", renew_interval=0.5), elector(kit.api, "b")
    terms: list[str] = []

    def work(name: str) -> Any:
        async def lead() -> None:
            terms.append(f"{name} started")
            try:
                await idle()
            finally:
                terms.append(f"{name} stopped")
        return lead

    async with running(run_elected(a, work("a"), what="a")):
        await kit.until(lambda: terms == ["a started"])
        async with running(run_elected(b, work("b"), what="b")):
            net.cut = True
            await kit.until(lambda: terms[-1:] == ["a stopped"])
            assert not a.is_leader
            # b's work starts in its own task just after b.is_leader turns true: wait for the work, not the flag
            await kit.until(lambda: b.is_leader and terms[-1:] == ["b started"])
            assert terms == ["a started", "a stopped", "b started"]  # never both at once
            net.cut = False
        # b shut down and released: a, retrying all along, leads again.
        await kit.until(lambda: a.is_leader and terms[-1] == "a started")
    assert terms == ["a started", "a stopped", "b started", "b stopped", "a started", "a stopped"]


# -- the controller manager and the scheduler stop with the lease and start again with it ------------------------

async def _steal(kit: Kit, name: str) -> None:
    """Someone else holds the lease now, for an hour."""
    lease = await kit.api.get(LEASE, NS, name)
    lease["spec"].update(holderIdentity="thief", leaseDurationSeconds=3600, renewTime=rfc3339_micro())
    await kit.api.update(LEASE, NS, name, lease)


async def _give_back(kit: Kit, name: str) -> None:
    lease = await kit.api.get(LEASE, NS, name)
    lease["spec"].update(holderIdentity="", leaseDurationSeconds=1, renewTime=rfc3339_micro())
    await kit.api.update(LEASE, NS, name, lease)


async def test_controllers_stop_when_the_lease_is_lost_and_resume_when_regained(kit: Kit) -> None:
    m = build_controller_manager(kit.api, kinds=kit.kinds, identity="me", **FAST)
    async with running(m.run()):
        await kit.until(lambda: m.is_leader)
        await _steal(kit, CONTROLLER_MANAGER_LEASE)
        await kit.until(lambda: not m.is_leader)
        rs = m.controller("replicaset")
        await kit.until(lambda: rs.queue.shutting_down)  # its workers are gone with the lease
        await kit.api.create(RS, "default", replicaset("web", 2))
        await kit.settle()  # the manager's informers have the ReplicaSet: a running controller would act on it
        for _ in range(20):  # an observation window, not a timing assertion: nothing may happen in it
            await asyncio.sleep(0.01)
            assert (await kit.api.list(POD, "default"))["items"] == []
        await _give_back(kit, CONTROLLER_MANAGER_LEASE)
        await kit.until(lambda: m.is_leader)
        await kit.until(lambda: _count_pods(kit, 2))  # the new term's workers start from every current key


async def _count_pods(kit: Kit, n: int) -> bool:
    return len((await kit.api.list(POD, "default"))["items"]) == n


def _node(name: str) -> Obj:
    alloc = {"cpu": "4", "memory": "8Gi", "pods": "110"}
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
            "status": {"capacity": alloc, "allocatable": alloc,
                       "conditions": [{"type": "Ready", "status": "True"}]}}


def _pod(name: str) -> Obj:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
            "spec": {"containers": [{"name": "c", "image": "nginx:1"}]}}


async def _node_of(kit: Kit, name: str) -> str:
    return str((await kit.api.get(POD, "default", name))["spec"].get("nodeName") or "")


async def test_the_scheduler_binds_only_while_it_holds_its_lease(kit: Kit) -> None:
    scheduler = build_scheduler(kit.api, kit.informers, scheduled_events=False)
    e = elector(kit.api, "me", name=SCHEDULER_LEASE)

    async def elected() -> None:
        await scheduler.start()
        await run_elected(e, scheduler.lead, what="scheduler")

    await kit.api.create(NODE, "", _node("n1"))
    async with running(elected()):
        await kit.api.create(POD, "default", _pod("first"))
        await kit.until(lambda: _node_of(kit, "first"))
        await _steal(kit, SCHEDULER_LEASE)
        await kit.until(lambda: not e.is_leader)
        await kit.api.create(POD, "default", _pod("second"))
        await kit.settle()
        await kit.until(lambda: "default/second" in scheduler.queue)  # queued, so a running loop would bind it
        for _ in range(20):  # an observation window, not a timing assertion: nothing may happen in it
            await asyncio.sleep(0.01)
            assert await _node_of(kit, "second") == ""
        await _give_back(kit, SCHEDULER_LEASE)
        await kit.until(lambda: e.is_leader)
        await kit.until(lambda: _node_of(kit, "second"))
        assert await _node_of(kit, "second") == "n1"
        await kit.api.create(POD, "default", _pod("third"))  # the new term keeps scheduling new pods
        await kit.until(lambda: _node_of(kit, "third"))


class HangingBinds:
    """The API, except that bindings hang (an API server that stopped answering) while `hang` is set."""

    def __init__(self, api: Resources) -> None:
        self.api = api
        self.hang = True
        self.hung = 0

    def __getattr__(self, verb: str) -> Any:
        return getattr(self.api, verb)

    async def create(self, *args: Any, subresource: str = "", **kwargs: Any) -> Any:
        if subresource == "binding" and self.hang:
            self.hung += 1
            await idle()
        return await self.api.create(*args, subresource=subresource, **kwargs)


async def test_a_new_scheduler_term_retries_the_binds_the_last_one_left_in_flight(kit: Kit) -> None:
    """A bind cancelled with its term leaves its pod assumed; the next term forgets it and schedules it again."""
    api = HangingBinds(kit.api)
    scheduler = build_scheduler(api, kit.informers, scheduled_events=False)  # type: ignore[arg-type]
    e = elector(kit.api, "me", name=SCHEDULER_LEASE)

    async def elected() -> None:
        await scheduler.start()
        await run_elected(e, scheduler.lead, what="scheduler")

    await kit.api.create(NODE, "", _node("n1"))
    async with running(elected()):
        await kit.api.create(POD, "default", _pod("stuck"))
        await kit.until(lambda: api.hung == 1)  # assumed on n1, its binding in flight
        assert scheduler.cache.is_assumed("default/stuck")
        await _steal(kit, SCHEDULER_LEASE)  # the term ends with the bind still in flight
        await kit.until(lambda: not e.is_leader)
        api.hang = False
        await _give_back(kit, SCHEDULER_LEASE)
        await kit.until(lambda: e.is_leader)
        await kit.until(lambda: _node_of(kit, "stuck"))


class _LosingElector:
    """An elector whose lease is lost (hold raises LostLease) the moment the test opens `gate`."""

    where = "kube-system/stub"

    def __init__(self) -> None:
        self.gate = asyncio.Event()
        self.terms = 0

    async def acquire(self) -> None:
        self.terms += 1

    async def hold(self) -> None:
        await self.gate.wait()
        raise LostLease(self.where)


@pytest.mark.parametrize("cancel_first", [False, True])
async def test_run_elected_ends_when_cancelled_as_the_lease_is_lost(cancel_first: bool) -> None:
    """A cancellation (server shutdown) that meets the loss of the lease still ends run_elected: on Python
    3.11 a TaskGroup raised only the LostLease and the loop went on to acquire again, never ending."""
    stub = _LosingElector()
    task = asyncio.create_task(run_elected(stub, idle, what="stub"))  # type: ignore[arg-type]
    while stub.terms == 0:
        await asyncio.sleep(0)
    await asyncio.sleep(0)  # hold and the work are waiting
    if cancel_first:
        task.cancel()
        stub.gate.set()
    else:
        stub.gate.set()
        task.cancel()
    done, _ = await asyncio.wait((task,), timeout=5)
    assert task in done and task.cancelled(), f"run_elected ran on after its cancellation ({stub.terms} terms)"
