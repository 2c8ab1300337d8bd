"""Lists as of a past revision: the index's current state with the window's later changes undone.

A paginated list reads every page at its first page's revision, as upstream reads etcd at the revision in the
continue token. Neither store keeps old values in its index, but the watch window does: each event holds the
value it wrote and the one it replaced (`prev`). So the state of key K at revision R is
- K's index entry, if no event newer than R touched K;
- otherwise set by K's *oldest* event newer than R: absent at R if that event created K (ADDED); else present
  with that event's `prev` (a MODIFIED or DELETED replaced exactly the value K had at R).
A reconstructed item's mod revision is read from its value's `metadata.resourceVersion` (every store writes
the key's mod revision there), and only for items that land on the page.

`list_at` is a function of (index, window) so that every store built on `KeyIndex` and `WatchHub` (`Store`,
`MirrorStore`) reads at a revision the same way. Its caller promises that the window holds every event newer
than `floor`; nothing here assumes revisions are contiguous (a shared datastore's have gaps).

Cost: a bisection for R in the window, one prefix test for each of the window's events newer than R (all
resources': ~75 ns each, so ~0.7 ms for a page read behind a full 10,000-event window, bench/store_list_at.py),
then page size + the number of keys in range changed since R. Nothing proportional to the whole resource: a
list's pages follow each other closely, so what is newer than R is usually the writes of those milliseconds.
Synchronous and read-only: call it on the loop, between two applied batches.

Raises `Compacted` when R < floor (events after R may have left the window), or when the event that holds a
key's value at R has no `prev` (a window loaded at open whose replaced row compaction had removed).
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from itertools import islice
from operator import attrgetter

import orjson

from lite.server.store.errors import Compacted
from lite.server.store.index import KeyIndex
from lite.server.store.packing import unpack
from lite.server.store.watch import StoreEvent

Item = tuple[str, int, bytes]  # (key, mod_rev, value as held), as `KeyIndex.list` gives them
_rev = attrgetter("rev")


def list_at(index: KeyIndex, events: Sequence[StoreEvent], floor: int, at_rev: int, prefix: str,
            start_after: str = "", limit: int = 0) -> tuple[list[Item], int]:
    """The items under `prefix` with key > start_after as of `at_rev`, sorted by key, at most `limit` (0 = all);
    and how many more follow them at that revision. `index` is the current state, `events` the window (revision
    order), holding every event with rev > `floor`."""
    if at_rev < floor:
        raise Compacted(floor + 1)
    newer = len(events) - bisect_right(events, at_rev, key=_rev)
    oldest: dict[str, StoreEvent] = {}  # key in range -> its oldest event newer than at_rev
    # Newest first, so the last one written for a key is its oldest. The prefix test runs as a comprehension
    # over the window's tail (0.96 -> 0.74 ms for 10,000 events against a loop doing both tests per event).
    for ev in [ev for ev in islice(reversed(events), newer) if ev.key.startswith(prefix)]:
        if ev.key > start_after:
            oldest[ev.key] = ev
    if not oldest:
        return index.list(prefix, start_after, limit)
    then: list[tuple[str, StoreEvent]] = []  # keys live at at_rev and changed since, with the event holding it
    for key, ev in oldest.items():
        if ev.type == "ADDED":
            continue  # created after at_rev
        if ev.packed_prev is None:
            raise Compacted(ev.rev)
        then.append((key, ev))
    then.sort(key=lambda t: t[0])
    current, in_range = index.scan(prefix, start_after)
    total = in_range - sum(1 for key in oldest if index.get(key) is not None) + len(then)
    want = limit if limit > 0 else total
    page: list[Item] = []
    j = 0
    for key, rev, value in current:
        if len(page) >= want:
            break
        if key in oldest:
            continue  # its current entry is not its state at at_rev
        while j < len(then) and then[j][0] < key and len(page) < want:
            page.append(_past(*then[j]))
            j += 1
        if len(page) < want:
            page.append((key, rev, value))
    while j < len(then) and len(page) < want:
        page.append(_past(*then[j]))
        j += 1
    return page, total - len(page)


def _past(key: str, ev: StoreEvent) -> Item:
    """The item `key` was before `ev` replaced it."""
    value = ev.packed_prev
    assert value is not None  # checked by list_at
    meta = orjson.loads(unpack(value)).get("metadata")
    return key, int(meta["resourceVersion"]), value
