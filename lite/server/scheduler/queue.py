"""The scheduling queue (upstream `internal/queue.PriorityQueue`), for one asyncio loop.

Three places a pending pod can be:
- activeQ: a heap by priority (higher first), then by the time the pod entered the queue; `pop()` waits here.
- backoffQ: pods that failed, each until its backoff ends: 1 s doubling per attempt, capped at 10 s.
- unschedulable: pods no node could take; they leave on `move_all()` (called for cluster events that may
  make them schedulable: node added/changed, pod deleted, ...) or after `max_unschedulable` (5 min).

Invariants:
- A pod key is in at most one place, or "in flight" (popped, not yet `done`/`requeue`d).
- `update` of a queued pod replaces its PodInfo in place; an unschedulable pod whose spec changed is moved
  back (to backoffQ if still backing off, else activeQ). Updates to an in-flight pod are kept for its requeue.
- A pod that failed while a (broad) move request happened during its cycle goes to backoffQ, not
  unschedulable (upstream's moveRequestCycle), so an event racing with the cycle is not lost. The
  scheduler's cycle itself is synchronous, so this only matters for attempts that await (binding).
- Timers are loop callbacks (no task): `flush()` moves expired backoff and stale unschedulable pods.
- Waiting pods are small (given `rebuild`): an unschedulable pod keeps no PodInfo, only what the requeue
  decisions read (its key, priority, facts fingerprint, attempts and parking time, from which the end of its
  backoff is computed, and the plugins that rejected it: which cluster events can help); a pod added with
  `add_unparsed` has none until its turn.
  Its PodInfo is built by `rebuild(key)` (the scheduler's: from its informer) when it is popped; `rebuild`
  returning None (the pod is gone, bound or no longer schedulable) drops it. 10,000 pods parked with no node
  to take them, or queued at once by a restart, thus cost no parsed pod each.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from collections.abc import Callable

from lite.records import dataclass
from lite.server.scheduler.podinfo import PodInfo

INITIAL_BACKOFF = 1.0
MAX_BACKOFF = 10.0
MAX_UNSCHEDULABLE = 300.0


@dataclass(slots=True)  # one per pending pod: no __dict__ each
class QueuedPod:
    info: PodInfo | None             # None while parked (unschedulable, with `rebuild`): rebuilt on pop
    timestamp: float                 # when it entered the queue or was parked (activeQ tie-breaker, 5-min flush)
    key: str = ""
    priority: int = 0                # of `info`, kept while it is dropped (the activeQ order)
    facts: int = 0                   # of `info`, kept while it is dropped (did an update change the pod?)
    attempts: int = 0                # its backoff ends at timestamp + backoff_for(attempts) (`_backoff_end`)
    cycle: int = 0                   # scheduling cycle in which it was popped
    plugins: frozenset[str] = frozenset()   # filters that rejected it last time


class SchedulingQueue:
    def __init__(self, *, clock: Callable[[], float] = time.monotonic, initial_backoff: float = INITIAL_BACKOFF,
                 max_backoff: float = MAX_BACKOFF, max_unschedulable: float = MAX_UNSCHEDULABLE,
                 rebuild: Callable[[str], PodInfo | None] | None = None) -> None:
        self.clock = clock
        self.rebuild = rebuild
        self.initial_backoff = initial_backoff
        self.max_backoff = max_backoff
        self.max_unschedulable = max_unschedulable
        self._pods: dict[str, QueuedPod] = {}
        self._active: list[tuple[int, float, int, str]] = []
        self._active_keys: set[str] = set()
        self._backoff: dict[str, QueuedPod] = {}
        self._unschedulable: dict[str, QueuedPod] = {}
        self._in_flight: dict[str, QueuedPod] = {}
        self._seq = itertools.count()
        self._cycle = 0
        self._move_cycle = -1
        self._ready = asyncio.Event()
        self._timer: asyncio.TimerHandle | None = None
        self._closed = False

    # -- adding and removing --

    def add(self, info: PodInfo) -> None:
        """A new pending pod (or one seen again): straight to activeQ unless already queued."""
        qp = self._pods.get(info.key)
        if qp is not None:
            self.update(info)
            return
        qp = QueuedPod(info, self.clock(), info.key, info.priority, info.facts)
        self._pods[info.key] = qp
        self._push_active(qp)

    def add_unparsed(self, key: str, priority: int, facts: int) -> None:
        """A new pending pod, parsed only when popped (`rebuild`, which must be set); `key` is not queued."""
        assert self.rebuild is not None and key not in self._pods
        qp = QueuedPod(None, self.clock(), key, priority, facts)
        self._pods[key] = qp
        self._push_active(qp)

    def update(self, info: PodInfo) -> None:
        qp = self._pods.get(info.key)
        if qp is None:
            self.add(info)
            return
        changed = qp.facts != info.facts or (qp.info is not None and qp.info.labels != info.labels)
        parked = info.key in self._unschedulable
        if qp.info is None and not changed:
            qp.priority = info.priority
            return  # nothing the plugins read changed: it stays without a PodInfo
        qp.info, qp.priority, qp.facts = info, info.priority, info.facts
        if parked and changed:
            del self._unschedulable[info.key]
            self._requeue_backing_off(qp)

    def delete(self, key: str) -> None:
        qp = self._pods.pop(key, None)
        if qp is None:
            return
        self._active_keys.discard(key)   # the heap entry goes stale and is skipped on pop
        self._backoff.pop(key, None)
        self._unschedulable.pop(key, None)
        self._in_flight.pop(key, None)

    def info(self, key: str) -> PodInfo | None:
        """The PodInfo of a queued (or in-flight) pod; None for a parked one that keeps none (module doc)."""
        qp = self._pods.get(key)
        return qp.info if qp is not None else None

    def unparsed(self, key: str) -> tuple[int, int] | None:
        """(facts, priority) of a pod queued without its PodInfo (module doc), else None."""
        qp = self._pods.get(key)
        return (qp.facts, qp.priority) if qp is not None and qp.info is None else None

    def __contains__(self, key: str) -> bool:
        return key in self._pods

    def __len__(self) -> int:
        return len(self._pods)

    # -- the scheduler's side --

    async def pop(self) -> PodInfo:
        """The next pod to schedule (waits). Mark it with `done` or `requeue` afterwards."""
        while True:
            while self._active:
                _, _, _, key = heapq.heappop(self._active)
                if key not in self._active_keys:
                    continue
                self._active_keys.discard(key)
                if not self._active_keys:  # a set keeps the size it grew to (10,000 pods at once: ~0.5 MB)
                    self._active_keys = set()
                qp = self._pods[key]
                if qp.info is None:  # queued without it: from the pod as it is now
                    assert self.rebuild is not None
                    info = self.rebuild(key)
                    if info is None:
                        del self._pods[key]
                        continue
                    qp.info, qp.priority, qp.facts = info, info.priority, info.facts
                self._cycle += 1
                qp.cycle = self._cycle
                qp.attempts += 1
                self._in_flight[key] = qp
                return qp.info
            self._ready.clear()
            await self._ready.wait()

    def done(self, key: str) -> None:
        """The pod was bound (or will be, asynchronously): it leaves the queue."""
        self._in_flight.pop(key, None)
        self._pods.pop(key, None)

    def requeue(self, key: str, *, unschedulable: bool, plugins: frozenset[str] = frozenset()) -> None:
        """A failed attempt: unschedulable (no node fits; `plugins` rejected it) or an error (backoffQ)."""
        qp = self._in_flight.pop(key, None)
        if qp is None:
            return
        qp.plugins = plugins
        qp.timestamp = self.clock()
        if unschedulable and self._move_cycle < qp.cycle:
            if self.rebuild is not None:
                qp.info, qp.cycle = None, 0  # parked small (module doc); the cycle matters only in flight
            self._unschedulable[key] = qp
            self._arm(qp.timestamp + self.max_unschedulable)
        else:
            self._backoff[key] = qp
            self._arm(self._backoff_end(qp))

    def backoff_for(self, attempts: int) -> float:
        return min(self.initial_backoff * 2.0 ** min(max(attempts - 1, 0), 64), self.max_backoff)

    def _backoff_end(self, qp: QueuedPod) -> float:
        """When the backoff of a requeued pod ends: computed, not kept (a float less for each of 10,000 parked
        pods; `timestamp` and `attempts` do not change while it waits)."""
        return qp.timestamp + self.backoff_for(qp.attempts)

    def move_all(self, plugins: frozenset[str] | None = None) -> None:
        """A cluster event that may make unschedulable pods fit: move them back (all of them, or those that
        some of `plugins` rejected: the event can only help with those)."""
        if plugins is None:
            self._move_cycle = self._cycle
        for key, qp in list(self._unschedulable.items()):
            if plugins is None or qp.plugins & plugins:
                del self._unschedulable[key]
                self._requeue_backing_off(qp)

    def flush(self) -> None:
        """Move pods whose backoff ended, and pods unschedulable for too long."""
        now = self.clock()
        for key, qp in list(self._backoff.items()):
            if self._backoff_end(qp) <= now:
                del self._backoff[key]
                self._push_active(qp)
        for key, qp in list(self._unschedulable.items()):
            if now - qp.timestamp >= self.max_unschedulable:  # parked at `timestamp` (`requeue`)
                del self._unschedulable[key]
                self._requeue_backing_off(qp)
        nxt = min((self._backoff_end(qp) for qp in self._backoff.values()), default=None)
        if nxt is not None:
            self._arm(nxt)

    def close(self) -> None:
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    # -- inspection (tests, metrics) --

    def pending(self) -> dict[str, list[str]]:
        return {"active": sorted(self._active_keys), "backoff": sorted(self._backoff),
                "unschedulable": sorted(self._unschedulable), "inFlight": sorted(self._in_flight)}

    # -- internals --

    def _requeue_backing_off(self, qp: QueuedPod) -> None:
        end = self._backoff_end(qp)
        if end > self.clock():
            self._backoff[qp.key] = qp
            self._arm(end)
        else:
            self._push_active(qp)

    def _push_active(self, qp: QueuedPod) -> None:
        key = qp.key
        if key in self._active_keys:
            return
        self._active_keys.add(key)
        heapq.heappush(self._active, (-qp.priority, qp.timestamp, next(self._seq), key))
        self._ready.set()

    def _arm(self, when: float) -> None:
        """Make sure `flush` runs by `when` (one timer, moved earlier when needed)."""
        if self._closed:
            return
        loop = asyncio.get_running_loop()
        delay = max(when - self.clock(), 0.0)
        at = loop.time() + delay
        if self._timer is not None:
            if self._timer.when() <= at:
                return
            self._timer.cancel()
        self._timer = loop.call_at(at, self._fire)

    def _fire(self) -> None:
        self._timer = None
        self.flush()
        if self._unschedulable:
            oldest = min(qp.timestamp for qp in self._unschedulable.values())
            self._arm(oldest + self.max_unschedulable)
