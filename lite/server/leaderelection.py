"""Leader election on coordination.k8s.io/v1 Leases, by client-go's `leaderelection` rules.

Used by the controller manager (Lease `kube-system/kube-controller-manager`) and the scheduler (Lease
`kube-system/kube-scheduler`), upstream's names, so exactly one server of several runs each at a time:

    run_elected(elector, lead):
      loop: acquire()  try every `retry_period` (jittered; sooner when the observed lease expires sooner)
                       until the lease is ours
            ├─ hold()  renew every `renew_interval`; failed renewals retried every `retry_period`; no renewal
            │          for `renew_deadline` since the last good one, or another holder seen → LostLease
            └─ lead()  the leader's work, cancelled (and awaited) when the lease is lost; then back to acquire
      cancelled while holding → release(): holderIdentity "" and leaseDurationSeconds 1, so a standby takes over
      at its next retry instead of waiting for the lease to expire

The decisions are pure (`observe`, `decide`, `next_spec`, `released_spec`, `retry_delay`, `stepped_down`),
table-tested apart from the loop that reads and writes the Lease.

Invariants (client-go's):
- A Lease held by someone else is taken only once it has expired *as observed locally*: the local monotonic
  time at which this candidate last saw the record change, plus the record's leaseDurationSeconds. No other
  machine's clock is trusted (renewTime is written for people and tools, never compared).
- An empty holderIdentity (a released Lease) or an absent Lease is taken at once: a single server, or one
  restarted after a clean shutdown, leads without waiting.
- `sole=True` (a datastore no other server can share: lite's own SQLite store, the case where k3s turns leader
  election off) takes a foreign holder's Lease at once too: that holder can only be this server's previous,
  dead, incarnation (a kill -9 or power loss), so a restart does not wait out its lease.
- Every write carries the resourceVersion read (optimistic concurrency), so two candidates never both win.
- `leaseTransitions` grows by one whenever the holder changes; `acquireTime` marks the current holder's start
  and is kept by renewals.
- The leader stops leading (`LostLease`, its work cancelled) once `renew_deadline` has passed since the start of
  its last successful renewal, whatever the API does meanwhile (each attempt is bounded by that deadline); with
  `renew_deadline` < `lease_duration` it has stopped before any candidate may take over.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import os
import random
import socket
import time
import uuid
from collections.abc import Callable, Coroutine
from typing import Any

from lite.client import Client
from lite.errors import ApiError
from lite.kinds import BUILTIN_KINDS, Kind
from lite.objects import deep_copy, rfc3339_micro
from lite.records import dataclass

Obj = dict[str, Any]
log = logging.getLogger("lite.leaderelection")

LEASE_NAMESPACE = "kube-system"
CONTROLLER_MANAGER_LEASE = "kube-controller-manager"
SCHEDULER_LEASE = "kube-scheduler"
# kube-controller-manager's and kube-scheduler's defaults (--leader-elect-lease-duration, -renew-deadline,
# -retry-period). The leader renews every RENEW_INTERVAL, not every retry period as client-go does: a third of
# the writes on an idle server, and still two retries before the renew deadline.
LEASE_DURATION = 15.0
RENEW_DEADLINE = 10.0
RETRY_PERIOD = 2.0
RENEW_INTERVAL = 5.0
JITTER = 1.2  # client-go's JitterFactor: a candidate's retry waits retry_period * [1, 1 + JITTER)
EXPIRY_MARGIN = 0.01  # seconds past an observed expiry that a candidate's wake-up aims at (timers fire early)


class LostLease(Exception):
    """The lease could not be renewed within the renew deadline, or another holder took it: stop leading now."""


def lease_kind() -> Kind:
    for k in BUILTIN_KINDS:
        if k.group == "coordination.k8s.io" and k.kind == "Lease":
            return k
    raise RuntimeError("Lease kind missing from BUILTIN_KINDS")


def default_identity() -> str:
    """client-go's `hostname_<uuid>`: two processes on one host never share an identity."""
    return f"{socket.gethostname()}_{uuid.UUID(bytes=os.urandom(16), version=4)}"


