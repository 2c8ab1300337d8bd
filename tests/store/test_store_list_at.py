"""Store.list / list_packed at a past revision (`at_rev`): the state as of that revision, paginated, from the
index and the watch window; Compacted when the window no longer reaches back."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import orjson
import pytest

from lite.server.store import Compacted, Store
from lite.server.store.packing import unpack

Op = tuple[str, ...]  # ("create"|"update", key, value) or ("delete", key)
P = "core/configmaps/"


def cm(value: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "data": {"v": value}}


async def apply(store: Store, ops: list[Op]) -> None:
    for op in ops:
        if op[0] == "create":
            await store.create(op[1], cm(op[2]))
        elif op[0] == "update":
            await store.update(op[1], cm(op[2]), 0)
        else:
            await store.delete(op[1], 0)


def shown(items: list[tuple[str, int, bytes]]) -> list[tuple[str, str]]:
    """(key, data.v) of each item."""
    return [(k[len(P):], orjson.loads(v)["data"]["v"]) for k, _, v in items]


# (id, ops before the listed revision, ops after it, prefix, start_after, limit, expected page, expected remaining)
CASES: list[tuple[str, list[Op], list[Op], str, str, int, list[tuple[str, str]], int]] = [
    ("unchanged-under-prefix", [("create", P + "a/x", "1")], [("create", "core/secrets/a/s", "1")],
     P, "", 0, [("a/x", "1")], 0),
    ("created-after", [("create", P + "a/a", "1"), ("create", P + "a/c", "1")], [("create", P + "a/b", "2")],
     P, "", 0, [("a/a", "1"), ("a/c", "1")], 0),
    ("updated-after", [("create", P + "a/a", "1")], [("update", P + "a/a", "2"), ("update", P + "a/a", "3")],
     P, "", 0, [("a/a", "1")], 0),
    ("deleted-after", [("create", P + "a/a", "1"), ("create", P + "a/b", "1")], [("delete", P + "a/b")],
     P, "", 0, [("a/a", "1"), ("a/b", "1")], 0),
    ("recreated", [("create", P + "a/b", "1")], [("delete", P + "a/b"), ("create", P + "a/b", "2")],
     P, "", 0, [("a/b", "1")], 0),
    ("created-and-deleted-after", [("create", P + "a/a", "1")], [("create", P + "a/b", "2"), ("delete", P + "a/b")],
     P, "", 0, [("a/a", "1")], 0),
    ("deleted-then-recreated-before", [("create", P + "a/a", "1"), ("delete", P + "a/a"), ("create", P + "a/a", "2")],
     [("update", P + "a/a", "3")], P, "", 0, [("a/a", "2")], 0),
    ("prefix-boundary-short", [("create", P + "a/x", "1"), ("create", P + "ab/y", "1")],
     [("update", P + "ab/y", "2"), ("delete", P + "a/x"), ("create", P + "a0/z", "1")],
     P + "a/", "", 0, [("a/x", "1")], 0),
    ("prefix-boundary-long", [("create", P + "a/x", "1"), ("create", P + "ab/y", "1")],
     [("update", P + "ab/y", "2"), ("delete", P + "a/x")], P + "ab/", "", 0, [("ab/y", "1")], 0),
    ("page-start-and-limit", [("create", P + f"n/{c}", "1") for c in "abcde"],
     [("delete", P + "n/b"), ("create", P + "n/bb", "2"), ("update", P + "n/d", "2"), ("delete", P + "n/a")],
     P, P + "n/a", 2, [("n/b", "1"), ("n/c", "1")], 2),
    ("page-skips-changed-keys", [("create", P + f"n/{c}", "1") for c in "abcd"],
     [("delete", P + "n/a"), ("create", P + "n/aa", "2"), ("update", P + "n/b", "2")],
     P, "", 3, [("n/a", "1"), ("n/b", "1"), ("n/c", "1")], 1),
    ("page-after-every-key", [("create", P + "n/a", "1")], [("delete", P + "n/a"), ("create", P + "n/z", "1")],
     P, P + "n/a", 0, [], 0),
    ("empty-then", [], [("create", P + "n/a", "1")], P, "", 0, [], 0),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
async def test_list_at(store: Store, case: tuple[str, list[Op], list[Op], str, str, int,
                                                 list[tuple[str, str]], int]) -> None:
    _, before, after, prefix, start_after, limit, want, want_remaining = case
    await store.create("core/namespaces/default", cm("ns"))  # so that at_rev is never 0
    await apply(store, before)
    at = store.current_rev
    then = store.list(prefix, start_after=start_after, limit=limit)
    await apply(store, after)
    assert store.current_rev > at
    items, rev, remaining = store.list(prefix, start_after=start_after, limit=limit, at_rev=at)
    assert (shown(items), rev, remaining) == (want, at, want_remaining)
    assert (items, remaining) == (then[0], then[2])  # the very items (revisions, bytes) the list gave then
    packed, rev, remaining = store.list_packed(prefix, start_after=start_after, limit=limit, at_rev=at)
    assert [(k, r, unpack(v)) for k, r, v in packed] == items and (rev, remaining) == (at, want_remaining)


async def test_current_revision_reads_the_index(store: Store) -> None:
    await store.create(P + "n/a", cm("1"))
    current = store.list(P)
    assert store.list(P, at_rev=store.current_rev) == current == store.list(P, at_rev=0)
    with pytest.raises(ValueError):
        store.list(P, at_rev=store.current_rev + 1)


async def test_model_every_revision_every_page(store: Store) -> None:
    """Random writes; every revision's full state recorded; then every revision listed in pages of random sizes
    under several prefixes equals what was recorded."""
    rng = random.Random(20)
    keys = [f"{P}{ns}/{n}" for ns in ("a", "ab", "b") for n in "pqrs"] + ["core/secrets/a/p"]
    states: dict[int, list[tuple[str, int, bytes]]] = {}
    for i in range(160):
        key = rng.choice(keys)
        if store.get(key) is None:
            await store.create(key, cm(str(i)))
        elif rng.random() < 0.3:
            await store.delete(key, 0)
        else:
            await store.update(key, cm(str(i)), 0)
        states[store.current_rev] = store.list("")[0]
    for rev, state in states.items():
        for prefix in ("", P, P + "a", P + "a/", P + "ab/", "core/secrets/", "zz/"):
            want = [item for item in state if item[0].startswith(prefix)]
            got: list[tuple[str, int, bytes]] = []
            after = ""
            while True:
                limit = rng.choice((0, 1, 2, 5))
                page, at, remaining = store.list(prefix, start_after=after, limit=limit, at_rev=rev)
                assert at == rev and (limit == 0 or len(page) <= limit)
                got += page
                assert remaining == len(want) - len(got), (rev, prefix)
                if not remaining:
                    break
                after = page[-1][0]
            assert got == want, (rev, prefix)


async def test_compacted_beyond_the_window(tmp_path: Path) -> None:
    store = await Store.open(str(tmp_path / "w.db"), window=5)
    try:
        for i in range(8):
            await store.create(f"{P}n/{i}", cm(str(i)))
        assert store.oldest_rev == 4
        assert [k for k, _, _ in store.list(P, at_rev=3)[0]] == [f"{P}n/{i}" for i in range(3)]  # window: 4..8
        with pytest.raises(Compacted) as e:
            store.list(P, at_rev=2)
        assert e.value.oldest_rev == 4
        with pytest.raises(Compacted):
            store.list_packed(P, limit=1, at_rev=1)
    finally:
        await store.close()


async def test_compacted_when_the_replaced_value_is_gone(tmp_path: Path) -> None:
    """After a restart the window starts where compaction left a gap; its first change of a key may have lost
    the value it replaced: a revision before that change cannot be listed."""
    path = str(tmp_path / "c.db")
    store = await Store.open(path)
    try:
        await store.create(P + "n/k", cm("1"))  # 1
        await store.update(P + "n/k", cm("2"), 0)  # 2
        await store.update(P + "n/k", cm("3"), 0)  # 3: replaces row 2
        await store.create(P + "n/other", cm("1"))  # 4
        assert await store.compact(1) == 2  # rows 1 and 2 go
    finally:
        await store.close()
    store = await Store.open(path)
    try:
        assert store.oldest_rev == 3
        with pytest.raises(Compacted) as e:
            store.list(P, at_rev=2)
        assert e.value.oldest_rev == 3
        assert store.list(P + "n/o", at_rev=2)[0] == []  # no key whose history is lost: listable
        assert [k for k, _, _ in store.list(P, at_rev=3)[0]] == [P + "n/k"]
    finally:
        await store.close()
