"""MirrorStore over a real SqliteBackend: Store's interface, conflicts, acknowledged writes, watches with
revision gaps, two mirrors on one backend, compaction, reload when the change stream is compacted away,
the codec, and files shared with Store.

The generic Store tests imported below run here again against a MirrorStore: this module's `store` fixture
overrides conftest's."""

from __future__ import annotations

import asyncio
import random
import sqlite3
from collections.abc import AsyncIterator

import orjson
import pytest
from store_helpers import pod
from test_store_crud import (  # noqa: F401  (collected again here, over a MirrorStore)
    test_concurrent_writers_group_commit,
    test_conflicts,
    test_create_get_sets_resource_version,
    test_delete_without_final_keeps_object,
    test_update_and_delete,
)
from test_store_list import (  # noqa: F401
    test_list_reflects_deletes,
    test_list_sorted_and_prefix_isolated,
    test_pagination,
)
from test_store_list_at import (  # noqa: F401
    cm,
    test_current_revision_reads_the_index,
    test_list_at,
    test_model_every_revision_every_page,
)
from test_store_watch import (  # noqa: F401
    take,
    test_event_delivered_before_write_returns,
    test_many_watchers_fan_out,
    test_prefix_isolation,
    test_replay_then_live,
    test_watch_from_current_on_empty_store,
)

from lite.server.encryption.aesgcm import Key, Keyset, SecretsCodec
from lite.server.encryption.control import sealed_counts
from lite.server.store import (
    Compacted,
    KeyExists,
    KeyNotFound,
    RevMismatch,
    Store,
    StoreClosed,
    StoreFull,
    WatchDropped,
    mirror,
)
from lite.server.store.backend import Change
from lite.server.store.mirror import MirrorStore
from lite.server.store.sqlitebackend import SqliteBackend
from lite.server.store.watch import Watch
from tests.helpers.gatedbackend import GatedBackend

K = "core/pods/default/a"


async def caught_up(s: MirrorStore, rev: int) -> None:
    while s.current_rev < rev:
        await asyncio.wait_for(s._applied.wait(), 5)


@pytest.fixture
async def backend(db_path: str) -> AsyncIterator[SqliteBackend]:
    b = await SqliteBackend.open(db_path)
    yield b
    await b.close()


@pytest.fixture
async def store(backend: SqliteBackend) -> AsyncIterator[MirrorStore]:
    s = await MirrorStore.open(backend)
    yield s
    await s.close()


@pytest.fixture
async def gapped(db_path: str) -> AsyncIterator[MirrorStore]:
    """A mirror over a backend whose revisions step by 3 (1 is never used: 3, 6, 9, ...)."""
    b = await SqliteBackend.open(db_path, rev_step=3)
    s = await MirrorStore.open(b, window=5)
    yield s
    await s.close()
    await b.close()


# ---- writes ---------------------------------------------------------------------------------------------

async def test_acknowledged_write_is_readable_and_on_watches(store: MirrorStore, backend: SqliteBackend) -> None:
    w = store.watch("core/pods/", store.current_rev)
    for i in range(20):
        rev, raw = await store.create(f"core/pods/default/p{i}", pod(f"p{i}"))
        assert store.current_rev >= rev and store.get(f"core/pods/default/p{i}") == (rev, raw)
        assert w._queue[-1].rev == rev and w._queue[-1].value == raw
    assert orjson.loads(raw)["metadata"]["resourceVersion"] == str(rev)
    w.close()


async def test_stale_expected_rev_is_refused_locally(store: MirrorStore, backend: SqliteBackend) -> None:
    rev, _ = await store.create(K, pod("a"))
    rev2, _ = await store.update(K, pod("a", n=1), rev)
    commits = backend.commits
    with pytest.raises(RevMismatch) as err:
        await store.update(K, pod("a", n=2), rev)
    assert err.value.current_rev == rev2 and backend.commits == commits  # no round trip


