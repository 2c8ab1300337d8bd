"""PgBackend's tables and server-side functions (PostgreSQL 13+), and the typed edge of asyncpg.

Tables (created at open if missing; every name starts with `lite_`):
- `lite_log(rev PRIMARY KEY, key, created, deleted, prev_rev, value)`: one row per committed write, appended;
  a delete's row (deleted) carries the key's final state. `prev_rev` is the row the write superseded (0 for a
  create), which is what compaction follows.
- `lite_current(key PRIMARY KEY, rev)`: the live revision of every key, kept in the same transaction as the log
  rows. Lists read ranges of its primary key (keys sort bytewise: COLLATE "C") and each value by its log row's
  primary key, so a list costs the keys it returns whatever the history holds (kine lists by grouping the whole
  log). Values are not copied here: that doubled the bytes every write puts in the heap and WAL, and a 64-write
  batch took 8.1 ms of PostgreSQL's time against 3.8 ms now (fsync off, same run), while a 20,000-key snapshot,
  read once when a server starts or reloads, went from ~190 ms to ~250 ms.
- `lite_meta(name PRIMARY KEY, val)`: the rows 'rev' (the newest committed revision: the revision counter),
  'compacted' (changes at or below it may be gone) and 'swept' (compaction's progress).

Invariant (revisions reach readers in commit order, no gap): `lite_commit` locks the 'rev' row first (SELECT ...
FOR UPDATE), numbers its successful writes from it and writes it back; the row lock is held to COMMIT. So no
two batches hold revisions at once: a batch's revisions follow the previous batch's without a gap, and it commits
(becomes visible: PostgreSQL ends a transaction in the process array before it releases its locks) before the
next batch can take its first revision. Any snapshot that sees revision r therefore sees every revision below
r, and `val` of 'rev' in that snapshot is the highest it sees. A batch that fails as a whole rolls its counter
update back too, so revisions are gapless until compaction deletes rows. The lock is held only while PostgreSQL
runs that one statement and commits (autocommit): no client round trip falls inside it, so a lite server that
hangs or loses its network mid-commit holds up no other (the price: batches commit one at a time, each waiting
for its WAL flush, and for a synchronous standby's answer where one is configured).

`lite_commit` checks each write against the state committed before it plus the batch's own earlier writes
(each statement of the function reads a fresh snapshot, taken after the lock, under READ COMMITTED, which the
backend pins on its connections), and NOTIFYs `lite_changes` with the batch's last revision; PostgreSQL delivers
the notification at COMMIT. One call is one statement, one round trip and one transaction per batch.

`lite_compact_step(lim)` removes the history made obsolete by the next `lim` writes above the 'swept' mark (each
write's superseded row, and a delete's own row), up to 'compacted'; the live row of every key never goes, nor the
value a key had at 'compacted'. One small transaction per step, so commits never wait on a long one.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from typing import Any, Protocol

CHANNEL = "lite_changes"

# A constant key for pg_advisory_xact_lock: servers opening the same database create the schema one at a time
# (concurrent CREATE OR REPLACE FUNCTION fails with "tuple concurrently updated").
SCHEMA_LOCK = 0x6C697465  # "lite"

SCHEMA = """
CREATE TABLE IF NOT EXISTS lite_log (
    rev bigint PRIMARY KEY,
    key text COLLATE "C" NOT NULL,
    created boolean NOT NULL,
    deleted boolean NOT NULL,
    prev_rev bigint NOT NULL,
    value bytea NOT NULL
);
CREATE TABLE IF NOT EXISTS lite_current (
    key text COLLATE "C" PRIMARY KEY,
    rev bigint NOT NULL
) WITH (fillfactor = 80);
CREATE TABLE IF NOT EXISTS lite_meta (
    name text PRIMARY KEY,
    val bigint NOT NULL
);
INSERT INTO lite_meta(name, val) VALUES ('rev', 0), ('compacted', 0), ('swept', 0) ON CONFLICT DO NOTHING;

CREATE OR REPLACE FUNCTION lite_commit(ops text[], keys text[], vals bytea[], expect bigint[])
RETURNS TABLE(i int, rev bigint, code int) LANGUAGE plpgsql AS $fn$
DECLARE
    head bigint;
    first bigint;
    cur bigint;
