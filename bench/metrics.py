"""Cost of the request metrics on the API hot path, next to a baseline measured in the same run.

Prints the microseconds per request that `/metrics` bookkeeping adds (label derivation, the kind check, one
counter increment and one histogram observation) and, as the baseline, the cost of decoding and encoding a
2 KB pod with orjson, which every create does anyway. Then the cost of one scrape with 200 series, and what
the work-queue metrics add to a controller key's add + get + done cycle (its bookkeeping alone: three clock reads,
three dict operations and two histogram observations) next to the whole cycle measured in the same run.

Usage: python bench/metrics.py [--n 200000]
No network traffic.
"""

from __future__ import annotations

import argparse
import asyncio
import time

import orjson

from lite.histo import Histo
from lite.server.metrics import ServerMetrics, request_labels
from lite.workqueue import DURATION_BUCKETS, WorkQueue

SERVED = {("", "v1", "pods"), ("apps", "v1", "deployments")}


def per_call(fn: object, n: int) -> float:
    assert callable(fn)
    start = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - start) / n * 1e6


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=200000)
    n = ap.parse_args().n
    prom = ServerMetrics()

    def served(g: str, v: str, r: str) -> bool:
        return (g, v, r) in SERVED

    def metrics_path() -> None:
        labels = request_labels("POST", "/api/v1/namespaces/bench/pods", False, "application/json", served)
        prom.observe(labels, 201, 0.0042)

    pod = orjson.dumps({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "bench"},
                        "spec": {"containers": [{"name": "c", "image": "busybox", "args": ["x" * 1800]}]}})

    def baseline() -> None:
        orjson.dumps(orjson.loads(pod))

    base = per_call(baseline, n)
    cost = per_call(metrics_path, n)
    print(f"baseline (orjson decode+encode of a 2 KB pod): {base:7.2f} us/request")
    print(f"request metrics (labels + counter + histogram): {cost:7.2f} us/request  ({cost / base:.2f}x baseline)")
    for i in range(200):
        prom.observe(request_labels("GET", f"/api/v1/namespaces/n/pods/p{i}", False, "", served), 200 + i, 0.001)
    scrape = per_call(prom.exposition, 200) / 1000
    print(f"one scrape with {len(prom.exposition().splitlines())} lines: {scrape:7.2f} ms")
    cycle = asyncio.run(_queue_cycle(n))
    stamps: dict[str, float] = {}
    queued, worked = Histo(DURATION_BUCKETS), Histo(DURATION_BUCKETS)

    def bookkeeping() -> None:  # as add, get and done do it: three clock reads
        stamps.setdefault("k", time.monotonic())
        now = time.monotonic()
        queued.observe(now - stamps.pop("k"))
        stamps["w"] = now
        worked.observe(time.monotonic() - stamps.pop("w"))

    stats = per_call(bookkeeping, n)
    print(f"work queue add+get+done (with its metrics): {cycle:7.2f} us/key; the metrics bookkeeping alone: "
          f"{stats:5.2f} us ({stats / cycle:.0%} of the cycle)")


async def _queue_cycle(n: int) -> float:
    q: WorkQueue[str] = WorkQueue(name="bench")
    keys = [f"ns/k{i}" for i in range(1000)]
    start = time.perf_counter()
    for i in range(n // 1000):
        for k in keys:
            q.add(k)
        for _ in keys:
            q.done(await q.get())
        if i == 0:
            start = time.perf_counter()  # the first round warms up
    rounds = max(1, n // 1000 - 1)
    return (time.perf_counter() - start) / (rounds * 1000) * 1e6


if __name__ == "__main__":
    import benchlib  # bench/ is on sys.path: the script's own directory

    benchlib.run(benchlib.Results("metrics"), main)
