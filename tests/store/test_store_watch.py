"""watch: replay from a revision, live delivery, prefix isolation, Compacted, slow watcher dropped."""

from __future__ import annotations

import asyncio
import base64
import random

import orjson
import pytest
from store_helpers import pod

from lite.server.store import Compacted, Store, StoreEvent, Watch, WatchDropped


async def take(w: Watch, n: int) -> list[StoreEvent]:
    return [await asyncio.wait_for(anext(w), 5) for _ in range(n)]


async def test_replay_then_live(store: Store) -> None:
    r1, _ = await store.create("core/pods/default/a", pod("a"))
    r2, _ = await store.update("core/pods/default/a", pod("a", n=1), r1)
    w = store.watch("core/pods/default/", r1)  # replays r2 only
    r3, v3 = await store.create("core/pods/default/b", pod("b"))
    r4, v4 = await store.delete("core/pods/default/a", r2, final=pod("a", gone=True))
    evs = await take(w, 3)
    assert [(e.type, e.key, e.rev) for e in evs] == [
        ("MODIFIED", "core/pods/default/a", r2),
        ("ADDED", "core/pods/default/b", r3),
        ("DELETED", "core/pods/default/a", r4),
    ]
    assert evs[1].value == v3 and evs[1].prev is None
    assert evs[2].value == v4 and orjson.loads(v4)["metadata"]["resourceVersion"] == str(r4)
    assert evs[2].prev is not None and orjson.loads(evs[2].prev)["n"] == 1
    assert orjson.loads(evs[0].prev or b"")["metadata"]["resourceVersion"] == str(r1)
    assert w.last_rev == r4
    w.close()
    with pytest.raises(StopAsyncIteration):
        await anext(w)


async def test_event_delivered_before_write_returns(store: Store) -> None:
    w = store.watch("core/pods/", store.current_rev)
    rev, _ = await store.create("core/pods/default/a", pod("a"))
    assert w._queue and w._queue[0].rev == rev  # pushed at commit, not on a later poll
    w.close()


async def test_prefix_isolation(store: Store) -> None:
    w1 = store.watch("core/pods/default/", 0)
    w2 = store.watch("core/pods/default2/", 0)
    wall = store.watch("", 0)
    await store.create("core/pods/default2/x", pod("x", "default2"))
    await store.create("core/pods/default/y", pod("y"))
    await store.create("core/pods/default22/z", pod("z", "default22"))
    await store.create("core/services/default/s", pod("s"))
    assert [e.key for e in await take(w1, 1)] == ["core/pods/default/y"]
    assert [e.key for e in await take(w2, 1)] == ["core/pods/default2/x"]
    assert len(await take(wall, 4)) == 4
    # nothing else is queued for the narrow watchers
    assert not w1._queue and not w1._replay and not w2._queue and not w2._replay
    for w in (w1, w2, wall):
        w.close()


async def test_compacted_when_too_old(db_path: str) -> None:
    s = await Store.open(db_path, window=10)
    try:
        for i in range(25):
            await s.create(f"core/pods/default/p{i}", pod(f"p{i}"))
        assert s.oldest_rev == 16
        with pytest.raises(Compacted) as err:
            s.watch("core/pods/", 14)
        assert err.value.oldest_rev == 16
        w = s.watch("core/pods/", 15)  # the whole window is still there
        assert [e.rev for e in await take(w, 10)] == list(range(16, 26))
        w.close()
    finally:
        await s.close()


async def test_watch_from_current_on_empty_store(store: Store) -> None:
    assert store.oldest_rev == 1 and store.current_rev == 0
    w = store.watch("core/", 0)
    await store.create("core/pods/default/a", pod("a"))
    assert [e.rev for e in await take(w, 1)] == [1]
    w.close()


