"""Rollout benchmark: a rolling update of a 1,000-replica Deployment on simulated nodes, against a real server.

Prints the time for the Deployment to reach all replicas Running (scale-up), then the duration of the
rolling update (image change → the `kubectl rollout status` completion condition: observedGeneration caught
up, updated = available = replicas, no old pods left), with the default 25 % maxSurge/maxUnavailable, and
the lowest number of available replicas seen while it ran. Server and `lite agent --simulate` are child
processes on 127.0.0.1 (helpers from bench/scheduler.py).

Usage: python bench/rollout.py [--nodes 100] [--replicas 1000] [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import time

from scheduler import DEPLOYMENT, POD, bench_cluster, cpu_seconds, create_namespace, deployment, rss_mb

from lite.httpclient import HttpClient


def complete(d: dict[str, object], replicas: int) -> bool:
    """kubectl's rollout-status condition."""
    meta, status = d["metadata"], d.get("status") or {}
    assert isinstance(meta, dict) and isinstance(status, dict)
    return (int(status.get("observedGeneration") or 0) >= int(meta.get("generation") or 0)
            and status.get("updatedReplicas") == replicas and status.get("replicas") == replicas
            and status.get("availableReplicas") == replicas)


async def wait_complete(admin: HttpClient, ns: str, name: str, replicas: int, lowest: list[int],
                        timeout: float = 900.0) -> float:
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        d = await admin.get(DEPLOYMENT, ns, name)
        lowest[0] = min(lowest[0], int((d.get("status") or {}).get("availableReplicas") or 0))
        if complete(d, replicas):
            pods = (await admin.list(POD, ns, label_selector=f"app={name}"))["items"]
            if len(pods) == replicas:  # old pods finalised too
                return time.monotonic() - start
        await asyncio.sleep(0.2)
    raise TimeoutError(f"rollout of {name} not complete after {timeout}s")


async def run(nodes: int, replicas: int) -> None:
    async with bench_cluster("rollout") as b:
        b.start_simulator(nodes, "--pods", "250")
        up = await b.wait_nodes(nodes)
        print(f"{nodes} simulated nodes Ready in {up:.1f} s")
        await create_namespace(b.admin, "bench")
        await b.admin.create(DEPLOYMENT, "bench", deployment("web", replicas))
        ignored = [replicas]
        scale_up = await wait_complete(b.admin, "bench", "web", replicas, ignored)
        print(f"Deployment of {replicas} replicas Running and available in {scale_up:.1f} s")
        cpu0 = cpu_seconds(b.server.pid)
        patch = {"spec": {"template": {"spec": {"containers": [{"name": "app",
                                                                "image": "registry.local/bench/app:2"}]}}}}
        lowest = [replicas]
        t0 = time.monotonic()
        await b.admin.patch(DEPLOYMENT, "bench", "web", patch, patch_type="strategic")
        took = await wait_complete(b.admin, "bench", "web", replicas, lowest)
        elapsed = time.monotonic() - t0
        rss, peak = rss_mb(b.server.pid)
        print(f"rolling update of {replicas} replicas: {took:.1f} s ({replicas / elapsed:.0f} pods replaced/s); "
              f"lowest available seen {lowest[0]} (floor {replicas - replicas // 4})")
        print(f"server CPU during the rollout: {cpu_seconds(b.server.pid) - cpu0:.1f} s; "
              f"RSS {rss:.0f} MB (peak {peak:.0f} MB)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=100)
    ap.add_argument("--replicas", type=int, default=1000)
    ap.add_argument("--quick", action="store_true", help="20 nodes, 200 replicas")
    args = ap.parse_args()
    if args.quick:
        args.nodes, args.replicas = 20, 200
    asyncio.run(run(args.nodes, args.replicas))


if __name__ == "__main__":
    import benchlib  # bench/ is on sys.path: the script's own directory

    benchlib.run(benchlib.Results("rollout"), main)
