"""Leader election over HTTPS against a running `lite server` (the shared e2e server), as candidates in several
processes would run it: each elector has its own connection; the Lease is written with PUT and its
resourceVersion, so a lost race is the API's 409."""

from __future__ import annotations

import asyncio
import contextlib

from e2ekit import Cluster

from lite.httpclient import HttpClient
from lite.server.leaderelection import LeaderElector, lease_kind, run_elected

GUARD = 20.0  # a hang guard, never a speed assertion


async def _idle() -> None:
    await asyncio.Event().wait()


async def test_candidates_over_https_race_then_hand_over(cluster: Cluster) -> None:
    path = str(cluster.kubeconfig)
    async with HttpClient.from_kubeconfig(path) as one, HttpClient.from_kubeconfig(path) as two:
        # a's lease is long (40 s): b can only lead within the guard because a released it
        a = LeaderElector(one, "a", name="e2e-election", lease_duration=40, renew_deadline=30, retry_period=0.1,
                          renew_interval=0.2)
        b = LeaderElector(two, "b", name="e2e-election", lease_duration=40, renew_deadline=30, retry_period=0.1,
                          renew_interval=0.2)
        # both find no Lease and create it at once: exactly one wins (the other's create answers 409)
        won = await asyncio.gather(a.try_acquire_or_renew(), b.try_acquire_or_renew())
        assert sorted(won) == [False, True]
        leader, standby = (a, b) if won[0] else (b, a)
        ta = asyncio.create_task(run_elected(leader, _idle, what=leader.identity))
        tb = asyncio.create_task(run_elected(standby, _idle, what=standby.identity))
        try:
            async with asyncio.timeout(GUARD):
                await asyncio.sleep(0.5)  # several renewals and retries: the standby keeps waiting
                assert leader.is_leader and not standby.is_leader
                ta.cancel()  # graceful shutdown: the leader releases
                with contextlib.suppress(asyncio.CancelledError):
                    await ta
                while not standby.is_leader:
                    await asyncio.sleep(0.05)
            spec = (await one.get(lease_kind(), "kube-system", "e2e-election"))["spec"]
            assert spec["holderIdentity"] == standby.identity and spec["leaseTransitions"] == 1
        finally:
            for t in (ta, tb):
                t.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await t
            with contextlib.suppress(Exception):
                await one.delete(lease_kind(), "kube-system", "e2e-election")
