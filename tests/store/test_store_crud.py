"""create/get/update/delete, optimistic concurrency, group commit."""

from __future__ import annotations

import asyncio
import sqlite3
import threading

import orjson
import pytest
from store_helpers import pod

from lite.server.store import CommitFailed, KeyExists, KeyNotFound, RevMismatch, Store, StoreClosed
from lite.server.store.sqlite import Row

K = "core/pods/default/a"


async def test_create_get_sets_resource_version(store: Store) -> None:
    obj = pod("a")
    rev, raw = await store.create(K, obj)
    assert rev == 1 and store.current_rev == 1
    assert orjson.loads(raw)["metadata"]["resourceVersion"] == "1"
    assert "resourceVersion" not in obj["metadata"]  # the caller's dict is left alone
    assert store.get(K) == (1, raw)
    assert store.get("core/pods/default/b") is None


async def test_update_and_delete(store: Store) -> None:
    rev1, _ = await store.create(K, pod("a"))
    rev2, raw2 = await store.update(K, pod("a", spec={"x": 1}), rev1)
    assert rev2 == rev1 + 1
    assert orjson.loads(raw2)["spec"] == {"x": 1}
    assert store.get(K) == (rev2, raw2)
    rev3, final = await store.delete(K, rev2, final=pod("a", spec={"x": 2}))
    assert rev3 == rev2 + 1
    assert orjson.loads(final)["metadata"]["resourceVersion"] == str(rev3)
    assert orjson.loads(final)["spec"] == {"x": 2}
    assert store.get(K) is None
    # a key can be created again after deletion
    rev4, _ = await store.create(K, pod("a"))
    assert rev4 == rev3 + 1


async def test_delete_without_final_keeps_object(store: Store) -> None:
    await store.create(K, pod("a", spec={"y": 1}))
    rev, final = await store.delete(K, 0)
    doc = orjson.loads(final)
    assert doc["spec"] == {"y": 1} and doc["metadata"]["resourceVersion"] == str(rev)


async def test_conflicts(store: Store) -> None:
    rev, _ = await store.create(K, pod("a"))
    with pytest.raises(KeyExists):
        await store.create(K, pod("a"))
    with pytest.raises(RevMismatch) as err:
        await store.update(K, pod("a"), rev + 5)
    assert err.value.current_rev == rev
    with pytest.raises(KeyNotFound):
        await store.update("core/pods/default/missing", pod("missing"), 0)
    with pytest.raises(KeyNotFound):
        await store.delete("core/pods/default/missing", 0)
    rev2, _ = await store.update(K, pod("a"), 0)  # 0 = unconditional
    with pytest.raises(RevMismatch):
        await store.delete(K, rev)  # stale
    await store.delete(K, rev2)
    with pytest.raises(KeyNotFound):
        await store.delete(K, 0)
    assert store.current_rev == rev2 + 1  # failed writes consume no revision


async def test_batch_behaves_like_serial_writes(store: Store) -> None:
    rev, _ = await store.create(K, pod("a"))
    # Both updates are submitted before either commits: the second must see the first one pending.
    results = await asyncio.gather(
        store.update(K, pod("a", n=1), rev),
        store.update(K, pod("a", n=2), rev),
        store.create(K, pod("a")),
        store.delete(K, 0),
        store.create(K, pod("a", n=3)),
        return_exceptions=True,
    )
    assert results[0] == (rev + 1, store_value_at(results[0]))
    assert isinstance(results[1], RevMismatch) and results[1].current_rev == rev + 1
    assert isinstance(results[2], KeyExists)
    assert isinstance(results[3], tuple) and results[3][0] == rev + 2
    assert isinstance(results[4], tuple) and results[4][0] == rev + 3
    got = store.get(K)
    assert got is not None and orjson.loads(got[1])["n"] == 3 and got[0] == rev + 3


def store_value_at(result: object) -> bytes:
    assert isinstance(result, tuple)
    return result[1]  # type: ignore[no-any-return]


async def test_group_commit_batches(store: Store) -> None:
    n = 500
    base = store.commits
    revs = await asyncio.gather(*(store.create(f"core/pods/default/p{i}", pod(f"p{i}")) for i in range(n)))
    assert sorted(r for r, _ in revs) == list(range(1, n + 1))
    assert store.writes == n
    # All 500 were submitted before the writer ran once: far fewer transactions than writes.
    assert 1 <= store.commits - base < n // 10


async def test_concurrent_writers_group_commit(store: Store) -> None:
    async def writer(w: int) -> None:
        key = f"core/configmaps/default/c{w}"
        rev, _ = await store.create(key, {"metadata": {"name": f"c{w}"}})
        for i in range(20):
            rev, _ = await store.update(key, {"metadata": {"name": f"c{w}"}, "data": {"i": str(i)}}, rev)

    await asyncio.gather(*(writer(w) for w in range(64)))
    assert store.writes == 64 * 21 and store.current_rev == 64 * 21
    assert store.commits < store.writes // 4  # writes arriving during a commit share the next one


