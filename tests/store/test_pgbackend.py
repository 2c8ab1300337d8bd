"""PgBackend against a real PostgreSQL (tests/helpers/pgserver.py): conditional writes, group commits with mixed
outcomes, snapshots at one revision, the change stream (order across concurrent committers, a slow transaction
holding a lower revision, a PostgreSQL restart), compaction, and the plans lists and change reads use."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Sequence

import asyncpg
import pytest
from store_helpers import check_history

from lite.server.store import pgbackend
from lite.server.store import pgschema as sql
from lite.server.store.backend import Change, Outcome, Write
from lite.server.store.errors import (
    CommitFailed,
    Compacted,
    KeyExists,
    KeyNotFound,
    RevMismatch,
    StoreClosed,
)
from lite.server.store.pgbackend import PgBackend
from tests.helpers.pgserver import PgServer

GUARD = 60  # seconds: a hang guard for waits, never a timing assertion


async def collect(stream: AsyncIterator[list[Change]], until_rev: int) -> list[Change]:
    """Changes from `stream` until one at or above `until_rev` arrived."""
    got: list[Change] = []
    async with asyncio.timeout(GUARD):
        async for batch in stream:
            got.extend(batch)
            if got and got[-1].rev >= until_rev:
                return got
    raise AssertionError(f"stream ended at {got[-1].rev if got else None}, before {until_rev}")


async def wait_for(cond_coro: object, what: str) -> None:
    """Poll an async predicate (a no-argument coroutine function) until true; fails after GUARD seconds."""
    async with asyncio.timeout(GUARD):
        while not await cond_coro():  # type: ignore[operator]
            await asyncio.sleep(0.02)


def revs(outcomes: Sequence[Outcome]) -> list[int]:
    return [o for o in outcomes if isinstance(o, int)]


@pytest.fixture
async def backend(pg_dsn: str) -> AsyncIterator[PgBackend]:
    b = await PgBackend.open(pg_dsn)
    yield b
    await b.close()


async def test_conditional_writes_each_outcome(backend: PgBackend) -> None:
    [r1] = await backend.commit([Write("create", "core/pods/ns/a", b"v1")])
    assert r1 == 1
    [dup] = await backend.commit([Write("create", "core/pods/ns/a", b"again")])
    assert isinstance(dup, KeyExists) and dup.key == "core/pods/ns/a"
    [missing] = await backend.commit([Write("update", "core/pods/ns/b", b"x")])
    assert isinstance(missing, KeyNotFound)
    [stale] = await backend.commit([Write("update", "core/pods/ns/a", b"x", expected_rev=r1 + 7)])
    assert isinstance(stale, RevMismatch) and stale.current_rev == r1
    [r2] = await backend.commit([Write("update", "core/pods/ns/a", b"v2", expected_rev=r1)])
    [r3] = await backend.commit([Write("update", "core/pods/ns/a", b"v3")])  # any revision
    [old] = await backend.commit([Write("delete", "core/pods/ns/a", b"v3", expected_rev=r2)])
    assert isinstance(old, RevMismatch) and old.current_rev == r3
    assert (r2, r3) == (2, 3)  # failed writes take no revision
    assert await backend.snapshot() == (3, [("core/pods/ns/a", 3, b"v3")])
    [r4] = await backend.commit([Write("delete", "core/pods/ns/a", b"final", expected_rev=r3)])
    [gone] = await backend.commit([Write("delete", "core/pods/ns/a", b"final")])
    assert isinstance(gone, KeyNotFound)
    assert await backend.snapshot() == (4, [])
    assert await backend.current_rev() == r4 == 4
    history = await collect(backend.changes(0), 4)
    assert history == [Change(1, "core/pods/ns/a", b"v1", True, False),
                       Change(2, "core/pods/ns/a", b"v2", False, False),
                       Change(3, "core/pods/ns/a", b"v3", False, False),
                       Change(4, "core/pods/ns/a", b"final", False, True)]


async def test_batch_mixed_outcomes_checked_in_order(pg_dsn: str, backend: PgBackend) -> None:
    other = await PgBackend.open(pg_dsn)
    try:
        [ext] = await other.commit([Write("create", "k/taken", b"theirs")])  # committed by another server
        out = await backend.commit([
            Write("create", "k/a", b"a1"),
            Write("create", "k/taken", b"mine"),            # exists (committed before the batch)
            Write("create", "k/a", b"a-dup"),               # exists (created earlier in this batch)
            Write("update", "k/a", b"a2", expected_rev=2),  # the batch's own first write
            Write("update", "k/none", b"x"),                # never existed
            Write("delete", "k/taken", b"theirs", expected_rev=ext),
            Write("update", "k/a", b"a3", expected_rev=2),  # stale: k/a is at 3 now
            Write("create", "k/taken", b"again"),           # deleted just before in this batch
        ])
    finally:
        await other.close()
    assert out[0] == 2 and out[3] == 3 and out[5] == 4 and out[7] == 5
    assert isinstance(out[1], KeyExists) and isinstance(out[2], KeyExists)
    assert isinstance(out[4], KeyNotFound)
    assert isinstance(out[6], RevMismatch) and out[6].current_rev == 3
    assert await backend.snapshot("k/") == (5, [("k/a", 3, b"a2"), ("k/taken", 5, b"again")])
    changes = await collect(backend.changes(1), 5)
    assert [(c.rev, c.key, c.value, c.created, c.deleted) for c in changes] == [
        (2, "k/a", b"a1", True, False), (3, "k/a", b"a2", False, False),
        (4, "k/taken", b"theirs", False, True), (5, "k/taken", b"again", True, False)]


async def test_snapshot_prefix_and_one_revision_across_pages(backend: PgBackend,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    await backend.commit([Write("create", k, b"0") for k in
                          ("core/pods/a/x", "core/podsx/a/y", "core/pods/b/z", "apps/deployments/a/d", "core/nodes/n")])
    rev, items = await backend.snapshot("core/pods/")
    assert (rev, [k for k, _, _ in items]) == (5, ["core/pods/a/x", "core/pods/b/z"])
    assert [k for k, _, _ in (await backend.snapshot())[1]] == sorted(
        ["core/pods/a/x", "core/podsx/a/y", "core/pods/b/z", "apps/deployments/a/d", "core/nodes/n"])

    # 40 keys rewritten together by every batch; a snapshot read in pages of 2 must still show one batch's state
    keys = [f"s/{i:02}" for i in range(40)]
    await backend.commit([Write("create", k, b"0") for k in keys])
    monkeypatch.setattr(pgbackend, "SNAPSHOT_PAGE", 2)
    stop = asyncio.Event()

    async def rewrite() -> None:
        n = 0
        while not stop.is_set():
            n += 1
            await backend.commit([Write("update", k, str(n).encode()) for k in keys])

    writer = asyncio.create_task(rewrite())
    spanned = 0
    try:
        for _ in range(200):
            rev, items = await backend.snapshot("s/")
            assert [k for k, _, _ in items] == keys
            assert len({v for _, _, v in items}) == 1, "a snapshot mixed two batches"
            assert max(r for _, r, _ in items) <= rev
            if await backend.current_rev() > rev:
                spanned += 1
                if spanned >= 5:
                    break
    finally:
        stop.set()
        await writer
    assert spanned >= 5, "the writer never committed while a snapshot was read"


async def test_changes_in_order_across_concurrent_committers_and_a_slow_transaction(
        pg_dsn: str, backend: PgBackend) -> None:
    """Three backends (servers) commit at once while a slow transaction holds a revision and a watcher reads all
    along: it sees every revision exactly once, in order, with what each commit wrote, and does not skip the
    slow one (with revisions from a sequence, the others commit past it and the watcher reads beyond it first)."""
    writers = [await PgBackend.open(pg_dsn) for _ in range(3)]
    slow = await asyncpg.connect(pg_dsn)
    [first] = await writers[0].commit([Write("create", "c/first", b"0")])
    seen: list[Change] = []

    async def watcher() -> None:
        async for batch in backend.changes(first):
            seen.extend(batch)

    watching = asyncio.create_task(watcher())
    committed: dict[int, tuple[str, bytes, bool]] = {}
    try:
        tx = slow.transaction()
        await tx.start()
        [row] = await slow.fetch(sql.COMMIT, ["create"], ["c/slow"], [b"slow"], [0])
        slow_rev = int(row["rev"])
        assert slow_rev == first + 1

        async def client(b: PgBackend, c: int) -> None:
            for i in range(6):
                key = f"c/{c % 4}"  # shared keys: creates and deletes collide across clients
                ws = [Write("create", key, f"{c}.{i}".encode()), Write("delete", key, f"{c}.{i}".encode()),
                      Write("create", f"c/own{c}/{i}", b"x")]
                for w, o in zip(ws, await b.commit(ws), strict=True):
                    if isinstance(o, int):
                        assert o not in committed
                        committed[o] = (w.key, w.value, w.op == "delete")

        load = asyncio.gather(*(client(writers[c % 3], c) for c in range(12)))

        async def held_up() -> bool:  # every server waits on the revision lock (or, wrongly, the watcher went past)
            n = await slow.fetchval("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                                    "AND datname = current_database()")
            return int(n) >= len(writers) or any(c.rev > slow_rev for c in seen)

        await wait_for(held_up, "committers held up behind the slow transaction")
        await tx.commit()
        await load
        top = max(committed)

        async def caught_up() -> bool:
            return any(c.rev >= top for c in seen)

        await wait_for(caught_up, "the watcher reaching the last commit")
    finally:
        watching.cancel()
        await slow.close()
        for w in writers:
            await w.close()
    assert [c.rev for c in seen] == list(range(slow_rev, top + 1)), "a revision was skipped or repeated"
    assert seen[0] == Change(slow_rev, "c/slow", b"slow", True, False)
    assert {c.rev: (c.key, c.value, c.deleted) for c in seen[1:]} == committed


async def test_stream_resumes_after_postgresql_restart(pg_server: PgServer, pg_dsn: str, backend: PgBackend) -> None:
    """PostgreSQL crashes under a writer loop: the stream goes on after it with every revision once, in order
    (no gap: a transaction the crash ended took its revisions with it), every acknowledged write among them."""
    writer = await PgBackend.open(pg_dsn)
    seen: list[Change] = []

    async def watcher() -> None:
        async for batch in backend.changes(0):
            seen.extend(batch)

    watching = asyncio.create_task(watcher())
    acked: dict[int, bytes] = {}
    failed = 0
    stop = asyncio.Event()

    async def write_loop() -> None:
        nonlocal failed
        i = 0
        while not stop.is_set():
            i += 1
            try:
                [rev] = await writer.commit([Write("create", f"r/{i}", str(i).encode())])
                assert isinstance(rev, int)
                acked[rev] = str(i).encode()
            except CommitFailed:
                failed += 1  # outcome unknown: it shows on the stream if it happened
                await asyncio.sleep(0.01)

    loop = asyncio.create_task(write_loop())
    try:
        async def progress(n: int) -> bool:
            return len(acked) >= n

        await wait_for(lambda: progress(20), "writes before the crash")
        await asyncio.to_thread(pg_server.restart, "immediate")  # a crash: every connection drops
        after = len(acked)
        await wait_for(lambda: progress(after + 20), "writes after the crash")
        stop.set()
        await loop
        top = await writer.current_rev()

        async def caught_up() -> bool:
            return bool(seen) and seen[-1].rev >= top

        await wait_for(caught_up, "the stream reaching the last revision")
    finally:
        stop.set()
        watching.cancel()
        await writer.close()
    assert [c.rev for c in seen] == list(range(1, top + 1))
    assert {c.rev: c.value for c in seen if c.rev in acked} == acked
    assert failed > 0  # the crash did land amid the writes


async def test_changes_committed_while_the_listener_is_away_are_read_when_it_is_back(
        pg_server: PgServer, pg_dsn: str, backend: PgBackend) -> None:
    """The listener's connection drops and cannot come back while a commit happens elsewhere: no notification
    tells of that commit, so only the read after LISTEN is in place again finds it."""
    writer = await PgBackend.open(pg_dsn)
    watch = backend.changes(0)
    db = pg_dsn.rsplit("/", 1)[1]
    admin = await asyncpg.connect(pg_server.dsn())
    try:
        await writer.commit([Write("create", "l/a", b"1")])
        assert [c.rev for c in await collect(watch, 1)] == [1]
        await admin.execute(f'ALTER DATABASE "{db}" ALLOW_CONNECTIONS false')
        ended = await admin.fetchval("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                                     "WHERE datname = $1 AND application_name = 'lite-listen'", db)
        assert ended == 2  # the watcher's backend's listener and the writer's

        async def away() -> bool:
            return not backend._listening.is_set()

        await wait_for(away, "the listener noticing its connection is gone")
        await writer.commit([Write("create", "l/b", b"2")])  # on a pool connection that stayed
        await admin.execute(f'ALTER DATABASE "{db}" ALLOW_CONNECTIONS true')
        assert await collect(watch, 2) == [Change(2, "l/b", b"2", True, False)]
    finally:
        await admin.execute(f'ALTER DATABASE "{db}" ALLOW_CONNECTIONS true')
        await admin.close()
        await watch.aclose()
        await writer.close()


async def test_a_change_read_that_fails_is_retried(pg_server: PgServer, pg_dsn: str, backend: PgBackend,
                                                  caplog: pytest.LogCaptureFixture) -> None:
    """A notification arrives but the read it triggers cannot reach PostgreSQL (the pool's connections are gone
    and new ones refused): the stream retries with backoff and delivers the change once it can read again."""
    watch = backend.changes(0)
    db = pg_dsn.rsplit("/", 1)[1]
    raw = await asyncpg.connect(pg_dsn)  # a writer outside the pool
    admin = await asyncpg.connect(pg_server.dsn())
    try:
        reader = asyncio.create_task(collect(watch, 1))
        await admin.execute(f'ALTER DATABASE "{db}" ALLOW_CONNECTIONS false')
        await admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                            "WHERE datname = $1 AND application_name = 'lite'", db)
        await raw.fetch(sql.COMMIT, ["create"], ["f/a"], [b"1"], [0])

        async def failed_once() -> bool:
            return "read failed" in caplog.text

        await wait_for(failed_once, "a failed read")
        await admin.execute(f'ALTER DATABASE "{db}" ALLOW_CONNECTIONS true')
        assert await reader == [Change(1, "f/a", b"1", True, False)]
    finally:
        await admin.execute(f'ALTER DATABASE "{db}" ALLOW_CONNECTIONS true')
        await admin.close()
        await raw.close()
        await watch.aclose()


async def test_compaction_keeps_live_rows_and_answers_compacted(pg_dsn: str, backend: PgBackend,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pgbackend, "COMPACT_STEP", 2)  # several small transactions
    await backend.commit([Write("create", "x/a", b"a1"), Write("create", "x/b", b"b1"), Write("create", "x/c", b"c1")])
    await backend.commit([Write("update", "x/a", b"a2"), Write("update", "x/a", b"a3")])  # 4, 5
    await backend.commit([Write("delete", "x/b", b"b1")])  # 6
    await backend.commit([Write("update", "x/c", b"c2")])  # 7: after the compaction mark below
    before = await backend.snapshot()
    await backend.compact(6)
    assert await backend.snapshot() == before
    conn = await asyncpg.connect(pg_dsn)
    try:
        left = [int(r["rev"]) for r in await conn.fetch("SELECT rev FROM lite_log ORDER BY rev")]
        swept = await conn.fetchval("SELECT val FROM lite_meta WHERE name = 'swept'")
    finally:
        await conn.close()
    # gone: a1, a2 (superseded by 4, 5), b1 and its tombstone (6); kept: c1 (its value at 6), a3, c2
    assert left == [3, 5, 7]
    assert swept == 6
    with pytest.raises(Compacted) as e:
        await anext(backend.changes(5))
    assert e.value.oldest_rev == 6
    assert await anext(backend.changes(6)) == [Change(7, "x/c", b"c2", False, False)]
    await backend.compact(100)  # beyond the head: compacts to the head
    with pytest.raises(Compacted):
        await anext(backend.changes(6))
    assert await backend.snapshot() == before


async def test_close_ends_streams_and_refuses_writes(pg_dsn: str) -> None:
    b = await PgBackend.open(pg_dsn)
    stream = b.changes(0)
    reader = asyncio.create_task(anext(stream, None))
    await b.commit([Write("create", "z/a", b"1")])
    assert await reader == [Change(1, "z/a", b"1", True, False)]
    reader = asyncio.create_task(anext(stream, None))
    await b.close()
    assert await reader is None  # the stream ended
    with pytest.raises(StoreClosed):
        await b.commit([Write("create", "z/b", b"1")])
    await b.close()  # idempotent


async def test_lists_and_change_reads_use_indexes_at_100k_rows(pg_dsn: str, backend: PgBackend) -> None:
    conn = await asyncpg.connect(pg_dsn)
    try:
        # 100k live pods in 100 namespaces plus 100k superseded rows, loaded directly (this is about plans)
        await conn.execute("""
            INSERT INTO lite_log SELECT g, 'core/pods/ns' || (g % 100) || '/p' || g, true, false, 0, '\\x00'
              FROM generate_series(1, 100000) g;
            INSERT INTO lite_log SELECT g + 100000, 'core/pods/ns' || (g % 100) || '/p' || g, false, false, g,
              '\\x01' FROM generate_series(1, 100000) g;
            INSERT INTO lite_current SELECT 'core/pods/ns' || (g % 100) || '/p' || g, g + 100000
              FROM generate_series(1, 100000) g;
            UPDATE lite_meta SET val = 200000 WHERE name = 'rev';
            ANALYZE lite_log; ANALYZE lite_current; ANALYZE lite_meta;""")
        plans = {
            "namespace list": await conn.fetch("EXPLAIN " + sql.page_query(True, True, 1000),
                                               "core/pods/ns7/", "core/pods/ns70"),
            "all pods, next page": await conn.fetch("EXPLAIN " + sql.page_query(False, True, 1000),
                                                    "core/pods/ns5/p5", "core/pods0"),
            "everything": await conn.fetch("EXPLAIN " + sql.page_query(True, False, 1000), ""),
            "changes": await conn.fetch("EXPLAIN " + sql.CHANGES_ALL, 150000, 1000),
            "changes in a prefix": await conn.fetch("EXPLAIN " + sql.CHANGES_RANGE, 150000, 1000,
                                                    "core/pods/", "core/pods0"),
            "commit lookup": await conn.fetch("EXPLAIN SELECT rev FROM lite_current WHERE key = $1",
                                              "core/pods/ns1/p1"),
        }
    finally:
        await conn.close()
    for what, rows in plans.items():
        text = "\n".join(str(r[0]) for r in rows)
        assert "Seq Scan on lite_log" not in text and "Seq Scan on lite_current" not in text, f"{what}:\n{text}"
        assert "Index" in text, f"{what}:\n{text}"
    # and the backend reads them right
    rev, items = await backend.snapshot("core/pods/ns42/")
    assert rev == 200000 and len(items) == 1000 and all(v == b"\x01" for _, _, v in items)


async def test_open_when_postgresql_cannot_be_reached(pg_server: PgServer) -> None:
    db = pg_server.dsn("postgres")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        nobody = db.replace(f":{pg_server.port}/", f":{s.getsockname()[1]}/")  # bound, not listening
        with pytest.raises(CommitFailed, match="cannot reach PostgreSQL"):
            await PgBackend.open(nobody)


async def test_servers_opening_a_fresh_database_at_once(pg_dsn: str) -> None:
    """Concurrent CREATE OR REPLACE FUNCTIONs fail ("tuple concurrently updated") unless opens take turns."""
    backends = await asyncio.gather(*(PgBackend.open(pg_dsn) for _ in range(6)))
    try:
        outs = await asyncio.gather(*(b.commit([Write("create", f"o/{i}", b"1")]) for i, b in enumerate(backends)))
        assert sorted(o for [o] in outs) == [1, 2, 3, 4, 5, 6]
    finally:
        for b in backends:
            await b.close()


@pytest.mark.parametrize(("prefix", "bounds"), [
    ("", ("", None)),
    ("core/pods/", ("core/pods/", "core/pods0")),
    ("core/pods/ns/", ("core/pods/ns/", "core/pods/ns0")),
    ("a\U0010ffff", ("a\U0010ffff", "b")),
    ("\U0010ffff", ("\U0010ffff", None)),
])
def test_prefix_range(prefix: str, bounds: tuple[str, str | None]) -> None:
    assert sql.prefix_range(prefix) == bounds


async def test_changes_under_a_prefix(backend: PgBackend) -> None:
    stream = backend.changes(0, "core/pods/")
    await backend.commit([Write("create", "core/pods/a/x", b"1"), Write("create", "core/podsx/a/y", b"2"),
                          Write("create", "core/nodes/n", b"3"), Write("create", "core/pods/b/z", b"4")])
    await backend.commit([Write("create", "apps/deployments/a/d", b"5")])
    await backend.commit([Write("delete", "core/pods/a/x", b"1")])
    assert [(c.rev, c.key) for c in await collect(stream, 6)] == [
        (1, "core/pods/a/x"), (4, "core/pods/b/z"), (6, "core/pods/a/x")]
    await stream.aclose()


async def test_history(backend: PgBackend) -> None:
    await check_history(backend, "h")