BEGIN
    -- The revision lock: held to COMMIT, so batches take revisions and commit one after another.
    SELECT m.val INTO head FROM lite_meta m WHERE m.name = 'rev' FOR UPDATE;
    first := head;
    FOR n IN 1 .. coalesce(cardinality(keys), 0) LOOP
        i := n;
        SELECT c.rev INTO cur FROM lite_current c WHERE c.key = keys[n];
        IF ops[n] = 'create' THEN
            IF cur IS NOT NULL THEN
                rev := cur; code := 1; RETURN NEXT; CONTINUE;            -- KeyExists
            END IF;
            head := head + 1;
            INSERT INTO lite_log VALUES (head, keys[n], true, false, 0, vals[n]);
            INSERT INTO lite_current VALUES (keys[n], head);
        ELSE
            IF cur IS NULL THEN
                rev := 0; code := 2; RETURN NEXT; CONTINUE;              -- KeyNotFound
            END IF;
            IF expect[n] <> 0 AND expect[n] <> cur THEN
                rev := cur; code := 3; RETURN NEXT; CONTINUE;            -- RevMismatch
            END IF;
            head := head + 1;
            INSERT INTO lite_log VALUES (head, keys[n], false, ops[n] = 'delete', cur, vals[n]);
            IF ops[n] = 'delete' THEN
                DELETE FROM lite_current c WHERE c.key = keys[n];
            ELSE
                UPDATE lite_current c SET rev = head WHERE c.key = keys[n];
            END IF;
        END IF;
        rev := head; code := 0; RETURN NEXT;
    END LOOP;
    IF head > first THEN
        UPDATE lite_meta m SET val = head WHERE m.name = 'rev';
        PERFORM pg_notify('lite_changes', head::text);
    END IF;
END
$fn$;

CREATE OR REPLACE FUNCTION lite_compact_step(lim int)
RETURNS TABLE(removed bigint, remaining boolean) LANGUAGE plpgsql AS $fn$
DECLARE
    swept bigint;
    target bigint;
    upto bigint;
BEGIN
    -- Serialises compactors (on this row only: commits lock the 'rev' row).
    SELECT m.val INTO swept FROM lite_meta m WHERE m.name = 'swept' FOR UPDATE;
    SELECT m.val INTO target FROM lite_meta m WHERE m.name = 'compacted';
    IF swept >= target THEN
        removed := 0; remaining := false; RETURN NEXT; RETURN;
    END IF;
    WITH batch AS (
        SELECT l.rev, l.prev_rev, l.created, l.deleted FROM lite_log l
        WHERE l.rev > swept AND l.rev <= target ORDER BY l.rev LIMIT lim
    ), gone AS (
        DELETE FROM lite_log l WHERE l.rev IN (
            SELECT b.prev_rev FROM batch b WHERE NOT b.created
            UNION ALL SELECT b.rev FROM batch b WHERE b.deleted)
        RETURNING 1
    )
    SELECT (SELECT max(b.rev) FROM batch b), (SELECT count(*) FROM gone) INTO upto, removed;
    upto := coalesce(upto, target);
    UPDATE lite_meta m SET val = upto WHERE m.name = 'swept';
    remaining := upto < target;
    RETURN NEXT;
