"""SqliteBackend on its own (the Backend contract of backend.py): conditional writes in one group commit,
snapshots, pushed change streams in revision order, compaction and Compacted, close."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import orjson
import pytest
from store_helpers import check_history

from lite.server.store import Compacted, KeyExists, KeyNotFound, RevMismatch, StoreClosed
from lite.server.store.backend import Change, Write
from lite.server.store.sqlitebackend import SqliteBackend


def obj(name: str, **extra: object) -> bytes:
    return orjson.dumps({"metadata": {"name": name}, **extra})


@pytest.fixture
async def backend(db_path: str) -> AsyncIterator[SqliteBackend]:
    b = await SqliteBackend.open(db_path)
    yield b
    await b.close()


async def test_a_batch_checks_each_write_against_the_ones_before_it(backend: SqliteBackend) -> None:
    out = await backend.commit([
        Write("create", "k/a", obj("a")),
        Write("create", "k/a", obj("a")),  # exists: created just before in this batch
        Write("update", "k/a", obj("a", n=1), expected_rev=1),
        Write("update", "k/a", obj("a", n=2), expected_rev=1),  # stale: the update before made it 2
        Write("delete", "k/b", obj("b")),
        Write("delete", "k/a", obj("a", n=3)),
        Write("create", "k/a", obj("a", n=4)),
    ])
    assert out[0] == 1 and isinstance(out[1], KeyExists) and out[2] == 2
    assert isinstance(out[3], RevMismatch) and out[3].current_rev == 2
    assert isinstance(out[4], KeyNotFound) and out[5:] == [3, 4]
    rev, items = await backend.snapshot()
    assert rev == 4 == await backend.current_rev()
    assert [(k, r) for k, r, _ in items] == [("k/a", 4)]
    assert orjson.loads(items[0][2]) == {"metadata": {"name": "a", "resourceVersion": "4"}, "n": 4}


async def test_changes_are_pushed_in_order_with_prefix(backend: SqliteBackend) -> None:
    await backend.commit([Write("create", "a/x", obj("x")), Write("create", "b/y", obj("y"))])
    got: list[Change] = []
    done = asyncio.Event()

    async def follow() -> None:
        async for batch in backend.changes(0, "a/"):
            got.extend(batch)
            if got[-1].rev >= 5:
                done.set()

    task = asyncio.create_task(follow())
    await backend.commit([Write("update", "a/x", obj("x", n=1)), Write("create", "b/z", obj("z"))])
    await backend.commit([Write("delete", "a/x", obj("x", n=2))])
    await asyncio.wait_for(done.wait(), 5)  # pushed by the commits: nothing polls
    await backend.close()  # ends the stream
    await asyncio.wait_for(task, 5)
    assert [(c.rev, c.key, c.created, c.deleted) for c in got] == [
        (1, "a/x", True, False), (3, "a/x", False, False), (5, "a/x", False, True)]
    assert orjson.loads(got[-1].value)["n"] == 2
    with pytest.raises(StoreClosed):
        await backend.commit([Write("create", "a/q", obj("q"))])


async def test_rev_step_leaves_gaps(db_path: str) -> None:
    b = await SqliteBackend.open(db_path, rev_step=5)
    try:
        assert await b.commit([Write("create", "k/a", obj("a")), Write("create", "k/b", obj("b"))]) == [5, 10]
        stream = b.changes(5)
        assert [c.rev for c in await anext(stream)] == [10]
        await stream.aclose()
    finally:
        await b.close()


async def test_compaction_and_compacted_streams(backend: SqliteBackend) -> None:
    await backend.commit([Write("create", "k/a", obj("a")), Write("create", "k/b", obj("b"))])
    for i in range(5):
        await backend.commit([Write("update", "k/a", obj("a", n=i))])
    await backend.commit([Write("delete", "k/b", obj("b"))])  # rev 8, the newest row: a tombstone
    await backend.compact(100)
    rows, _ = await backend.stats()
    assert rows == 2  # k/a's live row and the newest row (its id is the current revision)
    assert await backend.current_rev() == 8
    with pytest.raises(Compacted):
        await anext(backend.changes(3))
    _, items = await backend.snapshot()
    assert [(k, r) for k, r, _ in items] == [("k/a", 7)]
    assert await backend.commit([Write("create", "k/c", obj("c"))]) == [9]  # revisions never go back


async def test_history(backend: SqliteBackend) -> None:
    await check_history(backend, "h")
