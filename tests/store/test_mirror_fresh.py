"""Read freshness across servers: `MirrorStore.fresh` (consistent reads, RVs another server handed out).

Two mirrors over one real backend are two servers; a `GatedBackend` (test_mirror.py) holds one mirror's change
stream back, as a slow network would, so that "the read came before the change arrived" is certain, not a race.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import orjson
import pytest
from store_helpers import pod
from test_mirror import GatedBackend

from lite.server.store import CommitFailed, Store
from lite.server.store.mirror import MirrorStore
from lite.server.store.pgbackend import PgBackend
from lite.server.store.sqlitebackend import SqliteBackend

K = "core/pods/default/a"


class CountingBackend(GatedBackend):
    """Counts `current_rev` calls; `hold` (when set) keeps each one waiting until released."""

    def __init__(self, inner: SqliteBackend) -> None:
        super().__init__(inner)
        self.rev_calls = 0
        self.hold: asyncio.Event | None = None
        self.fail = False

    async def current_rev(self) -> int:
        """The revision as of the call (read at once), answered once `hold` is released (a slow network)."""
        self.rev_calls += 1
        rev = await self.inner.current_rev()
        if self.hold is not None:
            await self.hold.wait()
        if self.fail:
            raise CommitFailed("the datastore is unreachable")
        return rev


@pytest.fixture
async def backend(db_path: str) -> AsyncIterator[SqliteBackend]:
    b = await SqliteBackend.open(db_path)
    yield b
    await b.close()


@pytest.fixture
async def pair(backend: SqliteBackend) -> AsyncIterator[tuple[MirrorStore, MirrorStore, CountingBackend]]:
    """Server a, and server b whose change stream can be held back (b's backend view counts current_rev)."""
    view = CountingBackend(backend)
    a = await MirrorStore.open(backend)
    b = await MirrorStore.open(view)
    yield a, b, view
    view.gate.set()
    await a.close()
    await b.close()


async def test_a_consistent_read_on_b_sees_a_write_acknowledged_by_a(
        pair: tuple[MirrorStore, MirrorStore, CountingBackend]) -> None:
    a, b, view = pair
    view.gate.clear()  # b's stream is slow
    rev, raw = await a.create(K, pod("a"))
    assert b.get(K) is None  # b's mirror alone does not have it yet
    waiting = b.fresh()
    assert waiting is not None
    read = asyncio.ensure_future(waiting)
    for _ in range(20):
        await asyncio.sleep(0)
    assert not read.done()  # b knows the datastore is ahead and waits for its mirror
    view.gate.set()
    await asyncio.wait_for(read, 5)
    assert b.get(K) == (rev, raw)
    items, list_rev, _ = b.list("core/pods/")
    assert [k for k, _, _ in items] == [K] and list_rev >= rev
    assert b.stale_reads == 0


async def test_concurrent_fresh_reads_share_one_revision_request(
        pair: tuple[MirrorStore, MirrorStore, CountingBackend]) -> None:
    a, b, view = pair
    await a.create(K, pod("a"))
    waits = [b.fresh() for _ in range(100)]
    assert all(w is not None for w in waits)
    await asyncio.wait_for(asyncio.gather(*[w for w in waits if w is not None]), 5)
    assert view.rev_calls == 1 and b.rev_requests == 1
    assert b.get(K) is not None
    # a later wave asks again (a read must not be answered by a request sent before it arrived)
    await asyncio.wait_for(asyncio.gather(*[w for w in (b.fresh() for _ in range(100)) if w is not None]), 5)
    assert view.rev_calls == 2


async def test_a_read_arriving_while_a_request_is_in_flight_waits_for_the_next(
        pair: tuple[MirrorStore, MirrorStore, CountingBackend]) -> None:
    a, b, view = pair
    view.hold = asyncio.Event()
    first = asyncio.ensure_future(b.fresh() or asyncio.sleep(0))
    while view.rev_calls == 0:  # b's request is on its way to the datastore
        await asyncio.sleep(0.001)
    view.gate.clear()
    rev, _ = await a.create(K, pod("a"))  # acknowledged by a after b's request was sent
    second = asyncio.ensure_future(b.fresh() or asyncio.sleep(0))
    third = asyncio.ensure_future(b.fresh() or asyncio.sleep(0))
    view.hold.set()
    await asyncio.wait_for(first, 5)  # answered by the request sent before the write: may miss it
    for _ in range(20):
        await asyncio.sleep(0)
    assert not second.done()  # the next request saw the write: b waits for its stream to bring it
    view.gate.set()
    await asyncio.wait_for(asyncio.gather(second, third), 5)
    assert view.rev_calls == 2  # second and third shared the next request
    got = b.get(K)
    assert got is not None and got[0] == rev


async def test_a_resource_version_newer_than_the_mirror_is_waited_for(
        pair: tuple[MirrorStore, MirrorStore, CountingBackend]) -> None:
    a, b, view = pair
    view.gate.clear()
    rev, _ = await a.create(K, pod("a"))
    assert b.current_rev < rev
    waiting = b.fresh(rev)
    assert waiting is not None
    read = asyncio.ensure_future(waiting)
    await asyncio.sleep(0.01)
    assert not read.done()
    view.gate.set()
    await asyncio.wait_for(read, 5)
    assert b.current_rev >= rev and b.get(K) is not None
    assert b.fresh(rev) is None  # reached: nothing to wait for
    assert view.rev_calls == 0  # an RV is waited for on the stream alone


async def test_a_resource_version_that_never_comes_gives_up_after_the_timeout(
        pair: tuple[MirrorStore, MirrorStore, CountingBackend]) -> None:
    _, b, _ = pair
    b.fresh_timeout = 0.05
    waiting = b.fresh(b.current_rev + 1000)
    assert waiting is not None
    await asyncio.wait_for(waiting, 5)  # returns (the API then answers 504 "too large")
    assert b.current_rev < 1000


async def test_a_consistent_read_when_the_datastore_cannot_say_reads_the_mirror(
        pair: tuple[MirrorStore, MirrorStore, CountingBackend]) -> None:
    a, b, view = pair
    await a.create(K, pod("a"))
    view.fail = True
    waiting = b.fresh()
    assert waiting is not None
    await asyncio.wait_for(waiting, 5)
    assert b.stale_reads == 1
    view.fail, view.hold, b.fresh_timeout = False, asyncio.Event(), 0.05
    waiting = b.fresh()  # the datastore hangs: the read goes on after fresh_timeout
    assert waiting is not None
    await asyncio.wait_for(waiting, 5)
    assert b.stale_reads == 2
    view.hold.set()


async def test_store_reads_are_fresh_as_they_are(store: Store) -> None:
    await store.create(K, pod("a"))
    assert store.fresh() is None and store.fresh(store.current_rev) is None
    assert store.fresh(store.current_rev + 5) is None  # one process: never handed out, "too large" at once


async def test_closing_ends_waiting_reads(pair: tuple[MirrorStore, MirrorStore, CountingBackend]) -> None:
    _, b, view = pair
    view.hold = asyncio.Event()
    waiting = b.fresh()
    assert waiting is not None
    read = asyncio.ensure_future(waiting)
    while view.rev_calls == 0:
        await asyncio.sleep(0.001)
    await b.close()
    await asyncio.wait_for(read, 5)
    assert b.fresh() is None and b.stale_reads == 0  # closing is no stale read


async def test_on_postgresql_a_write_through_one_server_is_read_fresh_on_another(pg_dsn: str) -> None:
    ba, bb = await PgBackend.open(pg_dsn), await PgBackend.open(pg_dsn)
    a, b = await MirrorStore.open(ba), await MirrorStore.open(bb)
    try:
        for i in range(20):
            key = f"core/pods/default/p{i}"
            rev, raw = await a.create(key, pod(f"p{i}"))
            waiting = b.fresh()
            assert waiting is not None
            await asyncio.wait_for(waiting, 5)
            assert b.get(key) == (rev, raw)
        assert b.stale_reads == 0
    finally:
        await a.close()
        await b.close()
        await ba.close()
        await bb.close()


# ---- the window after a (re)start: seeded from the backend's history ---------------------------------------

async def test_history_values_do_not_pass_the_following_codec(backend: SqliteBackend) -> None:
    """Old values seeded into the window are unsealed by the codec a FollowingCodec wraps: the bootstrap data it
    remembers (and would adopt) stays the datastore's newest, not a prev the history carried."""
    from lite.server.bootstrapdata import KEY, FollowingCodec
    from lite.server.encryption.aesgcm import Key, Keyset, SecretsCodec

    codec = FollowingCodec(SecretsCodec(Keyset((Key("k1", b"\x01" * 32),), True)), lambda raw: None)
    writer = await MirrorStore.open(backend, codec=codec)
    rev = 0
    for n in range(3):
        bundle = {"metadata": {"name": "cluster"}, "n": n}
        rev = (await writer.create(KEY, bundle))[0] if n == 0 else (await writer.update(KEY, bundle, rev))[0]
    await writer.close()
    codec = FollowingCodec(codec.inner, lambda raw: None)
    s = await MirrorStore.open(backend, codec=codec, window=1)
    try:
        assert [(e.rev, e.prev is not None) for e in s._hub.events] == [(rev, True)]  # seeded, with its prev
        assert codec._seen is not None and orjson.loads(codec._seen)["n"] == 2
    finally:
        await s.close()
