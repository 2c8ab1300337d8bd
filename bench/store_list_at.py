"""What reading a paginated list at its first page's revision costs: `Store.list_packed(at_rev=)` pages next to
the same pages at the current revision, measured in the same run on the same store.

A list's later pages read at the revision of its first (`lite/server/store/snapshot.py`): the index with the
window's newer changes undone. The cost beyond a current-revision page is one pass over the window's events
newer than that revision plus the keys in range changed since; this prints both extremes against the baseline:
- "changes under the prefix": K of the listed objects updated or deleted since the first page;
- "a full window elsewhere": the rest of the window (10,000 events) written since, under another prefix.

Every page set is checked against the state recorded at that revision; the run exits 1 if one differs.

Usage: python bench/store_list_at.py [--objects 10000] [--changes 200] [--page 500] [--rounds 20]
Prints figures (CPU time per page, min of the rounds); asserts no timing.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time

from lite.server.store import Store

P = "core/configmaps/default/"


def _obj(i: int, v: str = "1") -> dict[str, object]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"cm-{i:06d}", "namespace": "default"},
            "data": {"v": v, "pad": "x" * 1900}}


def _pages(store: Store, page: int, at_rev: int) -> list[tuple[str, int, bytes]]:
    out: list[tuple[str, int, bytes]] = []
    after = ""
    while True:
        items, _, remaining = store.list_packed(P, start_after=after, limit=page, at_rev=at_rev)
        out += items
        if not remaining:
            return out
        after = items[-1][0]


def _per_page(store: Store, page: int, at_rev: int, rounds: int, want: list[tuple[str, int, bytes]]) -> float:
    best = float("inf")
    pages = max(1, -(-len(want) // page))
    for _ in range(rounds):
        t = time.process_time()
        got = _pages(store, page, at_rev)
        best = min(best, (time.process_time() - t) / pages)
        if got != want:
            print(f"FAILED: the pages at revision {at_rev} differ from the state recorded then", file=sys.stderr)
            raise SystemExit(1)
    return best


async def main(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="lite-bench-list-at-") as d:
        store = await Store.open(f"{d}/state.db")
        try:
            for start in range(0, args.objects, 1000):
                await asyncio.gather(*(store.create(f"{P}cm-{i:06d}", _obj(i))
                                       for i in range(start, min(args.objects, start + 1000))))
            rev0 = store.current_rev
            state0 = store.list_packed(P)[0]
            step = max(1, args.objects // max(1, args.changes))
            for n, i in enumerate(range(0, args.objects, step)):
                if n >= args.changes:
                    break
                if n % 4 == 3:
                    await store.delete(f"{P}cm-{i:06d}", 0)
                else:
                    await store.update(f"{P}cm-{i:06d}", _obj(i, "2"), 0)
            rev1 = store.current_rev
            state1 = store.list_packed(P)[0]
            # the rest of the window (10,000 events) under another prefix: the first page's revision still in it
            elsewhere = 10000 - args.changes - 1
            for start in range(0, elsewhere, 1000):
                await asyncio.gather(*(store.create(f"core/configmaps/other/cm-{i:06d}", _obj(i))
                                       for i in range(start, min(elsewhere, start + 1000))))
            base = _per_page(store, args.page, 0, args.rounds, store.list_packed(P)[0])
            near = _per_page(store, args.page, rev1, args.rounds, state1)
            far = _per_page(store, args.page, rev0, args.rounds, state0)
        finally:
            await store.close()
    print(f"{args.objects} ConfigMaps of ~2 KB, pages of {args.page} (CPU ms per page, min of {args.rounds} rounds)")
    rows = [("current revision (baseline)", base),
            (f"a revision with {elsewhere} changes elsewhere since", near),
            (f"... and {args.changes} changes under the prefix before those", far)]
    for label, value in rows:
        print(f"  {label:<58} {value * 1e3:7.3f}  x{value / base:.1f}")

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--objects", type=int, default=10000)
    parser.add_argument("--changes", type=int, default=200)
    parser.add_argument("--page", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=20)
    asyncio.run(main(parser.parse_args()))
