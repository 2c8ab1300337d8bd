"""The store contract, part 3: compaction, close and reopen, on every factory.

What every store promises here:
- `compact(keep)` lets history go but never a live value: get/list answer the same before and after; watches
  open across a compaction go on without a gap; afterwards a watch replays exactly the history from its
  `oldest_rev` on and raises `Compacted` below it (after a reopen, history that compaction removed is gone:
  a watch from before it raises `Compacted` rather than skip it).
- `close()` ends every watch (StopAsyncIteration), is idempotent and safe to call concurrently; afterwards
  writes and new watches raise `StoreClosed`. A write submitted before close either succeeds or raises
  `StoreClosed`.
- A store reopened on the same datastore has every acknowledged write: same keys, revisions and values,
  `current_rev` at least the last acknowledged rev, and new writes get higher revisions than any before. A
  watch on it replays exactly the history from its `oldest_rev` on; a watcher resuming from the last rev it saw
  before the close gets exactly the rest, or `Compacted` (then it relists), never a stream with holes.
"""

from __future__ import annotations

import asyncio

import pytest
from conformance_kit import ConformingStore, Datastore, decoded, entries, obj, queued, summary, take

from lite.server.store import Compacted, StoreClosed, StoreEvent

P = "core/configmaps/ns/"


def key(n: object) -> str:
    return f"{P}{n}"


async def churn(store: ConformingStore, log: list[tuple[str, str, int, object]], n: int, tag: str) -> None:
    """n writes over a few keys (creates, updates, a delete), each appended to `log` as its event."""
    for i in range(n):
        k = key(f"k{i % 3}")
        got = store.get(k)
        if got is None:
            rev, value = await store.create(k, obj(k, tag=tag, i=i))
            log.append(("ADDED", k, rev, decoded(value)))
        elif i % 5 == 4:
            rev, value = await store.delete(k, got[0])
            log.append(("DELETED", k, rev, decoded(value)))
        else:
            rev, value = await store.update(k, obj(k, tag=tag, i=i), got[0])
            log.append(("MODIFIED", k, rev, decoded(value)))


def after(log: list[tuple[str, str, int, object]], rev: int) -> list[tuple[str, str, int, object]]:
    return [e for e in log if e[2] > rev]


async def assert_replays_its_window(store: ConformingStore, log: list[tuple[str, str, int, object]]) -> None:
    """A watch from oldest_rev - 1 replays exactly the logged history from oldest_rev on; below is Compacted."""
    oldest = store.oldest_rev
    w = store.watch("", oldest - 1)
    assert summary(await queued(w)) == after(log, oldest - 1)
    w.close()
    if oldest - 2 >= 0:
        with pytest.raises(Compacted) as err:
            store.watch("", oldest - 2)
        assert err.value.oldest_rev == oldest


async def test_watches_across_compaction(store: ConformingStore) -> None:
    log: list[tuple[str, str, int, object]] = []
    w = store.watch("", store.current_rev)
    await churn(store, log, 12, "before")
    reads = store.list("")[0]
    await store.compact(0)  # all superseded history may go
    assert entries(store.list("")[0]) == entries(reads)
    await churn(store, log, 12, "after")
    # the watch open across the compaction missed nothing and repeated nothing
    assert summary(await queued(w)) == log
    w.close()
    await assert_replays_its_window(store, log)


async def test_compaction_keeps_live_values_across_reopen(datastore: Datastore) -> None:
    store = await datastore.open()
    log: list[tuple[str, str, int, object]] = []
    await churn(store, log, 20, "a")
    for i in range(3):  # keys never updated: their live rows are old
        k = key(f"stable{i}")
        rev, value = await store.create(k, obj(k))
        log.append(("ADDED", k, rev, decoded(value)))
    await churn(store, log, 4, "b")
    first = log[0][2]
    last = store.current_rev
    reads = entries(store.list("")[0])
    await store.compact(0)
    store = await datastore.reopen(store)
    assert entries(store.list("")[0]) == reads and store.current_rev >= last
    # the superseded revisions before the churn's end are gone: replaying from the very start is impossible
    with pytest.raises(Compacted):
        store.watch("", first - 1)
    await assert_replays_its_window(store, log)


