"""Paced create latency of the store alone: WAL checkpoints on the background thread (now) against the
previous behaviour, SQLite's autocheckpoint inside the commit that crosses 1,000 pages, in the same run.

Usage: python bench/store_checkpoint.py [--rate 1000] [--seconds 10] [--size 5000] [--rounds 2] [--dir DIR]
Each round runs both modes (A B A B...) on a fresh file; prints p50/p99/max of the create latency per mode
and the p99 ratio now/before. Exits non-zero if any create fails.

`--compaction`: instead, paced creates (4 s) while one compaction removes 20,000 superseded 2 KB rows, against
the same paced creates with no compaction in the same run: the slowest create during compaction shows how
long a commit waits for one compaction step (the whole pass in one transaction held commits ~650 ms).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
from typing import Any

from benchlib import paced

from lite.server.store import Store


def pod(i: int, size: int) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"p{i}", "namespace": "default", "annotations": {"pad": "x" * size}},
            "spec": {"containers": [{"name": "c", "image": "busybox"}]}}


async def run(path: str, background: bool, rate: int, seconds: float, size: int) -> list[float]:
    s = await Store.open(path)
    if not background:  # the previous behaviour: no thread, the writer checkpoints at 1,000 pages
        ckpt = s._checkpointer
        assert ckpt is not None
        await s._run(ckpt.close)
        s._checkpointer = None
        await s._run(lambda: s._db.conn.execute("PRAGMA wal_autocheckpoint=1000").fetchall())
    lat: list[float] = []
    failed = 0

    async def one(i: int) -> None:
        nonlocal failed
        t = time.perf_counter()
        try:
            await s.create(f"core/pods/default/p{i}", pod(i, size))
        except Exception:
            failed += 1
            raise
        lat.append(time.perf_counter() - t)

    await paced(rate, seconds, one)
    if s._checkpointer is not None:
        print(f"  checkpointer: {s._checkpointer.passive} PASSIVE passes, {s._checkpointer.restarts} RESTARTs")
    await s.close()
    remove(path)
    if failed:
        raise SystemExit(f"{failed} creates failed")
    return lat


async def compaction_run(path: str, compact: bool, rate: int) -> tuple[list[float], list[float], float]:
    """(all latencies, latencies of creates started during the compaction, compaction seconds)."""
    s = await Store.open(path)

    async def churn(i: int) -> None:
        key = f"core/pods/default/u{i}"
        rev, _ = await s.create(key, pod(i, 2000))
        for _ in range(200):
            rev, _ = await s.update(key, pod(i, 2000), rev)

    await asyncio.gather(*(churn(i) for i in range(100)))  # 20,000 superseded rows
    lat: list[float] = []
    during: list[float] = []
    span = [0.0, 0.0]

    async def one(i: int) -> None:
        t = time.perf_counter()
        await s.create(f"core/pods/default/p{i}", pod(i, 2000))
        e = time.perf_counter()
        lat.append(e - t)
        if span[0] and t >= span[0] and (not span[1] or t <= span[1]):
            during.append(e - t)

    async def compaction() -> None:
        await asyncio.sleep(1.0)
        span[0] = time.perf_counter()
        if compact:
            await s.compact(0)
        else:
            await asyncio.sleep(0.7)
        span[1] = time.perf_counter()

    job = asyncio.create_task(compaction())
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    tasks = []
    for i in range(4 * rate):
        delay = t0 + i / rate - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(one(i)))
    await asyncio.gather(*tasks, job)
    await s.close()
    remove(path)
    return lat, during, span[1] - span[0]


async def compaction_main(d: str, rounds: int, rate: int) -> None:
    worst: dict[bool, list[float]] = {True: [], False: []}
    for r in range(rounds):
        for compact in (True, False):
            lat, during, took = await compaction_run(os.path.join(d, "c.db"), compact, rate)
            worst[compact].append(max(during))
            name = "compaction of 20,000 rows" if compact else "no compaction"
            print(f"round {r} {name:26s}: {took * 1000:5.0f} ms; {len(during)} creates meanwhile, slowest "
                  f"{max(during) * 1000:6.1f} ms; all creates p99 {q(lat, 0.99):6.2f} ms")
    now, base = statistics.median(worst[True]), statistics.median(worst[False])
    print(f"slowest create during compaction: {now * 1000:.1f} ms vs {base * 1000:.1f} ms without "
          f"(ratio {now / base:.2f})")


def remove(path: str) -> None:
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(path + suffix):
            os.remove(path + suffix)


def q(xs: list[float], p: float) -> float:
    return statistics.quantiles(xs, n=1000)[int(p * 1000) - 1] * 1000


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rate", type=int, default=1000)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--size", type=int, default=5000)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--dir", default=None)
    ap.add_argument("--compaction", action="store_true")
    a = ap.parse_args()
    if a.compaction:
        with tempfile.TemporaryDirectory(dir=a.dir) as d:
            await compaction_main(d, a.rounds, a.rate)
        return
    p99s: dict[bool, list[float]] = {True: [], False: []}
    with tempfile.TemporaryDirectory(dir=a.dir) as d:
        for r in range(a.rounds):
            for background in (True, False):
                lat = await run(os.path.join(d, "s.db"), background, a.rate, a.seconds, a.size)
                name = "background checkpoints" if background else "in-commit autocheckpoint"
                p99s[background].append(q(lat, 0.99))
                print(f"round {r} {name:26s}: p50 {q(lat, 0.5):6.2f} ms  p99 {q(lat, 0.99):6.2f} ms  "
                      f"max {max(lat) * 1000:6.1f} ms  ({len(lat)} creates)")
    now, before = statistics.median(p99s[True]), statistics.median(p99s[False])
    print(f"create p99 at {a.rate}/s: {now:.2f} ms now vs {before:.2f} ms before (ratio {now / before:.2f})")


if __name__ == "__main__":
    asyncio.run(main())
