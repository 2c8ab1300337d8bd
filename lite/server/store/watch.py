"""Watch fan-out from an in-memory window of recent events.

- The window keeps the most recent committed events in revision order, complete (every committed rev from
  `oldest_rev` to the current one is there), so a watch can replay from any rev inside it. `Store`'s
  revisions are contiguous (`WatchHub`); a shared datastore's have gaps (`GapWatchHub`, MirrorStore's; see
  `backend.py`): there `floor` (the newest revision out of reach: the newest event trimmed, or the revision a
  mirror was loaded at) decides what is compacted, not arithmetic on revisions. The replay lookup serves both:
  it checks contiguity in O(1) and only bisects (O(log n)) a window with gaps. It is capped in
  events (`window`) and in bytes (`window_bytes`, see `event_size`): 1 MiB objects cannot pin
  10,000 MiB. The newest event always stays, so `oldest_rev` never passes the current revision + 1.
  Its events hold packed values (`packing`), the same bytes objects as the index's, and unpack on access;
  live events pushed to watchers hold the plain bytes that were written, so delivery unpacks nothing.
- Watchers are indexed by resource prefix ("group/plural/"): publishing an event touches only the watchers
  of that resource (plus the rare watcher of a shorter prefix), so 100+ watchers cost little per write.
- A watcher's live queue is bounded in events (`queue_bound`) and bytes (`queue_bytes`); a watcher that
  falls further behind is ended with `WatchDropped` instead of blocking the writer or growing without limit
  (the kine rule; the client re-watches from its last RV, or relists on 410). Dropping frees its queue at
  once: a consumer that never reads again must not keep the events alive. Replay at watch start is not
  counted against the bound: it is a list of references into the window, not copies.

Everything here runs on the event loop thread; `publish` is called by the writer task right after COMMIT.
"""

from __future__ import annotations

import asyncio
from bisect import bisect_right
from collections import deque
from collections.abc import Callable, Iterable
from itertools import islice
from operator import attrgetter
from types import TracebackType
from typing import Literal

from lite.server.store.errors import Compacted, WatchDropped
from lite.server.store.packing import unpack

EventType = Literal["ADDED", "MODIFIED", "DELETED"]
_rev = attrgetter("rev")


class StoreEvent:
    """One committed change. `value` carries resourceVersion=rev; for DELETED it is the final state.

    `value` and `prev` are plain JSON however the event holds them: the window keeps events with packed
    values (`packing`), shared with the index, and they are unpacked on each access; live events carry
    the written bytes themselves. `packed_value`/`packed_prev` give what the event holds, unconverted.
    """

    __slots__ = ("key", "packed_prev", "packed_value", "rev", "type")

    def __init__(self, type: EventType, key: str, rev: int, value: bytes, prev: bytes | None) -> None:
        self.type = type
        self.key = key
        self.rev = rev
        self.packed_value = value
        self.packed_prev = prev

    @property
    def value(self) -> bytes:
        return unpack(self.packed_value)

    @property
    def prev(self) -> bytes | None:
        return None if self.packed_prev is None else unpack(self.packed_prev)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, StoreEvent):
            return NotImplemented
        return (self.type, self.key, self.rev, self.value, self.prev) == (
            other.type, other.key, other.rev, other.value, other.prev)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"StoreEvent({self.type!r}, {self.key!r}, {self.rev}, {self.value!r}, {self.prev!r})"


def event_size(ev: StoreEvent) -> int:
    """Bytes an event holds on to. `prev` is not counted: it is the same bytes object as the value of the
    key's previous event (or of the index), so counting it would count most bytes twice."""
    return len(ev.packed_value) + 100


def resource_prefix(key: str) -> str:
    """ "core/pods/ns/name" -> "core/pods/"; "" if the key has fewer than two segments."""
    first = key.find("/")
    second = key.find("/", first + 1) if first >= 0 else -1
    return key[: second + 1] if second >= 0 else ""


