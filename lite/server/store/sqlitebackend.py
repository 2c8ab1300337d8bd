"""SqliteBackend: a `Backend` (see `backend.py`) over an SQLite file in `Store`'s schema, for one process.

It is MirrorStore's test backend and the SQLite end of `lite datastore migrate`: a file written through it
opens with `Store.open`, and a file `Store` wrote opens here (the `log`/`current` tables of `sqlite.py`;
revision = log row id).

- Writes run on one thread (an executor of one worker, which owns the connection, like `Store`'s): each
  `commit` is one `BEGIN IMMEDIATE` transaction that checks every write's condition against `current` as the
  batch's earlier writes left it, appends a log row per successful write (id = the newest id + `rev_step`) and
  updates `current`. A failed transaction fails the whole batch with `CommitFailed` (`StoreFull` for a full
  disk): nothing of it was written.
- `metadata.resourceVersion` is set to the row id in a value that is a JSON object as it is written (what
  `Store` writes, so that `Store.open` serves the right resourceVersions). A value sealed by a codec (a
  MirrorStore's, for encryption at rest) is rewritten the same way inside its seal when the backend is opened
  with that codec (`codec=`: unsealed, given the revision, sealed again); without it, it is stored as given
  and only a MirrorStore (which sets resourceVersion as it reads) reads it right.
- Changes are pushed: a commit, once durable, wakes every `changes` stream (an asyncio event, no polling),
  which reads the new rows on the same thread. Only writes through this object wake its streams (one
  process, one handle per file).
- `rev_step` > 1 leaves gaps between revisions, as a shared datastore does (tests of gap handling).
- Compaction removes superseded rows and tombstones at or below the revision (never a live row nor the
  newest row, whose id is the current revision). Which revision was compacted is known in memory only: a
  stream from below the revision the file was opened at (or compacted to) raises `Compacted`.
- A WAL `Checkpointer` (`checkpoint.py`) copies the WAL off the commit path, as for `Store`.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncIterator, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import orjson

from lite.server.store import faults
from lite.server.store.backend import Change, Outcome, Write
from lite.server.store.checkpoint import Checkpointer
from lite.server.store.errors import Compacted, KeyExists, KeyNotFound, RevMismatch, StoreClosed
from lite.server.store.index import prefix_end
from lite.server.store.sqlite import LogDB, ValueCodec

T = TypeVar("T")
CHANGES_BATCH = 1000  # rows per read of a change stream
COMPACT_ROWS = 200  # rows deleted per transaction (commits interleave between steps)
VACUUM_PAGES = 128


def with_rev(value: bytes, rev: int) -> bytes:
    """`value` with metadata.resourceVersion = rev if it is a JSON object; otherwise `value` as is."""
    if not value.startswith(b"{"):
        return value
    try:
        doc: Any = orjson.loads(value)
    except orjson.JSONDecodeError:
        return value
    meta = doc.get("metadata") if isinstance(doc, dict) else None
    if not isinstance(meta, dict):
        return value
    meta["resourceVersion"] = str(rev)
    return orjson.dumps(doc)


def _range(prefix: str) -> tuple[str, str]:
    """(where clause on `column`, parameters) for keys under `prefix`; the clause uses `{col}`."""
    if not prefix:
        return "", ""
    return " AND {col} >= ? AND {col} < ?", prefix_end(prefix)


class SqliteBackend:
    """See the module docstring; open with `SqliteBackend.open(path)`, end with `close()`."""

    def __init__(self, db: LogDB, executor: ThreadPoolExecutor, rev: int, rev_step: int,
                 codec: ValueCodec | None = None) -> None:
        self._db = db
        self._codec = codec
        self._executor = executor
        self._rev = rev  # newest committed revision known here
        self._compacted = rev  # streams from below this raise Compacted (history before open is not vouched for)
        self._rev_step = max(1, rev_step)
        self._changed = asyncio.Event()  # set (and replaced) after every commit and at close
        self._closed = False
        self._checkpointer: Checkpointer | None = None
        self.path = db.path
        self.commits = 0

    @classmethod
    async def open(cls, path: str, *, rev_step: int = 1, codec: ValueCodec | None = None) -> SqliteBackend:
        """Open (or create) the file; StoreCorrupt/StoreFull as `Store.open` raises them. `codec`: the one the
        writers seal values with, used only to set resourceVersion inside sealed values (module docstring)."""
        executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="lite-sqlitebackend")
        loop = asyncio.get_running_loop()
        try:
            db = await loop.run_in_executor(executor, LogDB, path, None)
        except BaseException as e:
            executor.shutdown(wait=False)
            fault = faults.open_error(e, path)
            if fault is not None:
                raise fault from e
            raise
        backend = cls(db, executor, 0, rev_step, codec)
        try:
            backend._rev = backend._compacted = await backend._run(db.max_rev)
            backend._checkpointer = await backend._run(lambda: Checkpointer(path))
        except BaseException:
            await backend._shutdown()
            raise
        return backend

    async def _run(self, fn: Callable[[], T]) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn)

    # ---- writes --------------------------------------------------------------------------------------

    async def commit(self, writes: Sequence[Write]) -> list[Outcome]:
        if self._closed:
            raise StoreClosed("backend is closed")
        if not writes:
            return []
        try:
            outcomes, top = await self._run(functools.partial(self._commit, list(writes)))
        except Exception as e:
            if self._closed:  # closed while it waited for the thread
                raise StoreClosed("backend is closed") from e
            raise await self._run(functools.partial(faults.commit_error, e, self.path)) from e
        self.commits += 1
        if self._checkpointer is not None:
            self._checkpointer.poke()
        if top > self._rev:
            self._rev = top
            self._wake()
        return outcomes

    def _commit(self, writes: list[Write]) -> tuple[list[Outcome], int]:
        c = self._db.conn
        c.execute("BEGIN IMMEDIATE")
        try:
            (top,) = c.execute("SELECT COALESCE(MAX(id), 0) FROM log").fetchone()
            outcomes: list[Outcome] = []
            for w in writes:
                got = c.execute("SELECT id FROM current WHERE name = ?", (w.key,)).fetchone()
                mod = int(got[0]) if got is not None else 0
                if w.op == "create":
                    if got is not None:
                        outcomes.append(KeyExists(w.key))
                        continue
                elif got is None:
                    outcomes.append(KeyNotFound(w.key))
                    continue
                elif w.expected_rev and w.expected_rev != mod:
                    outcomes.append(RevMismatch(w.key, mod))
                    continue
                top += self._rev_step
                c.execute("INSERT INTO log(id, name, created, deleted, prev_revision, value) VALUES (?, ?, ?, ?, ?, ?)",
                          (top, w.key, int(w.op == "create"), int(w.op == "delete"), mod, self._with_rev(w, top)))
                if w.op == "delete":
                    c.execute("DELETE FROM current WHERE name = ?", (w.key,))
                else:
                    c.execute("INSERT OR REPLACE INTO current(name, id) VALUES (?, ?)", (w.key, top))
                outcomes.append(top)
            c.execute("COMMIT")
        except BaseException:
            if c.in_transaction:
                c.execute("ROLLBACK")
            raise
        return outcomes, int(top)

    def _with_rev(self, w: Write, rev: int) -> bytes:
        if self._codec is None or w.value.startswith(b"{"):
            return with_rev(w.value, rev)
        plain = self._codec.unseal(w.key, w.value)
        return w.value if plain is w.value or plain == w.value else self._codec.seal(w.key, with_rev(plain, rev))

    def _wake(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    # ---- reads ---------------------------------------------------------------------------------------

    async def snapshot(self, prefix: str = "") -> tuple[int, list[tuple[str, int, bytes]]]:
        if self._closed:
            raise StoreClosed("backend is closed")
        return await self._run(functools.partial(self._snapshot, prefix))

    def _snapshot(self, prefix: str) -> tuple[int, list[tuple[str, int, bytes]]]:
        c = self._db.conn
        where, end = _range(prefix)
        c.execute("BEGIN")  # one read transaction: the rows and the revision agree
        try:
            (rev,) = c.execute("SELECT COALESCE(MAX(id), 0) FROM log").fetchone()
            rows = c.execute("SELECT c.name, c.id, l.value FROM current c JOIN log l ON l.id = c.id WHERE 1"
                             + where.format(col="c.name") + " ORDER BY c.name", (prefix, end) if where else ())
            items = [(str(k), int(r), bytes(v)) for k, r, v in rows]
        finally:
            c.execute("COMMIT")
        return int(rev), items

    async def current_rev(self) -> int:
        if self._closed:
            raise StoreClosed("backend is closed")
        return await self._run(self._db.max_rev)

    async def changes(self, after_rev: int, prefix: str = "") -> AsyncIterator[list[Change]]:
        """Batches of changes with rev > after_rev under `prefix`, pushed as commits land, until close."""
        while not self._closed:
            if self._rev > after_rev:
                batch, after_rev = await self._run(functools.partial(self._read_changes, after_rev, prefix))
                if batch:
                    yield batch
                continue
            await self._changed.wait()

    def _read_changes(self, after_rev: int, prefix: str) -> tuple[list[Change], int]:
        """Up to CHANGES_BATCH changes after `after_rev`, and the revision the stream has then reached."""
        if after_rev < self._compacted:
            raise Compacted(self._compacted + 1)
        c = self._db.conn
        where, end = _range(prefix)
        c.execute("BEGIN")
        try:
            (top,) = c.execute("SELECT COALESCE(MAX(id), 0) FROM log").fetchone()
            params = (after_rev, prefix, end, CHANGES_BATCH) if where else (after_rev, CHANGES_BATCH)
            rows = c.execute("SELECT id, name, created, deleted, value FROM log WHERE id > ?"
                             + where.format(col="name") + " ORDER BY id LIMIT ?", params).fetchall()
        finally:
            c.execute("COMMIT")
        batch = [Change(int(i), str(k), bytes(v), bool(cr), bool(d)) for i, k, cr, d, v in rows]
        reached = batch[-1].rev if len(batch) == CHANGES_BATCH else max(int(top), after_rev)
        return batch, reached

    async def history(self, upto_rev: int, limit: int) -> tuple[int, list[Change]]:
        """`backend.HasHistory`: the newest rows up to `upto_rev`, cut at the newest gap (compaction leaves one
        where it removed rows; revisions step by `rev_step`), each with the value it replaced when still there."""
        if self._closed:
            raise StoreClosed("backend is closed")
        return await self._run(functools.partial(self._history, upto_rev, limit))

    def _history(self, upto_rev: int, limit: int) -> tuple[int, list[Change]]:
        c = self._db.conn
        c.execute("BEGIN")  # one read transaction: compaction cannot remove a prev between the two reads
        try:
            rows = c.execute("SELECT id, name, created, deleted, prev_revision, value FROM log WHERE id <= ? "
                             "ORDER BY id DESC LIMIT ?", (upto_rev, max(0, limit))).fetchall()
            kept: list[tuple[int, str, bool, bool, int, bytes]] = []
            for rid, name, created, deleted, prev_rev, value in rows:
                if int(rid) != (kept[-1][0] if kept else upto_rev + self._rev_step) - self._rev_step:
                    break  # a gap: what lies below it is not complete
                kept.append((int(rid), str(name), bool(created), bool(deleted), int(prev_rev), bytes(value)))
            kept.reverse()
            have = {r[0] for r in kept}
            outside = sorted({r[4] for r in kept if not r[2] and r[4] and r[4] not in have})
            prevs: dict[int, bytes] = {}
            for i in range(0, len(outside), 500):
                chunk = outside[i:i + 500]
                prevs.update((int(rid), bytes(v)) for rid, v in c.execute(
                    f"SELECT id, value FROM log WHERE id IN ({','.join('?' * len(chunk))})", chunk))
        finally:
            c.execute("COMMIT")
        values = {r[0]: r[5] for r in kept}
        out = []
        for rid, name, created, deleted, prev_rev, value in kept:
            prev = None if created else values.get(prev_rev, prevs.get(prev_rev))
            out.append(Change(rid, name, value, created, deleted, prev, prev_rev if prev is not None else 0))
        return (kept[0][0] - 1 if kept else upto_rev), out

    # ---- compaction, stats, close --------------------------------------------------------------------

    async def compact(self, rev: int) -> None:
        """Remove superseded rows and tombstones at or below `rev` (in small transactions), then vacuum."""
        if self._closed:
            raise StoreClosed("backend is closed")
        top = await self._run(self._db.max_rev)
        below = min(rev + 1, top)  # the newest row stays: its id is the current revision
        if below <= 1:
            return
        self._compacted = max(self._compacted, below - 1)
        doomed = await asyncio.to_thread(self._db.doomed, below)
        for i in range(0, len(doomed), COMPACT_ROWS):
            await self._run(functools.partial(self._db.delete_rows, doomed[i:i + COMPACT_ROWS]))
        free = -1
        while True:
            left = await self._run(functools.partial(self._db.vacuum_step, VACUUM_PAGES))
            if left == 0 or left == free:
                break
            free = left

    async def stats(self) -> tuple[int, int]:
        """(log rows, free pages) of the file: for tests and benchmarks."""
        return await self._run(self._db.counts)

    async def close(self) -> None:
        """End the change streams, close the file. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._wake()
        await self._shutdown()

    async def _shutdown(self) -> None:
        if self._checkpointer is not None:
            await self._run(self._checkpointer.close)
            self._checkpointer = None
        await self._run(self._db.close)
        self._executor.shutdown(wait=True)
