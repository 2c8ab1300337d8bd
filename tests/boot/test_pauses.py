"""lite.server.pauses: young GC passes walk a bounded number of objects whatever the heap holds, cycles among
the frozen survivors are still collected by the full pass, the GIL switch interval is short, and stop undoes
start."""

from __future__ import annotations

import gc
import sys
import weakref
from collections.abc import Iterator

import pytest

from lite.server.pauses import SWITCH_INTERVAL, LoopPauses


class Node:
    def __init__(self) -> None:
        self.other: Node | None = None


@pytest.fixture
def schedule() -> Iterator[LoopPauses]:
    before = gc.get_threshold()
    s = LoopPauses(young=1000, full_interval=3600)
    s.start()
    try:
        yield s
    finally:
        s.stop()
        assert gc.get_threshold() == before


def unfrozen() -> int:
    return sum(len(gc.get_objects(g)) for g in range(3))


def test_survivors_leave_the_walked_generations_so_a_pass_stays_short(schedule: LoopPauses) -> None:
    frozen = gc.get_freeze_count()
    heap = [[i] for i in range(30_000)]  # long-lived containers, as informer caches are
    # Every automatic pass froze what survived it: the generations a pass walks hold at most ~`young` objects,
    # not the 30,000 (with thresholds of (50,000, 20, 100) they would all still be young).
    assert unfrozen() <= 2 * schedule.young
    assert gc.get_freeze_count() - frozen >= len(heap) - 2 * schedule.young


def test_cycles_among_frozen_survivors_are_collected_by_the_full_pass(schedule: LoopPauses) -> None:
    a, b = Node(), Node()
    a.other, b.other = b, a
    gone = weakref.ref(a)
    keep = [[i] for i in range(5 * schedule.young)]  # enough allocations for passes that freeze the cycle
    assert len(keep) and gc.is_tracked(a) and unfrozen() < 2 * schedule.young
    del a, b
    assert gone() is not None  # frozen: no automatic pass walks it
    schedule.full_pass()
    assert gone() is None
    assert schedule.full_passes == 1


def test_stop_undoes_start() -> None:
    before, switch = gc.get_threshold(), sys.getswitchinterval()
    s = LoopPauses(young=1000)
    s.start()
    assert gc.get_threshold()[0] == 1000 and gc.get_freeze_count() > 0
    assert sys.getswitchinterval() == SWITCH_INTERVAL < switch
    s.stop()
    assert gc.get_threshold() == before and sys.getswitchinterval() == switch
    assert gc.get_freeze_count() == 0
    assert all(cb.__self__ is not s for cb in gc.callbacks if hasattr(cb, "__self__"))