class Watch:
    """Async iterator of `StoreEvent`s for keys under `prefix`, in revision order, starting after `after_rev`.

    Ends with StopAsyncIteration when closed (by `close()` or the store closing) and raises
    `WatchDropped` when it fell too far behind. Use `async with` or call `close()` to unregister.
    """

    def __init__(self, hub: WatchHub, prefix: str, after_rev: int, replay: Iterable[StoreEvent]) -> None:
        self.prefix = prefix
        self.last_rev = after_rev
        self._after = after_rev  # live events at or below it are skipped (a watch from a future rev)
        self._hub = hub
        self._replay: deque[StoreEvent] = deque(replay)
        self._queue: deque[StoreEvent] = deque()
        self._queued_bytes = 0
        self._waiter: asyncio.Future[None] | None = None
        self._dropped = False
        self._closed = False
        # Set by a consumer that would discard some events unseen (a field selector's required keys): a live
        # event it says True for is not queued, and the consumer is not woken for it. `passed_rev` is the newest
        # such event's rev when nothing before it was waiting: every event up to it is delivered or skipped.
        self.skip: Callable[[StoreEvent], bool] | None = None
        self.passed_rev = after_rev

    def _push(self, ev: StoreEvent) -> bool:
        """Queue a live event; False if that overflowed the bound (the watch is then dropped)."""
        if ev.rev <= self._after:
            return True
        if self.skip is not None and self.skip(ev):
            if not self._queue and not self._replay:
                self.passed_rev = ev.rev
            return True
        size = event_size(ev)
        if self._queue and (len(self._queue) >= self._hub.queue_bound
                            or self._queued_bytes + size > self._hub.queue_bytes):
            self._drop()
            return False
        self._queue.append(ev)
        self._queued_bytes += size
        self._wake()
        return True

    def _drop(self) -> None:
        """End the watch with WatchDropped(last_rev) once its consumer reaches it; frees its events now."""
        self._dropped = True
        self._queue.clear()
        self._replay.clear()
        self._queued_bytes = 0
        self._wake()

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def _end(self) -> None:
        self._closed = True
        self._wake()

    def close(self) -> None:
        if not self._closed:
            self._hub.unregister(self)
            self._end()

    def __aiter__(self) -> Watch:
        return self

    async def __anext__(self) -> StoreEvent:
        ev = await self.next_before(None)
        assert ev is not None  # no deadline: only an event ends the wait
        return ev

    async def next_before(self, deadline: float | None) -> StoreEvent | None:
        """The next event, or None once the loop clock reaches `deadline` (None: wait as long as it takes).

        Ends like `__anext__` (StopAsyncIteration, WatchDropped). It waits on one future and a timer, not a
        task: consumers with a deadline (timeouts, bookmarks) call this for every event of every watcher.
        """
        while True:
            if self._replay:
                ev = self._replay.popleft()
            elif self._queue:
                ev = self._queue.popleft()
                self._queued_bytes -= event_size(ev)
            elif self._dropped:
                raise WatchDropped(self.last_rev)
            elif self._closed:
                raise StopAsyncIteration
            else:
                loop = asyncio.get_running_loop()
                if deadline is not None and loop.time() >= deadline:
                    return None
                self._waiter = loop.create_future()
                timer = loop.call_at(deadline, self._wake) if deadline is not None else None
                try:
                    await self._waiter
                finally:
                    self._waiter = None
                    if timer is not None:
                        timer.cancel()
                continue
            self.last_rev = ev.rev
            return ev

    async def __aenter__(self) -> Watch:
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


