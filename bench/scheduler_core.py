"""Scheduler core benchmark: the real scheduler in process over a real Resources + SQLite Store.

Creates N nodes (4 cpu, 16Gi, 110 pods) and P pending pods (100m / 128Mi each) before the scheduler
starts, then starts the shared informers and the scheduler and times until every pod is bound
(the binding writes go through Resources into the store, as in the server). No simulated kubelets.

Prints pods/s bound (wall clock), pods per CPU-second of this process (the figure to trust when other work
shares the machine), the time to sync the informers, and the spread of pods over nodes.

With --services, 50 Services select the pods (as in a real cluster, where pods belong to workloads), so the
system default topology spreading is scored too.

Usage: python bench/scheduler_core.py [--nodes 1000] [--pods 10000] [--services] [--no-scheduled-events] [--profile]
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import pstats
import tempfile
import time
from pathlib import Path

from lite.informer import SharedInformers
from lite.kinds import BUILTIN_KINDS, KindRegistry
from lite.server.api.resources import Resources
from lite.server.api.strategies import default_strategies
from lite.server.scheduler.scheduler import build_scheduler
from lite.server.store.store import Store

POD = next(k for k in BUILTIN_KINDS if k.group == "" and k.kind == "Pod")
NODE = next(k for k in BUILTIN_KINDS if k.group == "" and k.kind == "Node")
SVC = next(k for k in BUILTIN_KINDS if k.group == "" and k.kind == "Service")


def make_node(i: int) -> dict[str, object]:
    alloc = {"cpu": "4", "memory": "16Gi", "pods": "110", "ephemeral-storage": "100Gi"}
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": f"node-{i:04d}", "labels": {"kubernetes.io/hostname": f"node-{i:04d}",
                                                              "topology.kubernetes.io/zone": f"zone-{i % 3}"}},
            "status": {"capacity": dict(alloc), "allocatable": alloc}}


def make_pod(i: int) -> dict[str, object]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"pod-{i:05d}", "namespace": "default", "labels": {"app": f"app-{i % 50}"}},
            "spec": {"containers": [{"name": "c", "image": "nginx:1.27",
                                     "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}}}]}}


def make_service(i: int) -> dict[str, object]:
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": f"app-{i}", "namespace": "default"},
            "spec": {"selector": {"app": f"app-{i}"}, "ports": [{"port": 80}]}}


async def create_all(api: Resources, kind_objs: list[tuple[object, dict[str, object]]], concurrency: int) -> None:
    sem = asyncio.Semaphore(concurrency)

    async def one(kind: object, obj: dict[str, object]) -> None:
        async with sem:
            ns = "" if obj["kind"] == "Node" else "default"
            await api.create(kind, ns, obj)  # type: ignore[arg-type]

    await asyncio.gather(*(one(k, o) for k, o in kind_objs))


async def main(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        store = await Store.open(str(Path(tmp) / "state.db"))
        api = Resources(store, KindRegistry(), default_strategies())
        await api.start()
        t0 = time.perf_counter()
        await create_all(api, [(NODE, make_node(i)) for i in range(args.nodes)], 64)
        if args.services:
            await create_all(api, [(SVC, make_service(i)) for i in range(50)], 64)
        await create_all(api, [(POD, make_pod(i)) for i in range(args.pods)], 64)
        print(f"created {args.nodes} nodes and {args.pods} pods in {time.perf_counter() - t0:.1f}s")

        informers = SharedInformers(api)
        sched = build_scheduler(api, informers, scheduled_events=not args.no_scheduled_events)
        prof = cProfile.Profile() if args.profile else None
        t1 = time.perf_counter()
        async with asyncio.TaskGroup() as tg:
            inf_task = tg.create_task(informers.run())
            await informers.wait_synced()
            t_sync = time.perf_counter() - t1
            if prof:
                prof.enable()
            t2, cpu2 = time.perf_counter(), time.process_time()
            sched_task = tg.create_task(sched.run())
            while sched.bound < args.pods:
                await asyncio.sleep(0.05)
            elapsed, cpu = time.perf_counter() - t2, time.process_time() - cpu2
            if prof:
                prof.disable()
            sched_task.cancel()
            inf_task.cancel()
        items = (await api.list(POD, "default"))["items"]
        per_node: dict[str, int] = {}
        for p in items:
            n = p["spec"].get("nodeName")
            if n:
                per_node[n] = per_node.get(n, 0) + 1
        await store.close()
    bound = sum(per_node.values())
    print(f"informer sync: {t_sync:.2f}s")
    print(f"bound {bound}/{args.pods} pods on {len(per_node)} nodes in {elapsed:.2f}s: "
          f"{args.pods / elapsed:.0f} pods/s")
    print(f"process CPU {cpu:.2f}s: {args.pods / cpu:.0f} pods per CPU-second (robust to a loaded machine)")
    print(f"pods per node: min {min(per_node.values())} max {max(per_node.values())}")
    if prof:
        pstats.Stats(prof).sort_stats("cumulative").print_stats(35)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--pods", type=int, default=10000)
    ap.add_argument("--no-scheduled-events", action="store_true")
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--services", action="store_true",
                    help="50 Services select the pods, so upstream's default topology spreading applies")
    import benchlib  # bench/ is on sys.path: the script's own directory

    benchlib.run(benchlib.Results("scheduler_core"), lambda: asyncio.run(main(ap.parse_args())))
