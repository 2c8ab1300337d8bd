"""Pod network benchmark: per-pod setup and teardown time of lite.netns for N pods (default 50).

Prints, for one pass sequentially and one pass with all pods at once (asyncio.gather): setup per pod (mean,
median, p90) and pods/s, teardown per pod, and the load average (the measurement VM is shared and noisy: compare
only runs with similar load). Connectivity is checked once per pass (first pod pings the last and the node).

Usage (root): python bench/netns.py [--pods 50] [--passes 2]
Everything happens in a node netns created here (`ltest-bench-<hex>-node`) and in the pods' own netns; all of
it is removed at the end, also on failure. Nothing touches the host netns.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

sys.path.insert(0, str(Path(__file__).resolve().parent))

import benchlib
from benchlib import BenchFailed

from lite.netns import bridge, nsfs, pod
from lite.netns.ipam import Ipam


def summary(label: str, seconds: list[float]) -> str:
    ms = sorted(s * 1000 for s in seconds)
    p90 = ms[int(len(ms) * 0.9) - 1] if len(ms) >= 10 else ms[-1]
    return f"{label}: mean {statistics.mean(ms):.2f} ms, median {statistics.median(ms):.2f} ms, p90 {p90:.2f} ms"


def ping(netns: str, address: str) -> bool:
    done = subprocess.run(["ip", "netns", "exec", netns, "ping", "-c1", "-W1", address], capture_output=True)
    return done.returncode == 0


async def timed(coro_fn, *args, **kwargs) -> float:  # type: ignore[no-untyped-def]
    start = time.perf_counter()
    await coro_fn(*args, **kwargs)
    return time.perf_counter() - start


async def one_pass(node: str, prefix: str, ipam: Ipam, pods: int, concurrent: bool) -> None:
    ids = [f"{prefix}-{concurrent:d}-{i}" for i in range(pods)]
    kwargs = {"node_netns": node}
    setups = [(pid, ipam.allocate(pid)) for pid in ids]
    start = time.perf_counter()
    if concurrent:
        setup_times = await asyncio.gather(
            *(timed(pod.setup_pod_network, pid, addr, ipam.gateway, ipam.prefixlen, **kwargs) for pid, addr in setups)
        )
    else:
        setup_times = [
            await timed(pod.setup_pod_network, pid, addr, ipam.gateway, ipam.prefixlen, **kwargs)
            for pid, addr in setups
        ]
    wall = time.perf_counter() - start
    mode = "concurrent" if concurrent else "sequential"
    print(summary(f"  {mode} setup   ", list(setup_times)) + f"; {pods / wall:.0f} pods/s ({wall * 1000:.0f} ms wall)")
    first, last = setups[0], setups[-1]
    reachable = ping(pod.netns_name(first[0]), str(last[1])) and ping(pod.netns_name(first[0]), str(ipam.gateway))
    print(f"  connectivity (first pod -> last pod, -> node): {'OK' if reachable else 'FAILED'}")
    if not reachable:  # set up fast but broken: not a figure (the teardown below still runs first)
        failed = BenchFailed(f"{mode} pass: the first pod cannot reach the last pod or the node")
    start = time.perf_counter()
    if concurrent:
        down = await asyncio.gather(*(timed(pod.teardown_pod_network, pid, **kwargs) for pid in ids))
    else:
        down = [await timed(pod.teardown_pod_network, pid, **kwargs) for pid in ids]
    wall = time.perf_counter() - start
    print(summary(f"  {mode} teardown", list(down)) + f"; {pods / wall:.0f} pods/s")
    ipam.reconcile([])
    if not reachable:
        raise failed


async def main(pods: int, passes: int, workdir: Path) -> None:
    prefix = f"ltest-bench-{secrets.token_hex(3)}"
    node = f"{prefix}-node"
    subprocess.run(["ip", "netns", "add", node], check=True)
    try:
        ipam = Ipam(workdir / "ipam.json", "10.42.0.0/16")
        await bridge.ensure_bridge("lite0", f"{ipam.gateway}/{ipam.prefixlen}", node_netns=node)
        for n in range(passes):
            print(f"pass {n + 1}: {pods} pods, load average {os.getloadavg()[0]:.2f}")
            await one_pass(node, prefix, ipam, pods, concurrent=False)
            await one_pass(node, prefix, ipam, pods, concurrent=True)
    finally:
        for pid in pod.list_pod_netns():
            if pid.startswith(prefix):
                nsfs.remove_netns(pod.pod_netns_path(pid))
        subprocess.run(["ip", "netns", "del", node], check=False)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=50)
    parser.add_argument("--passes", type=int, default=2)
    args = parser.parse_args()
    results = benchlib.Results("netns")
    if os.geteuid() != 0:
        results.skip("needs root (network namespaces)")

    def body() -> None:
        with tempfile.TemporaryDirectory(prefix="lite-bench-netns-") as tmp:
            asyncio.run(main(args.pods, args.passes, Path(tmp)))

    benchlib.run(results, body)
