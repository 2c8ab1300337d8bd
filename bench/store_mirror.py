"""MirrorStore over SqliteBackend against Store on the same disk, and the watch window with revision gaps.

Usage: python bench/store_mirror.py [--dir DIR] [--rounds N] [--json FILE]

Prints, each against a baseline measured in the same run (rounds alternate A B A B):
- group-committed writes/s by 64 concurrent writers (read-modify-write loops): Store, then MirrorStore over a
  SqliteBackend (a write is answered once the mirror applied it from the change stream);
- delivery of a write made through one MirrorStore to a watcher of another over the same backend (p50/p99);
- WatchHub.watch on a full 10,000-event window whose revisions have gaps (bisection) against a contiguous one
  (Store's; arithmetic), for watches from near the newest end, the middle, and the oldest end.
Exits non-zero if any write fails or any event is not delivered.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
from typing import Any

import benchlib

from lite.server.store import Store
from lite.server.store.mirror import MirrorStore
from lite.server.store.sqlitebackend import SqliteBackend
from lite.server.store.watch import StoreEvent, WatchHub

WRITERS, PER_WRITER = 64, 40


def pod(i: int, n: int = 0) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"p{i}", "namespace": "default",
                                                           "annotations": {"pad": "x" * 1800}}, "n": n}


async def writes(store: Store | MirrorStore, results: benchlib.Results) -> float:
    async def writer(w: int) -> None:
        key = f"core/pods/default/p{w}"
        try:
            rev, _ = await store.create(key, pod(w))
            for n in range(PER_WRITER):
                rev, _ = await store.update(key, pod(w, n), rev)
        except Exception as e:
            results.count(False, f"writer {w}: {e!r}")

    t0 = time.perf_counter()
    await asyncio.gather(*(writer(w) for w in range(WRITERS)))
    return WRITERS * (PER_WRITER + 1) / (time.perf_counter() - t0)


async def store_round(path: str, results: benchlib.Results) -> float:
    s = await Store.open(path)
    try:
        return await writes(s, results)
    finally:
        await s.close()


async def mirror_round(path: str, results: benchlib.Results) -> float:
    b = await SqliteBackend.open(path)
    s = await MirrorStore.open(b)
    try:
        return await writes(s, results)
    finally:
        await s.close()
        await b.close()


async def delivery(path: str, results: benchlib.Results, n: int = 300) -> list[float]:
    """ms from a write's start on mirror A to its event at a watcher of mirror B."""
    b = await SqliteBackend.open(path)
    one, two = await MirrorStore.open(b), await MirrorStore.open(b)
    lat: list[float] = []
    try:
        w = two.watch("core/configmaps/", two.current_rev)
        rev, _ = await one.create("core/configmaps/default/c", {"metadata": {"name": "c"}, "n": 0})
        await asyncio.wait_for(anext(w), 5)
        for i in range(n):
            t0 = time.perf_counter()
            rev, _ = await one.update("core/configmaps/default/c", {"metadata": {"name": "c"}, "n": i}, rev)
            try:
                ev = await asyncio.wait_for(anext(w), 5)
            except TimeoutError:
                results.count(False, f"event {rev} not delivered to the other mirror")
                continue
            results.count(ev.rev == rev, f"event {ev.rev} delivered, {rev} expected")
            lat.append((time.perf_counter() - t0) * 1e3)
        w.close()
    finally:
        await one.close()
        await two.close()
        await b.close()
    return lat


def window_lookup(step: int) -> dict[str, float]:
    """us per WatchHub.watch (prefix matching nothing, so only the lookup counts) on a full window."""
    hub = WatchHub(10000, 1000)
    hub.remember(StoreEvent("MODIFIED", f"core/pods/default/p{r % 500}", r * step, b"{}", None)
                 for r in range(1, 10001))
    top = 10000 * step
    out = {}
    for name, after in (("newest", top - 10 * step), ("middle", top // 2), ("oldest", step)):
        t0 = time.perf_counter()
        for _ in range(2000):
            hub.watch("core/configmaps/", after, top).close()
        out[name] = (time.perf_counter() - t0) / 2000 * 1e6
    return out


async def main(args: argparse.Namespace, results: benchlib.Results) -> None:
    with tempfile.TemporaryDirectory(dir=args.dir) as d:
        store_rates, mirror_rates = [], []
        for r in range(args.rounds):
            store_rates.append(await store_round(os.path.join(d, f"store{r}.db"), results))
            mirror_rates.append(await mirror_round(os.path.join(d, f"mirror{r}.db"), results))
        s, m = statistics.median(store_rates), statistics.median(mirror_rates)
        print(f"writes/s, {WRITERS} writers: Store {s:,.0f} (rounds {', '.join(f'{x:,.0f}' for x in store_rates)}); "
              f"MirrorStore/SqliteBackend {m:,.0f} (rounds {', '.join(f'{x:,.0f}' for x in mirror_rates)}); "
              f"ratio {m / s:.2f}")
        results.set("store_writes_per_s", s)
        results.set("mirror_writes_per_s", m)
        lat = sorted(await delivery(os.path.join(d, "delivery.db"), results))
        if lat:
            p50, p99 = lat[len(lat) // 2], lat[min(len(lat) - 1, int(len(lat) * 0.99))]
            print(f"write on mirror A -> event on mirror B (same SqliteBackend): p50 {p50:.2f} ms, p99 {p99:.2f} ms")
            results.set("cross_mirror_p50_ms", p50)
            results.set("cross_mirror_p99_ms", p99)
    rows = []
    for _ in range(args.rounds):
        rows.append((window_lookup(1), window_lookup(3)))
    for pos in ("newest", "middle", "oldest"):
        c = statistics.median(r[0][pos] for r in rows)
        g = statistics.median(r[1][pos] for r in rows)
        where = "the middle" if pos == "middle" else f"the {pos} end"
        print(f"window lookup from {where}: contiguous {c:.1f} us, with gaps {g:.1f} us (ratio {g / c:.2f})")
        results.set(f"window_{pos}_contiguous_us", c)
        results.set(f"window_{pos}_gaps_us", g)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", default=None)
    ap.add_argument("--rounds", type=int, default=3)
    benchlib.add_args(ap)
    parsed = ap.parse_args()
    res = benchlib.Results.from_args("store_mirror", parsed)
    benchlib.run(res, lambda: asyncio.run(main(parsed, res)))
