"""Cost of serving a resource through a view of another version (issue 18 item 7), in process.

Creates HPAs (stored as autoscaling/v2) and Events (stored as core/v1), then times get, list and a merge
patch through the stored version (the baseline) and through the view (autoscaling/v1, events.k8s.io/v1),
each in the same run over the same real Store and Resources. Prints per-operation microseconds and the
ratio view/baseline. Exits non-zero if any request fails.

Usage: python bench/served_versions.py [--objects 500] [--rounds 3]
Touches only a temporary directory.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from collections.abc import Awaitable, Callable
from typing import Any

from lite.kinds import Kind, KindRegistry
from lite.server.api.resources import Resources
from lite.server.api.strategies import default_strategies
from lite.server.store import Store

NS = "default"


def hpa(i: int) -> dict[str, Any]:
    return {"metadata": {"name": f"h{i}"}, "spec": {
        "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": f"d{i}"}, "maxReplicas": 5,
        "metrics": [{"type": "Resource", "resource": {"name": "memory", "target": {
            "type": "AverageValue", "averageValue": "100Mi"}}},
                    {"type": "Resource", "resource": {"name": "cpu", "target": {
                        "type": "Utilization", "averageUtilization": 60}}}]}}


def event(i: int) -> dict[str, Any]:
    return {"metadata": {"name": f"e{i}"}, "involvedObject": {"kind": "Pod", "name": f"p{i}", "namespace": NS},
            "reason": "Pulled", "message": "pulled", "type": "Normal", "count": 1,
            "source": {"component": "kubelet", "host": "n1"}}


async def timed(n: int, op: Callable[[int], Awaitable[Any]]) -> float:
    """Microseconds per call of op(0..n-1)."""
    start = time.perf_counter()
    for i in range(n):
        await op(i)
    return (time.perf_counter() - start) / n * 1e6


async def compare(res: Resources, label: str, base: Kind, view: Kind, prefix: str, n: int, rounds: int,
                  patch: Callable[[int], dict[str, Any]]) -> None:
    for what, make in (
        ("get", lambda k: (lambda i: res.get(k, NS, f"{prefix}{i}"))),
        ("patch", lambda k: (lambda i: res.patch(k, NS, f"{prefix}{i}", patch(i)))),
    ):
        b = min([await timed(n, make(base)) for _ in range(rounds)])
        v = min([await timed(n, make(view)) for _ in range(rounds)])
        print(f"{label} {what:5s}: {base.api_version:>18s} {b:8.1f} us   {view.api_version:>18s} {v:8.1f} us   "
              f"ratio {v / b:4.2f}")
    lb = min([await timed(1, lambda _i: res.list(base, NS)) for _ in range(rounds)])
    lv = min([await timed(1, lambda _i: res.list(view, NS)) for _ in range(rounds)])
    print(f"{label} list of {n}: {base.api_version:>12s} {lb / 1000:8.1f} ms   {view.api_version:>18s} "
          f"{lv / 1000:8.1f} ms   ratio {lv / lb:4.2f}")


async def main(n: int, rounds: int) -> None:
    """Any failed request raises: benchlib.run fails the bench with it, last."""
    with tempfile.TemporaryDirectory() as d:
        store = await Store.open(f"{d}/lite.db")
        try:
            kinds = KindRegistry()
            res = Resources(store, kinds, default_strategies())
            await res.start()
            k = {(g, v, kind): kinds.by_gvk(g, v, kind) for g, v, kind in (
                ("autoscaling", "v2", "HorizontalPodAutoscaler"), ("autoscaling", "v1", "HorizontalPodAutoscaler"),
                ("", "v1", "Event"), ("events.k8s.io", "v1", "Event"))}
            hv2, hv1 = k[("autoscaling", "v2", "HorizontalPodAutoscaler")], k[("autoscaling", "v1",
                                                                              "HorizontalPodAutoscaler")]
            ecore, ev1 = k[("", "v1", "Event")], k[("events.k8s.io", "v1", "Event")]
            assert hv2 and hv1 and ecore and ev1
            for i in range(n):
                await res.create(hv2, NS, hpa(i))
                await res.create(ecore, NS, event(i))
            print(f"{n} HPAs and {n} Events; best of {rounds} rounds; patches alternate a label")
            await compare(res, "HPA  ", hv2, hv1, "h", n, rounds,
                          lambda i: {"metadata": {"labels": {"round": str(time.perf_counter_ns() % 7)}}})
            await compare(res, "Event", ecore, ev1, "e", n, rounds,
                          lambda i: {"metadata": {"labels": {"round": str(time.perf_counter_ns() % 7)}}})
        finally:
            await store.close()


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--objects", type=int, default=500)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    import benchlib  # bench/ is on sys.path: the script's own directory

    benchlib.run(benchlib.Results("served_versions"), lambda: asyncio.run(main(a.objects, a.rounds)))
