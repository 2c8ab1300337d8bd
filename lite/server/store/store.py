"""The store: an SQLite revision log behind an in-memory index, with group commit and watch fan-out.

Write path (all on the event loop except the COMMIT itself):
1. `create/update/delete` check conflicts against the *pending view* (committed index overlaid with writes
   still waiting for COMMIT), assign the next revision, set `metadata.resourceVersion`, serialise with
   orjson, and queue the row. Because checks and revisions follow submission order, a batch behaves exactly
   like the same writes done one after another.
2. The single writer task takes everything pending and commits it in one transaction on the store's one
   thread (`synchronous=FULL`, so COMMIT is durable). While that runs, new writes queue up for the next batch.
3. After COMMIT the writer first starts the next batch's COMMIT (what queued meanwhile), then, while that
   runs, packs this batch's values (`packing`), updates the index and `current_rev`, publishes the events to
   watchers, and only then resolves the writers' futures: an acknowledged write is durable, readable, and
   already on watches. Reads unpack; the index and the window share each packed value. Batches are applied
   and answered in commit order; a batch's COMMIT starts only after the one before it succeeded, so a failed
   COMMIT never has a later batch committed behind it.

If a COMMIT fails, exactly that batch fails, plus any write queued behind it on a key the batch wrote (it
was checked against a write that did not happen); the index, `current_rev` and the watch stream are
untouched. The other queued writes are renumbered from the committed revision and go in the next batch, so
revisions stay gapless, and a write that was waiting to report a conflict with a pending write is judged
again if a batch failed meanwhile. A full disk fails writes with `StoreFull` (logged once when it starts and
once when writes succeed again); nothing else changes, so the store recovers by itself as soon as a commit
fits. `open` raises `StoreCorrupt` for a damaged file and `StoreFull` when the disk is too full to open it.

The writer task is owned by the store (started in `open`, awaited in `close`), and so is the `Checkpointer`
thread (`checkpoint.py`: WAL checkpoints off the commit path; started in `open`, joined in `close` before the
file closes); `compactor` is the one loop that the server runs in its own TaskGroup. Compaction deletes and
vacuums in small transactions on the writer's thread, so a commit never waits for more than one step.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import orjson

from lite.records import dataclass
from lite.server.store import faults
from lite.server.store.checkpoint import Checkpointer
from lite.server.store.errors import (
    CommitFailed,
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
from lite.server.store.sqlite import LogDB, Row, ValueCodec
from lite.server.store.watch import EventType, StoreEvent, Watch, WatchHub

log = logging.getLogger(__name__)
T = TypeVar("T")
# Compaction by size: superseded history is kept within max(HISTORY_FLOOR, HISTORY_FACTOR x live bytes), so
# store files settle within ~5x the live data whatever the revision budget (`keep`) would allow.
HISTORY_FACTOR = 2.0
HISTORY_FLOOR = 1 << 20
# Compaction's steps on the writer's thread: rows deleted per transaction, pages vacuumed per transaction.
COMPACT_ROWS = 200
VACUUM_PAGES = 128


@dataclass(slots=True)
class _Pending:
    row: Row
    prev: bytes | None  # the value this write replaces, for the event
    future: asyncio.Future[tuple[int, bytes]]


_Batch = list[_Pending]  # an alias: inside Store, `list` names the method
_Items = list[tuple[str, int, bytes]]  # (key, mod_rev, value) as `list` returns them
_History = list[tuple[Row, bytes, bytes | None]]  # (row, packed value, packed prev) for the window at open


def _encode(obj: dict[str, Any], rev: int) -> bytes:
    """JSON of `obj` with metadata.resourceVersion = rev; the caller's dict is not modified."""
    meta = obj.get("metadata")
    out = dict(obj)
    out["metadata"] = {**(meta if isinstance(meta, dict) else {}), "resourceVersion": str(rev)}
    # orjson's result keeps its growth buffer (~16 KB for a 2 KB object); an exact-size copy is what we
    # keep in the index and the window, or 10,000 pods would cost 160 MB instead of 20 MB.
    return memoryview(orjson.dumps(out)).tobytes()


