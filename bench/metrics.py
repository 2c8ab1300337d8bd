"""Cost of the request metrics on the API hot path, next to a baseline measured in the same run.

Prints the microseconds per request that `/metrics` bookkeeping adds (label derivation, the kind check, one
counter increment and one histogram observation) and, as the baseline, the cost of decoding and encoding a
2 KB pod with orjson, which every create does anyway. Then the cost of one scrape with 200 series.

Usage: python bench/metrics.py [--n 200000]
No network traffic.
"""

from __future__ import annotations

import argparse
import time

import orjson

from lite.server.metrics import ServerMetrics, request_labels

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


if __name__ == "__main__":
    main()
