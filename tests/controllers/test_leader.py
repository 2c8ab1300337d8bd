"""Leader election between controller managers over the real in-process API (short leases for speed)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable

from conftest import LEASE, POD, RS, Kit, replicaset

from lite.errors import ApiError
from lite.objects import rfc3339_micro
from lite.server.controllers.manager import build_controller_manager
from lite.server.controllers.runtime import ControllerManager

FAST = {"lease_duration": 1.0, "renew_interval": 0.1, "renew_deadline": 0.5, "retry_period": 0.05}


@contextlib.asynccontextmanager
async def started(m: ControllerManager) -> AsyncIterator[asyncio.Task[None]]:
    task = asyncio.create_task(m.run())
    try:
        yield task
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def _holder(kit: Kit) -> str:
    lease = await kit.api.get(LEASE, "kube-system", "kube-controller-manager")
    return str(lease["spec"].get("holderIdentity") or "")


async def test_handover_between_two_managers(kit: Kit) -> None:
    a = build_controller_manager(kit.api, kinds=kit.kinds, identity="a", **FAST)
    b = build_controller_manager(kit.api, kinds=kit.kinds, identity="b", **FAST)
    async with started(a) as task_a, started(b):
        await kit.until(lambda: a.is_leader)
        await kit.until(lambda: b.synced.is_set())
        # b keeps trying while a renews: many renew periods later a still holds the lease.
        for _ in range(5):
            await asyncio.sleep(FAST["renew_interval"])
            assert await _holder(kit) == "a" and not b.is_leader
        # The leader's workers run: a ReplicaSet gets its pods.
        await kit.api.create(RS, "default", replicaset("web", 2))
        await kit.until(lambda: _pods(kit, 2))
        task_a.cancel()  # shutdown releases the lease, so b need not wait for it to expire
        with contextlib.suppress(asyncio.CancelledError):
            await task_a
        await kit.until(lambda: b.is_leader)
        lease = await kit.api.get(LEASE, "kube-system", "kube-controller-manager")
        assert lease["spec"]["holderIdentity"] == "b"
        assert lease["spec"]["leaseTransitions"] == 1
        # b's workers took over.
        await _scale(kit, 3)
        await kit.until(lambda: _pods(kit, 3))


async def _scale(kit: Kit, n: int) -> None:
    # A 409 here is the API's pending-write race (reported): a patch without a precondition that meets a
    # status write still in its group commit. Retry as kubectl's users would.
    for _ in range(50):
        try:
            await kit.api.patch(RS, "default", "web", {"spec": {"replicas": n}})
            return
        except ApiError as e:
            if e.code != 409:
                raise
            await asyncio.sleep(0.01)
    raise AssertionError("the ReplicaSet could not be scaled")


async def _pods(kit: Kit, n: int) -> bool:
    return len((await kit.api.list(POD, "default"))["items"]) == n


async def test_expired_lease_of_a_dead_holder_is_taken_over(kit: Kit) -> None:
    await kit.api.create(LEASE, "kube-system", {
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": "kube-controller-manager", "namespace": "kube-system"},
        "spec": {"holderIdentity": "dead", "leaseDurationSeconds": 1, "renewTime": rfc3339_micro(),
                 "acquireTime": rfc3339_micro(), "leaseTransitions": 4}})
    m = build_controller_manager(kit.api, kinds=kit.kinds, identity="new", **FAST)
    await kit.api.create(RS, "default", replicaset("web", 1))
    async with started(m):
        await kit.until(lambda: m.synced.is_set())
        assert not m.is_leader and await _holder(kit) == "dead"
        await kit.until(lambda: m.is_leader)
        await kit.until(lambda: _pods(kit, 1))
    lease = await kit.api.get(LEASE, "kube-system", "kube-controller-manager")
    assert lease["spec"]["leaseTransitions"] == 5
    assert lease["spec"]["holderIdentity"] == ""  # released on shutdown


async def test_leader_tasks_run_only_on_the_leader_and_restart_with_each_term(kit: Kit) -> None:
    """The server's loops gated under the controller manager's Lease (e.g. ClusterRole aggregation) run while
    their manager leads, on one manager of two, and start afresh on the one that takes over."""
    running: dict[str, int] = {"a": 0, "b": 0}
    started_terms: dict[str, int] = {"a": 0, "b": 0}

    def loop(name: str) -> Callable[[], Awaitable[None]]:
        async def run() -> None:
            started_terms[name] += 1
            running[name] += 1
            try:
                await asyncio.Event().wait()
            finally:
                running[name] -= 1
        return run

    a = build_controller_manager(kit.api, kinds=kit.kinds, identity="a", **FAST)
    b = build_controller_manager(kit.api, kinds=kit.kinds, identity="b", **FAST)
    a.leader_tasks.append(("gated", loop("a")))
    b.leader_tasks.append(("gated", loop("b")))
    async with started(a) as task_a, started(b):
        await kit.until(lambda: a.is_leader and running["a"] == 1)
        await kit.until(lambda: b.synced.is_set())
        for _ in range(5):
            await asyncio.sleep(FAST["renew_interval"])
            assert (running, started_terms["b"]) == ({"a": 1, "b": 0}, 0)
        task_a.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task_a
        assert running["a"] == 0  # stopped with its term
        await kit.until(lambda: b.is_leader and running["b"] == 1)
        assert started_terms == {"a": 1, "b": 1}
