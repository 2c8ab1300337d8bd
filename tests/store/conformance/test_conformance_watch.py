"""The store contract, part 2: watches, on every factory.

What every store promises here:
- `watch(prefix, after_rev)` hands out every committed change of a key under `prefix` with rev > after_rev,
  in revision order, each exactly once: first those already committed (replay), then live ones.
- An event carries the key's new state with resourceVersion = its rev (for DELETED: the final state the delete
  wrote); a MODIFIED event carries the value it replaced as `prev`, an ADDED one None. Failed writes make none.
- An acknowledged write is already on every matching watch when the write returns (no waiting for it).
- `last_rev` is the rev of the last event handed out: a new watch from it resumes exactly where the old one
  stopped (no bookmark needed), also after the old one was dropped for falling behind (`WatchDropped`, which
  carries that rev).
- A watch from below what the store can still replay raises `Compacted(oldest_rev)`; from `oldest_rev - 1`
  it replays everything from `oldest_rev` on.
- `close()` (or leaving `async with`) ends a watch with StopAsyncIteration and unregisters it.
"""

from __future__ import annotations

import asyncio

import pytest
from conformance_kit import ConformingStore, Datastore, decoded, obj, queued, summary, take, with_rv

from lite.server.store import Compacted, KeyExists, KeyNotFound, RevMismatch, StoreEvent, WatchDropped

P = "core/configmaps/ns1/"


def key(n: object, prefix: str = P) -> str:
    return f"{prefix}{n}"