# -- the pure part ------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Record:
    """What a Lease's spec says about its holder (client-go's LeaderElectionRecord)."""

    holder: str
    duration: int  # leaseDurationSeconds
    acquire_time: str
    renew_time: str
    transitions: int


def record_of(lease: Obj | None) -> Record | None:
    """The Lease's record; None for an absent Lease. Missing or malformed fields read as upstream's zero values."""
    if lease is None:
        return None
    spec = lease.get("spec") or {}

    def num(v: Any) -> int:
        return v if isinstance(v, int) and not isinstance(v, bool) else 0

    return Record(str(spec.get("holderIdentity") or ""), num(spec.get("leaseDurationSeconds")),
                  str(spec.get("acquireTime") or ""), str(spec.get("renewTime") or ""),
                  num(spec.get("leaseTransitions")))


@dataclass(frozen=True, slots=True)
class Observation:
    """The record last read and the local monotonic time it was first seen in that exact state."""

    record: Record | None
    at: float


def observe(prev: Observation | None, record: Record | None, now: float) -> Observation:
    """The observation after reading `record` at `now`: its clock restarts only when the record changed."""
    if prev is not None and prev.record == record:
        return prev
    return Observation(record, now)


class Verdict(enum.Enum):
    CREATE = "create"  # no Lease yet: create it, held by us
    RENEW = "renew"  # ours: renew it
    TAKE = "take"  # released, or expired by our own observation (or a sole server's): take it over
    WAIT = "wait"  # someone else's, live: keep waiting


def decide(obs: Observation, identity: str, now: float, *, sole: bool = False) -> Verdict:
    """May `identity` take or renew the Lease it observed, at local monotonic time `now`? See the module doc."""
    rec = obs.record
    if rec is None:
        return Verdict.CREATE
    if rec.holder == identity:
        return Verdict.RENEW
    if not rec.holder or sole:
        return Verdict.TAKE
    if now < obs.at + rec.duration:
        return Verdict.WAIT
    return Verdict.TAKE


def next_spec(rec: Record | None, verdict: Verdict, identity: str, stamp: str, duration: int) -> Obj:
    """The spec to write for a CREATE, RENEW or TAKE at time `stamp` (RFC 3339, microseconds)."""
    if verdict is Verdict.WAIT:
        raise ValueError("nothing is written while waiting")
    if verdict is Verdict.RENEW and rec is not None:
        acquire, transitions = rec.acquire_time or stamp, rec.transitions
    elif verdict is Verdict.TAKE and rec is not None:
        acquire, transitions = stamp, rec.transitions + 1
    else:
        acquire, transitions = stamp, 0
    return {"holderIdentity": identity, "leaseDurationSeconds": max(1, duration), "acquireTime": acquire,
            "renewTime": stamp, "leaseTransitions": transitions}


def released_spec(rec: Record, stamp: str) -> Obj:
    """The spec of a released Lease: no holder, a one-second duration, the transitions count kept."""
    return {"holderIdentity": "", "leaseDurationSeconds": 1, "acquireTime": stamp, "renewTime": stamp,
            "leaseTransitions": rec.transitions}


def retry_delay(obs: Observation | None, now: float, retry: float) -> float:
    """How long a candidate that was refused waits before its next attempt: its (jittered) `retry`, or less when
    the Lease it observed expires sooner by its clock, so a dead holder is replaced as soon as the rules allow
    (a standby's takeover comes at most one poll interval, not two, after the last renewal + the duration)."""
    rec = obs.record if obs is not None else None
    if obs is None or rec is None or not rec.holder:
        return retry
    return max(0.0, min(retry, obs.at + rec.duration - now + EXPIRY_MARGIN))


def stepped_down(renewed_at: float, now: float, renew_deadline: float) -> bool:
    """Whether a leader whose last good renewal started at `renewed_at` must have stopped leading by `now`."""
    return now >= renewed_at + renew_deadline


