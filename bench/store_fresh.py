"""Consistent reads across servers: two MirrorStores over one SqliteBackend (or PostgreSQL with --pg DSN).

Usage: python bench/store_fresh.py [--dir DIR] [--pg DSN] [--reads N] [--json FILE]

Prints, each against a baseline measured in the same run (rounds alternate A B A B):
- a read through server b right after a write through server a: how often b's mirror alone lacked the write
  (the baseline, today's behaviour without waiting) and how often it lacked it after `fresh()` (must be 0);
- the latency of a consistent read (`fresh()` then `get`) against a plain mirror `get` (p50/p99);
- 100 concurrent consistent lists: elapsed time, and how many `current_rev` requests they cost (one expected);
- `Store.fresh()` (the one-process store's cost on every API read) against a `Store.get` of a small object.
Exits non-zero if any read after `fresh()` misses the write just acknowledged.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from typing import Any

import benchlib

from lite.server.store import Store
from lite.server.store.mirror import MirrorStore
from lite.server.store.sqlitebackend import SqliteBackend

CONCURRENT = 100


def cm(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": "default"},
            "data": {"k": "v" * 200}}


async def open_backends(args: argparse.Namespace, path: str) -> tuple[Any, Any]:
    if args.pg:
        from lite.server.store.pgbackend import PgBackend
        return await PgBackend.open(args.pg), await PgBackend.open(args.pg)
    one = await SqliteBackend.open(path)
    return one, one


async def awaited(store: MirrorStore, rev: int = 0) -> None:
    waiting = store.fresh(rev)
    if waiting is not None:
        await waiting


async def cross_reads(a: MirrorStore, b: MirrorStore, n: int, tag: str, results: benchlib.Results) -> tuple[int, int]:
    """(b lacked the write, b lacked it after fresh()) over n writes through a."""
    lacked = lacked_fresh = 0
    for i in range(n):
        key = f"core/configmaps/default/{tag}{i}"
        rev, _ = await a.create(key, cm(f"{tag}{i}"))
        lacked += b.get(key) is None
        await awaited(b)
        got = b.get(key)
        if not results.count(got is not None and got[0] == rev, f"{key} not read fresh on b"):
            lacked_fresh += 1
    return lacked, lacked_fresh


async def latencies(b: MirrorStore, n: int, fresh: bool) -> list[float]:
    out = []
    for _ in range(n):
        t = time.perf_counter()
        if fresh:
            await awaited(b)
        b.get("core/configmaps/default/x0")
        out.append(time.perf_counter() - t)
    return out


async def burst(b: MirrorStore) -> tuple[float, int]:
    before = b.rev_requests

    async def one() -> None:
        await awaited(b)
        b.list("core/configmaps/")

    t = time.perf_counter()
    await asyncio.gather(*[one() for _ in range(CONCURRENT)])
    return time.perf_counter() - t, b.rev_requests - before


async def store_cost(path: str) -> tuple[float, float]:
    """(ns per Store.get of a small object, ns per Store.fresh() call), A B A B."""
    s = await Store.open(path)
    try:
        await s.create("core/configmaps/default/s", cm("s"))
        n, gets, fresh = 200_000, [], []
        for _ in range(2):
            t = time.perf_counter()
            for _ in range(n):
                s.get("core/configmaps/default/s")
            gets.append((time.perf_counter() - t) / n * 1e9)
            t = time.perf_counter()
            for _ in range(n):
                s.fresh()
            fresh.append((time.perf_counter() - t) / n * 1e9)
        return min(gets), min(fresh)
    finally:
        await s.close()


async def main(args: argparse.Namespace, results: benchlib.Results) -> None:
    with tempfile.TemporaryDirectory(dir=args.dir) as d:
        ba, bb = await open_backends(args, f"{d}/backend.db")
        a, b = await MirrorStore.open(ba), await MirrorStore.open(bb)
        try:
            lacked, after = await cross_reads(a, b, args.reads, "x", results)
            results.set("b_lacked_the_write_pct", 100 * lacked / args.reads)
            results.set("b_lacked_it_after_fresh_pct", 100 * after / args.reads)
            print(f"read on b right after a write on a ({args.reads} writes): b's mirror alone lacked it "
                  f"{lacked} times (baseline); after fresh() {after} times", flush=True)
            plain: list[float] = []
            fresh: list[float] = []
            for _ in range(2):  # A B A B
                plain += await latencies(b, args.reads, False)
                fresh += await latencies(b, args.reads, True)
            for name, xs in (("plain get", plain), ("fresh get", fresh)):
                xs.sort()
                p50, p99 = statistics.median(xs) * 1e3, xs[int(len(xs) * 0.99) - 1] * 1e3
                results.set(f"{name.replace(' ', '_')}_p50_ms", p50)
                results.set(f"{name.replace(' ', '_')}_p99_ms", p99)
                print(f"{name}: p50 {p50:.3f} ms, p99 {p99:.3f} ms", flush=True)
            elapsed, requests = await burst(b)
            results.set("concurrent_fresh_lists_ms", elapsed * 1e3)
            results.set("concurrent_fresh_lists_rev_requests", requests)
            print(f"{CONCURRENT} concurrent consistent lists: {elapsed * 1e3:.1f} ms, {requests} current_rev "
                  f"request(s)", flush=True)
        finally:
            await a.close()
            await b.close()
            await ba.close()
            if bb is not ba:
                await bb.close()
        get_ns, fresh_ns = await store_cost(f"{d}/store.db")
        results.set("store_get_ns", get_ns)
        results.set("store_fresh_ns", fresh_ns)
        print(f"Store: fresh() {fresh_ns:.0f} ns per call against get {get_ns:.0f} ns (the API's read path adds "
              f"one such call per request)", flush=True)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", default=None)
    ap.add_argument("--pg", default="", help="a PostgreSQL DSN: two PgBackends (two servers) instead of SQLite")
    ap.add_argument("--reads", type=int, default=300)
    benchlib.add_args(ap)
    parsed = ap.parse_args()
    res = benchlib.Results.from_args("store_fresh", parsed)
    benchlib.run(res, lambda: asyncio.run(main(parsed, res)))
