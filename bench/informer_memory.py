"""Memory per stored pod in the server's in-process caches: the store's bytes and the pod informer's objects.

A real `lite server` (API alone) stores N bench pods (bench/api.py's ~2 KB pods, which the server's defaults and
managedFields make ~5 KB of JSON), then stops; the store file is opened in this process and a pod informer is
synced from the real in-process API (`Resources`) twice in the same run:
- baseline: `SharedInformers(transform=None)`, one plainly decoded object per pod;
- lite: `SharedInformers()` as the server builds it (`ShareCommonParts`: shared parts, interned strings).
For each it prints the bytes each cached pod holds (tracemalloc, after a collection) and the CPU of the sync
per pod (list, decode, transform, index), with the ratio to the baseline.

Usage: python bench/informer_memory.py [--pods 10000] [--quick] [--json FILE]
Exits 1, the error on the last line, when a create fails or not every pod was stored.
Traffic goes only to 127.0.0.1; the server is a child process and is stopped before the measurement.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

import benchlib
from api import API_ONLY, create_burst, ensure_namespace, start_lite

from lite.informer import SharedInformers, Transform
from lite.kinds import KindRegistry
from lite.server.api.resources import Resources
from lite.server.api.strategies import default_strategies
from lite.server.store import Store


async def fill(data: Path, pods: int) -> None:
    lite, _ = await start_lite(data, *API_ONLY)
    try:
        await ensure_namespace(lite, "bench")
        rate, _lat = await create_burst(lite, "/api/v1/namespaces/bench/pods", pods, 64, "m")
        print(f"stored {pods} pods through the API ({rate:.0f} creates/s)")
    finally:
        lite.stop()


async def sync(api: Resources, transform: Transform | bool | None, pods: int, trace: bool) -> float:
    """Bytes per cached pod (`trace`; tracemalloc distorts CPU) or CPU seconds per pod of the sync of a pod
    informer with `transform`."""
    kinds = KindRegistry()
    pod = kinds.by_gvk("", "v1", "Pod")
    assert pod is not None
    gc.collect()
    if trace:
        tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    informers = SharedInformers(api, transform=transform)
    inf = informers.informer(pod, "bench")
    started = time.process_time()
    task = asyncio.create_task(informers.run())
    try:
        await asyncio.wait_for(informers.wait_synced(), 300)
        cpu = time.process_time() - started
        if len(inf) != pods:
            raise RuntimeError(f"the informer holds {len(inf)} pods, {pods} were stored")
        gc.collect()
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        tracemalloc.stop()
    return held / pods if trace else cpu / pods


async def main(args: argparse.Namespace, res: benchlib.Results) -> None:
    pods = 2000 if args.quick else args.pods
    gc.set_threshold(50_000, 20, 100)  # as the server runs (lite.server.main._tune_gc)
    with tempfile.TemporaryDirectory(prefix="lite-bench-") as tmp:
        data = Path(tmp) / "lite"
        await fill(data, pods)
        store = await Store.open(str(data / "server" / "db" / "state.db"))
        try:
            api = Resources(store, KindRegistry(), default_strategies())
            items, _rev, _ = store.list("core/pods/bench/")
            if len(items) != pods:
                raise benchlib.BenchFailed(f"{len(items)} of {pods} pods stored")
            stored = sum(len(v) for _k, _r, v in items) / len(items)
            held = [await sync(api, t, pods, True) for t in (None, True)]
            # A B A B A B: the machine is shared, so each CPU figure is the best of three runs
            cpu = [await sync(api, t, pods, False) for t in (None, True) * 3]
        finally:
            await store.close()
    base = (held[0], min(cpu[0::2]))
    lite = (held[1], min(cpu[1::2]))
    print(f"== in-process caches per stored pod ({pods} bench pods) ==")
    print(f"store (bytes of the JSON, index and watch window share them): {stored:8.0f} B/pod")
    print(f"pod informer, plainly decoded (baseline):                    {base[0]:8.0f} B/pod  "
          f"sync {base[1] * 1e6:6.0f} us/pod")
    print(f"pod informer, shared parts (lite):                           {lite[0]:8.0f} B/pod  "
          f"sync {lite[1] * 1e6:6.0f} us/pod")
    print(f"ratio lite/baseline: memory {lite[0] / base[0]:.2f}, sync CPU {lite[1] / base[1]:.2f}")
    res.set("stored_bytes_per_pod", stored)
    res.set("plain_informer_bytes_per_pod", base[0])
    res.set("shared_informer_bytes_per_pod", lite[0])
    res.set("memory_ratio", lite[0] / base[0])
    res.set("sync_cpu_ratio", lite[1] / base[1])
    sys.stdout.flush()


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--pods", type=int, default=10000)
    ap.add_argument("--quick", action="store_true", help="2,000 pods")
    benchlib.add_args(ap)
    cli = ap.parse_args()
    results = benchlib.Results.from_args("informer_memory", cli)
    benchlib.run(results, lambda: asyncio.run(main(cli, results)))