class Store:
    """See the module docstring and docs/internals.md for the contract."""

    def __init__(self, db: LogDB, executor: ThreadPoolExecutor, window: int, watch_queue: int,
                 window_bytes: int = 64 << 20, watch_queue_bytes: int = 16 << 20) -> None:
        self._db = db
        self._executor = executor
        # The loop `open` ran on, kept: on Python 3.11 every asyncio.get_running_loop() is a getpid() system call,
        # which costs microseconds in a sandboxed kernel, and a write asked for it twice.
        self._loop: asyncio.AbstractEventLoop | None = None
        self._checkpointer: Checkpointer | None = None  # started by open once the file is loaded
        self._index = KeyIndex()
        self._hub = WatchHub(window, watch_queue, window_bytes, watch_queue_bytes)
        self.current_rev = 0
        self._next_rev = 1
        # key -> (rev, value or None if deleted) for writes queued or committing but not yet applied.
        self._overlay: dict[str, tuple[int, bytes | None]] = {}
        self._pending: list[_Pending] = []
        self._in_flight: list[_Pending] = []  # the writes the writer is committing or applying (up to 2 batches)
        self._wake = asyncio.Event()
        self._committed = asyncio.Event()  # set (and replaced) after every commit or failed batch
        self._closing = False
        self._writer: asyncio.Task[None] | None = None
        self._close_task: asyncio.Future[None] | None = None
        self.full = False  # the last commit failed for want of disk space (cleared by the next good one)
        self.failed_batches = 0
        self.commits = 0  # transactions committed (group commit makes this far less than `writes`)
        self.writes = 0  # rows committed
        self.compactions = 0  # compaction passes finished
        self.compacted_rows = 0  # rows those passes removed
        self.on_commit: Callable[[int], None] | None = None  # told the row count of every committed batch

    # ---- lifecycle -------------------------------------------------------------------------------------

    @classmethod
    async def open(cls, path: str, *, window: int = 10000, watch_queue: int = 1000, window_bytes: int = 64 << 20,
                   watch_queue_bytes: int = 16 << 20, codec: ValueCodec | None = None) -> Store:
        """Open or create the file, load the current state and seed the watch window from the newest rows.

        The window holds at most `window` events and `window_bytes` bytes; `watch_queue` and
        `watch_queue_bytes` bound each watcher's backlog of live events before it is dropped. A damaged
        file raises StoreCorrupt (nothing is written to it), a full disk StoreFull.
        """
        executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="lite-store")
        loop = asyncio.get_running_loop()
        try:
            db = await loop.run_in_executor(executor, LogDB, path, codec)
        except BaseException as e:
            executor.shutdown(wait=False)
            _raise_open_fault(e, path)
            raise
        store = cls(db, executor, window, watch_queue, window_bytes, watch_queue_bytes)
        store._loop = loop
        try:
            await store._load(window)
        except BaseException as e:
            await store._close()
            _raise_open_fault(e, path)
            raise
        try:
            store._checkpointer = await store._run(lambda: Checkpointer(path))
        except BaseException:
            await store._close()
            raise
        store._writer = asyncio.create_task(store._write_loop(), name="lite-store-writer")
        return store

    async def _load(self, window: int) -> None:
        # Packed on the store's thread: the loop is only waiting for the open.
        current = await self._run(lambda: [(k, r, pack(v)) for k, r, v in self._db.load_current()])
        rev = await self._run(self._db.max_rev)
        known = {r: value for _, r, value in current}

        def recent() -> _History:
            # Values of live rows come from `known` (already packed, shared with the index); the rest are
            # packed as they are read (10,000 plain values held at once were a transient peak of ~50 MB
            # that left the heap fragmented), each once: a prev in the window is the same object.
            return [(h.row, h.row.value, h.prev_value) for h in self._db.recent(window, known, pack)]

        history = await self._run(recent) if window > 0 else []
        self._index.load_sorted(current)
        self.current_rev = rev
        self._next_rev = rev + 1
        self._hub.remember(StoreEvent(_event_type(row), row.name, row.id, value, prev) for row, value, prev in history)

    async def close(self) -> None:
        """Commit everything pending, end all watches, close the file. Idempotent; safe to call concurrently."""
        if self._close_task is None:
            self._close_task = asyncio.ensure_future(self._close())
        await asyncio.shield(self._close_task)

    async def _close(self) -> None:
        self._closing = True
        self._wake.set()
        if self._writer is not None:
            # A crashed writer was already logged and failed its writes; the file must still be closed.
            await asyncio.gather(self._writer, return_exceptions=True)
        self._hub.close_all()
        if self._checkpointer is not None:
            # Before the writer's connection closes: that one must be the last (it checkpoints, removes the WAL).
            await self._run(self._checkpointer.close)
        await self._run(self._db.close)
        self._executor.shutdown(wait=True)

    async def release_memory(self) -> None:
        """Free what SQLite caches in memory (`LogDB.release_memory`), on the store's thread between commits;
        for a server gone quiet (`lite.malloctune.QuietTrim`). Nothing once the store is closing."""
        if not self._closing:
            await self._run(self._db.release_memory)

    def _poke(self) -> None:
        """Tell the checkpointer that the WAL grew."""
        if self._checkpointer is not None:
            self._checkpointer.poke()

    async def _run(self, fn: Callable[[], T]) -> T:
        """Run blocking SQLite work on the store's one thread."""
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn)

    # ---- reads (synchronous, committed state only) -----------------------------------------------------

    @property
    def oldest_rev(self) -> int:
        """Oldest revision a watch can replay from memory (current_rev + 1 when the window is empty)."""
        return self._hub.oldest_rev(self.current_rev)

    def get(self, key: str) -> tuple[int, bytes] | None:
        got = self._index.get(key)
        return None if got is None else (got[0], unpack(got[1]))

    def list(
        self, prefix: str, *, start_after: str = "", limit: int = 0, at_rev: int = 0
    ) -> tuple[list[tuple[str, int, bytes]], int, int]:
        """(items sorted by key, the revision they are as of, how many more items follow the page).

        `at_rev` 0 or current_rev reads the current state. An older revision reads the state as of it (a
        paginated list's later pages, an exact resourceVersion), rebuilt from the window (`snapshot.list_at`);
        Compacted when the window no longer reaches back to it; ValueError beyond current_rev.
        """
        if at_rev and at_rev != self.current_rev:
            items, remaining = self._list_at(prefix, start_after, limit, at_rev)
            return [(k, r, unpack(v)) for k, r, v in items], at_rev, remaining
        items, remaining = self._index.list(prefix, start_after, limit)
        return [(k, r, unpack(v)) for k, r, v in items], self.current_rev, remaining

    def get_packed(self, key: str) -> tuple[int, bytes] | None:
        """Like `get`, but the value as the store holds it (`packing.pack`'s form; `packing.unpack` gives
        the JSON). The same bytes object stays in the index until the key changes: a cache may keep it
        instead of a copy of its own."""
        return self._index.get(key)

    def list_packed(self, prefix: str, *, start_after: str = "", limit: int = 0,
                    at_rev: int = 0) -> tuple[_Items, int, int]:
        """Like `list`, with values as the store holds them (see `get_packed`)."""
        if at_rev and at_rev != self.current_rev:
            items, remaining = self._list_at(prefix, start_after, limit, at_rev)
            return items, at_rev, remaining
        items, remaining = self._index.list(prefix, start_after, limit)
        return items, self.current_rev, remaining

    def _list_at(self, prefix: str, start_after: str, limit: int, at_rev: int) -> tuple[_Items, int]:
        if at_rev > self.current_rev:
            raise ValueError(f"revision {at_rev} is beyond the current revision {self.current_rev}")
        # The window is contiguous up to current_rev: it holds every event newer than oldest_rev - 1.
        return list_at(self._index, self._hub.events, self.oldest_rev - 1, at_rev, prefix, start_after, limit)

    def count(self, prefix: str) -> int:
        return self._index.count(prefix)

    def stamp(self, prefix: str) -> object:
        """`KeyIndex.stamp`: the same object while nothing committed under `prefix` changed."""
        return self._index.stamp(prefix)

    def __len__(self) -> int:
        return len(self._index)

    def watcher_count(self) -> int:
        """Live watches (for tests and benchmarks)."""
        return self._hub.watcher_count()

    def watch(self, prefix: str, after_rev: int) -> Watch:
        """Events for keys under `prefix` with rev > after_rev; raises Compacted if those left the window."""
        if self._closing:
            raise StoreClosed("store is closed")
        return self._hub.watch(prefix, after_rev, self.current_rev)

    def fresh(self, rev: int = 0) -> Awaitable[None] | None:
        """Always None: one process holds every acknowledged write, so reads are fresh as they are (an RV
        beyond current_rev was never handed out). `MirrorStore.fresh` waits for other servers' writes."""
        return None

    # ---- writes --------------------------------------------------------------------------------------

    def _latest(self, key: str) -> tuple[int, bytes | None] | None:
        """The key's newest (rev, value) including pending writes; value None = deleted while pending."""
        pending = self._overlay.get(key)
        return pending if pending is not None else self._index.get(key)

    async def create(self, key: str, obj: dict[str, Any]) -> tuple[int, bytes]:
        latest = self._latest(key)
        while latest is not None and latest[1] is not None:
            if not await self._settle(key):
                raise KeyExists(key)
            latest = self._latest(key)  # the pending write it conflicted with failed: judge again
        prev_rev = latest[0] if latest is not None else 0
        return await self._submit(key, obj, created=True, deleted=False, prev_rev=prev_rev, prev=None)

    async def update(self, key: str, obj: dict[str, Any], expected_rev: int) -> tuple[int, bytes]:
        """Replace the object; expected_rev 0 = unconditional."""
        rev, prev = await self._check_existing(key, expected_rev)
        return await self._submit(key, obj, created=False, deleted=False, prev_rev=rev, prev=prev)

    async def delete(self, key: str, expected_rev: int, final: dict[str, Any] | None = None) -> tuple[int, bytes]:
        """Write a tombstone holding `final` (default: the current object) at a new revision.

        Returns (deletion rev, final state bytes with that rev as resourceVersion). expected_rev 0 =
        unconditional.
        """
        rev, prev = await self._check_existing(key, expected_rev)
        obj = final if final is not None else orjson.loads(unpack(prev))
        return await self._submit(key, obj, created=False, deleted=True, prev_rev=rev, prev=prev)

    async def _check_existing(self, key: str, expected_rev: int) -> tuple[int, bytes]:
        while True:
            latest = self._latest(key)
            if latest is None:
                raise KeyNotFound(key)
            rev, value = latest
            if value is not None and not (expected_rev and expected_rev != rev):
                return rev, value
            if not await self._settle(key):
                raise KeyNotFound(key) if value is None else RevMismatch(key, rev)
            # the pending write it conflicted with failed: judge again against what is committed

    async def _settle(self, key: str) -> bool:
        """Before failing a write on a conflict with a *pending* write, wait until that write is decided.

        Readers see committed state only, so a caller that re-reads after the error must find the state the
        conflict was about; otherwise a read-modify-write loop would spin on the same stale revision. Returns
        True if a batch failed meanwhile (perhaps the very write it conflicted with), so that the caller judges
        again against what is committed instead of reporting a conflict that may be gone.
        """
        if key not in self._overlay:
            return False  # the conflict is with committed state
        failures = self.failed_batches
        while key in self._overlay and not self._closing:
            await self._committed.wait()
        return self.failed_batches != failures and key not in self._overlay

    async def _submit(
        self,
        key: str,
        obj: dict[str, Any],
        *,
        created: bool,
        deleted: bool,
        prev_rev: int,
        prev: bytes | None,
    ) -> tuple[int, bytes]:
        if self._closing:
            raise StoreClosed("store is closed")
        rev = self._next_rev
        value = _encode(obj, rev)  # before claiming the rev: a bad object must not leave a gap
        self._next_rev = rev + 1
        self._overlay[key] = (rev, None if deleted else value)
        fut: asyncio.Future[tuple[int, bytes]] = (self._loop or asyncio.get_running_loop()).create_future()
        self._pending.append(_Pending(Row(rev, key, created, deleted, prev_rev, value), prev, fut))
        self._wake.set()
        return await fut

    # ---- the writer ----------------------------------------------------------------------------------

    async def _write_loop(self) -> None:
        try:
            await self._write_batches()
        except BaseException as e:
            # Without the writer every write would wait forever: fail them all (the batch it was committing or
            # applying too, whose futures nobody else resolves) and refuse new ones.
            self._closing = True
            if not isinstance(e, asyncio.CancelledError):
                log.exception("store writer crashed")
            batch, self._in_flight = self._in_flight, []
            self._fail_all(batch, StoreClosed(f"store writer stopped: {e!r}"))
            raise

    async def _write_batches(self) -> None:
        while True:
            if not self._pending:
                if self._closing:
                    return
                self._wake.clear()
                await self._wake.wait()
                continue
            batch, self._pending = self._pending, []
            self._in_flight = batch
            committing: asyncio.Future[None] | None = self._start_commit(batch)
            while committing is not None:
                if not await self._committed_ok(batch, committing):
                    break
                # Batch k is durable: batch k+1 (whatever queued meanwhile) starts its COMMIT on the store's
                # thread now, and the loop applies batch k while that runs, instead of applying first and only
                # then starting the next COMMIT (the apply's time was added to every queued write's wait).
                # k+1 was checked against the pending view, which includes k: committing it before k is
                # applied is what the serial order would have done; it is resolved only after k (below).
                nxt, self._pending = self._pending, []
                self._in_flight = [*batch, *nxt]
                committing = self._start_commit(nxt) if nxt else None
                self._apply_batch(batch)
                batch = nxt
            # Its rows hold the plain values: not kept alive while waiting for the next write.
            self._in_flight = []
            del batch

    def _start_commit(self, batch: _Batch) -> asyncio.Future[None]:
        rows = [p.row for p in batch]
        return (self._loop or asyncio.get_running_loop()).run_in_executor(self._executor, self._db.commit, rows)

    async def _committed_ok(self, batch: _Batch, committing: asyncio.Future[None]) -> bool:
        """Wait for the batch's COMMIT; on failure fail it (see `_fail_batch`) and return False."""
        try:
            await committing
        except Exception as e:
            err = await self._run(functools.partial(faults.commit_error, e, self._db.path))
            self._note_failure(len(batch), err)
            self._fail_batch(batch, err)
            return False
        self._poke()
        return True

    def _apply_batch(self, batch: _Batch) -> None:
        """Make a committed batch visible: index, current_rev, watchers; then resolve its writers' futures."""
        rows = [p.row for p in batch]
        if self.full:
            self.full = False
            log.warning("store writable again: a commit succeeded after the disk was full")
        # Packed here on the loop, not on the store's thread: zlib drops the GIL for every value, and each
        # time the thread would wait for the busy loop to hand it back (a switch interval, 5 ms).
        packed = [pack(r.value) for r in rows]
        events, kept = [], []
        for p, value in zip(batch, packed, strict=True):
            r = p.row
            # The replaced value as the index holds it (packed), so that the window does not keep a plain
            # copy of it beside the packed one (a pending write's overlay holds its plain bytes).
            held = self._index.get(r.name)
            prev = held[1] if p.prev is not None and held is not None and held[0] == r.prev_revision else p.prev
            if r.deleted:
                self._index.remove(r.name)
            else:
                self._index.put(r.name, r.id, value)
            if self._overlay.get(r.name, (0,))[0] == r.id:
                del self._overlay[r.name]
            kind = _event_type(r)
            events.append(StoreEvent(kind, r.name, r.id, r.value, prev))
            kept.append(StoreEvent(kind, r.name, r.id, value, prev))
        self.current_rev = rows[-1].id
        self._committed.set()
        self._committed = asyncio.Event()
        self.commits += 1
        self.writes += len(rows)
        if self.on_commit is not None:
            self.on_commit(len(rows))
        self._hub.publish(events, kept)
        for p in batch:
            if not p.future.done():  # the submitter may have been cancelled; the write stands anyway
                p.future.set_result((p.row.id, p.row.value))

    def _note_failure(self, rows: int, err: CommitFailed) -> None:
        """Log a failed commit; a full disk only when it starts, since every retry would say the same."""
        if not isinstance(err, StoreFull):
            log.error("store commit of %d rows failed: %s", rows, err)
        elif not self.full:
            self.full = True
            log.error("%s", err)
        else:
            log.debug("store commit of %d rows refused: still full", rows)

    def _fail_batch(self, batch: _Batch, err: CommitFailed) -> None:
        """Fail the batch and the queued writes that were checked against it; requeue every other one.

        A queued write on a key that the batch (or a queued write failed before it) wrote assumed that write
        happened, so it fails with the same error. The others are still valid against the committed state plus
        the queued writes kept before them: they are renumbered from current_rev + 1, so revisions stay gapless,
        and re-encoded with their new resourceVersion (their callers have seen nothing of them yet).
        """
        self.failed_batches += 1
        queued, self._pending = self._pending, []
        self._overlay.clear()
        self._next_rev = self.current_rev + 1
        failed = {p.row.name for p in batch}
        renumbered: dict[int, tuple[int, bytes]] = {}  # old rev of a kept write -> (new rev, new value)
        for p in batch:
            if not p.future.done():
                p.future.set_exception(err)
        for p in queued:
            r = p.row
            if r.name in failed:
                if not p.future.done():
                    p.future.set_exception(err)
                continue
            rev = self._next_rev
            self._next_rev = rev + 1
            value = _encode(orjson.loads(r.value), rev)
            prev_rev, prev = renumbered.get(r.prev_revision, (r.prev_revision, p.prev))
            renumbered[r.id] = (rev, value)
            self._overlay[r.name] = (rev, None if r.deleted else value)
            row = Row(rev, r.name, r.created, r.deleted, prev_rev, value)
            self._pending.append(_Pending(row, None if r.created else prev, p.future))
        self._committed.set()
        self._committed = asyncio.Event()
        if self._pending:
            self._wake.set()

    def _fail_all(self, batch: _Batch, err: StoreError) -> None:
        """A failed batch invalidates everything queued behind it: fail all, reset to committed state."""
        queued, self._pending = self._pending, []
        self._overlay.clear()
        self._committed.set()
        self._committed = asyncio.Event()
        self._next_rev = self.current_rev + 1
        for p in [*batch, *queued]:
            if not p.future.done():
                p.future.set_exception(err)

    # ---- compaction ----------------------------------------------------------------------------------

    async def compact(self, keep: int, *, history_factor: float = HISTORY_FACTOR,
                      history_floor: int = HISTORY_FLOOR) -> int:
        """Drop superseded rows and tombstones older than current_rev - keep, and beyond that as many of the
        oldest as it takes to keep the superseded history within max(history_floor, history_factor x live
        bytes); vacuum. Returns rows removed.

        Finding the rows (measuring the history, listing the ids) reads on connections of its own, so commits
        go on meanwhile. Deleting and vacuuming run on the writer's thread in steps of `COMPACT_ROWS` rows and
        `VACUUM_PAGES` pages, each its own transaction, so commits interleave and none waits for more than one
        step; no checkpoint here (the checkpointer thread copies the steps' pages). Watches are unaffected (they are
        served from memory); after a restart the replayable window is at most `keep` revisions deep (less
        when large objects changed often: a restarted watcher far behind then relists after a 410).
        """
        newest = self.current_rev
        by_revs = max(0, newest - max(0, keep))
        # Off the writer's thread (see LogDB.size_cut and LogDB.doomed): commits go on while they read.
        by_size = await asyncio.to_thread(self._db.size_cut, history_factor, history_floor)
        below = min(newest, max(by_revs, by_size))
        doomed = await asyncio.to_thread(self._db.doomed, below) if below > 0 else []
        removed = 0
        # In small steps on the writer's thread: commits queued meanwhile run between two steps, so none
        # waits for more than one step (one deletion of a few hundred rows was ms; the whole pass at once was
        # 36-141 ms every minute). The checkpointer copies what the steps wrote, off the writer's thread.
        for i in range(0, len(doomed), COMPACT_ROWS):
            chunk = doomed[i:i + COMPACT_ROWS]
            removed += await self._run(functools.partial(self._db.delete_rows, chunk))
            self._poke()
        free = -1
        while True:  # until no free page is left, or a step frees none (a file without auto_vacuum)
            left = await self._run(functools.partial(self._db.vacuum_step, VACUUM_PAGES))
            self._poke()
            if left == 0 or left == free:
                break
            free = left
        self.compactions += 1
        self.compacted_rows += removed
        return removed

    @property
    def path(self) -> str:
        """The store file's path."""
        return self._db.path

    async def stats(self) -> tuple[int, int]:
        """(log rows, free pages) of the file: for tests and benchmarks."""
        return await self._run(self._db.counts)


def _raise_open_fault(exc: BaseException, path: str) -> None:
    """Raise StoreCorrupt/StoreFull from `exc` if `exc` (raised opening `path`) means a damaged file/full disk."""
    fault = faults.open_error(exc, path)
    if fault is not None:
        raise fault from exc


def _event_type(row: Row) -> EventType:
    if row.deleted:
        return "DELETED"
    return "ADDED" if row.created else "MODIFIED"


async def compactor(store: StoreLike, interval: float, keep: int) -> None:
    """Compact every `interval` seconds keeping `keep` revisions; for the server's TaskGroup. Never returns.

    A failed compaction is logged and retried next round: it must not take the server down. On a full disk
    it fails like any write (it must grow the WAL first); that is one line, not a traceback a minute.
    """
    while True:
        await asyncio.sleep(interval)
        try:
            removed = await store.compact(keep)
        except Exception as e:
            if faults.is_full(faults.primary_code(e), None, None):
                log.warning("store compaction skipped: the disk is full (%s)", e)
            else:
                log.exception("store compaction failed")
        else:
            log.debug("store compaction removed %d rows at rev %d", removed, store.current_rev)
