"""`lite.server.compaction.CompactTurns`: of several servers on one datastore, one compacts per interval.

Two (and three) servers' turn keepers over one real store take turns in a scripted order of ticks, as their
interval timers would fire: the first looks only observe; afterwards exactly one takes each round, the others
seeing the key change; when the one taking turns stops, another takes over after one quiet interval; and a
server whose view of the key is stale never wins a swap (the store checks the revision)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from lite.server.compaction import KEY, CompactTurns
from lite.server.store import Store


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    s = await Store.open(str(tmp_path / "state.db"))
    try:
        yield s
    finally:
        await s.close()


async def test_one_server_takes_each_turn_and_another_takes_over_when_it_stops(store: Store) -> None:
    a, b, c = (CompactTurns(store, name) for name in "abc")
    assert [await t.take() for t in (a, b, c)] == [False, False, False]  # first looks: nothing yet
    assert store.get(KEY) is None
    rounds = [[await t.take() for t in (a, b, c)] for _ in range(4)]
    assert rounds[0] == [True, False, False]  # a looked first and saw no change: a takes it; b, c see the change
    assert rounds[1:] == [[True, False, False]] * 3  # a keeps taking turns while it lives
    got = store.get(KEY)
    assert got is not None and b"\"holder\":\"a\"" in got[1].replace(b" ", b"")
    # a stops: b's last look came after a's last turn, so b's next tick sees a quiet interval and takes over
    assert [await t.take() for t in (b, c)] == [True, False]
    assert [await t.take() for t in (b, c)] == [True, False]


class LaggingView:
    """A server whose mirror has not applied the newest write yet: reads the key as it was, writes to the store."""

    def __init__(self, store: Store, frozen: tuple[int, bytes] | None) -> None:
        self.store, self.frozen = store, frozen

    def get(self, key: str) -> tuple[int, bytes] | None:
        return self.frozen

    async def create(self, key: str, obj: dict[str, Any]) -> tuple[int, bytes]:
        return await self.store.create(key, obj)

    async def update(self, key: str, obj: dict[str, Any], expected_rev: int) -> tuple[int, bytes]:
        return await self.store.update(key, obj, expected_rev)


async def test_a_stale_view_never_wins_the_swap(store: Store) -> None:
    a = CompactTurns(store, "a")
    await a.take()
    assert await a.take() is True  # created the key
    before = store.get(KEY)
    lagging = LaggingView(store, before)
    b = CompactTurns(lagging, "b")  # type: ignore[arg-type]  # the part of StoreLike take() uses
    assert await b.take() is False  # first look
    assert await a.take() is True  # a swaps the key again; b's view still shows the revision before
    assert await b.take() is False  # b saw "no change" and tries the swap at the old revision: refused
    assert store.get(KEY) is not None and store.get(KEY) != before
    lagging.frozen = None  # a view from before the key existed: its create is refused too
    b.seen = 0
    assert await b.take() is False
