"""`PgBackend`: the `Backend` contract (backend.py) on PostgreSQL 13+, through asyncpg.

Schema, server-side functions and the revision invariant are in pgschema.py; in short, every batch takes the
revision lock (one counter row, locked FOR UPDATE to COMMIT), so batches commit in revision order and a reader
that sees revision r sees every revision below it: the change stream reads `rev > last ORDER BY rev` and can
never skip a slow transaction's lower revision, because no higher one can commit before it.

Tasks and connections (all owned here, ended by `close`):
- a pool for commits, snapshots and change reads (READ COMMITTED and jit off pinned on every connection);
- one listener connection that LISTENs on `lite_changes`. A notification (sent by `lite_commit`, delivered at
  COMMIT) wakes every change stream, which then reads what it has not seen; nothing polls on a timer for data.
  When the connection is lost (PostgreSQL restarted, network), it reconnects with backoff (50 ms doubling to
  2 s) and wakes every stream once LISTEN is in place again, since notifications sent meanwhile are lost; a
  quiet connection is pinged every 5 s so a dead one is noticed;
- one flusher task while commits are queued: concurrent `commit` calls that arrive while a batch is in flight go
  together as the next batch (one `lite_commit` call: one round trip, one transaction), in arrival order.

Failures: a batch that cannot be sent or fails as a whole raises `CommitFailed` in each caller it holds (its
writes may have committed; they then show on the change stream); `snapshot`, `current_rev` and `compact` raise
`CommitFailed` the same way when PostgreSQL cannot be reached. A change stream does not fail when PostgreSQL
goes away: it retries with backoff and resumes after the last revision it delivered, or raises `Compacted` when
that revision was compacted meanwhile.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any, cast

import asyncpg

from lite.server.store import pgschema as sql
from lite.server.store.backend import Backend, Change, Outcome, Write
from lite.server.store.errors import (
    CommitFailed,
    Compacted,
    KeyExists,
    KeyNotFound,
    RevMismatch,
    StoreClosed,
)

log = logging.getLogger(__name__)

# What a lost or refused connection raises (asyncpg's server errors include "terminating connection").
TRANSIENT: tuple[type[BaseException], ...] = (
    OSError, TimeoutError, asyncpg.PostgresError, asyncpg.InterfaceError)

SETTINGS = {
    # lite_commit relies on a fresh snapshot per statement (see pgschema.py), whatever the database's default.
    "default_transaction_isolation": "read committed",
    # JIT compiling a 100k-row list costs more than it saves for these short queries.
    "jit": "off",
    "application_name": "lite",
}
LISTENER_SETTINGS = {**SETTINGS, "application_name": "lite-listen"}  # operators (and tests) can tell it apart
POOL_SIZE = 8
MAX_BATCH = 1000  # writes per lite_commit call when queued commits are joined
CHANGES_PAGE = 1000  # changes per read of a stream
SNAPSHOT_PAGE = 1000  # keys per page of a snapshot
COMPACT_STEP = 500  # writes whose history one compaction transaction removes
BACKOFF_MIN, BACKOFF_MAX = 0.05, 2.0
PING = 5.0
CONNECT_TIMEOUT = 10.0
COMMIT_TIMEOUT = 60.0  # per statement: a batch may wait its turn behind others; past this its outcome is unknown


class PgBackend:
    """A `Backend` on one PostgreSQL database (see the module docstring). Use `await PgBackend.open(dsn)`."""

    def __init__(self, dsn: str, pool: sql.Pool) -> None:
        self._dsn = dsn
        self._pool = pool
        self._closed = False
        self._subs: set[asyncio.Event] = set()  # one per change stream: set = read again
        self._queue: deque[tuple[list[Write], asyncio.Future[list[Outcome]]]] = deque()
        self._flusher: asyncio.Task[None] | None = None
        self._listening = asyncio.Event()  # set while LISTEN is in place (tests wait on it)
        self._listener: asyncio.Task[None] | None = None

    @classmethod
    async def open(cls, dsn: str) -> PgBackend:
        """Connect (`postgres://USER:PASS@HOST:PORT/DB` or the other forms asyncpg takes), create the schema if
        missing, and start listening. Raises CommitFailed when PostgreSQL cannot be reached."""
        try:
            pool = cast(sql.Pool, await asyncpg.create_pool(
                dsn, min_size=1, max_size=POOL_SIZE, server_settings=SETTINGS, timeout=CONNECT_TIMEOUT,
                reset=_keep_session))
        except TRANSIENT as e:
            raise CommitFailed(f"cannot reach PostgreSQL: {e}") from e
        self = cls(dsn, pool)
        try:
            async with pool.acquire() as conn, conn.transaction():
                await conn.execute("SELECT pg_advisory_xact_lock($1)", sql.SCHEMA_LOCK)
                await conn.execute(sql.SCHEMA)
        except BaseException as e:
            pool.terminate()
            if isinstance(e, TRANSIENT):
                raise CommitFailed(f"cannot set up the lite schema in PostgreSQL: {e}") from e
            raise
        self._listener = asyncio.create_task(self._listen(), name="pgbackend-listen")
        return self

    def _check_open(self) -> None:
        if self._closed:
            raise StoreClosed("the PostgreSQL backend is closed")

    # ---- writes ----

    async def commit(self, writes: Sequence[Write]) -> list[Outcome]:
        """Apply each write whose condition holds; one outcome per write, in order (see the module docstring)."""
        self._check_open()
        if not writes:
            return []
        fut: asyncio.Future[list[Outcome]] = asyncio.get_running_loop().create_future()
        self._queue.append((list(writes), fut))
        if self._flusher is None:
            self._flusher = asyncio.create_task(self._flush(), name="pgbackend-flush")
        return await fut

    async def _flush(self) -> None:
        """Send queued commits, joined up to MAX_BATCH writes, one lite_commit call at a time, until none wait."""
        taken: list[tuple[list[Write], asyncio.Future[list[Outcome]]]] = []
        try:
            while self._queue and not self._closed:
                taken = []
                count = 0
                while self._queue and (not taken or count + len(self._queue[0][0]) <= MAX_BATCH):
                    taken.append(self._queue.popleft())
                    count += len(taken[-1][0])
                try:
                    outcomes = await self._commit_batch([w for ws, _ in taken for w in ws])
                except Exception as e:
                    if not isinstance(e, CommitFailed):
                        log.exception("PostgreSQL commit failed unexpectedly")
                        e = CommitFailed(f"PostgreSQL commit failed: {e!r}")
                    for _, fut in taken:
                        if not fut.done():
                            fut.set_exception(e)
                    continue
                at = 0
                for ws, fut in taken:
                    if not fut.done():
                        fut.set_result(outcomes[at:at + len(ws)])
                    at += len(ws)
        finally:
            self._flusher = None
            # Cancelled by close() with a batch in flight: its outcome is unknown to its callers.
            for _, fut in taken:
                if not fut.done():
                    fut.set_exception(StoreClosed("the PostgreSQL backend closed during the commit"))
            if self._closed:
                self._fail_queued()

    async def _commit_batch(self, writes: list[Write]) -> list[Outcome]:
        try:
            async with self._pool.acquire(timeout=CONNECT_TIMEOUT) as conn:
                rows = await conn.fetch(sql.COMMIT, [w.op for w in writes], [w.key for w in writes],
                                        [w.value for w in writes], [w.expected_rev for w in writes],
                                        timeout=COMMIT_TIMEOUT)
        except TRANSIENT as e:
            raise CommitFailed(f"PostgreSQL commit failed: {e}") from e
        if len(rows) != len(writes):
            raise CommitFailed(f"lite_commit answered {len(rows)} outcomes for {len(writes)} writes")
        out: list[Outcome] = []
        for row in sorted(rows, key=lambda r: int(r["i"])):
            w = writes[int(row["i"]) - 1]
            code, rev = int(row["code"]), int(row["rev"])
            out.append(rev if code == 0 else KeyExists(w.key) if code == 1
                       else KeyNotFound(w.key) if code == 2 else RevMismatch(w.key, rev))
        return out

    def _fail_queued(self) -> None:
        while self._queue:
            _, fut = self._queue.popleft()
            if not fut.done():
                fut.set_exception(StoreClosed("the PostgreSQL backend is closed"))

    # ---- reads ----

    async def current_rev(self) -> int:
        """The newest committed revision, read from PostgreSQL now."""
        self._check_open()
        try:
            async with self._pool.acquire(timeout=CONNECT_TIMEOUT) as conn:
                return int(await conn.fetchval(sql.HEAD, timeout=CONNECT_TIMEOUT))
        except TRANSIENT as e:
            raise CommitFailed(f"cannot read the revision from PostgreSQL: {e}") from e

    async def snapshot(self, prefix: str = "") -> tuple[int, list[tuple[str, int, bytes]]]:
        """(revision, live keys under `prefix` sorted by key) from one REPEATABLE READ transaction, read in
        keyset pages of SNAPSHOT_PAGE keys along `lite_current`'s primary key (index range scans)."""
        self._check_open()
        low, high = sql.prefix_range(prefix)
        bounds: tuple[str, ...] = () if high is None else (high,)
        out: list[tuple[str, int, bytes]] = []
        try:
            async with self._pool.acquire(timeout=CONNECT_TIMEOUT) as conn, \
                    conn.transaction(isolation="repeatable_read", readonly=True):
                head = int(await conn.fetchval(sql.HEAD, timeout=COMMIT_TIMEOUT))
                after, first = low, True
                while True:
                    rows = await conn.fetch(sql.page_query(first, high is not None, SNAPSHOT_PAGE), after, *bounds,
                                            timeout=COMMIT_TIMEOUT)
                    out.extend((str(r[0]), int(r[1]), bytes(r[2])) for r in rows)
                    if len(rows) < SNAPSHOT_PAGE:
                        return head, out
                    after, first = out[-1][0], False
        except TRANSIENT as e:
            raise CommitFailed(f"cannot read a snapshot from PostgreSQL: {e}") from e

    async def history(self, upto_rev: int, limit: int) -> tuple[int, list[Change]]:
        """`backend.HasHistory`: the newest `limit` changes up to `upto_rev` above the compaction mark (every row
        above the mark is kept), with the values they replaced; floor = the oldest one's revision - 1 when
        `limit` cut them, else the mark."""
        self._check_open()
        if limit <= 0:
            return upto_rev, []
        try:
            async with self._pool.acquire(timeout=CONNECT_TIMEOUT) as conn:
                rows = await conn.fetch(sql.HISTORY, upto_rev, max(0, limit), timeout=COMMIT_TIMEOUT)
        except TRANSIENT as e:
            raise CommitFailed(f"cannot read the history from PostgreSQL: {e}") from e
        compacted = int(rows[0]["compacted"])
        out = []
        for r in rows:
            if r["rev"] is None:
                continue
            prev = None if r["prev"] is None else bytes(r["prev"])
            out.append(Change(int(r["rev"]), str(r["key"]), bytes(r["value"]), bool(r["created"]), bool(r["deleted"]),
                              prev, int(r["prev_rev"]) if prev is not None else 0))
        floor = out[0].rev - 1 if limit and len(out) >= limit else compacted
        return min(max(floor, compacted), upto_rev), out

    async def changes(self, after_rev: int, prefix: str = "") -> AsyncIterator[list[Change]]:
        """Batches of committed changes under `prefix` with rev > after_rev, in revision order, until close.

        Reads when woken (a notification, LISTEN set up again, more left to read) and once at the start; a read
        that fails is retried with backoff (a wake cuts the wait short). Raises Compacted when the revision it
        continues after is below the compaction mark (changes up to the mark may be gone)."""
        self._check_open()
        low, high = sql.prefix_range(prefix)
        wake = asyncio.Event()
        wake.set()
        self._subs.add(wake)
        last, delay = after_rev, BACKOFF_MIN
        try:
            while not self._closed:
                if not wake.is_set():
                    await wake.wait()
                    continue
                wake.clear()
                try:
                    head, compacted, batch = await self._read_changes(last, low, high)
                except TRANSIENT as e:
                    log.warning("PostgreSQL change stream: read failed (%s); retrying in %.2fs", e, delay)
                    try:
                        await asyncio.wait_for(wake.wait(), delay)
                    except TimeoutError:
                        pass
                    delay = min(delay * 2, BACKOFF_MAX)
                    wake.set()
                    continue
                delay = BACKOFF_MIN
                if last < compacted:
                    raise Compacted(compacted)
                if len(batch) == CHANGES_PAGE:
                    last = batch[-1].rev
                    wake.set()  # more to read
                else:
                    last = max(last, head)
                if batch and not self._closed:
                    yield batch
        finally:
            self._subs.discard(wake)

    async def _read_changes(self, last: int, low: str, high: str | None) -> tuple[int, int, list[Change]]:
        """(head, compaction mark, changes after `last` up to head) from one statement, so one snapshot."""
        async with self._pool.acquire(timeout=CONNECT_TIMEOUT) as conn:
            if not low:
                rows = await conn.fetch(sql.CHANGES_ALL, last, CHANGES_PAGE, timeout=COMMIT_TIMEOUT)
            elif high is None:
                rows = await conn.fetch(sql.CHANGES_FROM, last, CHANGES_PAGE, low, timeout=COMMIT_TIMEOUT)
            else:
                rows = await conn.fetch(sql.CHANGES_RANGE, last, CHANGES_PAGE, low, high, timeout=COMMIT_TIMEOUT)
        head, compacted = int(rows[0]["head"]), int(rows[0]["compacted"])
        batch = [Change(int(r["rev"]), str(r["key"]), bytes(r["value"]), bool(r["created"]), bool(r["deleted"]))
                 for r in rows if r["rev"] is not None]
        return head, compacted, batch

    def _wake_all(self) -> None:
        for ev in self._subs:
            ev.set()

    # ---- the listener ----

    async def _listen(self) -> None:
        """Keep one connection LISTENing on the change channel; see the module docstring."""
        delay = BACKOFF_MIN
        while not self._closed:
            lost = asyncio.Event()
            try:
                conn = cast(sql.Conn, await asyncpg.connect(
                    self._dsn, server_settings=LISTENER_SETTINGS, timeout=CONNECT_TIMEOUT))
            except TRANSIENT as e:
                log.warning("PostgreSQL listener: cannot connect (%s); retrying in %.2fs", e, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, BACKOFF_MAX)
                continue
            try:
                conn.add_termination_listener(_setter(lost))
                await conn.add_listener(sql.CHANNEL, self._notified)
                delay = BACKOFF_MIN
                self._listening.set()
                self._wake_all()  # whatever was committed while nobody listened
                while not lost.is_set():
                    try:
                        await asyncio.wait_for(lost.wait(), PING)
                    except TimeoutError:
                        await conn.fetchval("SELECT 1", timeout=PING)
            except TRANSIENT as e:
                log.warning("PostgreSQL listener: connection lost (%s); reconnecting", e)
            finally:
                self._listening.clear()
                conn.terminate()

    def _notified(self, _conn: Any, _pid: int, _channel: str, _payload: str) -> None:
        self._wake_all()

    # ---- compaction and close ----

    async def compact(self, rev: int) -> None:
        """Mark `rev` (at most the head) compacted, then remove the obsolete history at or below it in steps of
        COMPACT_STEP writes, each its own short transaction. The mark goes first, so a change stream never reads
        the history while it is being removed: it answers Compacted instead."""
        self._check_open()
        try:
            async with self._pool.acquire(timeout=CONNECT_TIMEOUT) as conn:
                await conn.execute(sql.COMPACT_MARK, rev, timeout=COMMIT_TIMEOUT)
                while not self._closed:
                    row = await conn.fetchrow(sql.COMPACT_STEP, COMPACT_STEP, timeout=COMMIT_TIMEOUT)
                    if row is None or not row["remaining"]:
                        return
        except TRANSIENT as e:
            raise CommitFailed(f"PostgreSQL compaction failed: {e}") from e

    async def close(self) -> None:
        """End the change streams and close every connection. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._wake_all()
        self._fail_queued()
        for task in (self._listener, self._flusher):
            if task is not None:
                task.cancel()
                try:
                    await task
                except asyncio.CancelledError:
                    pass
        try:
            await asyncio.wait_for(self._pool.close(), 5)
        except TRANSIENT:
            self._pool.terminate()


async def _keep_session(_conn: Any) -> None:
    """The pool's reset on release: nothing to do. Pool connections keep no session state (no LISTEN, no session
    lock, no SET, no cursor), and asyncpg's default reset is one more round trip per use (`UNLISTEN *; RESET ALL;
    ...`): it made a commit two exchanges with PostgreSQL instead of one."""


def _setter(event: asyncio.Event) -> Callable[[Any], None]:
    """A termination callback for asyncpg that sets `event`."""
    def done(_conn: Any) -> None:
        event.set()
    return done


def _is_a_backend(b: PgBackend) -> Backend:
    """Never called: mypy checks here that PgBackend satisfies the Backend protocol."""
    return b