# -- the loop -----------------------------------------------------------------------------------------------


class LeaderElector:
    """Acquire, hold and release one Lease for `identity`. Not reentrant: one `acquire`/`hold` at a time."""

    def __init__(self, client: Client, identity: str, *, name: str, namespace: str = LEASE_NAMESPACE,
                 lease_duration: float = LEASE_DURATION, renew_deadline: float = RENEW_DEADLINE,
                 retry_period: float = RETRY_PERIOD, renew_interval: float = RENEW_INTERVAL,
                 sole: bool = False, jitter: float = JITTER, clock: Callable[[], float] = time.monotonic) -> None:
        if not 0 < renew_deadline < lease_duration:
            raise ValueError("the renew deadline must be positive and shorter than the lease duration")
        if not (retry_period > 0 and 0 < renew_interval < renew_deadline):
            raise ValueError("the retry period and renew interval must be positive, the latter below the deadline")
        self.client = client
        self.identity = identity
        self.namespace = namespace
        self.name = name
        self.lease_duration = lease_duration
        self.renew_deadline = renew_deadline
        self.retry_period = retry_period
        self.renew_interval = renew_interval
        self.sole = sole
        self.jitter = jitter
        self.clock = clock
        self.kind = lease_kind()
        self.is_leader = False
        self.observed: Observation | None = None
        self._renewed_at = float("-inf")  # clock() at the start of the last successful acquire/renew

    @property
    def where(self) -> str:
        return f"{self.namespace}/{self.name}"

    async def acquire(self) -> None:
        """Return once this identity holds the lease."""
        # Polling is the protocol: the lease's state lives in the API, and expiry is judged by our own clock.
        while True:
            if await self.try_acquire_or_renew():
                break
            retry = self.retry_period * (1 + random.random() * self.jitter)
            await asyncio.sleep(retry_delay(self.observed, self.clock(), retry))
        log.info("%s: acquired lease %s", self.identity, self.where)

    async def hold(self) -> None:
        """Renew until the lease is lost (raises LostLease) or cancelled (then releases it)."""
        try:
            while True:
                await asyncio.sleep(max(0.0, self._renewed_at + self.renew_interval - self.clock()))
                while not await self._renew_once():
                    if not self.is_leader:
                        raise LostLease(self.where)
                    left = self._renewed_at + self.renew_deadline - self.clock()
                    await asyncio.sleep(max(0.0, min(self.retry_period, left)))
        except asyncio.CancelledError:
            await self.release()
            raise

    async def _renew_once(self) -> bool:
        """One renewal bounded by the renew deadline; past it, stop leading."""
        left = self._renewed_at + self.renew_deadline - self.clock()
        ok = False
        if left > 0:
            try:
                async with asyncio.timeout(left):
                    ok = await self.try_acquire_or_renew()
            except TimeoutError:
                ok = False
        if not ok and stepped_down(self._renewed_at, self.clock(), self.renew_deadline):
            self.is_leader = False
        if not self.is_leader:
            holder = self.observed.record.holder if self.observed and self.observed.record else ""
            log.error("%s: lost lease %s%s", self.identity, self.where,
                      f" to {holder}" if holder and holder != self.identity else " (no renewal within the deadline)")
        return ok

    async def release(self) -> None:
        """Give the lease up if we hold it (best effort, bounded by a short timeout)."""
        if not self.is_leader:
            return
        self.is_leader = False
        try:
            async with asyncio.timeout(2.0):
                while True:
                    lease = await self.client.get(self.kind, self.namespace, self.name)
                    rec = record_of(lease)
                    if rec is None or rec.holder != self.identity:
                        return
                    new = deep_copy(lease)
                    new["spec"] = {**(lease.get("spec") or {}), **released_spec(rec, rfc3339_micro())}
                    try:
                        done = await self.client.update(self.kind, self.namespace, self.name, new)
                    except ApiError as e:
                        # A renewal cancelled in flight (our own, as the work stopped) may still commit after the
                        # read above: read again and release what is still ours.
                        if e.code == 409:
                            continue
                        raise
                    break
                self.observed = Observation(record_of(done), self.clock())
            log.info("%s: released lease %s", self.identity, self.where)
        except Exception as e:  # best effort: the lease then expires on its own
            log.warning("%s: releasing lease %s failed: %s", self.identity, self.where, e)

    async def try_acquire_or_renew(self) -> bool:
        """One attempt; True when we hold the lease afterwards. Any error counts as a failed attempt (a store
        that fails now may answer at the next retry: the elector must outlive it)."""
        try:
            return await self._attempt()
        except ApiError as e:
            if e.code != 409:  # a conflict is another candidate's write winning: expected, not worth a warning
                log.warning("%s: lease %s: %s", self.identity, self.where, e)
        except Exception:
            log.exception("%s: lease %s: attempt failed", self.identity, self.where)
        return False

    async def _attempt(self) -> bool:
        started = self.clock()
        try:
            lease: Obj | None = await self.client.get(self.kind, self.namespace, self.name)
        except ApiError as e:
            if e.code != 404:
                raise
            lease = None
        rec = record_of(lease)
        self.observed = observe(self.observed, rec, self.clock())
        verdict = decide(self.observed, self.identity, self.clock(), sole=self.sole)
        if verdict is Verdict.WAIT:
            self.is_leader = False
            return False
        spec = next_spec(rec, verdict, self.identity, rfc3339_micro(), round(self.lease_duration))
        if lease is None:
            done = await self.client.create(self.kind, self.namespace, {
                "apiVersion": self.kind.api_version, "kind": "Lease",
                "metadata": {"name": self.name, "namespace": self.namespace}, "spec": spec})
        else:
            new = deep_copy(lease)
            new["spec"] = {**(lease.get("spec") or {}), **spec}
            done = await self.client.update(self.kind, self.namespace, self.name, new)
        self.observed = Observation(record_of(done), self.clock())
        self._renewed_at = started
        if not self.is_leader and verdict is Verdict.TAKE and rec is not None and rec.holder:
            log.info("%s: took over lease %s from %s", self.identity, self.where, rec.holder)
        self.is_leader = True
        return True


