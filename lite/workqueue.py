"""A work queue with client-go semantics (k8s.io/client-go/util/workqueue), for asyncio.

A controller's event handlers `add` keys; its workers loop on `key = await q.get()`, reconcile, then call
`q.done(key)` (always, in a `finally`). On failure a worker calls `q.add_rate_limited(key)` to retry with
per-key exponential backoff; on success `q.forget(key)` resets that backoff.

Invariants (the same as client-go's `queue.go`, `delaying_queue.go`, `rate_limiting_queue.go`):
- De-duplication: a key waiting in the queue is never queued twice ("dirty" set).
- A key handed out by `get` is "processing" until `done`; adding it meanwhile only marks it dirty, and
  `done` puts it back in the queue. So one key is never held by two workers at once, and no add is lost.
- Keys come out in FIFO order of their first pending add.
- `add_after(key, delay)` queues the key once the delay has passed; a key already waiting for a later time
  has its time moved earlier, never later. Delayed adds are timer callbacks on the running loop: no task.
- After `shut_down()` adds are ignored, pending timers are dropped, and `get` raises `ShutDown` once the
  queue is empty (keys still queued are handed out first, as in client-go; workers stop on `ShutDown`).
- Single event loop, no threads: every method except `get` and `shut_down_with_drain` is synchronous and
  must be called from the loop's thread.
- Metrics as client-go's workqueue reports them, kept in a `QueueStats` the queue is given (so a controller's
  successive queues add up to one series): `adds` counts adds that queued or marked a key, `retries` every
  `add_after`/`add_rate_limited`, `queue_latency` the time from a key's first pending add to its `get`,
  `work_duration` the time from `get` to `done`. Each costs a clock read and a dict operation per call.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import deque
from collections.abc import Hashable
from typing import Generic, Protocol, TypeVar

from lite.histo import Histo

K = TypeVar("K", bound=Hashable)
K_contra = TypeVar("K_contra", bound=Hashable, contravariant=True)

DEFAULT_BASE_DELAY = 0.005   # seconds; client-go DefaultControllerRateLimiter: 5 ms ...
DEFAULT_MAX_DELAY = 1000.0   # ... doubling up to 1000 s
# client-go's workqueue duration buckets (component-base): exponential from 10 ns, factor 10, 10 of them.
DURATION_BUCKETS = tuple(float(f"1e{e}") for e in range(-8, 2))


class ShutDown(Exception):
    """Raised by `WorkQueue.get` once the queue is shut down and drained of queued keys."""


class QueueStats:
    """Cumulative numbers of one named queue (see the module doc), read by whoever exports metrics."""

    __slots__ = ("adds", "queue_latency", "retries", "work_duration")

    def __init__(self) -> None:
        self.adds = 0
        self.retries = 0
        self.queue_latency = Histo(DURATION_BUCKETS)
        self.work_duration = Histo(DURATION_BUCKETS)


class RateLimiter(Protocol[K_contra]):
    """How long a key should wait before its next retry (client-go `RateLimiter`)."""

    def when(self, key: K_contra) -> float:
        """The delay in seconds for this retry; records the retry."""
        ...

    def forget(self, key: K_contra) -> None:
        """Stop tracking the key (it succeeded)."""
        ...

    def num_requeues(self, key: K_contra) -> int:
        ...


class ExponentialBackoff(Generic[K]):
    """Per-key `base * 2**failures`, capped at `max_delay` (client-go ItemExponentialFailureRateLimiter)."""

    def __init__(self, base: float = DEFAULT_BASE_DELAY, max_delay: float = DEFAULT_MAX_DELAY) -> None:
        self.base = base
        self.max_delay = max_delay
        self._failures: dict[K, int] = {}

    def when(self, key: K) -> float:
        exp = self._failures.get(key, 0)
        self._failures[key] = exp + 1
        # Capping the exponent first keeps 2**exp finite for keys that fail for a very long time.
        if exp > 1023:
            return self.max_delay
        return min(self.base * math.pow(2, exp), self.max_delay)

    def forget(self, key: K) -> None:
        self._failures.pop(key, None)

    def num_requeues(self, key: K) -> int:
        return self._failures.get(key, 0)


class TokenBucket(Generic[K]):
    """An overall (not per-key) rate limit: `qps` with bursts of `burst` (client-go BucketRateLimiter).

    Each call reserves a token and returns how long to wait for it, so retries of all keys together stay
    under `qps`. Combine with per-key backoff through `MaxOf`, as client-go's default controller limiter does.
    """

    def __init__(self, qps: float = 10.0, burst: int = 100) -> None:
        self.qps = qps
        self.burst = burst
        self._tokens = float(burst)
        self._last = time.monotonic()

    def when(self, key: K) -> float:
        now = time.monotonic()
        self._tokens = min(float(self.burst), self._tokens + (now - self._last) * self.qps)
        self._last = now
        self._tokens -= 1.0
        return 0.0 if self._tokens >= 0 else -self._tokens / self.qps

    def forget(self, key: K) -> None:
        pass

    def num_requeues(self, key: K) -> int:
        return 0


class MaxOf(Generic[K]):
    """The longest delay of several limiters (client-go MaxOfRateLimiter)."""

    def __init__(self, *limiters: RateLimiter[K]) -> None:
        self.limiters = limiters

    def when(self, key: K) -> float:
        return max(limiter.when(key) for limiter in self.limiters)

    def forget(self, key: K) -> None:
        for limiter in self.limiters:
            limiter.forget(key)

    def num_requeues(self, key: K) -> int:
        return max(limiter.num_requeues(key) for limiter in self.limiters)


class WorkQueue(Generic[K]):
    """De-duplicating, delaying, rate-limited work queue. See the module docstring for the contract."""

    def __init__(self, rate_limiter: RateLimiter[K] | None = None, *, name: str = "",
                 stats: QueueStats | None = None) -> None:
        self.name = name
        self.stats = stats if stats is not None else QueueStats()
        self._added_at: dict[K, float] = {}  # first pending add of a queued (or dirty) key
        self._started_at: dict[K, float] = {}  # `get` of a key being processed
        self.rate_limiter: RateLimiter[K] = rate_limiter or ExponentialBackoff()
        self._queue: deque[K] = deque()
        self._dirty: set[K] = set()
        self._processing: set[K] = set()
        self._waiting: dict[K, tuple[float, asyncio.TimerHandle]] = {}
        self._getters: deque[asyncio.Future[None]] = deque()
        self._idle: asyncio.Event | None = None
        self._shutting_down = False

    # -- the basic queue (queue.go) --

    def add(self, key: K) -> None:
        """Queue `key` unless it is already queued; if it is being processed, requeue it at `done`."""
        if self._shutting_down or key in self._dirty:
            return
        self.stats.adds += 1
        self._added_at.setdefault(key, time.monotonic())
        self._dirty.add(key)
        if key in self._processing:
            return
        self._queue.append(key)
        self._wake_one()

    async def get(self) -> K:
        """The next key, waiting for one. Raises `ShutDown` when shut down and empty."""
        while not self._queue:
            if self._shutting_down:
                raise ShutDown(self.name)
            fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._getters.append(fut)
            try:
                await fut
            except asyncio.CancelledError:
                # A wake-up meant for this getter must not be lost: pass it on.
                if fut.done() and not fut.cancelled():
                    self._wake_one()
                raise
            finally:
                if fut in self._getters:
                    self._getters.remove(fut)
        key = self._queue.popleft()
        self._processing.add(key)
        self._dirty.discard(key)
        now = time.monotonic()
        added = self._added_at.pop(key, None)
        if added is not None:
            self.stats.queue_latency.observe(now - added)
        self._started_at[key] = now
        return key

    def done(self, key: K) -> None:
        """Mark `key` processed; if it was added meanwhile it goes back in the queue now."""
        self._processing.discard(key)
        started = self._started_at.pop(key, None)
        if started is not None:
            self.stats.work_duration.observe(time.monotonic() - started)
        if key in self._dirty:
            self._queue.append(key)
            self._wake_one()
        if not self._processing and self._idle is not None:
            self._idle.set()

    def __len__(self) -> int:
        """Keys queued and ready (not the ones being processed or waiting for a delay)."""
        return len(self._queue)

    def processing(self) -> int:
        return len(self._processing)

    def unfinished_seconds(self) -> float:
        """Seconds of work in progress not yet observed in `work_duration` (client-go's unfinished work)."""
        now = time.monotonic()
        return sum(now - t for t in self._started_at.values())

    def longest_running(self) -> float:
        """Seconds the longest-running key being processed has been at it (0 when none is)."""
        return time.monotonic() - min(self._started_at.values()) if self._started_at else 0.0

    def shut_down(self) -> None:
        """Stop accepting adds and wake every getter (each raises `ShutDown` once the queue is empty)."""
        self._shutting_down = True
        for _, handle in self._waiting.values():
            handle.cancel()
        self._waiting.clear()
        while self._getters:
            fut = self._getters.popleft()
            if not fut.done():
                fut.set_result(None)

    async def shut_down_with_drain(self) -> None:
        """`shut_down`, then wait until every key handed out has been marked `done`."""
        self.shut_down()
        while self._processing:
            self._idle = asyncio.Event()
            await self._idle.wait()

    @property
    def shutting_down(self) -> bool:
        return self._shutting_down

    def _wake_one(self) -> None:
        while self._getters:
            fut = self._getters.popleft()
            if not fut.done():
                fut.set_result(None)
                return

    # -- delays (delaying_queue.go) --

    def add_after(self, key: K, delay: float) -> None:
        """Queue `key` after `delay` seconds (now if `delay <= 0`). An earlier pending time wins."""
        if self._shutting_down:
            return
        self.stats.retries += 1
        if delay <= 0:
            self.add(key)
            return
        loop = asyncio.get_running_loop()
        ready_at = loop.time() + delay
        pending = self._waiting.get(key)
        if pending is not None:
            if pending[0] <= ready_at:
                return
            pending[1].cancel()
        handle = loop.call_at(ready_at, self._fire, key)
        self._waiting[key] = (ready_at, handle)

    def _fire(self, key: K) -> None:
        self._waiting.pop(key, None)
        self.add(key)

    def waiting(self) -> int:
        """Keys waiting for their delay to pass."""
        return len(self._waiting)

    # -- rate limiting (rate_limiting_queue.go) --

    def add_rate_limited(self, key: K) -> None:
        """Queue `key` after the rate limiter's delay (per-key exponential backoff by default)."""
        if self._shutting_down:
            return
        self.add_after(key, self.rate_limiter.when(key))

    def forget(self, key: K) -> None:
        """Reset the key's backoff (call after a successful reconcile). Does not dequeue it."""
        self.rate_limiter.forget(key)

    def num_requeues(self, key: K) -> int:
        return self.rate_limiter.num_requeues(key)
