"""Store micro-benchmarks (the SQLite Store in-process, no API): group-commit write rate, list of 10,000 objects, watch
fan-out latency, memory. `bench/store.py` measures every datastore through the API.

Usage: python bench/store_micro.py [--dir DIR]   (DIR holds the temporary SQLite files; default a temp dir)
Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
from typing import Any

from lite.server.store import Store


def pod(i: int, size: int = 2048) -> dict[str, Any]:
    name = f"pod-{i:05d}"
    obj: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": {"app": "bench"}},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
    }
    obj["metadata"]["annotations"] = {"pad": "x" * max(0, size - 200)}
    return obj


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


async def bench_writes(path: str, writers: int = 64, per_writer: int = 300) -> None:
    s = await Store.open(path)

    async def writer(w: int) -> None:
        key = f"core/pods/default/w{w}"
        rev, _ = await s.create(key, pod(w))
        for _ in range(per_writer):
            rev, _ = await s.update(key, pod(w), rev)

    t0 = time.perf_counter()
    await asyncio.gather(*(writer(w) for w in range(writers)))
    dt = time.perf_counter() - t0
    print(
        f"writes: {s.writes} writes of 2 KB by {writers} concurrent writers in {dt:.2f} s "
        f"= {s.writes / dt:,.0f} writes/s; {s.commits} transactions (avg batch {s.writes / s.commits:.1f})"
    )
    await s.close()


async def bench_list(path: str, n: int = 10_000) -> None:
    s = await Store.open(path)
    rss0 = rss_mb()
    t0 = time.perf_counter()
    for lo in range(0, n, 1000):
        await asyncio.gather(*(s.create(f"core/pods/default/pod-{i:05d}", pod(i)) for i in range(lo, lo + 1000)))
    print(
        f"load: created {n} 2 KB pods in {time.perf_counter() - t0:.2f} s; "
        f"RSS {rss_mb():.0f} MB (was {rss0:.0f} MB before)"
    )
    times = []
    for _ in range(20):
        t0 = time.perf_counter()
        items, _, _ = s.list("core/pods/")
        times.append(time.perf_counter() - t0)
    assert len(items) == n
    print(f"list: {n} items in {statistics.median(times) * 1e3:.2f} ms (median of 20)")
    t0 = time.perf_counter()
    after, pages = "", 0
    while True:
        items, _, remaining = s.list("core/pods/", start_after=after, limit=500)
        pages += 1
        if not remaining:
            break
        after = items[-1][0]
    print(f"list: {n} items in {pages} pages of 500 in {(time.perf_counter() - t0) * 1e3:.2f} ms")
    await s.close()
    t0 = time.perf_counter()
    s = await Store.open(path)
    print(f"open: reopened {len(s)} objects + window in {(time.perf_counter() - t0) * 1e3:.0f} ms")
    await s.close()


async def bench_fanout(path: str, watchers: int = 100, writes: int = 300) -> None:
    s = await Store.open(path)
    received: list[list[float]] = [[] for _ in range(writes)]

    async def consume(w: Any) -> None:
        async for ev in w:
            received[ev.rev - 1].append(time.perf_counter())
            if ev.rev == writes:
                return

    ws = [s.watch("core/pods/", 0) for _ in range(watchers)]
    noise = [s.watch("core/configmaps/", 0) for _ in range(watchers)]  # other resources cost nothing
    tasks = [asyncio.create_task(consume(w)) for w in ws]
    starts, commits = [], []
    for i in range(writes):
        t0 = time.perf_counter()
        await s.create(f"core/pods/default/p{i}", pod(i, 512))
        commits.append(time.perf_counter() - t0)
        starts.append(t0)
        await asyncio.sleep(0.001)  # let consumers run, as a live server would between requests
    await asyncio.gather(*tasks)
    last = [max(r) - t0 for r, t0 in zip(received, starts, strict=True)]
    assert all(len(r) == watchers for r in received)
    spread = [max(r) - min(r) for r in received]  # first to last of the 100 watchers
    q = statistics.quantiles(last, n=100)
    print(
        f"watch: {watchers} watchers (+{watchers} on another resource); write submitted -> last watcher "
        f"got it: p50 {q[49] * 1e3:.2f} ms, p99 {q[98] * 1e3:.2f} ms; of which COMMIT p50 "
        f"{statistics.median(commits) * 1e3:.2f} ms; first -> last watcher p50 "
        f"{statistics.median(spread) * 1e6:.0f} us, max {max(spread) * 1e6:.0f} us"
    )
    for w in ws + noise:
        w.close()
    await s.close()


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", default=None)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir) as d:
        await bench_writes(os.path.join(d, "writes.db"))
        await bench_list(os.path.join(d, "list.db"))
        await bench_fanout(os.path.join(d, "fanout.db"))


if __name__ == "__main__":
    import benchlib  # bench/ is on sys.path: the script's own directory

    benchlib.run(benchlib.Results("store_micro"), lambda: asyncio.run(main()))