async def test_slow_watcher_dropped(db_path: str) -> None:
    s = await Store.open(db_path, watch_queue=5)
    try:
        slow = s.watch("core/pods/", 0)
        fast = s.watch("core/pods/", 0)
        got: list[int] = []

        async def consume() -> None:
            async for ev in fast:
                got.append(ev.rev)
                if ev.rev == 20:
                    return

        consumer = asyncio.create_task(consume())
        for i in range(20):
            await s.create(f"core/pods/default/p{i}", pod(f"p{i}"))
        await asyncio.wait_for(consumer, 5)
        assert got == list(range(1, 21))
        # the slow one's queue was freed when it overflowed: it gets WatchDropped with its position (it
        # had read nothing), so a consumer that never reads again pins no events
        delivered = []
        with pytest.raises(WatchDropped) as err:
            async for ev in slow:
                delivered.append(ev.rev)
        assert delivered == [] and err.value.last_rev == 0
        assert s._hub.watcher_count() == 1
        # the consumer resumes from its last rev without loss
        again = s.watch("core/pods/", err.value.last_rev)
        assert [e.rev for e in await take(again, 20)] == list(range(1, 21))
        again.close()
        fast.close()
        assert s._hub.watcher_count() == 0
    finally:
        await s.close()


async def test_close_ends_watches(db_path: str) -> None:
    s = await Store.open(db_path)
    w = s.watch("core/pods/", 0)
    waiter = asyncio.create_task(anext(w))
    await asyncio.sleep(0)
    await s.close()
    with pytest.raises(StopAsyncIteration):
        await asyncio.wait_for(waiter, 5)


async def test_many_watchers_fan_out(store: Store) -> None:
    watchers = [store.watch(f"core/pods/ns{i % 10}/", 0) for i in range(100)]
    others = [store.watch("core/configmaps/", 0) for _ in range(20)]
    for i in range(10):
        await store.create(f"core/pods/ns{i}/p", pod("p", f"ns{i}"))
    for i, w in enumerate(watchers):
        ev = await take(w, 1)
        assert ev[0].key == f"core/pods/ns{i % 10}/p"
        assert not w._queue
    assert all(not w._queue for w in others)
    for w in [*watchers, *others]:
        w.close()


def big(name: str, kib: int, n: int = 0) -> dict[str, object]:
    """`kib` KiB of data that deflate cannot shrink much (the window counts values as it holds them, packed)."""
    blob = base64.b64encode(random.Random(n).randbytes(kib * 768)).decode()
    return {**pod(name), "data": {"blob": blob, "n": n}}


async def test_window_is_capped_in_bytes(db_path: str) -> None:
    """Large objects: the window keeps what fits in `window_bytes`, not `window` events (issue 7 item 3)."""
    s = await Store.open(db_path, window=10000, window_bytes=1 << 20)
    try:
        rev = 0
        for i in range(40):  # 40 updates of a 100 KiB object: ~4 MiB of events, 1 MiB kept
            rev, _ = await (s.create("core/configmaps/default/big", big("big", 100)) if i == 0
                            else s.update("core/configmaps/default/big", big("big", 100, i), rev))
        assert s.current_rev - s.oldest_rev + 1 in range(8, 15)  # about 1 MiB of ~78 KiB packed events
        with pytest.raises(Compacted):
            s.watch("core/configmaps/", 1)
        w = s.watch("core/configmaps/", s.oldest_rev - 1)  # the oldest replayable point still works
        assert [e.rev for e in await take(w, s.current_rev - s.oldest_rev + 1)] == list(
            range(s.oldest_rev, s.current_rev + 1))
        w.close()
        # one event larger than the whole cap still stays (the newest event is always kept)
        rev, _ = await s.update("core/configmaps/default/big", big("big", 2048), rev)
        assert s.oldest_rev == s.current_rev == rev
    finally:
        await s.close()


async def test_queue_capped_in_bytes_and_freed_when_dropped(db_path: str) -> None:
    s = await Store.open(db_path, watch_queue=1000, watch_queue_bytes=512 << 10)
    try:
        start = s.current_rev
        stalled = s.watch("core/configmaps/", start)  # never reads
        rev, _ = await s.create("core/configmaps/default/big", big("big", 100))
        for i in range(10):
            rev, _ = await s.update("core/configmaps/default/big", big("big", 100, i), rev)
        # ~6 events fit in 512 KiB: it was dropped long before 1,000 events, and holds none of them now
        assert s.watcher_count() == 0
        assert not stalled._queue and stalled._queued_bytes == 0
        with pytest.raises(WatchDropped) as err:
            await anext(stalled)
        assert err.value.last_rev == start
    finally:
        await s.close()