END
$fn$;
"""

COMMIT = "SELECT i, rev, code FROM lite_commit($1::text[], $2::text[], $3::bytea[], $4::bigint[])"
COMPACT_MARK = ("UPDATE lite_meta SET val = GREATEST(val, LEAST($1::bigint, "
                "(SELECT val FROM lite_meta WHERE name = 'rev'))) WHERE name = 'compacted' RETURNING val")
COMPACT_STEP = "SELECT removed, remaining FROM lite_compact_step($1)"
HEAD = "SELECT val FROM lite_meta WHERE name = 'rev'"

# One statement, so one snapshot: the head, the compaction mark and the changes after $1 up to that head.
_CHANGES = """
SELECT h.val AS head, k.val AS compacted, l.rev, l.key, l.created, l.deleted, l.value
FROM lite_meta h JOIN lite_meta k ON k.name = 'compacted'
LEFT JOIN LATERAL (
    SELECT g.rev, g.key, g.created, g.deleted, g.value FROM lite_log g
    WHERE g.rev > $1 AND g.rev <= h.val {cond} ORDER BY g.rev LIMIT $2
) l ON true
WHERE h.name = 'rev' ORDER BY l.rev
"""
CHANGES_ALL = _CHANGES.format(cond="")
CHANGES_FROM = _CHANGES.format(cond="AND g.key >= $3")
CHANGES_RANGE = _CHANGES.format(cond="AND g.key >= $3 AND g.key < $4")

# The newest $2 changes at or below $1 above the compaction mark, each with the value it replaced (a prev row at or
# below the mark may be gone: NULL then), and the mark, in one statement (one snapshot). Index scans on lite_log's
# primary key (rev).
HISTORY = """
SELECT k.val AS compacted, l.rev, l.key, l.created, l.deleted, l.value, l.prev_rev, p.value AS prev
FROM lite_meta k
LEFT JOIN LATERAL (
    SELECT g.rev, g.key, g.created, g.deleted, g.value, g.prev_rev FROM lite_log g
    WHERE g.rev > k.val AND g.rev <= $1 ORDER BY g.rev DESC LIMIT $2
) l ON true
LEFT JOIN lite_log p ON p.rev = l.prev_rev AND NOT l.created
WHERE k.name = 'compacted' ORDER BY l.rev
"""

# Keyset pages of the live keys, read in one REPEATABLE READ transaction (see PgBackend.snapshot).
_PAGE = ("SELECT c.key, c.rev, (SELECT l.value FROM lite_log l WHERE l.rev = c.rev) FROM lite_current c "
         "WHERE c.key {op} $1 {cond} ORDER BY c.key LIMIT {limit}")


def page_query(first: bool, bounded: bool, limit: int) -> str:
    """The query for one page of a snapshot: keys >= $1 (first page) or > $1 (after the last key read), and
    < $2 when the prefix has an upper bound."""
    return _PAGE.format(op=">=" if first else ">", cond="AND c.key < $2" if bounded else "", limit=int(limit))


def prefix_range(prefix: str) -> tuple[str, str | None]:
    """[low, high) of the keys starting with `prefix` in code point order (bytewise for UTF-8, as COLLATE "C"
    sorts); high is None when no key bounds it from above (empty prefix, or only U+10FFFF at its end)."""
    stem = prefix.rstrip("\U0010ffff")
    if not stem:
        return prefix, None
    return prefix, stem[:-1] + chr(ord(stem[-1]) + 1)


# ---- the typed edge of asyncpg (it ships no complete stubs): only what PgBackend uses; its coroutine methods
# are declared as returning awaitables, as its `timeout` keyword would otherwise trip ruff's ASYNC109 ----

class Record(Protocol):
    def __getitem__(self, index: int | str) -> Any: ...


class Conn(Protocol):
    def execute(self, query: str, *args: object, timeout: float | None = None) -> Awaitable[str]: ...

    def fetch(self, query: str, *args: object, timeout: float | None = None) -> Awaitable[list[Record]]: ...

    def fetchrow(self, query: str, *args: object, timeout: float | None = None) -> Awaitable[Record | None]: ...

    def fetchval(self, query: str, *args: object, timeout: float | None = None) -> Awaitable[Any]: ...

    async def add_listener(self, channel: str, callback: Callable[[Any, int, str, str], None]) -> None: ...

    def add_termination_listener(self, callback: Callable[[Any], None]) -> None: ...

    def transaction(self, *, isolation: str | None = None, readonly: bool = False,
                    deferrable: bool = False) -> AbstractAsyncContextManager[None]: ...

    def is_closed(self) -> bool: ...

    def close(self, *, timeout: float | None = None) -> Awaitable[None]: ...

    def terminate(self) -> None: ...


class Pool(Protocol):
    def acquire(self, *, timeout: float | None = None) -> AbstractAsyncContextManager[Conn]: ...

    def close(self) -> Awaitable[None]: ...

    def terminate(self) -> None: ...

