"""Guarded long-lived tasks and work-queue workers: the loops every controller would otherwise rewrite.

- `Backoff`: exponential delay with jitter that resets after a quiet spell (client-go's backoff manager for
  reflectors: 0.8 s doubling to 30 s).
- `guarded(name, factory)`: runs an eternal coroutine forever: a failure is logged at once with its traceback,
  then restarted after a backoff; a normal return is a bug (eternal tasks do not end) and is logged and
  restarted the same way. Only cancellation stops it. Meant as a `TaskGroup` child, so a controller never
  dies silently and never takes its siblings down.
- `run_workers(queue, reconcile, workers=n)`: n workers over a `WorkQueue`, each key reconciled by one worker
  at a time (the queue guarantees it); a failing key is retried with the queue's per-key backoff (or the
  error's `retry_after`), a succeeding one is forgotten; `reconcile` may return a delay to be called again
  (periodic work such as CronJob schedules). Returns when the queue is shut down and drained.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable, Hashable
from typing import Any, TypeVar

from lite.errors import ApiError
from lite.workqueue import ShutDown, WorkQueue

K = TypeVar("K", bound=Hashable)

log = logging.getLogger("lite.controllerkit")


class Backoff:
    """`initial * factor**n` capped at `max_delay`, plus up to `jitter` of it at random; `reset()` on health."""

    def __init__(self, initial: float = 0.8, max_delay: float = 30.0, *, factor: float = 2.0,
                 jitter: float = 1.0, reset_after: float = 120.0) -> None:
        self.initial = initial
        self.max_delay = max_delay
        self.factor = factor
        self.jitter = jitter
        self.reset_after = reset_after
        self._current = 0.0
        self._last = 0.0

    def next(self) -> float:
        """The next delay. A long time since the previous call means the trouble was over: start again."""
        now = time.monotonic()
        if self._current == 0.0 or now - self._last > self.reset_after:
            self._current = self.initial
        else:
            self._current = min(self._current * self.factor, self.max_delay)
        self._last = now
        return self._current * (1.0 + random.random() * self.jitter)

    def reset(self) -> None:
        self._current = 0.0


async def guarded(name: str, factory: Callable[[], Awaitable[Any]], *, backoff: Backoff | None = None) -> None:
    """Run `factory()` forever, restarting it after failures or an unexpected return. Never returns."""
    backoff = backoff or Backoff()
    while True:
        started = time.monotonic()
        try:
            await factory()
            log.error("%s: eternal task returned; restarting it", name)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("%s: failed; restarting it", name)
        if time.monotonic() - started > backoff.reset_after:
            backoff.reset()
        await asyncio.sleep(backoff.next())


Reconcile = Callable[[K], Awaitable[float | None]]


async def run_workers(queue: WorkQueue[K], reconcile: Reconcile[K], *, workers: int = 1,
                      name: str = "") -> None:
    """Run `workers` workers on `queue` until it is shut down (then they finish the keys already queued)."""
    name = name or queue.name or "workers"
    async with asyncio.TaskGroup() as tg:
        for i in range(workers):
            tg.create_task(_worker(queue, reconcile, f"{name}-{i}"))


async def _worker(queue: WorkQueue[K], reconcile: Reconcile[K], name: str) -> None:
    while True:
        try:
            key = await queue.get()
        except ShutDown:
            return
        try:
            await _process(queue, reconcile, key, name)
        finally:
            queue.done(key)


async def _process(queue: WorkQueue[K], reconcile: Reconcile[K], key: K, name: str) -> None:
    try:
        again = await reconcile(key)
    except asyncio.CancelledError:
        raise
    except ApiError as e:
        if e.retry_after:
            log.info("%s: %r: %s; retrying in %ss", name, key, e, e.retry_after)
            queue.add_after(key, float(e.retry_after))
        else:
            # Conflicts are routine (another writer got there first): a retry reads fresh state.
            level = logging.INFO if e.code == 409 else logging.WARNING
            log.log(level, "%s: %r: %s; will retry", name, key, e)
            queue.add_rate_limited(key)
        return
    except Exception:
        log.exception("%s: reconcile of %r failed; will retry", name, key)
        queue.add_rate_limited(key)
        return
    queue.forget(key)
    if again is not None and again >= 0:
        queue.add_after(key, again)
