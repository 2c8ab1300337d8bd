"""list order, prefix boundaries, pagination, count."""

from __future__ import annotations

import asyncio

from store_helpers import pod

from lite.server.store import Store


async def fill(store: Store) -> None:
    keys = [f"core/pods/default/p{i:03d}" for i in range(25)]
    keys += [f"core/pods/default2/q{i}" for i in range(3)]
    keys += ["core/pods/kube-system/dns", "core/services/default/svc", "apps/deployments/default/web"]
    await asyncio.gather(*(store.create(k, pod(k.rsplit("/", 1)[1])) for k in reversed(keys)))


async def test_list_sorted_and_prefix_isolated(store: Store) -> None:
    await fill(store)
    items, rev, remaining = store.list("core/pods/default/")
    assert [k for k, _, _ in items] == [f"core/pods/default/p{i:03d}" for i in range(25)]
    assert rev == store.current_rev == 31 and remaining == 0
    assert all(store.get(k) == (r, v) for k, r, v in items)
    assert [k for k, _, _ in store.list("core/pods/default2/")[0]] == [f"core/pods/default2/q{i}" for i in range(3)]
    assert store.count("core/pods/") == 29
    assert store.count("core/pods/default/") == 25
    assert store.count("core/") == 30
    assert store.count("") == 31
    assert store.count("core/pods/nope/") == 0
    assert store.list("zzz/")[0] == []


async def test_pagination(store: Store) -> None:
    await fill(store)
    seen: list[str] = []
    after = ""
    remainders = []
    while True:
        items, _, remaining = store.list("core/pods/default/", start_after=after, limit=10)
        seen += [k for k, _, _ in items]
        remainders.append(remaining)
        if not remaining:
            break
        after = items[-1][0]
    assert seen == [f"core/pods/default/p{i:03d}" for i in range(25)]
    assert remainders == [15, 5, 0]
    # start_after before the prefix starts at the prefix; after it, nothing.
    assert store.list("core/pods/default/", start_after="a", limit=1)[0][0][0] == "core/pods/default/p000"
    assert store.list("core/pods/default/", start_after="core/pods/default/zzz")[0] == []


async def test_list_reflects_deletes(store: Store) -> None:
    await fill(store)
    await store.delete("core/pods/default/p003", 0)
    keys = [k for k, _, _ in store.list("core/pods/default/")[0]]
    assert "core/pods/default/p003" not in keys and len(keys) == 24
    assert store.count("core/pods/default/") == 24
