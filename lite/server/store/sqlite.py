"""The SQLite side of the store: schema, loading at open, batch commit, compaction.

Every method here blocks and must run on the store's single writer thread (the connection is created there
and only ever used there); `Store` guarantees that by routing all calls through a one-thread executor.

Schema (kine-style, revision = row id):
- `log(id INTEGER PRIMARY KEY, name, created, deleted, prev_revision, value)`: append-only; one row per
  write. A delete appends a tombstone (deleted=1) whose value is the object's final state.
- `current(name PRIMARY KEY, id)`: the live row id of every existing key, maintained in the same
  transaction as the log rows, so open() loads the current state with one join instead of a scan of the
  whole history.

An optional `ValueCodec` transforms values at the file boundary only (encryption at rest): rows are sealed
as they are written and unsealed as they are read, so memory, watches and callers only ever see plain
values and the store stays generic (the codec decides which keys it seals).

Invariants: ids are assigned by the (only) writer as current+1, +2, ... so they are gapless until compaction
removes rows; the newest log row is never compacted, so `max(id)` is always the current revision.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator, Sequence
from typing import Protocol

from lite.records import dataclass
from lite.server.store.checkpoint import WRITER_GUARD_PAGES
from lite.server.store.faults import quick_check

CACHE_KB = 512  # the writer connection's page cache (`PRAGMA cache_size`), see `LogDB.__init__`

SCHEMA = """
CREATE TABLE IF NOT EXISTS log (
    id INTEGER PRIMARY KEY,
    name TEXT NOT NULL,
    created INTEGER NOT NULL,
    deleted INTEGER NOT NULL,
    prev_revision INTEGER NOT NULL,
    value BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS current (
    name TEXT PRIMARY KEY,
    id INTEGER NOT NULL
) WITHOUT ROWID;
"""


@dataclass(frozen=True, slots=True)
class Row:
    """One log row as written or read."""

    id: int
    name: str
    created: bool
    deleted: bool
    prev_revision: int
    value: bytes


@dataclass(frozen=True, slots=True)
class HistoryRow:
    """A log row with the value of the row it superseded (None if that is gone or it is a create)."""

    row: Row
    prev_value: bytes | None


class ValueCodec(Protocol):
    """Transforms values between memory and the file (encryption at rest): `seal` before a row is written,
    `unseal` after it is read; `name` is the row's key (bind ciphertexts to it). Both run on the store's
    thread and must be thread-safe against the event loop changing the codec's keys."""

    def seal(self, name: str, value: bytes) -> bytes: ...

    def unseal(self, name: str, value: bytes) -> bytes: ...


class LogDB:
    """One connection to the store file. Not thread-safe: use from one thread only."""

    def __init__(self, path: str, codec: ValueCodec | None = None) -> None:
        """Open (or create) the file; raises StoreCorrupt, leaving the file untouched, if it is damaged."""
        self.path = path
        self.codec = codec
        # isolation_level=None: we issue BEGIN/COMMIT ourselves, so a batch is exactly one transaction.
        self.conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        c = self.conn
        try:
            # Before anything writes: a damaged file must be reported as it was found.
            quick_check(c, path)
            # auto_vacuum only takes effect if set before the first table exists (or after a full VACUUM).
            c.execute("PRAGMA auto_vacuum=INCREMENTAL")
            c.execute("PRAGMA journal_mode=WAL")
            c.execute("PRAGMA synchronous=FULL")
            # Checkpoints run on the store's Checkpointer thread, not inside a commit (see checkpoint.py);
            # this connection checkpoints itself only if that thread falls far behind.
            c.execute(f"PRAGMA wal_autocheckpoint={WRITER_GUARD_PAGES}")
            # Without a limit the -wal file keeps its high-water size forever.
            c.execute("PRAGMA journal_size_limit=8388608")
            # The store reads its objects from memory; this connection writes (log appends, `current` updates,
            # compaction's deletes): a 512 KB page cache holds their hot pages (SQLite's default 2 MB stayed full
            # of pages a burst touched once until `release_memory`).
            c.execute(f"PRAGMA cache_size=-{CACHE_KB}")
            c.executescript(SCHEMA)
        except BaseException:
            c.close()
            raise

    def close(self) -> None:
        self.conn.close()

    def release_memory(self) -> None:
        """Free the connection's page cache (`PRAGMA shrink_memory`): the pages a burst of commits or the
        open's full read left there (up to SQLite's default 2 MB), read again from the file when needed."""
        self.conn.execute("PRAGMA shrink_memory")

    def max_rev(self) -> int:
        (rev,) = self.conn.execute("SELECT COALESCE(MAX(id), 0) FROM log").fetchone()
        return int(rev)

    def load_current(self) -> Iterator[tuple[str, int, bytes]]:
        """(key, mod_rev, value) of every live key, sorted by key."""
        cur = self.conn.execute("SELECT c.name, c.id, l.value FROM current c JOIN log l ON l.id = c.id ORDER BY c.name")
        for name, rev, value in cur:
            yield name, rev, self._unseal(name, bytes(value))

    def _unseal(self, name: str, value: bytes) -> bytes:
        return value if self.codec is None else self.codec.unseal(name, value)

    def recent(self, limit: int, known: dict[int, bytes],
               convert: Callable[[bytes], bytes] | None = None) -> list[HistoryRow]:
        """The newest `limit` rows, oldest first, cut at the newest gap so that they are contiguous.

        `known` maps revs to values already in memory (the live rows); those objects are reused so the
        window and the index share one copy of each value instead of doubling memory at open. A row's prev
        value is shared with the window's copy when the superseded row is in the window (the usual case);
        only the others are read, by id: joining every row to its predecessor read each blob twice.
        `convert` (the store's packing) applies to each value read from the file as it is read, so that
        only converted values are ever held at once (not `limit` plain ones), as `known`'s already are.
        """
        conv: Callable[[bytes], bytes] = convert or bytes
        cur = self.conn.execute(
            "SELECT id, name, created, deleted, prev_revision, value FROM log ORDER BY id DESC LIMIT ?", (limit,))
        rows: list[Row] = []
        for rid, name, created, deleted, prev_rev, value in cur:
            if rows and rid != rows[-1].id - 1:
                break  # compaction left a gap: older rows cannot be replayed without holes
            mem = known.get(rid)
            rows.append(Row(rid, name, bool(created), bool(deleted), prev_rev,
                            mem if mem is not None else conv(self._unseal(name, bytes(value)))))
        rows.reverse()
        by_rev = {r.id: r.value for r in rows}
        outside = sorted({r.prev_revision for r in rows if not r.created and r.prev_revision not in by_rev})
        for i in range(0, len(outside), 500):
            chunk = outside[i:i + 500]
            marks = ",".join("?" * len(chunk))
            by_rev.update((rid, conv(self._unseal(name, bytes(value)))) for rid, name, value in self.conn.execute(
                f"SELECT id, name, value FROM log WHERE id IN ({marks})", chunk))
        # A superseded row that compaction removed has no value: its event carries prev None.
        return [HistoryRow(r, None if r.created else by_rev.get(r.prev_revision)) for r in rows]

    def commit(self, rows: Sequence[Row]) -> None:
        """Append `rows` and update `current`, all in one durable transaction."""
        c = self.conn
        final: dict[str, Row] = {}
        for r in rows:
            final[r.name] = r
        c.execute("BEGIN IMMEDIATE")
        try:
            c.executemany(
                "INSERT INTO log(id, name, created, deleted, prev_revision, value) VALUES (?, ?, ?, ?, ?, ?)",
                [(r.id, r.name, int(r.created), int(r.deleted), r.prev_revision,
                  r.value if self.codec is None else self.codec.seal(r.name, r.value)) for r in rows],
            )
            c.executemany(
                "INSERT OR REPLACE INTO current(name, id) VALUES (?, ?)",
                [(r.name, r.id) for r in final.values() if not r.deleted],
            )
            c.executemany("DELETE FROM current WHERE name = ?", [(r.name,) for r in final.values() if r.deleted])
            c.execute("COMMIT")
        except BaseException:
            if c.in_transaction:
                c.execute("ROLLBACK")
            raise

    def doomed(self, below: int) -> list[int]:
        """Ids of the rows compaction removes below `below`: neither some key's live row nor >= below.

        Read on a connection of its own in the calling thread, like `size_cut`, so commits go on meanwhile.
        The list stays right while commits go on: a row that is not live never becomes live again (a write
        always appends a new row), so deleting these ids later removes no live row."""
        c = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        try:
            return [int(i) for (i,) in c.execute(
                "SELECT id FROM log WHERE id < ? AND id NOT IN (SELECT id FROM current) ORDER BY id", (below,))]
        finally:
            c.close()

    def delete_rows(self, ids: Sequence[int]) -> int:
        """Delete these (superseded) rows in one transaction; returns rows gone. One compaction step: the
        caller keeps it small (hundreds of rows), since commits wait for it on the writer's thread."""
        c = self.conn
        c.execute("BEGIN IMMEDIATE")
        try:
            removed = 0
            for i in range(0, len(ids), 500):
                chunk = ids[i:i + 500]
                cur = c.execute(f"DELETE FROM log WHERE id IN ({','.join('?' * len(chunk))})", chunk)
                removed += cur.rowcount
            c.execute("COMMIT")
        except BaseException:
            if c.in_transaction:
                c.execute("ROLLBACK")
            raise
        return int(removed)

    def vacuum_step(self, pages: int) -> int:
        """Give back up to `pages` free pages to the file system (one transaction); returns free pages left."""
        # executescript steps the pragma to completion; execute() would free only one page per call.
        self.conn.executescript(f"PRAGMA incremental_vacuum({int(pages)});")
        (free,) = self.conn.execute("PRAGMA freelist_count").fetchone()
        return int(free)

    def size_cut(self, factor: float, floor: int) -> int:
        """The lowest id compaction must keep so that superseded history holds at most
        max(floor, factor x live bytes); 0 when all of it fits. Live rows are never counted as history.

        It reads every live row's length, so it runs on a read connection of its own, in the calling thread
        (not the writer's): in WAL mode a reader does not block the writer, so commits go on meanwhile (on
        the writer's connection it held every commit for 50-200 ms each minute with 20,000 pods stored). It
        sees the last committed snapshot, which only makes the cut a little older: compaction never removes
        a live row whatever the cut."""
        c = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        try:
            return self._size_cut(c, factor, floor)
        finally:
            c.close()

    @staticmethod
    def _size_cut(c: sqlite3.Connection, factor: float, floor: int) -> int:
        (live,) = c.execute("SELECT COALESCE(SUM(length(value)), 0) FROM log "
                            "WHERE id IN (SELECT id FROM current)").fetchone()
        budget = max(floor, int(factor * int(live)))
        total = 0
        for row_id, size in c.execute("SELECT id, length(value) FROM log WHERE id NOT IN (SELECT id FROM current) "
                                      "ORDER BY id DESC"):
            total += int(size)
            if total > budget:
                return int(row_id) + 1
        return 0

    def counts(self) -> tuple[int, int]:
        """(log rows, free pages): for tests and benchmarks."""
        (rows,) = self.conn.execute("SELECT COUNT(*) FROM log").fetchone()
        (free,) = self.conn.execute("PRAGMA freelist_count").fetchone()
        return int(rows), int(free)
