"""Service proxy benchmark: programming N Services x M endpoints, and applying one endpoint change.

Prints (issue 8, item 2; targets: full program <= 1 s for 1,000 x 10, one endpoint change p99 <= 50 ms):
- full program from an empty table through the proxier (translate + diff + one libnftables transaction), with
  the time split into translation and the kernel apply;
- the baseline measured in the same run: the same rule set loaded by one `nft -f` process (how shell-based
  proxies do it);
- one endpoint change applied incrementally (proxier.sync_once: translate all, diff, one small transaction),
  p50/p99 over K changes, next to the baseline of re-loading the whole table per change (delete + `nft -f`,
  in one transaction too);
- process RSS and CPU seconds spent by the syncer.

Usage (root): python bench/network.py [--services 1000] [--endpoints 10] [--changes 100]
Everything happens in a netns created here (`ltest-bench-<hex>-proxy`), removed at the end, also on failure.
Nothing touches the host netns. Figures are printed, never asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from lite.agent.proxy.endpoints import service_ports
from lite.agent.proxy.proxier import Proxier
from lite.agent.proxy.rules import ProxyConfig, table_for
from lite.netns import nftstate
from lite.netns.nftables import AsyncNft
from lite.netns.proxysync import TableSyncer

CONFIG = ProxyConfig("n1", ("10.99.0.1",), "10.42.0.0/16")


def service(i: int) -> dict[str, Any]:
    spec = {"clusterIP": f"10.43.{i // 250}.{i % 250 + 1}", "ports": [{"name": "http", "port": 80, "protocol": "TCP"}]}
    return {"metadata": {"namespace": "bench", "name": f"svc{i}"}, "spec": spec}


def endpoint_slice(i: int, endpoints: int, salt: int = 0) -> dict[str, Any]:
    meta = {"namespace": "bench", "name": f"svc{i}-1", "labels": {"kubernetes.io/service-name": f"svc{i}"}}
    eps = [
        {"addresses": [f"10.42.{(i * endpoints + j + salt) // 250 % 250}.{(i * endpoints + j + salt) % 250 + 2}"]}
        for j in range(endpoints)
    ]
    return {"metadata": meta, "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}], "endpoints": eps}


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))]


def rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def nft_file(netns: str, text: str) -> float:
    with tempfile.NamedTemporaryFile("w", suffix=".nft") as f:
        f.write(text)
        f.flush()
        start = time.perf_counter()
        subprocess.run(["ip", "netns", "exec", netns, "nft", "-f", f.name], check=True)
        return time.perf_counter() - start


async def run(netns: str, n_services: int, n_endpoints: int, n_changes: int) -> None:
    services = [service(i) for i in range(n_services)]
    slices = [endpoint_slice(i, n_endpoints) for i in range(n_services)]
    rss0, cpu0 = rss_mib(), cpu_seconds()
    nft = AsyncNft(netns)
    try:
        # --- full program, split into its parts, then through the proxier for real
        t0 = time.perf_counter()
        desired = table_for(service_ports(services, slices), CONFIG)
        t1 = time.perf_counter()
        text = nftstate.transaction(None, desired)
        t2 = time.perf_counter()
        print(f"rule set: {len(desired.chains)} chains, {text.count(chr(10))} nft commands, {len(text) / 1e6:.1f} MB")
        print(f"  translate {1000 * (t1 - t0):.0f} ms, diff/render {1000 * (t2 - t1):.0f} ms")
        proxier = Proxier(CONFIG, TableSyncer(nft), netns=netns, min_interval=0)
        proxier.replace(services, slices)
        start = time.perf_counter()
        await proxier.sync_once()
        full = time.perf_counter() - start
        print(f"full program via proxier (translate + diff + one libnftables transaction): {1000 * full:.0f} ms")
        await nft.run("delete table ip lite")
        base_full = nft_file(netns, text)
        print(f"  baseline, same rules via one `nft -f` process: {1000 * base_full:.0f} ms")
        await nft.run("delete table ip lite")
        proxier = Proxier(CONFIG, TableSyncer(nft), netns=netns, min_interval=0)
        proxier.replace(services, slices)
        await proxier.sync_once()
        rss1 = rss_mib()

        # --- one endpoint change at a time
        latencies: list[float] = []
        cpu_before = cpu_seconds()
        for k in range(n_changes):
            i = (k * 7919) % n_services
            proxier.set_slice(endpoint_slice(i, n_endpoints, salt=k + 1))
            start = time.perf_counter()
            await proxier.sync_once()
            latencies.append(time.perf_counter() - start)
        cpu_changes = cpu_seconds() - cpu_before
        ms = [1000 * v for v in latencies]
        print(
            f"endpoint change, incremental ({n_changes}x): p50 {statistics.median(ms):.1f} ms, "
            f"p99 {pct(ms, 0.99):.1f} ms, CPU {1000 * cpu_changes / n_changes:.1f} ms/change"
        )
        base: list[float] = []
        current = [endpoint_slice(i, n_endpoints) for i in range(n_services)]
        for k in range(min(n_changes, 10)):
            i = (k * 7919) % n_services
            current[i] = endpoint_slice(i, n_endpoints, salt=k + 1000)
            start = time.perf_counter()
            reload = "delete table ip lite\n" + nftstate.transaction(
                None, table_for(service_ports(services, current), CONFIG)
            )
            with tempfile.NamedTemporaryFile("w", suffix=".nft") as f:
                f.write(reload)
                f.flush()
                subprocess.run(["ip", "netns", "exec", netns, "nft", "-f", f.name], check=True)
            base.append(time.perf_counter() - start)
        bms = [1000 * v for v in base]
        print(
            f"  baseline, full reload per change ({len(base)}x): "
            f"p50 {statistics.median(bms):.0f} ms, max {max(bms):.0f} ms"
        )
        print(
            f"process RSS: {rss0:.0f} MiB before, {rss1:.0f} MiB with {n_services} services programmed "
            f"(+{rss1 - rss0:.0f} MiB); CPU total {cpu_seconds() - cpu0:.1f} s"
        )
        print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    finally:
        nft.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--services", type=int, default=1000)
    parser.add_argument("--endpoints", type=int, default=10)
    parser.add_argument("--changes", type=int, default=100)
    args = parser.parse_args()
    netns = f"ltest-bench-{secrets.token_hex(3)}-proxy"
    subprocess.run(["ip", "netns", "add", netns], check=True)
    try:
        asyncio.run(run(netns, args.services, args.endpoints, args.changes))
    finally:
        subprocess.run(["ip", "netns", "del", netns], check=False)


if __name__ == "__main__":
    import benchlib  # bench/ is on sys.path: the script's own directory

    benchlib.run(benchlib.Results("network"), main)