async def test_next_batch_commits_while_the_last_one_is_applied(store: Store) -> None:
    """Pipelined group commit: once batch 1 is durable, the writes queued behind it start their COMMIT on the
    store's thread before the loop applies batch 1 (index, watchers, answers), not after; and still answer in
    order, batch 1 first."""
    real_commit, first_may_finish, second_started = store._db.commit, threading.Event(), threading.Event()
    calls: list[list[str]] = []

    def commit(rows: list[Row]) -> None:
        calls.append([r.name for r in rows])
        if len(calls) == 1:
            first_may_finish.wait(10)
        else:
            second_started.set()
        real_commit(rows)

    seen_while_applying: list[bool] = []

    def applying(rows: int) -> None:  # runs on the loop while batch 1 is applied
        if not seen_while_applying:
            seen_while_applying.append(second_started.wait(5))

    store._db.commit = commit  # type: ignore[method-assign]
    store.on_commit = applying
    first = asyncio.ensure_future(store.create("core/pods/default/p1", pod("p1")))
    while not calls:  # the thread took [p1] and is committing it
        await asyncio.sleep(0.001)
    second = asyncio.ensure_future(store.create("core/pods/default/p2", pod("p2")))
    await asyncio.sleep(0)  # p2 is queued behind the batch in flight
    first_may_finish.set()
    assert (await first)[0] == 1 and not second.done()
    assert (await second)[0] == 2
    assert calls == [["core/pods/default/p1"], ["core/pods/default/p2"]]
    assert seen_while_applying == [True], "batch 2's COMMIT waited for batch 1 to be applied"


async def test_a_crash_applying_a_committed_batch_fails_its_writes_instead_of_hanging_them(db_path: str) -> None:
    """A bug while applying a committed batch (here the commit hook raises) stops the writer: that batch's
    writes and every later one fail with StoreClosed instead of waiting forever, and close still works."""
    s = await Store.open(db_path)

    def broken(rows: int) -> None:
        raise RuntimeError("bug")

    s.on_commit = broken
    async with asyncio.timeout(10):
        with pytest.raises(StoreClosed):
            await s.create("core/pods/default/a", pod("a"))
        with pytest.raises(StoreClosed):
            await s.create("core/pods/default/b", pod("b"))
        await s.close()


async def test_a_crash_applying_a_batch_also_fails_the_batch_committing_behind_it(db_path: str) -> None:
    """With the next batch's COMMIT already running when the apply of the one before crashes, both batches'
    writes fail with StoreClosed: none is left waiting for an apply that will never come."""
    s = await Store.open(db_path)
    real_commit, first_may_finish, calls = s._db.commit, threading.Event(), []

    def commit(rows: list[Row]) -> None:
        calls.append(len(rows))
        if len(calls) == 1:
            first_may_finish.wait(10)
        real_commit(rows)

    def broken(rows: int) -> None:
        raise RuntimeError("bug")

    s._db.commit = commit  # type: ignore[method-assign]
    s.on_commit = broken
    async with asyncio.timeout(10):
        first = asyncio.ensure_future(s.create("core/pods/default/a", pod("a")))
        while not calls:
            await asyncio.sleep(0.001)
        second = asyncio.ensure_future(s.create("core/pods/default/b", pod("b")))
        await asyncio.sleep(0)  # b is queued behind the batch committing
        first_may_finish.set()
        for t in (first, second):
            with pytest.raises(StoreClosed):
                await t
        await s.close()
    assert calls == [1, 1]  # b's batch was committing while a's was applied


async def test_close_drains_and_rejects(db_path: str) -> None:
    s = await Store.open(db_path)
    tasks = [asyncio.create_task(s.create(f"core/pods/default/p{i}", pod(f"p{i}"))) for i in range(50)]
    await asyncio.sleep(0)  # let them submit
    await s.close()
    assert all(t.done() and not t.exception() for t in tasks)
    with pytest.raises(StoreClosed):
        await s.create("core/pods/default/late", pod("late"))
    s2 = await Store.open(db_path)
    assert s2.count("core/pods/") == 50 and s2.current_rev == 50
    await s2.close()


async def test_failed_commit_fails_batch_and_recovers(db_path: str) -> None:
    """Another process holding the write lock makes COMMIT fail (after SQLite's 5 s busy timeout)."""
    s = await Store.open(db_path)
    try:
        rev, _ = await s.create(K, pod("a"))
        other = sqlite3.connect(db_path, isolation_level=None)
        other.execute("BEGIN IMMEDIATE")  # holds the write lock
        results = await asyncio.gather(
            s.update(K, pod("a", n=1), rev),
            s.update(K, pod("a", n=2), rev + 1),  # checked against the first one, still pending
            return_exceptions=True,
        )
        other.execute("ROLLBACK")
        other.close()
        assert all(isinstance(r, CommitFailed) for r in results), results
        assert s.current_rev == rev and s.get(K) is not None and s.get(K)[0] == rev  # type: ignore[index]
        # the pending view was reset: the next write is checked against committed state, no rev gap
        rev2, _ = await s.update(K, pod("a", n=3), rev)
        assert rev2 == rev + 1
    finally:
        await s.close()
    s = await Store.open(db_path)
    assert s.current_rev == rev + 1 and [e.rev for e in s.watch("", 0)._replay] == [1, 2]
    await s.close()


async def test_conflict_with_a_pending_write_settles_before_raising(store: Store) -> None:
    """A writer that loses to a pending write finds that write committed when it re-reads (no stale spin)."""
    rev, _ = await store.create(K, pod("a"))
    first = asyncio.ensure_future(store.update(K, pod("a", spec={"x": 1}), rev))
    await asyncio.sleep(0)  # the first update is submitted, not yet committed
    assert store.get(K) is not None and store.get(K)[0] == rev  # type: ignore[index]
    with pytest.raises(RevMismatch):
        await store.update(K, pod("a", spec={"x": 2}), rev)
    got = store.get(K)
    assert got is not None and got[0] == (await first)[0]
