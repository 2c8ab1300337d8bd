"""The in-memory index of current objects: key -> (mod_rev, value as held), plus the keys in sorted order.

Only bytes are held (no parsed dicts), and the store hands it packed values (`packing`), so 10,000 5 KB
pods cost ~5 MB of values. The index never packs or unpacks: it holds what it is given. The sorted key
list makes a prefix list a pair of bisections and a slice, and keeps `count` O(log n). Inserting a new key
is an O(n) memmove, which is microseconds at the sizes lite targets.

Only the store's writer task (on the event loop) mutates it, after COMMIT; readers are synchronous.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right, insort
from collections.abc import Iterator


def prefix_end(prefix: str) -> str:
    """The smallest string greater than every string that starts with `prefix` ("" -> no bound)."""
    if not prefix:
        return ""
    return prefix[:-1] + chr(ord(prefix[-1]) + 1)


class KeyIndex:
    """Committed current state. Values are shared with the event window, never copied."""

    def __init__(self) -> None:
        self._data: dict[str, tuple[int, bytes]] = {}
        self._keys: list[str] = []
        # watched prefix -> its token (`stamp`), replaced whenever a key under the prefix is put or removed
        self._stamps: dict[str, object] = {}

    def __len__(self) -> int:
        return len(self._data)

    def get(self, key: str) -> tuple[int, bytes] | None:
        return self._data.get(key)

    def load_sorted(self, items: list[tuple[str, int, bytes]]) -> None:
        """Bulk load from rows already sorted by key (open)."""
        self._data = {k: (rev, value) for k, rev, value in items}
        self._keys = [k for k, _, _ in items]
        self._stamps.clear()

    def put(self, key: str, rev: int, value: bytes) -> None:
        if key not in self._data:
            insort(self._keys, key)
        self._data[key] = (rev, value)
        if self._stamps:
            self._touch(key)

    def remove(self, key: str) -> None:
        if self._data.pop(key, None) is not None:
            i = bisect_left(self._keys, key)
            del self._keys[i]
            if self._stamps:
                self._touch(key)

    def stamp(self, prefix: str) -> object:
        """A token that stays the same object (compare with `is`) while no key under `prefix` is put or removed
        in this index: what a reader derived from the items under `prefix` is still right while its token is.
        The prefix is watched from its first call on (a few prefixes: each costs every put a `startswith`); a
        reload (`load_sorted`) or another index never hands out a token given before."""
        got = self._stamps.get(prefix)
        if got is None:
            got = self._stamps[prefix] = object()
        return got

    def _touch(self, key: str) -> None:
        stamps = self._stamps
        for prefix in stamps:
            if key.startswith(prefix):
                stamps[prefix] = object()

    def _span(self, prefix: str, start_after: str = "") -> tuple[int, int]:
        end = prefix_end(prefix)
        keys = self._keys
        lo = bisect_right(keys, start_after) if start_after >= prefix else bisect_left(keys, prefix)
        if lo == len(keys) or not keys[lo].startswith(prefix):
            return lo, lo  # nothing under the prefix (often: LimitRanges, quotas): no second search
        hi = bisect_left(keys, end, lo) if end else len(keys)
        return lo, max(lo, hi)

    def list(self, prefix: str, start_after: str, limit: int) -> tuple[list[tuple[str, int, bytes]], int]:
        """Items under `prefix` with key > start_after, at most `limit` (0 = all); and how many remain."""
        lo, hi = self._span(prefix, start_after)
        stop = hi if limit <= 0 else min(hi, lo + limit)
        data = self._data
        items = [(k, *data[k]) for k in self._keys[lo:stop]]
        return items, hi - stop

    def scan(self, prefix: str, start_after: str) -> tuple[Iterator[tuple[str, int, bytes]], int]:
        """The items `list` would give with no limit, lazily in key order, and how many there are. Consume the
        iterator before the index changes (the store's readers are synchronous, so they always do)."""
        lo, hi = self._span(prefix, start_after)
        keys, data = self._keys, self._data
        return ((keys[i], *data[keys[i]]) for i in range(lo, hi)), hi - lo

    def count(self, prefix: str) -> int:
        lo, hi = self._span(prefix)
        return hi - lo