class History:
    """Acknowledged writes in order, as events: what a watch must hand out."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str, int, object]] = []

    def add(self, type_: str, k: str, result: tuple[int, bytes]) -> tuple[int, bytes]:
        self.events.append((type_, k, result[0], decoded(result[1])))
        return result

    def after(self, rev: int, prefix: str = "") -> list[tuple[str, str, int, object]]:
        return [e for e in self.events if e[2] > rev and e[1].startswith(prefix)]


async def test_replay_then_live_in_revision_order(store: ConformingStore) -> None:
    h = History()
    r1, v1 = h.add("ADDED", key("a"), await store.create(key("a"), obj(key("a"), n=1)))
    r2, v2 = h.add("MODIFIED", key("a"), await store.update(key("a"), obj(key("a"), n=2), r1))
    h.add("ADDED", key("b"), await store.create(key("b"), obj(key("b"))))
    w = store.watch(P, r1)  # replays the update of a and the create of b
    r4, _ = h.add("DELETED", key("a"), await store.delete(key("a"), r2))
    h.add("ADDED", key("c"), await store.create(key("c"), obj(key("c"))))
    evs = await take(w, 4)
    assert summary(evs) == h.after(r1)
    assert evs[0].type == "MODIFIED" and decoded(evs[0].prev) == decoded(v1) == with_rv(obj(key("a"), n=1), r1)
    assert evs[1].type == "ADDED" and evs[1].prev is None
    assert decoded(evs[2].value) == with_rv(obj(key("a"), n=2), r4)  # DELETED: the final state, its own rev
    assert all(decoded(e.value)["metadata"]["resourceVersion"] == str(e.rev) for e in evs)
    assert w.last_rev == evs[-1].rev
    assert decoded(v2)["data"] == {"n": "2"}
    w.close()


async def test_deleted_event_carries_the_final_state_given(datastore: Datastore) -> None:
    store = await datastore.open()
    rev, _ = await store.create(key("a"), obj(key("a"), n=1))
    w = store.watch(P, rev)
    final = obj(key("a"), n=1, deletionTimestamp="2026-01-01T00:00:00Z")
    drev, value = await store.delete(key("a"), rev, final=final)
    assert decoded(value) == with_rv(final, drev)
    evs = await queued(w)
    if datastore.factory.delete_writes_final_first:  # the final state is written first, at a revision of its own
        assert [e.type for e in evs] == ["MODIFIED", "DELETED"], summary(evs)
        first = evs.pop(0)
        assert rev < first.rev < drev and decoded(first.value) == with_rv(final, first.rev)
    assert summary(evs) == [("DELETED", key("a"), drev, with_rv(final, drev))]
    w.close()


async def test_acknowledged_write_is_already_on_watches(store: ConformingStore) -> None:
    start = store.current_rev
    wide, narrow, other = store.watch("", start), store.watch(P, start), store.watch("core/pods/", start)
    h = History()
    h.add("ADDED", key("a"), await store.create(key("a"), obj(key("a"))))
    # no waiting: the events must be there when the write returns
    assert summary(await queued(wide)) == summary(await queued(narrow)) == h.after(start)
    r, _ = h.add("MODIFIED", key("a"), await store.update(key("a"), obj(key("a"), n=1), 0))
    assert summary(await queued(narrow)) == h.after(r - 1)
    h.add("DELETED", key("a"), await store.delete(key("a"), r))
    assert summary(await queued(narrow)) == h.after(r)
    assert summary(await queued(wide)) == h.after(h.events[0][2])
    assert await queued(other) == []
    for w in (wide, narrow, other):
        w.close()


async def test_prefix_isolation(store: ConformingStore) -> None:
    start = store.current_rev
    watches = {p: store.watch(p, start) for p in ("", "core/", P, "core/configmaps/ns10/", "core/pods/")}
    h = History()
    for k in (key("a"), "core/configmaps/ns10/a", "core/configmaps/ns1x/a", "core/pods/ns1/p",
              "example.com/widgets/ns1/y"):
        h.add("ADDED", k, await store.create(k, obj(k)))
    for p, w in watches.items():
        assert summary(await queued(w)) == h.after(start, p), p
        w.close()


async def test_watch_from_current_gets_only_new_events(store: ConformingStore) -> None:
    for i in range(3):
        await store.create(key(i), obj(key(i)))
    w = store.watch(P, store.current_rev)
    assert await queued(w) == []
    rev, _ = await store.update(key(1), obj(key(1), n=1), 0)
    assert [(e.type, e.key, e.rev) for e in await take(w, 1)] == [("MODIFIED", key(1), rev)]
    w.close()


async def test_failed_writes_make_no_events(store: ConformingStore) -> None:
    rev, _ = await store.create(key("a"), obj(key("a")))
    w = store.watch("", rev)
    with pytest.raises(KeyExists):
        await store.create(key("a"), obj(key("a")))
    with pytest.raises(RevMismatch):
        await store.update(key("a"), obj(key("a")), rev + 1000)
    with pytest.raises(KeyNotFound):
        await store.delete(key("b"), 0)
    assert await queued(w) == []
    rev2, _ = await store.update(key("a"), obj(key("a"), n=1), rev)
    assert [e.rev for e in await take(w, 1)] == [rev2]
    w.close()


async def test_close_ends_and_unregisters_a_watch(store: ConformingStore) -> None:
    base = store.watcher_count()
    w = store.watch(P, store.current_rev)
    async with store.watch("", store.current_rev) as w2:
        assert store.watcher_count() == base + 2
        waiter = asyncio.create_task(anext(w))
        await asyncio.sleep(0)
        w.close()
        with pytest.raises(StopAsyncIteration):
            await asyncio.wait_for(waiter, 10)
        assert store.watcher_count() == base + 1
    assert store.watcher_count() == base
    with pytest.raises(StopAsyncIteration):
        await anext(w2)


async def test_resume_from_last_rev_without_bookmarks(store: ConformingStore) -> None:
    h = History()
    start = store.current_rev
    w = store.watch(P, start)
    for i in range(4):
        h.add("ADDED", key(i), await store.create(key(i), obj(key(i))))
        h.add("ADDED", key(i, "core/pods/ns1/"), await store.create(key(i, "core/pods/ns1/"), obj(key(i))))
    seen = await take(w, 2)
    w.close()
    # writes inside and outside the prefix while nobody watches; the resumed watch starts at the last rev seen,
    # which is older than the newest write of other prefixes
    h.add("MODIFIED", key(0), await store.update(key(0), obj(key(0), n=1), 0))
    h.add("DELETED", key(3), await store.delete(key(3), 0))
    again = store.watch(P, w.last_rev)
    rest = await queued(again)
    assert summary(seen + rest) == h.after(start, P)
    assert rest[-2].type == "MODIFIED" and decoded(rest[-2].prev) == h.events[0][3]  # what the update replaced
    again.close()


async def test_dropped_watcher_resumes_from_its_last_rev(datastore: Datastore) -> None:
    store = await datastore.open(watch_queue=4)
    base = store.watcher_count()
    start = store.current_rev
    h = History()
    slow = store.watch(P, start)
    read: list[StoreEvent] = []
    for i in range(3):
        h.add("ADDED", key(i), await store.create(key(i), obj(key(i))))
    read += await take(slow, 2)  # it reads a little, then stops reading while the writes go on
    for i in range(3, 20):
        h.add("ADDED", key(i), await store.create(key(i), obj(key(i))))
    assert store.watcher_count() == base  # dropped (and unregistered) instead of holding the writers back
    with pytest.raises(WatchDropped) as err:
        while True:
            read.append(await asyncio.wait_for(anext(slow), 10))
    # what it handed out is the start of the history, and the error says where it stopped
    assert summary(read) == h.after(start, P)[: len(read)] and len(read) < 20
    assert err.value.last_rev == slow.last_rev == read[-1].rev
    again = store.watch(P, err.value.last_rev)
    assert summary(read + await queued(again)) == h.after(start, P)
    again.close()


async def test_dropped_watcher_that_read_nothing_resumes_from_its_start(datastore: Datastore) -> None:
    store = await datastore.open(watch_queue=4)
    await store.create(key("x"), obj(key("x")))
    start = store.current_rev
    h = History()
    stalled = store.watch(P, start)  # never reads
    for i in range(10):
        h.add("ADDED", key(i), await store.create(key(i), obj(key(i))))
    with pytest.raises(WatchDropped) as err:
        await asyncio.wait_for(anext(stalled), 10)
    assert err.value.last_rev == start
    again = store.watch(P, start)
    assert summary(await queued(again)) == h.after(start)
    again.close()


async def test_compacted_below_the_oldest_revision(datastore: Datastore) -> None:
    store = await datastore.open(window=5)
    h = History()
    rev, _ = h.add("ADDED", key("a"), await store.create(key("a"), obj(key("a"))))
    for i in range(20):
        rev, _ = h.add("MODIFIED", key("a"), await store.update(key("a"), obj(key("a"), n=i), rev))
    oldest = store.oldest_rev
    assert h.events[0][2] < oldest <= store.current_rev  # it keeps some history, not all of it
    with pytest.raises(Compacted) as err:
        store.watch(P, oldest - 2)
    assert err.value.oldest_rev == oldest
    with pytest.raises(Compacted):
        store.watch("", 0)
    w = store.watch(P, oldest - 1)  # the oldest point it can replay from: the whole window
    # (with revision gaps, oldest_rev may fall in a gap: the first event kept is then above it)
    assert summary(await queued(w)) == h.after(oldest - 1) and h.after(oldest - 1)[0][2] >= oldest
    w.close()
