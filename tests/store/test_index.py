"""`KeyIndex.list` and `count` against a brute-force reading of the same keys (pure; seeded random cases)."""

from __future__ import annotations

import random

from lite.server.store.index import KeyIndex

WORDS = ["core/pods/a/", "core/pods/b/", "core/limitranges/a/", "core/resourcequotas/", "apps/deployments/a/",
         "core/pods/a", "core/pod", "z", "", "core/pods/\u00e9/"]


def test_prefix_lists_match_a_brute_force_reading() -> None:
    rng = random.Random(7)
    keys = sorted({rng.choice(WORDS[:7]) + str(rng.randrange(60)) for _ in range(300)})
    idx = KeyIndex()
    idx.load_sorted([(k, i + 1, k.encode()) for i, k in enumerate(keys)])
    starts = ["", "core/pods/a/3", "core/pods/a/99", "core/pods/b/", "zz", "core/limitranges/a/5"]
    for prefix in [*WORDS, "core/", "core/pods/", "core/q", "apps/"]:
        want_all = [k for k in keys if k.startswith(prefix)]
        assert idx.count(prefix) == len(want_all)
        for start in starts:
            for limit in (0, 1, 5):
                want = [k for k in want_all if k > start] if start >= prefix else want_all
                got, more = idx.list(prefix, start, limit)
                shown = want if limit <= 0 else want[:limit]
                assert [k for k, _, _ in got] == shown, (prefix, start, limit)
                assert more == len(want) - len(shown)


def test_stamp_changes_exactly_when_a_key_under_its_prefix_does() -> None:
    """`stamp(prefix)` is a new object after each put or remove of a key under the prefix (an overwrite too), the
    same object otherwise; a reload never gives back an earlier token (seeded random writes)."""
    rng = random.Random(11)
    idx = KeyIndex()
    prefixes = ["core/limitranges/", "core/limitranges/a/", "core/resourcequotas/", "core/pods/", ""]
    seen: dict[str, object] = {p: idx.stamp(p) for p in prefixes}
    given = list(seen.values())
    for _ in range(400):
        key = rng.choice(WORDS[:7]) + str(rng.randrange(20))
        if rng.random() < 0.3:
            changed = idx.get(key) is not None  # removing an absent key changes nothing
            idx.remove(key)
        else:
            idx.put(key, 1, b"v")
            changed = True
        for p in prefixes:
            now = idx.stamp(p)
            if changed and key.startswith(p):
                assert now is not seen[p] and all(now is not old for old in given), (key, p)
                given.append(now)
            else:
                assert now is seen[p], (key, p)
            seen[p] = now
    idx.load_sorted([("core/pods/a/1", 1, b"v")])
    for p in prefixes:
        assert all(idx.stamp(p) is not old for old in given)
