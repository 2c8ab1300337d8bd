"""The watch window on its own: replay starts on contiguous windows (WatchHub, Store's) and windows with
revision gaps (GapWatchHub, a shared datastore's), the floor left by trimming, and `reset` for a reloaded
mirror."""

from __future__ import annotations

import pytest

from lite.server.store import Compacted, WatchDropped
from lite.server.store.watch import GapWatchHub, StoreEvent, WatchHub


def ev(rev: int, key: str = "core/pods/default/a") -> StoreEvent:
    return StoreEvent("MODIFIED", key, rev, b'{"x":1}', None)


def replayed(hub: WatchHub, after: int, current: int, prefix: str = "core/pods/") -> list[int]:
    w = hub.watch(prefix, after, current)
    revs = [e.rev for e in w._replay]
    w.close()
    return revs


@pytest.mark.parametrize("revs", [list(range(1, 101)), list(range(3, 301, 3)), [1, 2, 3, 10, 11, 50, 51, 52, 99]])
@pytest.mark.parametrize("hub_type", [WatchHub, GapWatchHub])
def test_replay_starts_after_any_revision(revs: list[int], hub_type: type[WatchHub]) -> None:
    hub = hub_type(1000, 100)
    hub.remember(ev(r) for r in revs)
    current = revs[-1]
    for after in range(revs[0] - 1, current + 2):  # both halves: from the oldest end and from the newest
        assert replayed(hub, after, current) == [r for r in revs if r > after], after


def test_replay_filters_by_prefix_from_either_end() -> None:
    hub = WatchHub(1000, 100)
    hub.remember(ev(r, "core/pods/default/a" if r % 2 else "core/services/default/s") for r in range(1, 51))
    assert replayed(hub, 45, 50) == [47, 49]  # near the newest end
    assert replayed(hub, 4, 50) == list(range(5, 51, 2))  # from the oldest end


def test_trimming_a_gapped_window_sets_the_floor() -> None:
    hub = GapWatchHub(3, 100)
    hub.remember(ev(r) for r in (5, 10, 15, 20, 25))
    assert [e.rev for e in hub.events] == [15, 20, 25] and hub.oldest_rev(25) == 11
    with pytest.raises(Compacted) as err:
        hub.watch("core/pods/", 9, 25)
    assert err.value.oldest_rev == 11
    assert replayed(hub, 10, 25) == [15, 20, 25]  # 10 was trimmed, 11-14 never existed: nothing is missing
    assert replayed(hub, 12, 25) == [15, 20, 25]


def test_contiguous_window_keeps_stores_oldest_rev() -> None:
    hub = WatchHub(10, 100)
    assert hub.oldest_rev(0) == 1
    hub.remember(ev(r) for r in range(16, 26))  # as Store seeds it at open: no floor yet
    assert hub.oldest_rev(25) == 16
    hub.remember([ev(26)])
    assert hub.oldest_rev(26) == 17


async def test_reset_drops_watchers_and_sets_the_floor() -> None:
    hub = GapWatchHub(10, 100)
    hub.remember(ev(r) for r in range(1, 6))
    w = hub.watch("core/pods/", 2, 5)
    assert [(await anext(w)).rev for _ in range(3)] == [3, 4, 5]
    hub.reset(40)
    with pytest.raises(WatchDropped) as err:
        await anext(w)
    assert err.value.last_rev == 5 and hub.watcher_count() == 0
    assert hub.oldest_rev(40) == 41 and not hub.events
    with pytest.raises(Compacted):
        hub.watch("core/pods/", 5, 40)  # the dropped watcher's re-watch: 410, relist
    assert replayed(hub, 40, 40) == []
