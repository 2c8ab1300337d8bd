"""`SyncLoop`: the "record cheaply, sync later" loop that the service proxy and the NetworkPolicy enforcer share.

    recording (any time, never blocks) ──► mark() ─► dirty flag      have_state() once a complete state is in
    run(): nothing before have_state(); then, whenever dirty: wait until `min_interval` after the previous sync,
           sync_once() (the subclass: translate, one transaction); on failure log once per streak, keep the
           state, mark dirty again and retry after `retry_interval`

Invariants: a burst of marks within `min_interval` of the last sync is folded into one sync (kube-proxy's
minSyncPeriod), and a mark never waits longer than `min_interval` after the previous sync finished; before the
first complete state nothing is synced, so a restarted agent leaves the kernel's tables as they are until it
knows the cluster again; `synced` counts completed syncs and `last_error` holds the latest failure (None after a
success). The subclass's `sync_once` clears the dirty flag before it reads the state (so a mark during the sync
is not lost) and calls `synced_now()` when it is done.
"""

from __future__ import annotations

import asyncio
import logging
import time


class SyncLoop:
    """See the module docstring. `what` names the loop in the log line of a failure streak."""

    what = "sync"

    def __init__(self, log: logging.Logger, *, min_interval: float, retry_interval: float) -> None:
        self.min_interval = min_interval
        self.retry_interval = retry_interval
        self.synced = 0
        self.last_error: BaseException | None = None
        self._log = log
        self._dirty = asyncio.Event()
        self._have_state = asyncio.Event()
        self._last_sync = float("-inf")

    def mark(self) -> None:
        """Something changed: sync soon."""
        self._dirty.set()

    def have_state(self) -> None:
        """A complete state has been recorded: syncing may start."""
        self._have_state.set()

    def synced_now(self) -> None:
        self._last_sync = time.monotonic()
        self.synced += 1

    async def sync_once(self) -> bool:
        raise NotImplementedError

    async def run(self) -> None:
        """Sync whenever marked, at most once per `min_interval`, never before `have_state()`; until cancelled."""
        await self._have_state.wait()
        while True:
            await self._dirty.wait()
            wait = self._last_sync + self.min_interval - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            try:
                await self.sync_once()
            except Exception as exc:
                if self.last_error is None:
                    self._log.error("%s failed (retrying every %.0f s): %s", self.what, self.retry_interval, exc)
                self.last_error = exc
                self._dirty.set()
                await asyncio.sleep(self.retry_interval)
            else:
                self.last_error = None