async def test_close_ends_watches_and_refuses_writes(datastore: Datastore) -> None:
    store = await datastore.open()
    start = store.current_rev
    rev, _ = await store.create(key("a"), obj(key("a")))
    w = store.watch(P, start)
    live = store.watch(P, rev)
    waiter = asyncio.create_task(anext(live))
    await asyncio.sleep(0)
    await asyncio.gather(store.close(), store.close())  # concurrent closes
    await store.close()  # and again: idempotent
    with pytest.raises(StopAsyncIteration):
        await asyncio.wait_for(waiter, 10)
    with pytest.raises(StopAsyncIteration):
        while True:  # a watch may still hand out what it held, then ends
            ev = await asyncio.wait_for(anext(w), 10)
            assert (ev.key, ev.rev) == (key("a"), rev)
    with pytest.raises(StoreClosed):
        await store.create(key("b"), obj(key("b")))
    with pytest.raises(StoreClosed):
        await store.update(key("a"), obj(key("a"), n=1), rev)
    with pytest.raises(StoreClosed):
        await store.delete(key("a"), rev)
    with pytest.raises(StoreClosed):
        store.watch(P, rev)


async def test_writes_racing_close_are_kept_if_acknowledged(datastore: Datastore) -> None:
    store = await datastore.open()
    writes = [asyncio.create_task(store.create(key(i), obj(key(i)))) for i in range(20)]
    await asyncio.sleep(0)  # submitted, not yet committed
    await store.close()
    outcomes = await asyncio.gather(*writes, return_exceptions=True)
    acked = {key(i): o for i, o in enumerate(outcomes) if isinstance(o, tuple)}
    for o in outcomes:
        assert isinstance(o, tuple | StoreClosed), o
    store = await datastore.open()
    for k, (rev, value) in acked.items():
        got = store.get(k)
        assert got is not None and (got[0], decoded(got[1])) == (rev, decoded(value))


async def test_reopen_keeps_everything_acknowledged(datastore: Datastore) -> None:
    store = await datastore.open()
    start = store.current_rev  # a fresh datastore's revisions need not start at 0 (etcd's go on counting)
    log: list[tuple[str, str, int, object]] = []
    for i in range(8):
        k = f"core/pods/ns{i % 2}/p{i}"
        rev, value = await store.create(k, obj(k, i=i))
        log.append(("ADDED", k, rev, decoded(value)))
    await churn(store, log, 10, "x")
    w = store.watch("", start)
    seen = await take(w, 5)
    last = store.current_rev
    reads = entries(store.list("")[0])
    counts = (store.count(""), store.count("core/pods/"), store.count(P))
    store = await datastore.reopen(store)
    assert entries(store.list("")[0]) == reads
    assert (store.count(""), store.count("core/pods/"), store.count(P)) == counts
    for k, rev, value in reads:
        got = store.get(k)
        assert got is not None and (got[0], decoded(got[1])) == (rev, value)
    assert store.current_rev >= last
    await assert_replays_its_window(store, log)
    # the watcher from before the restart resumes from the last rev it saw: exactly the rest, or 410
    resumed: list[StoreEvent] | None
    try:
        again = store.watch("", w.last_rev)
    except Compacted:
        resumed = None
    else:
        resumed = await queued(again)
        assert summary(seen + resumed) == log
    # new writes get revisions above every earlier one, and reach the resumed watch
    k = key("new")
    rev, value = await store.create(k, obj(k))
    assert rev > max(e[2] for e in log)
    if resumed is not None:
        assert summary(await queued(again)) == [("ADDED", k, rev, decoded(value))]
        again.close()


async def test_a_watch_from_before_a_restart_resumes(datastore: Datastore) -> None:
    """A store reopened on its datastore seeds its watch window from the retained history (Store: its file;
    MirrorStore: `backend.history`), as kube-apiserver's watch cache starts from etcd's history: a watcher from
    before the restart resumes with exactly the rest (with each event's previous state), and a list at a revision
    from before the restart reads that revision, instead of 410."""
    store = await datastore.open()
    log: list[tuple[str, str, int, object]] = []
    await churn(store, log, 10, "a")
    mid = store.current_rev
    listed_mid = entries(store.list(P)[0])
    await churn(store, log, 10, "b")
    w = store.watch(P, mid)
    before = [(e.type, e.key, e.rev, decoded(e.value), decoded(e.prev)) for e in await queued(w)]
    w.close()
    store = await datastore.reopen(store)
    assert store.oldest_rev <= mid + 1
    again = store.watch(P, mid)
    resumed = await queued(again)
    again.close()
    assert summary(resumed) == after(log, mid)
    # each event's previous state as before the restart (the first change of a key in the window included)
    assert [(e.type, e.key, e.rev, decoded(e.value), decoded(e.prev)) for e in resumed] == before
    assert entries(store.list(P, at_rev=mid)[0]) == listed_mid