async def test_writes_go_to_the_backend_without_resource_version(store: MirrorStore, db_path: str) -> None:
    await store.create(K, pod("a", metadata={"name": "a", "namespace": "default", "resourceVersion": "77"}))
    rev, raw = await store.update(K, pod("a", n=1), 0)
    assert orjson.loads(raw)["metadata"]["resourceVersion"] == str(rev)
    # the file holds what Store would have written: the row id as resourceVersion
    with sqlite3.connect(db_path) as c:
        (value,) = c.execute("SELECT value FROM log WHERE id = ?", (rev,)).fetchone()
    assert orjson.loads(value)["metadata"]["resourceVersion"] == str(rev)


async def test_delete_without_final_takes_the_newest_state(backend: SqliteBackend) -> None:
    a = await MirrorStore.open(backend)
    b = await MirrorStore.open(backend)
    try:
        rev, _ = await a.create(K, pod("a", n=0))
        wb = b.watch("core/pods/", 0)
        await take(wb, 1)
        # b's writer and a's commit race: b deletes (unconditionally) the state it mirrors unless a's
        # update landed first, in which case its conditional delete fails and it retries with the newer state.
        await a.update(K, pod("a", n=1), rev)
        r, final = await b.delete(K, 0)
        assert orjson.loads(final)["n"] == 1 and orjson.loads(final)["metadata"]["resourceVersion"] == str(r)
        wb.close()
    finally:
        await a.close()
        await b.close()


async def test_close_drains_and_rejects(backend: SqliteBackend) -> None:
    s = await MirrorStore.open(backend)
    writes = [asyncio.ensure_future(s.create(f"core/pods/default/p{i}", pod(f"p{i}"))) for i in range(10)]
    await asyncio.sleep(0)
    await s.close()
    assert [r for r, _ in await asyncio.gather(*writes)] == list(range(1, 11))
    with pytest.raises(StoreClosed):
        await s.create(K, pod("a"))
    with pytest.raises(StoreClosed):
        s.watch("", 0)
    again = await MirrorStore.open(backend)
    assert len(again) == 10
    await again.close()


async def test_a_full_datastore_fails_the_batch_and_recovers(store: MirrorStore, backend: SqliteBackend) -> None:
    await store.create(K, pod("a"))

    def cap() -> None:  # the file may not grow and has no free page: SQLITE_FULL for any new page
        c = backend._db.conn
        c.executescript("PRAGMA incremental_vacuum;")
        c.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
        (pages,) = c.execute("PRAGMA page_count").fetchone()
        c.execute(f"PRAGMA max_page_count={pages}").fetchone()

    await backend._run(cap)
    big = pod("big", data={"x": "y" * 200_000})
    with pytest.raises(StoreFull):
        await store.create("core/pods/default/big", big)
    assert store.full and store.failed_batches == 1 and store.get("core/pods/default/big") is None
    await backend._run(lambda: backend._db.conn.execute("PRAGMA max_page_count=1073741823").fetchone())
    rev, _ = await store.create("core/pods/default/big", big)
    assert not store.full and store.get("core/pods/default/big") is not None and store.current_rev == rev