async def run_elected(elector: LeaderElector, lead: Callable[[], Coroutine[Any, Any, None]], *, what: str) -> None:
    """Run `lead()` while `elector` holds its lease, again after each loss once it is regained. Never returns;
    cancellation stops `lead` and releases the lease. `lead` should run until cancelled; an exception from it
    releases the lease and propagates."""
    # Not a TaskGroup: on Python 3.11 a cancellation of this task that arrives while `hold` fails with LostLease
    # is swallowed by the group (it raises only the LostLease), and the loop would run on after being cancelled.
    while True:
        await elector.acquire()
        holding = asyncio.create_task(elector.hold(), name=f"lease {elector.where}")
        leading = asyncio.create_task(lead(), name=what)
        try:
            await asyncio.wait((holding, leading), return_when=asyncio.FIRST_COMPLETED)
            if leading.done() and not leading.cancelled() and leading.exception() is None:
                await asyncio.wait((holding,))  # the work ended by itself: keep the lease until lost or cancelled
        finally:
            # the work stops first, then the lease goes (hold releases it when cancelled): never two leaders
            await _stop(leading)
            await _stop(holding)
        if not holding.cancelled() and isinstance(holding.exception(), LostLease):
            log.error("%s: leadership lost; stopped", what)
            continue
        for task in (leading, holding):
            if not task.cancelled() and (exc := task.exception()) is not None:
                raise exc


async def _stop(task: asyncio.Task[None]) -> None:
    """Cancel `task` and wait for it to end, whatever it raises (its outcome stays on the task)."""
    task.cancel()
    await asyncio.wait((task,))
