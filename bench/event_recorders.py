"""Cost of recording an event: the scheduler's recorder (events.k8s.io/v1 with series) against the core/v1
recorder the controllers use (the baseline), in process, in the same run over the same real Store.

Two cases, each timed for both recorders:
- distinct: `--events` events about as many different pods (every one a create);
- repeats: `--events` repeats of one event about one pod (core: a patch of count each time; series: a patch
  at the second, then counted in memory until the sweeps, as upstream's recorder).
Prints microseconds per recorded event and the ratio series/core. Both recorders swallow API errors (they are
best effort), so the store is checked afterwards: the bench exits non-zero if an event is missing or a count
is wrong.

Usage: python bench/event_recorders.py [--events 2000] [--rounds 3]
Touches only a temporary directory.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from typing import Any

from lite.events import EventRecorder, SeriesRecorder
from lite.kinds import BUILTIN_KINDS, KindRegistry
from lite.server.api.resources import Resources
from lite.server.api.strategies import default_strategies
from lite.server.store import Store

EVENT = next(k for k in BUILTIN_KINDS if k.group == "" and k.kind == "Event")
NAMESPACE = next(k for k in BUILTIN_KINDS if k.group == "" and k.kind == "Namespace")


def pod(ns: str, i: int) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"p{i}", "namespace": ns, "uid": f"uid-{ns}-{i}", "resourceVersion": "1"}}


def recorder_op(res: Resources, name: str, ns: str, case: str) -> Callable[[int], Awaitable[None]]:
    """Record event i (about pod i, or always pod 0 for repeats) with a fresh recorder of kind `name`."""
    core = EventRecorder(res, "bench-controller")
    series = SeriesRecorder(res, "bench-scheduler", "bench-scheduler-1")

    async def op(i: int) -> None:
        regarding = pod(ns, i if case == "distinct" else 0)
        if name == "core":
            await core.warning(regarding, "FailedX", "no room")
        else:
            await series.eventf(regarding, None, "Warning", "FailedX", "Scheduling", "no room")
    return op


async def timed(n: int, op: Callable[[int], Awaitable[None]]) -> float:
    start = time.perf_counter()
    for i in range(n):
        await op(i)
    return (time.perf_counter() - start) / n * 1e6


async def run(n: int, rounds: int) -> int:
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        store = await Store.open(f"{tmp}/state.db")
        try:
            res = Resources(store, KindRegistry(), default_strategies())
            print(f"{'case':10} {'core us/event':>14} {'series us/event':>16} {'ratio':>7}")
            for case in ("distinct", "repeats"):
                best: dict[str, float] = {}
                for r in range(rounds):
                    for name in ("core", "series"):
                        ns = f"{case}-{name}-{r}"
                        await res.create(NAMESPACE, "", {"metadata": {"name": ns}})
                        op = recorder_op(res, name, ns, case)
                        us = await timed(n, op)
                        best[name] = min(best.get(name, us), us)
                        failures += check(await res.list(EVENT, ns), case, name, n)
                print(f"{case:10} {best['core']:14.0f} {best['series']:16.0f} {best['series'] / best['core']:7.2f}")
        finally:
            await store.close()
    return failures


def check(listed: dict[str, Any], case: str, name: str, n: int) -> int:
    items = listed["items"]
    if case == "distinct":
        ok = len(items) == n
    elif name == "core":
        ok = len(items) == 1 and items[0].get("count") == n
    else:  # count 2 written at once; the rest waits for the sweeps
        ok = len(items) == 1 and (items[0].get("series") or {}).get("count") == 2
    if not ok:
        print(f"  {case}/{name}: {len(items)} events stored, wrong", file=sys.stderr)
    return 0 if ok else 1


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--events", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    failures = asyncio.run(run(args.events, args.rounds))
    if failures:
        raise RuntimeError(f"{failures} recorder runs stored the wrong events (see above)")


if __name__ == "__main__":
    import benchlib  # bench/ is on sys.path: the script's own directory

    benchlib.run(benchlib.Results("event_recorders"), main)
