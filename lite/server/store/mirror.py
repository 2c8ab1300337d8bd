"""MirrorStore: `Store`'s public interface over any `Backend` (a datastore several servers share).

The API reads from memory as with `Store`: a `KeyIndex` of packed values and a `WatchHub` window. Here both
are a *mirror* of the backend, fed only by its change stream; writes go to the backend, which decides
conflicts and revisions (other servers write too).

- **Open.** `backend.snapshot()` is loaded into the index (sorted here, values packed as `Store` packs them),
  then one task consumes `backend.changes(rev)`: each change gets `metadata.resourceVersion` set to its
  revision (backends store values without it), is applied to the index, published to watchers (with the
  index's previous value as `prev`, like `Store`'s events), and `current_rev` advances to it. The window's
  revisions have gaps (`watch.GapWatchHub`). It is seeded, as `Store`'s is from its file, from the backend's
  retained history up to the snapshot's revision when the backend keeps one (`backend.HasHistory`: all three
  do), with each event's previous value: a watch, or a list at a revision, from before a server restart then
  resumes instead of getting 410. Its floor is then the history's floor (the snapshot's revision without
  history); a watch from below it gets `Compacted` (410, the client relists). Old values are unsealed by the
  codec a `FollowingCodec` wraps (`inner`), so that only the newest state passes the following one.
- **Fresh reads** (`fresh(rev)`). Reads answer from the mirror, which may lag the datastore by a change still
  on its way. `fresh()` is what a read that must be *most recent* awaits (kube-apiserver's consistent reads
  from its watch cache, KEP-2340): the backend's `current_rev`, then the mirror applying it. One such request
  is in flight at a time; every reader that arrives before it is sent shares it (a reader never shares one sent
  before it arrived: that could miss a write acknowledged meanwhile by another server). `fresh(N)` waits for
  the mirror to apply revision N (an RV another server handed out), on the stream alone. Both give up after
  `fresh_timeout` (3 s, the watch cache's wait): the read then answers from the mirror as it is (for N, "too
  large" as before), counted in `stale_reads` and logged; a backend that cannot say its revision does the same.
- **Writes** (`create`/`update`/`delete`) become `backend.Write`s, group-committed: writes arriving while a
  commit is in flight go together in the next `backend.commit`. The value sent is the object's JSON without
  `metadata.resourceVersion` (as kube-apiserver stores objects), sealed by the `codec` if one is given (memory
  and watches only ever see plain values). A write is answered (rev, value with that resourceVersion) only once
  the change consumer has applied its revision: it is then readable here and already on this server's
  watches; if the stream has not brought it within `ACK_WAIT` seconds (the datastore went away right after the
  commit), it is answered anyway, so an outage fails writes fast instead of holding a committed one for as
  long as it lasts (read-your-writes on this server is then suspended until the stream resumes). Conflicts
  are the backend's outcomes (`KeyExists`, `KeyNotFound`, `RevMismatch` carrying the key's mod revision),
  raised only once the mirror has caught up with the state the conflict was about, so that a caller who
  re-reads after the error sees it (a read-modify-write loop does not spin on a stale revision).
  The one conflict judged locally is an update/delete whose `expected_rev` is below the key's mirrored
  revision: revisions only grow, so the backend would refuse it too. Everything else may be stale here and
  goes to the backend. `delete` without `final` takes the object from the mirror (from the backend if the
  mirror has not seen the key yet) and is conditional on that revision, so the DELETED event never carries
  a state older than the key's last one. A failed `commit` (`CommitFailed`/`StoreFull`) fails its batch: the
  writes' outcomes are unknown (they may still show on the change stream); the next batch tries again.
- **Compaction reload.** If the change stream raises `Compacted` (this mirror fell behind the datastore's
  compaction), the mirror reloads from a fresh snapshot and, like kube-apiserver's watch cache when it
  reinitialises, ends every watch (`WatchDropped`): the consumer re-watches from its last revision, which is
  now below the window's floor, so it gets `Compacted` (HTTP 410) and the client relists. Reads answer from
  the old state until the new snapshot is in place. Any other stream failure is logged and the stream is
  resumed after `current_rev` with backoff.
- A change whose value cannot be read (a ciphertext no key opens, bad JSON) fails `open`; on the live stream
  it is logged and skipped (the key keeps its previous state here), so one bad value does not stop the mirror.
- `compact(keep)` asks the backend to compact below `current_rev - keep` (the size-based cut of `Store` does
  not apply: the backend's bytes are not measured here); the window in memory is unaffected.
- `close` commits what is queued, waits (up to `CLOSE_WAIT` s) for the mirror to apply those writes, ends
  every watch and stops the consumer. The backend belongs to whoever opened it: close it after the store.

Everything runs on the event loop. Counters (`commits`, `writes`, `on_commit`) count this server's own commits.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from operator import itemgetter
from typing import Any, Protocol, runtime_checkable

import orjson

from lite.records import dataclass
from lite.server.store.backend import Backend, Change, HasHistory, Op, Write
from lite.server.store.errors import (
    CommitFailed,
    Compacted,
    KeyExists,
    KeyNotFound,
    RevMismatch,
    StoreClosed,
    StoreError,
    StoreFull,
)
from lite.server.store.index import KeyIndex
from lite.server.store.interface import StoreLike
from lite.server.store.packing import pack, unpack
from lite.server.store.snapshot import list_at
from lite.server.store.sqlite import ValueCodec
from lite.server.store.store import HISTORY_FACTOR, HISTORY_FLOOR, Store
from lite.server.store.watch import EventType, GapWatchHub, StoreEvent, Watch

log = logging.getLogger(__name__)
CLOSE_WAIT = 5.0  # seconds close waits for the mirror to apply writes already committed
STALE_LOG_EVERY = 10.0  # seconds between warnings about reads that could not be made fresh
FRESH_TIMEOUT = 3.0  # seconds a read waits for the mirror to reach a revision (kube-apiserver's watch cache: 3 s)
ACK_WAIT = 5.0  # seconds a committed write waits for the change stream before it is answered anyway
RETRY_FIRST, RETRY_MAX = 0.05, 5.0  # backoff of a failed change stream (seconds)
_Items = list[tuple[str, int, bytes]]
_Changes = list[Change]  # aliases: inside MirrorStore, `list` names the method
_Batch = list["_Pending"]
_Waiting = list[tuple[int, "_Pending"]]  # committed writes (revision, pending) awaiting the change stream


@runtime_checkable
class _HasStats(Protocol):
    async def stats(self) -> tuple[int, int]: ...


@dataclass(slots=True)
class _Pending:
    write: Write
    stored: dict[str, Any]  # the object as sent (no resourceVersion): the answer is it with the new revision
    future: asyncio.Future[tuple[int, bytes]]


def _encode(obj: dict[str, Any], rev: int) -> bytes:
    """JSON of `obj` with metadata.resourceVersion = rev (exact-size bytes, as `Store` keeps them)."""
    meta = obj.get("metadata")
    out = dict(obj)
    out["metadata"] = {**(meta if isinstance(meta, dict) else {}), "resourceVersion": str(rev)}
    return memoryview(orjson.dumps(out)).tobytes()


def _stored(obj: dict[str, Any]) -> dict[str, Any]:
    """`obj` without metadata.resourceVersion (the caller's dict is not modified)."""
    meta = obj.get("metadata")
    if not isinstance(meta, dict) or "resourceVersion" not in meta:
        return obj
    out = dict(obj)
    out["metadata"] = {k: v for k, v in meta.items() if k != "resourceVersion"}
    return out


class MirrorStore:
    """See the module docstring and docs/internals.md; open with `MirrorStore.open(backend)`."""

    def __init__(self, backend: Backend, window: int, watch_queue: int, window_bytes: int,
                 watch_queue_bytes: int, codec: ValueCodec | None) -> None:
        self._backend = backend
        self._codec = codec
        self._index = KeyIndex()
        self._hub = GapWatchHub(window, watch_queue, window_bytes, watch_queue_bytes)
        self.current_rev = 0
        self._pending: list[_Pending] = []
        self._acks: dict[int, _Pending] = {}  # committed writes waiting for the mirror to apply their revision
        self._wake = asyncio.Event()
        self._applied = asyncio.Event()  # set (and replaced) after every applied batch, reload, or close
        self._closing = False
        self._stream_ended = False
        self._writer: asyncio.Task[None] | None = None
        self._consumer: asyncio.Task[None] | None = None
        self._close_task: asyncio.Future[None] | None = None
        self._path = str(getattr(backend, "path", ""))
        self.full = False  # the last commit failed for want of space (cleared by the next good one)
        self.failed_batches = 0
        self.commits = 0  # backend commits of this server's writes
        self.writes = 0  # this server's writes committed
        self.compactions = 0
        self.compacted_rows = 0  # not measured over a backend: stays 0
        self.reloads = 0  # snapshots reloaded after the change stream was compacted away
        self.fresh_timeout = FRESH_TIMEOUT
        self.rev_requests = 0  # backend current_rev calls made for fresh reads
        self.stale_reads = 0  # fresh reads that timed out (or could not ask the backend) and read the mirror
        self._rev_next: asyncio.Future[int] | None = None  # the next current_rev request, not sent yet
        self._rev_task: asyncio.Task[None] | None = None  # sends them one at a time
        self._stale_logged = float("-inf")  # loop time of the last stale-read warning
        self.on_commit: Callable[[int], None] | None = None  # told the successful writes of every commit

    # ---- lifecycle -------------------------------------------------------------------------------------

    @classmethod
    async def open(cls, backend: Backend, *, window: int = 10000, watch_queue: int = 1000,
                   window_bytes: int = 64 << 20, watch_queue_bytes: int = 16 << 20,
                   codec: ValueCodec | None = None) -> MirrorStore:
        """Load the backend's snapshot and start following its changes (see the module docstring)."""
        store = cls(backend, window, watch_queue, window_bytes, watch_queue_bytes, codec)
        await store._load()
        store._consumer = asyncio.create_task(store._consume(), name="lite-mirror-changes")
        store._writer = asyncio.create_task(store._write_loop(), name="lite-mirror-writer")
        return store

    async def _load(self) -> None:
        """Replace the mirror with a fresh snapshot; every watch is dropped (see the module docstring)."""
        rev, items = await self._backend.snapshot()
        loaded = [(k, r, pack(self._decode(k, v, r))) for k, r, v in items]
        loaded.sort(key=itemgetter(0))  # already sorted by the contract: a linear pass then
        index = KeyIndex()
        index.load_sorted(loaded)
        floor, history = await self._history(rev, index)
        self._index = index
        self.current_rev = rev
        self._hub.reset(floor)
        self._hub.remember(history)
        for r in [r for r in self._acks if r <= rev]:
            p = self._acks.pop(r)
            self._resolve(p, r, _encode(p.stored, r))
        self._signal()

    async def _history(self, rev: int, index: KeyIndex) -> tuple[int, list[StoreEvent]]:
        """(floor, window events) from the backend's retained history up to `rev` (the snapshot's revision), if it
        keeps one (`HasHistory`); else (rev, []). Values are packed and shared with `index` (and a prev with the
        key's previous event) as `Store`'s window shares them; a change that cannot be read cuts the window
        above it (no event may be missing between the floor and `rev`)."""
        if self._hub.window <= 0 or not isinstance(self._backend, HasHistory):
            return rev, []
        try:
            floor, changes = await self._backend.history(rev, self._hub.window)
        except Exception:
            log.exception("store mirror: cannot read the datastore's history; the watch window starts at %d", rev)
            return rev, []
        # Old values are unsealed by the codec a `FollowingCodec` wraps (`inner`): what passes its `unseal` must be
        # the datastore's newest state, in revision order (it adopts the newest bootstrap data it saw).
        codec = getattr(self._codec, "inner", None) or self._codec
        events: list[StoreEvent] = []
        last: dict[str, tuple[int, bytes]] = {}  # key -> (rev, packed value) of its latest event so far
        for ch in changes:
            try:
                held = index.get(ch.key)
                packed = held[1] if held is not None and held[0] == ch.rev and not ch.deleted \
                    else pack(self._decode(ch.key, ch.value, ch.rev, codec))
                prev: bytes | None = None
                if not ch.created:
                    before = last.get(ch.key)
                    if before is not None and before[0] == ch.prev_rev:
                        prev = before[1]
                    elif ch.prev is not None and ch.prev_rev:
                        prev = pack(self._decode(ch.key, ch.prev, ch.prev_rev, codec))
            except Exception:
                log.warning("store mirror: cannot read %s at revision %d in the history; the watch window starts "
                            "after it", ch.key, ch.rev)
                events.clear()
                last.clear()
                floor = ch.rev
                continue
            last[ch.key] = (ch.rev, packed)
            kind: EventType = "DELETED" if ch.deleted else "ADDED" if ch.created else "MODIFIED"
            events.append(StoreEvent(kind, ch.key, ch.rev, packed, prev))
        return min(floor, rev), events

    async def release_memory(self) -> None:
        """`Store.release_memory`'s counterpart: a mirror holds no SQLite page cache, so there is nothing to free
        beyond what the heap trim that follows it returns."""

    async def close(self) -> None:
        """Commit what is queued, end every watch, stop following the backend. Idempotent."""
        if self._close_task is None:
            self._close_task = asyncio.ensure_future(self._close())
        await asyncio.shield(self._close_task)

    async def _close(self) -> None:
        self._closing = True
        self._wake.set()
        if self._writer is not None:
            await asyncio.gather(self._writer, return_exceptions=True)
        if self._acks and self._consumer is not None and not self._consumer.done():
            loop = asyncio.get_running_loop()
            deadline = loop.time() + CLOSE_WAIT
            while self._acks and not self._consumer.done() and loop.time() < deadline:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._applied.wait(), deadline - loop.time())
        if self._consumer is not None:
            self._consumer.cancel()
            await asyncio.gather(self._consumer, return_exceptions=True)
        if self._rev_task is not None:
            self._rev_task.cancel()
            await asyncio.gather(self._rev_task, return_exceptions=True)
        if self._rev_next is not None:
            self._rev_next.set_exception(StoreClosed("store is closed"))
            self._rev_next.exception()
            self._rev_next = None
        self._fail_acks(StoreClosed("store closed before the write was seen on the change stream"))
        self._hub.close_all()
        self._signal()

    # ---- reads (synchronous, mirrored state) -----------------------------------------------------------

    @property
    def oldest_rev(self) -> int:
        """Oldest revision a watch can replay from memory (current_rev + 1 when nothing is replayable)."""
        return self._hub.oldest_rev(self.current_rev)

    def get(self, key: str) -> tuple[int, bytes] | None:
        got = self._index.get(key)
        return None if got is None else (got[0], unpack(got[1]))

    def list(self, prefix: str, *, start_after: str = "", limit: int = 0,
             at_rev: int = 0) -> tuple[_Items, int, int]:
        """(items sorted by key, the revision they are as of, how many more items follow the page); `at_rev` as
        `Store.list` (an older revision is rebuilt from the window by `snapshot.list_at`)."""
        items, rev, remaining = self.list_packed(prefix, start_after=start_after, limit=limit, at_rev=at_rev)
        return [(k, r, unpack(v)) for k, r, v in items], rev, remaining

    def get_packed(self, key: str) -> tuple[int, bytes] | None:
        """Like `get`, with the value as held (`packing.pack`'s form), as `Store.get_packed`."""
        return self._index.get(key)

    def list_packed(self, prefix: str, *, start_after: str = "", limit: int = 0,
                    at_rev: int = 0) -> tuple[_Items, int, int]:
        if at_rev and at_rev != self.current_rev:
            if at_rev > self.current_rev:
                raise ValueError(f"revision {at_rev} is beyond the current revision {self.current_rev}")
            # the window holds every event newer than oldest_rev - 1 (its floor), gaps or not
            items, remaining = list_at(self._index, self._hub.events, self.oldest_rev - 1, at_rev, prefix,
                                       start_after, limit)
            return items, at_rev, remaining
        items, remaining = self._index.list(prefix, start_after, limit)
        return items, self.current_rev, remaining

    def count(self, prefix: str) -> int:
        return self._index.count(prefix)

    def stamp(self, prefix: str) -> object:
        """`KeyIndex.stamp`: the same object while nothing committed under `prefix` changed."""
        return self._index.stamp(prefix)

    def __len__(self) -> int:
        return len(self._index)

    def watcher_count(self) -> int:
        return self._hub.watcher_count()

    def watch(self, prefix: str, after_rev: int) -> Watch:
        """Events for keys under `prefix` with rev > after_rev; raises Compacted if those left the window."""
        if self._closing:
            raise StoreClosed("store is closed")
        return self._hub.watch(prefix, after_rev, self.current_rev)

    # ---- read freshness across servers -----------------------------------------------------------------

    def fresh(self, rev: int = 0) -> Awaitable[None] | None:
        """Something to await before a read that must be fresh, or None when the mirror already is.

        rev 0: a consistent read ("most recent"): the mirror must apply everything the backend had committed
        when asked (one `current_rev` request, shared by every reader that arrived before it was sent). rev N:
        the mirror must have applied N (an RV another server handed out). Either waits at most `fresh_timeout`
        seconds; then the read goes on with the mirror as it is (an RV still beyond it is then "too large").
        """
        if rev:
            return None if rev <= self.current_rev else self._wait_applied(rev)
        if self._closing or self._stream_ended:
            return None
        return self._consistent()

    async def _wait_applied(self, rev: int) -> None:
        try:
            async with asyncio.timeout(self.fresh_timeout):
                while not (self.current_rev >= rev or self._closing or self._stream_ended):
                    await self._applied.wait()
        except TimeoutError:
            pass

    async def _consistent(self) -> None:
        try:
            async with asyncio.timeout(self.fresh_timeout):
                target = await asyncio.shield(self._backend_rev())
                while not (self.current_rev >= target or self._closing or self._stream_ended):
                    await self._applied.wait()
            return
        except TimeoutError:
            why = "the mirror did not catch up in time"
        except (CommitFailed, StoreClosed) as e:
            if self._closing:
                return
            why = f"the datastore did not answer ({e})"
        self.stale_reads += 1
        now = asyncio.get_running_loop().time()
        if now >= self._stale_logged + STALE_LOG_EVERY:  # a datastore outage must not log every read
            self._stale_logged = now
            log.warning("store mirror: consistent reads served from the mirror at revision %d: %s (%d so far)",
                        self.current_rev, why, self.stale_reads)

    def _backend_rev(self) -> asyncio.Future[int]:
        """The backend's current revision from a request sent after now: readers that arrive before it is sent
        share it (100 concurrent reads, one round trip); one request is in flight at a time."""
        if self._rev_next is None:
            self._rev_next = asyncio.get_running_loop().create_future()
            if self._rev_task is None or self._rev_task.done():
                self._rev_task = asyncio.create_task(self._ask_revs(), name="lite-mirror-fresh")
        return self._rev_next

    async def _ask_revs(self) -> None:
        while self._rev_next is not None:
            fut, self._rev_next = self._rev_next, None
            self.rev_requests += 1
            try:
                fut.set_result(await self._backend.current_rev())
            except BaseException as e:
                err = e if isinstance(e, CommitFailed | StoreClosed) \
                    else StoreClosed("store is closed") if isinstance(e, asyncio.CancelledError) \
                    else CommitFailed(f"reading the datastore's revision failed: {e!r}")
                fut.set_exception(err)
                fut.exception()  # retrieved here: every waiter may have timed out already
                if isinstance(e, asyncio.CancelledError):
                    raise

    # ---- the change consumer ---------------------------------------------------------------------------

    def _decode(self, key: str, raw: bytes, rev: int, codec: ValueCodec | None = None) -> bytes:
        """The plain JSON of a stored value with resourceVersion = rev (unsealed by `codec`, default the store's)."""
        codec = codec or self._codec
        plain = raw if codec is None else codec.unseal(key, raw)
        doc = orjson.loads(plain)
        return _encode(doc, rev) if isinstance(doc, dict) else plain

    async def _consume(self) -> None:
        delay = RETRY_FIRST
        reload = False
        try:
            while True:
                try:
                    if reload:
                        await self._load()
                        reload = False
                        self.reloads += 1
                    stream = self._backend.changes(self.current_rev)
                    try:
                        async for batch in stream:
                            self._apply(batch)
                            delay = RETRY_FIRST
                    finally:
                        aclose = getattr(stream, "aclose", None)
                        if aclose is not None:
                            with contextlib.suppress(Exception):
                                await aclose()
                    return  # the backend was closed
                except Compacted as e:
                    log.warning("store mirror fell behind the datastore's compaction (%s): reloading; "
                                "watches end and their clients relist", e)
                    reload = True
                except StoreClosed:
                    return
                except Exception:
                    log.exception("store mirror: change stream failed; resuming after revision %d in %.2f s",
                                  self.current_rev, delay)
                    await asyncio.sleep(delay)
                    delay = min(RETRY_MAX, delay * 2)
        finally:
            self._stream_ended = True
            self._fail_acks(StoreClosed("the datastore's change stream ended"))
            self._signal()

    def _apply(self, batch: _Changes) -> None:
        """Apply changes to the index, publish them, then answer the writes among them."""
        events: list[StoreEvent] = []
        kept: list[StoreEvent] = []
        index = self._index
        for ch in batch:
            if ch.rev <= self.current_rev:
                continue  # already in the snapshot this mirror was (re)loaded from
            own = self._acks.get(ch.rev)
            try:
                # This server's write: encoded from the object it sent (the same bytes, without parsing them).
                value = _encode(own.stored, ch.rev) if own is not None else self._decode(ch.key, ch.value, ch.rev)
            except Exception:
                log.exception("store mirror: cannot read %s at revision %d; change skipped", ch.key, ch.rev)
                self.current_rev = ch.rev
                continue
            packed = pack(value)
            held = index.get(ch.key)
            prev = held[1] if held is not None and not ch.created else None
            if ch.deleted:
                index.remove(ch.key)
            else:
                index.put(ch.key, ch.rev, packed)
            kind: EventType = "DELETED" if ch.deleted else "ADDED" if ch.created else "MODIFIED"
            events.append(StoreEvent(kind, ch.key, ch.rev, value, prev))
            kept.append(StoreEvent(kind, ch.key, ch.rev, packed, prev))
            self.current_rev = ch.rev
        if events:
            self._hub.publish(events, kept)
        if self._acks:
            for ev in events:
                p = self._acks.pop(ev.rev, None)
                if p is not None:
                    self._resolve(p, ev.rev, ev.packed_value)
            for r in [r for r in self._acks if r <= self.current_rev]:  # skipped unreadable changes
                p = self._acks.pop(r)
                self._resolve(p, r, _encode(p.stored, r))
        self._signal()

    def _signal(self) -> None:
        self._applied.set()
        self._applied = asyncio.Event()

    @staticmethod
    def _resolve(p: _Pending, rev: int, value: bytes) -> None:
        if not p.future.done():  # the submitter may have been cancelled; the write stands anyway
            p.future.set_result((rev, value))

    def _answer_late(self, waiting: _Waiting) -> None:
        """Committed writes whose revisions the change stream has not brought within ACK_WAIT (the datastore went
        away right after the commit, or the stream is reconnecting): answer them as committed rather than hold
        their clients for as long as the outage lasts. They show here once the stream resumes."""
        for rev, p in waiting:
            if self._acks.get(rev) is p:
                del self._acks[rev]
                log.warning("store mirror: write at revision %d answered before the change stream brought it "
                            "(mirrored up to %d)", rev, self.current_rev)
                self._resolve(p, rev, _encode(p.stored, rev))

    def _fail_acks(self, err: StoreError) -> None:
        acks, self._acks = self._acks, {}
        for p in acks.values():
            if not p.future.done():
                p.future.set_exception(err)

    # ---- writes --------------------------------------------------------------------------------------

    async def create(self, key: str, obj: dict[str, Any]) -> tuple[int, bytes]:
        return await self._submit("create", key, obj, 0)

    async def update(self, key: str, obj: dict[str, Any], expected_rev: int) -> tuple[int, bytes]:
        """Replace the object; expected_rev 0 = unconditional."""
        self._stale(key, expected_rev)
        return await self._submit("update", key, obj, expected_rev)

    async def delete(self, key: str, expected_rev: int, final: dict[str, Any] | None = None) -> tuple[int, bytes]:
        """Delete the key, leaving `final` (default: its current object) as the DELETED event's state.

        Returns (deletion rev, final state with that rev as resourceVersion); expected_rev 0 = unconditional.
        """
        self._stale(key, expected_rev)
        if final is not None:
            return await self._submit("delete", key, final, expected_rev)
        while True:
            if expected_rev and self.current_rev < expected_rev:
                # the caller saw a revision this mirror has not applied yet: the final state must be the
                # object at that revision, not an older one read from the backend before it landed
                await self._reach(expected_rev)
            held = self._index.get(key)
            if held is not None:
                rev, value = held[0], unpack(held[1])
            else:  # not mirrored yet (a peer's create this server has not applied)
                found = await self._fetch(key)
                if found is None:
                    gone = KeyNotFound(key)
                    await self._catch_up(gone)
                    raise gone
                rev, value = found
            if expected_rev and rev != expected_rev:
                # after _reach, a revision the key does not have here was not committed when asked (one still
                # in flight, or made up): the object at it is unknown, so the delete cannot write its state
                mismatch = RevMismatch(key, rev)
                await self._catch_up(mismatch)
                raise mismatch
            try:
                return await self._submit("delete", key, orjson.loads(value), expected_rev or rev)
            except RevMismatch:
                if expected_rev:
                    raise
                # changed meanwhile (the mirror has caught up with it): delete its newer state

    def _stale(self, key: str, expected_rev: int) -> None:
        """RevMismatch if the mirror already holds a newer revision of the key than `expected_rev`."""
        held = self._index.get(key)
        if expected_rev and held is not None and held[0] > expected_rev:
            raise RevMismatch(key, held[0])

    async def _fetch(self, key: str) -> tuple[int, bytes] | None:
        """The key's (mod_rev, plain value) read from the backend (the mirror has not seen it)."""
        _, items = await self._backend.snapshot(key)
        for k, rev, raw in items:
            if k == key:
                return rev, self._decode(k, raw, rev)
        return None

    async def _submit(self, op: Op, key: str, obj: dict[str, Any], expected_rev: int) -> tuple[int, bytes]:
        if self._closing:
            raise StoreClosed("store is closed")
        stored = _stored(obj)
        raw = orjson.dumps(stored)  # before queueing: a bad object fails alone
        value = raw if self._codec is None else self._codec.seal(key, raw)
        fut: asyncio.Future[tuple[int, bytes]] = asyncio.get_running_loop().create_future()
        self._pending.append(_Pending(Write(op, key, value, expected_rev), stored, fut))
        self._wake.set()
        try:
            return await fut
        except (KeyExists, KeyNotFound, RevMismatch) as e:
            await self._catch_up(e)
            raise

    async def _reach(self, rev: int) -> None:
        """Wait until the mirror has applied `rev`, or everything the backend had committed when asked."""
        if self.current_rev >= rev or self._closing or self._stream_ended:
            return
        try:
            target = min(rev, await self._backend.current_rev())
        except Exception:  # the datastore cannot say: go on with what is mirrored
            return
        while not (self.current_rev >= target or self._closing or self._stream_ended):
            await self._applied.wait()

    async def _catch_up(self, err: KeyExists | KeyNotFound | RevMismatch) -> None:
        """Wait until the mirror shows the state a backend conflict was about (or is as new as the backend)."""
        def seen() -> bool:
            if isinstance(err, RevMismatch):
                return self.current_rev >= err.current_rev
            present = self._index.get(err.key) is not None
            return present if isinstance(err, KeyExists) else not present

        if seen() or self._closing or self._stream_ended:
            return
        try:
            target = await self._backend.current_rev()
        except Exception:  # the datastore cannot say: report the conflict as it is
            return
        while not (seen() or self.current_rev >= target or self._closing or self._stream_ended):
            await self._applied.wait()

    async def _write_loop(self) -> None:
        try:
            while True:
                if not self._pending:
                    if self._closing:
                        return
                    self._wake.clear()
                    await self._wake.wait()
                    continue
                batch, self._pending = self._pending, []
                await self._commit(batch)
        except BaseException as e:
            self._closing = True
            if not isinstance(e, asyncio.CancelledError):
                log.exception("store mirror writer crashed")
            queued, self._pending = self._pending, []
            for p in queued:
                if not p.future.done():
                    p.future.set_exception(StoreClosed(f"store writer stopped: {e!r}"))
            raise

    async def _commit(self, batch: _Batch) -> None:
        """One group commit: answer conflicts now, successes once the mirror applied their revisions."""
        try:
            outcomes = await self._backend.commit([p.write for p in batch])
            if len(outcomes) != len(batch):
                raise CommitFailed(f"the datastore answered {len(outcomes)} outcomes for {len(batch)} writes")
        except Exception as e:
            err = e if isinstance(e, CommitFailed | StoreClosed) else CommitFailed(f"datastore commit failed: {e}")
            self.failed_batches += 1
            if isinstance(err, StoreFull):
                if not self.full:
                    log.error("%s", err)
                self.full = True
            else:
                log.error("store mirror: commit of %d writes failed: %s", len(batch), err)
            for p in batch:
                if not p.future.done():
                    p.future.set_exception(err)
            return
        if self.full:
            self.full = False
            log.warning("store writable again: a commit succeeded after the datastore was full")
        ok = 0
        waiting: _Waiting = []
        for p, out in zip(batch, outcomes, strict=True):
            if isinstance(out, int):
                ok += 1
                if out <= self.current_rev:  # the mirror applied it already (or reloaded past it)
                    self._resolve(p, out, _encode(p.stored, out))
                elif self._stream_ended:
                    p.future.set_exception(StoreClosed("the datastore's change stream ended"))
                else:
                    self._acks[out] = p
                    waiting.append((out, p))
            elif not p.future.done():
                p.future.set_exception(out if isinstance(out, StoreError)
                                       else CommitFailed(f"the datastore answered {out!r} for a write"))
        if waiting:  # one timer per batch
            asyncio.get_running_loop().call_later(ACK_WAIT, self._answer_late, waiting)
        self.commits += 1
        self.writes += ok
        if self.on_commit is not None and ok:
            self.on_commit(ok)

    @property
    def path(self) -> str:
        """The backend's file if it has one (SqliteBackend), else "" (metrics then report no file size)."""
        return self._path

    # ---- compaction, stats ---------------------------------------------------------------------------

    async def compact(self, keep: int, *, history_factor: float = HISTORY_FACTOR,
                      history_floor: int = HISTORY_FLOOR) -> int:
        """Ask the backend to drop history at or below current_rev - keep; returns 0 (rows are not counted).

        `history_factor`/`history_floor` (Store's size-based cut) do not apply to a backend: accepted so that
        `compactor` drives both stores. The in-memory window is unaffected.
        """
        below = self.current_rev - max(0, keep)
        if below > 0:
            await self._backend.compact(below)
            self.compactions += 1
        return 0

    async def stats(self) -> tuple[int, int]:
        """The backend's (log rows, free pages) if it reports them (SqliteBackend does), else (0, 0)."""
        if isinstance(self._backend, _HasStats):
            return await self._backend.stats()
        return 0, 0


def _conforms(store: Store, mirror: MirrorStore) -> tuple[StoreLike, StoreLike]:
    """Never called: mypy checks here that both stores give the API the same interface."""
    return store, mirror
