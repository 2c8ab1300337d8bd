"""Coordination between pulls/imports (which reuse content already on disk) and deletions (remove, GC).

All methods run on the event loop thread; only the file deletions themselves happen in a worker thread.

Protocol (like containerd leases, in miniature):
- a pull or import opens a `Lease` and pins every blob digest and diff_id *before* it checks whether that
  content is present, then calls `settle(key)` to wait out a deletion of it already under way; it releases
  the lease only after its image record is written (no await between the two);
- a deleter `claim`s its candidates: the unpinned ones are marked as being deleted and returned; after the
  deletion thread finishes it calls `release`, which wakes the pulls waiting in `settle`, and they find the
  content absent and fetch it again.
So content is never deleted while a pull relies on it, and a pull never relies on content being deleted.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Iterable


class Lease:
    """Pins taken by one pull or import; `release` drops them all (idempotent)."""

    def __init__(self, guard: ContentGuard) -> None:
        self._guard = guard
        self._keys: list[str] = []

    def pin(self, *keys: str) -> None:
        self._guard.pins.update(keys)
        self._keys.extend(keys)

    def release(self) -> None:
        self._guard.pins.subtract(self._keys)
        self._guard.pins += Counter()  # drop zero counts
        self._keys.clear()


class ContentGuard:
    def __init__(self) -> None:
        self.pins: Counter[str] = Counter()
        self.deleting: set[str] = set()
        self._released = asyncio.Event()

    def lease(self) -> Lease:
        return Lease(self)

    async def settle(self, *keys: str) -> None:
        """Return once none of `keys` is being deleted."""
        while self.deleting.intersection(keys):
            await self._released.wait()

    def claim(self, candidates: Iterable[str]) -> set[str]:
        """Mark the unpinned candidates as being deleted and return them."""
        victims = {k for k in candidates if not self.pins[k] and k not in self.deleting}
        self.deleting |= victims
        return victims

    def release(self, victims: set[str]) -> None:
        self.deleting -= victims
        self._released.set()
        self._released = asyncio.Event()