class WatchHub:
    """The event window and the registry of live watchers."""

    def __init__(self, window: int, queue_bound: int, window_bytes: int = 64 << 20,
                 queue_bytes: int = 16 << 20) -> None:
        self.events: deque[StoreEvent] = deque()
        self.window = max(1, window)
        self.window_bytes = window_bytes
        self.events_bytes = 0
        self.queue_bound = queue_bound
        self.queue_bytes = queue_bytes
        self._by_resource: dict[str, set[Watch]] = {}
        self._broad: set[Watch] = set()  # prefixes shorter than "group/plural/"

    def oldest_rev(self, current_rev: int) -> int:
        """The oldest revision a watch replays: watching from any after_rev >= oldest_rev - 1 misses nothing."""
        return self.events[0].rev if self.events else current_rev + 1

    def watcher_count(self) -> int:
        return len(self._broad) + sum(len(s) for s in self._by_resource.values())

    def watch(self, prefix: str, after_rev: int, current_rev: int) -> Watch:
        oldest = self.oldest_rev(current_rev)
        if after_rev < oldest - 1:
            raise Compacted(oldest)
        events = self.events
        n = len(events)
        replay: list[StoreEvent]
        if not n:
            replay = []
        else:
            first = events[0].rev
            # Contiguous (always so for Store): the index is arithmetic; with gaps, a bisection on the revs.
            skip = max(0, after_rev + 1 - first) if events[-1].rev - first == n - 1 \
                else bisect_right(events, after_rev, key=_rev)
            tail = n - skip
            if tail <= 0:
                replay = []
            elif tail < skip:  # walk from the newest end: a watch from near the current revision costs O(tail)
                newest = list(islice(reversed(events), tail))
                newest.reverse()
                replay = [ev for ev in newest if ev.key.startswith(prefix)]
            else:
                replay = [ev for ev in islice(events, skip, None) if ev.key.startswith(prefix)]
        w = Watch(self, prefix, after_rev, replay)
        res = resource_prefix(prefix)
        (self._by_resource.setdefault(res, set()) if res else self._broad).add(w)
        return w

    def unregister(self, w: Watch) -> None:
        res = resource_prefix(w.prefix)
        if not res:
            self._broad.discard(w)
            return
        bucket = self._by_resource.get(res)
        if bucket is not None:
            bucket.discard(w)
            if not bucket:
                del self._by_resource[res]

    def remember(self, events: Iterable[StoreEvent]) -> None:
        """Append events to the window, then trim it to its caps (keeping at least the newest event)."""
        for ev in events:
            self.events.append(ev)
            self.events_bytes += event_size(ev)
        while len(self.events) > 1 and (len(self.events) > self.window or self.events_bytes > self.window_bytes):
            self.events_bytes -= event_size(self.events.popleft())

    def publish(self, events: list[StoreEvent], kept: list[StoreEvent] | None = None) -> None:
        """Append committed events to the window (`kept`: the same events holding packed values, if given)
        and push `events` to matching watchers."""
        self.remember(events if kept is None else kept)
        for ev in events:
            bucket = self._by_resource.get(resource_prefix(ev.key), ())
            for targets in (bucket, self._broad):
                dropped = [w for w in targets if ev.key.startswith(w.prefix) and not w._push(ev)]
                for w in dropped:
                    self.unregister(w)

    def close_all(self) -> None:
        for w in [*self._broad, *(w for s in self._by_resource.values() for w in s)]:
            w._end()
        self._broad.clear()
        self._by_resource.clear()


class GapWatchHub(WatchHub):
    """A WatchHub for revisions with gaps (MirrorStore's): what is compacted is decided by `floor`.

    `floor` is the newest revision a watch can no longer replay after: the newest event trimmed from the
    window, or the revision of the snapshot the mirror was (re)loaded from (`reset`). With gaps, the oldest
    event's revision says nothing about the revisions just below it: a watch from any after_rev >= floor misses
    nothing (the window holds every committed revision above floor).
    """

    def __init__(self, window: int, queue_bound: int, window_bytes: int = 64 << 20,
                 queue_bytes: int = 16 << 20) -> None:
        super().__init__(window, queue_bound, window_bytes, queue_bytes)
        self.floor = 0

    def oldest_rev(self, current_rev: int) -> int:
        return self.floor + 1

    def remember(self, events: Iterable[StoreEvent]) -> None:
        for ev in events:
            self.events.append(ev)
            self.events_bytes += event_size(ev)
        while len(self.events) > 1 and (len(self.events) > self.window or self.events_bytes > self.window_bytes):
            gone = self.events.popleft()
            self.events_bytes -= event_size(gone)
            self.floor = gone.rev

    def reset(self, floor: int) -> None:
        """Forget the window and drop every watcher (`WatchDropped`): for a mirror (re)loaded from a snapshot at
        revision `floor`, whose history before it is unknown. A dropped watcher's consumer re-watches from its
        last revision and gets `Compacted` (410: the client relists) unless it was already at `floor`."""
        for w in [*self._broad, *(w for s in self._by_resource.values() for w in s)]:
            w._drop()
        self._broad.clear()
        self._by_resource.clear()
        self.events.clear()
        self.events_bytes = 0
        self.floor = floor
