"""Leader election on a coordination.k8s.io/v1 Lease, as client-go's `leaderelection` package does it.

The elector owns one Lease (`kube-system/lite-controller-manager` for the controller manager):

    acquire(): try every `retry_interval` until we hold the lease ──► hold(): renew every `renew_interval`;
                                                                        a renewal that keeps failing for
                                                                        `renew_deadline` raises LostLease
    cancelled while holding ──► release(): holderIdentity "" and leaseDurationSeconds 1, so a standby
                                takes over at once instead of waiting for the lease to expire

Invariants:
- A lease held by someone else is taken only once it has expired *as observed locally*: the local monotonic
  time at which we last saw the record change, plus its leaseDurationSeconds (client-go's observedTime; no
  trust in other machines' clocks).
- Every write carries the resourceVersion read (optimistic concurrency), so two candidates never both win.
- `leaseTransitions` grows by one whenever the holder changes; `acquireTime` marks the current holder's start.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from lite.client import Client
from lite.errors import ApiError
from lite.kinds import BUILTIN_KINDS, Kind
from lite.objects import deep_copy, rfc3339_micro

Obj = dict[str, Any]
log = logging.getLogger("lite.leaderelection")


class LostLease(Exception):
    """The lease could not be renewed within the renew deadline: stop leading now."""


def lease_kind() -> Kind:
    for k in BUILTIN_KINDS:
        if k.group == "coordination.k8s.io" and k.kind == "Lease":
            return k
    raise RuntimeError("Lease kind missing from BUILTIN_KINDS")


class LeaderElector:
    """Acquire, hold and release one Lease for `identity`. Not reentrant: one `acquire`/`hold` at a time."""

    def __init__(self, client: Client, identity: str, *, namespace: str = "kube-system",
                 name: str = "lite-controller-manager", lease_duration: float = 15.0,
                 renew_interval: float = 5.0, renew_deadline: float = 10.0, retry_interval: float = 2.0) -> None:
        self.client = client
        self.identity = identity
        self.namespace = namespace
        self.name = name
        self.lease_duration = lease_duration
        self.renew_interval = renew_interval
        self.renew_deadline = renew_deadline
        self.retry_interval = retry_interval
        self.kind = lease_kind()
        self.is_leader = False
        self._observed: tuple[Any, ...] | None = None
        self._observed_at = 0.0

    async def acquire(self) -> None:
        """Return once this identity holds the lease."""
        # Polling is the protocol: the lease's state lives in the API, not in a local Event.
        while True:
            if await self.try_acquire_or_renew():
                break
            await asyncio.sleep(self.retry_interval)
        log.info("%s: acquired lease %s/%s", self.identity, self.namespace, self.name)

    async def hold(self) -> None:
        """Renew until the lease is lost (raises LostLease) or cancelled (then releases it).

        Lost means: renewals kept failing for `renew_deadline`, or another holder was seen with a live lease.
        """
        try:
            while True:
                await asyncio.sleep(self.renew_interval)
                deadline = time.monotonic() + self.renew_deadline
                while not await self.try_acquire_or_renew():
                    if not self.is_leader:  # someone else holds a live lease: stop at once
                        log.error("%s: lease %s/%s taken over", self.identity, self.namespace, self.name)
                        raise LostLease(f"{self.namespace}/{self.name}")
                    if time.monotonic() >= deadline:
                        self.is_leader = False
                        log.error("%s: lost lease %s/%s", self.identity, self.namespace, self.name)
                        raise LostLease(f"{self.namespace}/{self.name}")
                    await asyncio.sleep(self.retry_interval)
        except asyncio.CancelledError:
            await self.release()
            raise

    async def release(self) -> None:
        """Give the lease up if we hold it (best effort, bounded by a short timeout)."""
        if not self.is_leader:
            return
        self.is_leader = False
        try:
            async with asyncio.timeout(2.0):
                lease = await self.client.get(self.kind, self.namespace, self.name)
                spec = lease.get("spec") or {}
                if spec.get("holderIdentity") != self.identity:
                    return
                new = deep_copy(lease)
                new["spec"] = {**spec, "holderIdentity": "", "leaseDurationSeconds": 1,
                               "renewTime": rfc3339_micro()}
                await self.client.update(self.kind, self.namespace, self.name, new)
        except (ApiError, TimeoutError) as e:
            log.warning("%s: releasing lease failed: %s", self.identity, e)

    async def try_acquire_or_renew(self) -> bool:
        """One attempt; True when we hold the lease afterwards. API errors count as a failed attempt."""
        try:
            return await self._attempt()
        except ApiError as e:
            if e.code != 409:
                log.warning("%s: lease %s/%s: %s", self.identity, self.namespace, self.name, e)
            return False

    async def _attempt(self) -> bool:
        now = rfc3339_micro()
        try:
            lease = await self.client.get(self.kind, self.namespace, self.name)
        except ApiError as e:
            if e.code != 404:
                raise
            await self.client.create(self.kind, self.namespace, {
                "apiVersion": self.kind.api_version, "kind": "Lease",
                "metadata": {"name": self.name, "namespace": self.namespace},
                "spec": self._spec(now, now, 0)})
            self.is_leader = True
            return True
        spec = lease.get("spec") or {}
        holder = spec.get("holderIdentity") or ""
        self._observe(spec)
        if holder and holder != self.identity and not self._expired(spec):
            self.is_leader = False
            return False
        new = deep_copy(lease)
        transitions = int(spec.get("leaseTransitions") or 0)
        if holder == self.identity:
            new["spec"] = self._spec(str(spec.get("acquireTime") or now), now, transitions)
        else:
            new["spec"] = self._spec(now, now, transitions + 1)
        await self.client.update(self.kind, self.namespace, self.name, new)
        self.is_leader = True
        return True

    def _spec(self, acquire: str, renew: str, transitions: int) -> Obj:
        return {"holderIdentity": self.identity, "leaseDurationSeconds": max(1, round(self.lease_duration)),
                "acquireTime": acquire, "renewTime": renew, "leaseTransitions": transitions}

    def _observe(self, spec: Obj) -> None:
        record = (spec.get("holderIdentity"), spec.get("renewTime"), spec.get("leaseTransitions"))
        if record != self._observed:
            self._observed = record
            self._observed_at = time.monotonic()

    def _expired(self, spec: Obj) -> bool:
        duration = float(spec.get("leaseDurationSeconds") or self.lease_duration)
        return time.monotonic() > self._observed_at + duration