async def test_close_does_not_wait_forever_for_a_stalled_stream(backend: SqliteBackend,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(mirror, "CLOSE_WAIT", 0.05)
    gated = GatedBackend(backend)
    s = await MirrorStore.open(gated)
    gated.gate.clear()
    commits = backend.commits
    write = asyncio.ensure_future(s.create(K, pod("a")))
    while backend.commits == commits:  # committed, but its change never reaches this mirror
        await asyncio.sleep(0.001)
    await s.close()
    with pytest.raises(StoreClosed):
        await write
    _, items = await backend.snapshot()
    assert [k for k, _, _ in items] == [K]  # the datastore has it: the outcome was unknown, not a failure


# ---- two servers on one datastore ----------------------------------------------------------------------

async def test_two_mirrors_see_each_others_writes_and_conflicts(backend: SqliteBackend) -> None:
    a = await MirrorStore.open(backend)
    b = await MirrorStore.open(backend)
    try:
        wb = b.watch("core/pods/", 0)
        rev, raw = await a.create(K, pod("a"))
        ev = (await take(wb, 1))[0]
        assert (ev.type, ev.rev, ev.value) == ("ADDED", rev, raw) and b.get(K) == (rev, raw)
        with pytest.raises(KeyExists):
            await b.create(K, pod("a"))
        rev2, _ = await b.update(K, pod("a", n=1), rev)
        # a's mirror may not have applied b's update yet; the backend refuses a's stale write, and by the time
        # the error is raised a's mirror shows the state it conflicted with (a re-read gets the new revision).
        with pytest.raises(RevMismatch) as err:
            await a.update(K, pod("a", n=2), rev)
        assert err.value.current_rev == rev2
        got = a.get(K)
        assert got is not None and got[0] == rev2
        await b.delete(K, rev2)
        with pytest.raises(KeyNotFound):
            await a.update(K, pod("a", n=3), 0)
        assert a.get(K) is None
        # concurrent creates of one key from both servers: exactly one wins
        results = await asyncio.gather(a.create("core/pods/default/x", pod("x")),
                                       b.create("core/pods/default/x", pod("x")), return_exceptions=True)
        assert sorted(type(r).__name__ for r in results) == ["KeyExists", "tuple"]
        wb.close()
    finally:
        await a.close()
        await b.close()


async def test_concurrent_writers_on_two_mirrors_agree(backend: SqliteBackend) -> None:
    """Read-modify-write loops on both servers over shared keys: every acknowledged increment lands once,
    and both mirrors end with the same state."""
    a = await MirrorStore.open(backend)
    b = await MirrorStore.open(backend)
    try:
        keys = [f"core/configmaps/default/c{i}" for i in range(4)]
        for k in keys:
            await a.create(k, {"metadata": {"name": k}, "n": 0})
        await caught_up(b, a.current_rev)

        async def bump(s: MirrorStore, k: str, times: int) -> None:
            done = 0
            while done < times:
                got = s.get(k)
                assert got is not None
                doc = orjson.loads(got[1])
                doc["n"] += 1
                try:
                    await s.update(k, doc, got[0])
                    done += 1
                except RevMismatch:
                    pass

        await asyncio.gather(*(bump(s, k, 10) for s in (a, b) for k in keys))
        for s in (a, b):  # the last write answered on one server may still be on its way to the other
            await caught_up(s, await backend.current_rev())
        assert a.list("core/configmaps/") == b.list("core/configmaps/")
        assert [orjson.loads(v)["n"] for _, _, v in a.list("core/configmaps/")[0]] == [20] * 4
        assert a.writes + b.writes == 4 + 80
    finally:
        await a.close()
        await b.close()


async def test_two_servers_random_writes_and_watchers(db_path: str) -> None:
    """Writers on two mirrors of one datastore (revisions with gaps), watchers starting on either at random
    revisions: every watcher's stream is exactly the committed history after its start (types, values, prev
    values, in revision order), and both mirrors end in the datastore's state."""
    rng = random.Random(20)
    backend = await SqliteBackend.open(db_path, rev_step=2)
    mirrors = [await MirrorStore.open(backend, window=150) for _ in range(2)]
    keys = [f"core/configmaps/default/c{i}" for i in range(8)]
    watchers: list[tuple[int, Watch]] = []

    def start_watcher() -> None:
        m = rng.choice(mirrors)
        after = rng.randint(m.oldest_rev - 1, m.current_rev)
        watchers.append((after, m.watch("core/configmaps/", after)))

    async def writer(m: MirrorStore, n: int) -> None:
        for i in range(n):
            k = rng.choice(keys)
            got = m.get(k)
            try:
                if got is None:
                    await m.create(k, {"metadata": {"name": k}, "i": i})
                elif rng.random() < 0.2:
                    await m.delete(k, got[0] if rng.random() < 0.5 else 0)
                else:
                    await m.update(k, {"metadata": {"name": k}, "i": i}, got[0] if rng.random() < 0.7 else 0)
            except (KeyExists, KeyNotFound, RevMismatch):
                pass
            if rng.random() < 0.05:
                start_watcher()

    try:
        start_watcher()
        await asyncio.gather(*(writer(m, 50) for m in mirrors for _ in range(3)))
        top = await backend.current_rev()
        for m in mirrors:
            await caught_up(m, top)
        with sqlite3.connect(db_path) as c:
            log = c.execute("SELECT id, name, created, deleted, value FROM log ORDER BY id").fetchall()
            current = c.execute("SELECT c.name, c.id, l.value FROM current c JOIN log l ON l.id = c.id "
                                "ORDER BY c.name").fetchall()
        assert len(log) > 150 and len(watchers) >= 5
        last: dict[str, bytes] = {}
        history = []
        for rev, key, created, deleted, value in log:
            kind = "DELETED" if deleted else "ADDED" if created else "MODIFIED"
            history.append((rev, kind, key, orjson.loads(value), None if created else orjson.loads(last[key])))
            last[key] = value
        for after, w in watchers:
            want = [h for h in history if h[0] > after]
            got = await take(w, len(want))
            assert [(e.rev, e.type, e.key, orjson.loads(e.value), e.prev and orjson.loads(e.prev))
                    for e in got] == want
            assert not w._queue
        for m in mirrors:
            assert [(k, r, orjson.loads(v)) for k, r, v in m.list("")[0]] == \
                [(k, r, orjson.loads(v)) for k, r, v in current]
    finally:
        for _, w in watchers:
            w.close()
        for m in mirrors:
            await m.close()
        await backend.close()


# ---- revisions with gaps ------------------------------------------------------------------------------

async def test_watch_replay_and_live_with_revision_gaps(gapped: MirrorStore) -> None:
    s = gapped
    revs = [(await s.create(f"core/pods/default/p{i}", pod(f"p{i}")))[0] for i in range(4)]
    assert revs == [3, 6, 9, 12] and s.current_rev == 12
    assert s.oldest_rev == 1  # the snapshot at 0: nothing is missing after it
    assert [e.rev for e in await take(s.watch("core/pods/", 0), 4)] == revs
    assert [e.rev for e in await take(s.watch("core/pods/", 7), 2)] == [9, 12]  # from a gap
    assert [e.rev for e in await take(s.watch("core/pods/", 9), 1)] == [12]
    live = s.watch("core/pods/", 10)
    r5, _ = await s.create("core/pods/default/p4", pod("p4"))
    assert [e.rev for e in await take(live, 2)] == [12, r5]
    for i in range(5, 7):  # window=5: 3 and 6 leave it
        await s.create(f"core/pods/default/p{i}", pod(f"p{i}"))
    assert [e.rev for e in s._hub.events] == [9, 12, 15, 18, 21] and s.oldest_rev == 7
    with pytest.raises(Compacted) as err:
        s.watch("core/pods/", 5)
    assert err.value.oldest_rev == 7
    assert [e.rev for e in await take(s.watch("core/pods/", 6), 5)] == [9, 12, 15, 18, 21]
    assert [e.rev for e in await take(s.watch("core/pods/", 8), 5)] == [9, 12, 15, 18, 21]


async def test_store_opens_a_gapped_file(gapped: MirrorStore, db_path: str) -> None:
    for i in range(3):
        await gapped.create(f"core/pods/default/p{i}", pod(f"p{i}"))
    items = gapped.list("")
    await gapped.close()
    st = await Store.open(db_path)
    try:
        assert st.list("") == items and st.current_rev == 9
        assert (await st.create(K, pod("a")))[0] == 10
    finally:
        await st.close()


# ---- compaction and reload ----------------------------------------------------------------------------

async def test_compaction_reaches_the_backend(store: MirrorStore, backend: SqliteBackend) -> None:
    rev, _ = await store.create(K, pod("a"))
    for i in range(30):
        rev, _ = await store.update(K, pod("a", n=i), rev)
    rows, _ = await backend.stats()
    assert rows == 31
    assert await store.compact(10) == 0 and store.compactions == 1
    rows, _ = await store.stats()
    assert rows == 10  # the rows above current - 10 (the live one among them); older history is gone
    w = store.watch("core/pods/", rev - 5)  # the window in memory is unaffected
    assert len(await take(w, 5)) == 5
    w.close()


async def test_reload_when_the_stream_is_compacted_away(backend: SqliteBackend) -> None:
    a = await MirrorStore.open(backend)
    gated = GatedBackend(backend)
    b = await MirrorStore.open(gated)
    try:
        await a.create("core/pods/default/gone", pod("gone"))
        watcher = b.watch("core/pods/", 0)
        await take(watcher, 1)
        seen = b.current_rev
        gated.gate.clear()  # b's stream stalls
        rev, _ = await a.create(K, pod("a"))
        await a.delete("core/pods/default/gone", 0)
        for i in range(5):
            rev, _ = await a.update(K, pod("a", n=i), rev)
        await a.compact(0)
        assert b.current_rev == seen and b.get("core/pods/default/gone") is not None
        gated.gate.set()
        with pytest.raises(WatchDropped):  # the watch ends: its client re-watches ...
            await take(watcher, 1)
        assert b.reloads == 1 and b.current_rev == a.current_rev
        with pytest.raises(Compacted):  # ... from its last revision, which is gone: 410, relist
            b.watch("core/pods/", seen)
        assert b.get("core/pods/default/gone") is None and b.get(K) == a.get(K)
        assert b.list("core/") == a.list("core/")
        # and it follows the stream again
        w = b.watch("core/pods/", b.current_rev)
        r, _ = await a.update(K, pod("a", n=99), rev)
        assert [e.rev for e in await take(w, 1)] == [r]
        w.close()
    finally:
        await b.close()
        await a.close()


async def test_conflict_is_raised_once_the_mirror_shows_it(backend: SqliteBackend) -> None:
    """A backend conflict about a state this mirror has not applied yet waits for it: the caller's re-read
    after the error must show the revision it conflicted with, or its read-modify-write loop would spin."""
    gated = GatedBackend(backend)
    a = await MirrorStore.open(gated)
    b = await MirrorStore.open(backend)
    try:
        rev, _ = await a.create(K, pod("a"))
        await caught_up(b, rev)
        gated.gate.clear()  # a's stream stalls
        rev2, _ = await b.update(K, pod("a", n=1), rev)
        stale = asyncio.ensure_future(a.update(K, pod("a", n=2), rev))  # a still mirrors rev: the backend judges
        created = asyncio.ensure_future(a.create("core/pods/default/b", pod("b")))
        await b.create("core/pods/default/c", pod("c"))
        exists = asyncio.ensure_future(a.create("core/pods/default/c", pod("c")))
        for _ in range(20):
            await asyncio.sleep(0)
        assert not stale.done() and not created.done() and not exists.done()
        gated.gate.set()
        with pytest.raises(RevMismatch) as err:
            await stale
        assert err.value.current_rev == rev2
        got = a.get(K)
        assert got is not None and got[0] == rev2
        with pytest.raises(KeyExists):
            await exists
        assert a.get("core/pods/default/c") is not None
        assert (await created)[0] == a.get("core/pods/default/b")[0]  # type: ignore[index]
    finally:
        await a.close()
        await b.close()


async def test_delete_of_a_revision_the_mirror_has_not_seen_yet(backend: SqliteBackend) -> None:
    gated = GatedBackend(backend)
    a = await MirrorStore.open(gated)
    b = await MirrorStore.open(backend)
    try:
        rev, _ = await a.create(K, pod("a"))
        await caught_up(b, rev)
        gated.gate.clear()
        rev2, _ = await b.update(K, pod("a", n=1), rev)  # a client saw rev2 on b, then deletes through a
        deleting = asyncio.ensure_future(a.delete(K, rev2))
        with pytest.raises(KeyNotFound):  # neither mirrored nor in the backend
            await a.delete("core/pods/default/none", 0)
        gated.gate.set()
        r, final = await deleting
        assert orjson.loads(final)["n"] == 1 and r > rev2 and a.get(K) is None
    finally:
        await a.close()
        await b.close()


def test_the_interface_is_stores() -> None:
    """Every public method and property of Store exists on MirrorStore with the same signature."""
    import inspect

    for name, member in inspect.getmembers(Store):
        if name.startswith("_") and name != "__len__":
            continue
        assert hasattr(MirrorStore, name), name
        if inspect.isfunction(member) or inspect.ismethod(member):
            theirs, mine = (inspect.signature(f, eval_str=True) for f in (member, getattr(MirrorStore, name)))
            if name == "open":  # a file path there, a Backend here; the same options
                assert list(theirs.parameters.values())[1:] == list(mine.parameters.values())[1:]
            else:
                assert theirs == mine, name
    for attr in ("current_rev", "commits", "writes", "compactions", "compacted_rows", "on_commit", "full",
                 "failed_batches"):
        assert attr in MirrorStore.__init__.__code__.co_names, attr


class BrokenStreamBackend(GatedBackend):
    """Its change streams break once (a lost connection) when `breaks` is set, after delivering a batch."""

    breaks = False

    async def changes(self, after_rev: int, prefix: str = "") -> AsyncIterator[list[Change]]:
        async for batch in super().changes(after_rev, prefix):
            yield batch
            if self.breaks:
                self.breaks = False
                raise ConnectionResetError("connection to the datastore lost")


async def test_a_broken_stream_resumes_after_the_last_applied_revision(backend: SqliteBackend) -> None:
    broken = BrokenStreamBackend(backend)
    a = await MirrorStore.open(backend)
    b = await MirrorStore.open(broken)
    try:
        w = b.watch("core/pods/", 0)
        broken.breaks = True
        revs = [(await a.create(f"core/pods/default/p{i}", pod(f"p{i}")))[0] for i in range(5)]
        assert [e.rev for e in await take(w, 5)] == revs  # each once, in order, across the reconnection
        assert not broken.breaks and len(b) == 5
        w.close()
    finally:
        await a.close()
        await b.close()


# ---- codec and files shared with Store ----------------------------------------------------------------

async def test_codec_seals_what_the_backend_holds(backend: SqliteBackend, db_path: str) -> None:
    """The real Secrets codec (AES-GCM): the datastore holds ciphertext, memory and watches plain JSON."""
    codec = SecretsCodec(Keyset((Key("k1", b"\x01" * 32),), True))
    s = await MirrorStore.open(backend, codec=codec)
    try:
        w = s.watch("core/secrets/", 0)
        rev, raw = await s.create("core/secrets/default/t", {"metadata": {"name": "t"}, "data": {"k": "dG9w"}})
        assert b"dG9w" in raw and (await take(w, 1))[0].value == raw
        await s.create(K, pod("a"))
        with sqlite3.connect(db_path) as c:
            stored = dict(c.execute("SELECT name, value FROM log").fetchall())
        assert b"dG9w" not in stored["core/secrets/default/t"] and stored[K].startswith(b"{")
        assert sealed_counts(s.path) == {"k1": 1}  # `lite secrets-encrypt status` reads the file
        again = await MirrorStore.open(backend, codec=codec)
        assert again.get("core/secrets/default/t") == (rev, raw)
        await again.close()
        w.close()
    finally:
        await s.close()


async def test_sealed_values_carry_their_revision_for_store(db_path: str) -> None:
    """Opened with the writers' codec, the backend sets resourceVersion inside sealed values too: the file
    then opens with Store.open and serves every object with its revision."""
    codec = SecretsCodec(Keyset((Key("k1", b"\x01" * 32),), True))
    b = await SqliteBackend.open(db_path, codec=codec)
    s = await MirrorStore.open(b, codec=codec)
    rev, _ = await s.create("core/secrets/default/t", {"metadata": {"name": "t"}, "data": {"k": "dG9w"}})
    rev2, raw2 = await s.update("core/secrets/default/t", {"metadata": {"name": "t"}, "data": {"k": "b3Bz"}}, rev)
    await s.close()
    await b.close()
    st = await Store.open(db_path, codec=codec)
    try:
        assert st.get("core/secrets/default/t") == (rev2, raw2)
        assert orjson.loads(raw2)["metadata"]["resourceVersion"] == str(rev2)
    finally:
        await st.close()


async def test_files_move_between_store_and_sqlite_backend(db_path: str) -> None:
    st = await Store.open(db_path)
    r1, _ = await st.create(K, pod("a"))
    await st.update(K, pod("a", n=1), r1)
    await st.create("core/pods/default/b", pod("b"))
    await st.delete("core/pods/default/b", 0)
    before = st.list("")
    await st.close()
    backend = await SqliteBackend.open(db_path)
    m = await MirrorStore.open(backend)
    assert m.list("") == before
    rev, raw = await m.create("core/pods/default/c", pod("c"))
    _, upd = await m.update(K, pod("a", n=2), 0)
    after = m.list("")
    await m.close()
    await backend.close()
    st = await Store.open(db_path)
    try:
        assert st.list("") == after and st.get("core/pods/default/c") == (rev, raw)
        got = st.get(K)
        assert got is not None and got[1] == upd
        rev2, _ = await st.create("core/pods/default/d", pod("d"))
        assert rev2 == st.current_rev == after[1] + 1
    finally:
        await st.close()


# ---- lists at a revision over a window with gaps ------------------------------------------------------

async def test_list_at_with_revision_gaps(db_path: str) -> None:
    b = await SqliteBackend.open(db_path, rev_step=3)
    s = await MirrorStore.open(b)
    try:
        await test_model_every_revision_every_page(s)  # type: ignore[arg-type]
    finally:
        await s.close()
        await b.close()


async def test_list_at_compacted_below_the_floor(gapped: MirrorStore) -> None:
    for i in range(8):
        await gapped.create(f"core/configmaps/n/{i}", cm(str(i)))
    revs = [r for _, r, _ in gapped.list("core/configmaps/")[0]]
    floor = gapped.oldest_rev - 1
    ok = [r for r in revs if r >= floor]
    assert [k for k, _, _ in gapped.list("core/configmaps/", at_rev=ok[0])[0]] == [
        f"core/configmaps/n/{i}" for i in range(revs.index(ok[0]) + 1)]
    with pytest.raises(Compacted):
        gapped.list("core/configmaps/", at_rev=floor - 1)


async def test_a_committed_write_is_answered_when_the_stream_stalls(backend: SqliteBackend,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The datastore goes away right after a commit: the write is answered (as committed) after ACK_WAIT, not
    held for as long as the outage lasts; the mirror shows it, once, when the stream resumes."""
    monkeypatch.setattr(mirror, "ACK_WAIT", 0.1)
    gated = GatedBackend(backend)
    s = await MirrorStore.open(gated)
    try:
        start = s.current_rev
        w = s.watch("core/pods/", start)
        gated.gate.clear()
        rev, value = await asyncio.wait_for(s.create(K, pod("a")), 5)
        assert orjson.loads(value)["metadata"]["resourceVersion"] == str(rev)
        assert s.get(K) is None and s.current_rev == start  # answered before the mirror applied it
        gated.gate.set()
        await caught_up(s, rev)
        got = s.get(K)
        assert got is not None and got[0] == rev and orjson.loads(got[1]) == orjson.loads(value)
        events = await take(w, 1)
        assert [(e.type, e.key, e.rev) for e in events] == [("ADDED", K, rev)]
        rev2, _ = await asyncio.wait_for(s.update(K, pod("a"), rev), 5)  # and the next write is answered as usual
        assert s.get(K) is not None and s.get(K)[0] == rev2  # type: ignore[index]
    finally:
        await s.close()
