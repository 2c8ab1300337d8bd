"""Edge autonomy figures (issue 21) on the three-node netns cluster, each against a baseline of the same run.

- start to answering: from `lite agent` starting on node 2 after a "reboot" (agent SIGKILLed, `lite killall`
  of its data dir: no pod process, netns, mount, bridge or nft table left) to every pod of the node running
  again and the Service answering on its ClusterIP from the node's own netns. Cut off (its link to the server
  down: the node runs from its cache) versus the same reboot with the server reachable (baseline), in
  interleaved rounds (A B A B).
- cache size on disk per pod: the bytes the node's desired-state cache (`<data-dir>/agent/cache/`) takes on disk
  (allocated blocks, and the files' own sizes) divided by the node's pods, versus the pods' own JSON as the API
  serves it (baseline: the mean `kubectl get pod -o json` size).
- the agent's RSS with the cache loaded (cut off, after its pods answer) versus the same agent started cut off
  with an empty cache and no pod directory (baseline: it runs nothing). RSS of the agent process only (the
  containers' shims are separate processes).

Usage (root): python bench/edge.py [--pods 4] [--rounds 2] [--settle 8]
The cluster lives in network namespaces made here (tests/helpers/netcluster.py) and is removed at the end, also
on failure; nothing touches the host netns. Any pod that does not come back, any request that fails, counts as
a failure (exit status 1). Figures are printed, never asserted. On a shared 2-core machine rounds vary by tens
of percent: read the ratios, and re-run before drawing conclusions.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import benchlib

from tests.helpers import edgekit as kit
from tests.helpers.netcluster import (
    NetCluster,
    NetNode,
    cut,
    kill_agent,
    killall,
    net_cluster,
    pods_running_on,
    reboot,
    restore,
    running_ready,
    start_agent,
)


def rss_kb(node: NetNode) -> int:
    """VmRSS of the node's agent (nsenter execs it: the Popen's pid is the agent's)."""
    assert node.proc is not None
    for line in Path(f"/proc/{node.proc.pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def disk_bytes(root: Path) -> tuple[int, int, int]:
    """(allocated bytes, sum of file sizes, file count) below `root`."""
    alloc = size = files = 0
    for p in root.rglob("*"):
        if p.is_file() and not p.is_symlink():
            st = p.stat()
            alloc += st.st_blocks * 512
            size += st.st_size
            files += 1
    return alloc, size, files


def comes_back(c: NetCluster, node: NetNode, uids: set[str], web_ip: str, started: float, timeout: float,
               results: benchlib.Results, what: str) -> float | None:
    """Seconds from `started` until every pod in `uids` has a process on the node and the Service answers from
    the node; None (counted as a failure) after `timeout`."""
    up = False
    while time.monotonic() < started + timeout:
        up = up or uids <= pods_running_on(node)
        if up and kit.node_get(c, node, f"http://{web_ip}/", timeout=1):
            return time.monotonic() - started
        time.sleep(0.1)
    results.count(False, f"{what}: pods {sorted(uids - pods_running_on(node))} not back in {timeout:.0f} s\n"
                         f"{c.log_tails()}")
    return None


def settled(c: NetCluster, uids: set[str]) -> bool:
    pods = c.pods("app=web")
    return {p["metadata"]["uid"] for p in pods} == uids and all(running_ready(p) for p in pods)


def rounds(c: NetCluster, node: NetNode, uids: set[str], web_ip: str, args: argparse.Namespace,
           results: benchlib.Results) -> dict[str, list[float]]:
    got: dict[str, list[float]] = {"connected": [], "cut": [], "rss_loaded": []}
    for _ in range(args.rounds):
        for mode in ("connected", "cut"):
            if mode == "cut":
                cut(c, node)
            started = reboot(c, node)
            secs = comes_back(c, node, uids, web_ip, started, args.timeout, results, f"{mode} reboot")
            if secs is not None:
                got[mode].append(secs)
            if mode == "cut":
                time.sleep(max(0.0, started + args.settle - time.monotonic()))
                got["rss_loaded"].append(rss_kb(node) / 1024)
                restore(c, node)
            c.wait(lambda: settled(c, uids), "the node's pods Running again on the server", timeout=120)
    return got


def empty_cache_rss(c: NetCluster, node: NetNode, args: argparse.Namespace) -> float:
    """The agent started cut off with no cache and no pod directory (both moved aside, then put back)."""
    agent = node.data_dir / "agent"
    aside = node.data_dir.parent / "aside"
    aside.mkdir()
    cut(c, node)
    try:
        kill_agent(node)
        killall(c, node)
        for name in ("cache", "pods"):
            if (agent / name).exists():
                shutil.move(agent / name, aside / name)
        start_agent(c, node)
        time.sleep(args.settle)
        if node.proc is None or node.proc.poll() is not None:
            raise benchlib.BenchFailed(f"the agent exited when started cut off with an empty cache\n{c.log_tails()}")
        return rss_kb(node) / 1024
    finally:
        kill_agent(node)
        killall(c, node)
        for name in ("cache", "pods"):
            if (aside / name).exists():
                shutil.rmtree(agent / name, ignore_errors=True)
                shutil.move(aside / name, agent / name)
        restore(c, node)
        start_agent(c, node)


def body(args: argparse.Namespace, results: benchlib.Results) -> None:
    with tempfile.TemporaryDirectory(prefix="lite-bench-edge-") as tmp, net_cluster(Path(tmp)) as c:
        node = c.nodes[1]
        c.apply([*kit.config("v1", "s1"), *kit.web(node.name, args.pods)])
        pods = c.wait_running("app=web", args.pods)
        uids = {p["metadata"]["uid"] for p in pods}
        web_ip = c.json("get", "svc", "web")["spec"]["clusterIP"]
        pod_json = statistics.mean(len(json.dumps(c.json("get", "pod", p["metadata"]["name"]))) for p in pods)
        got = rounds(c, node, uids, web_ip, args, results)
        cache = node.data_dir / "agent" / "cache"
        if not cache.is_dir():
            results.fail(f"no cache at {cache}")
        alloc, size, files = disk_bytes(cache)
        empty = empty_cache_rss(c, node, args)
        c.wait(lambda: settled(c, uids), "the node's pods Running again after the empty-cache run", timeout=120)

    def med(xs: list[float]) -> float | None:
        return statistics.median(xs) if xs else None

    cut_s, conn_s, loaded = med(got["cut"]), med(got["connected"]), med(got["rss_loaded"])
    results.set("cut_start_to_answer_s", cut_s)
    results.set("connected_start_to_answer_s", conn_s)
    results.set("cache_bytes_per_pod", alloc / args.pods)
    results.set("cache_file_bytes_per_pod", size / args.pods)
    results.set("pod_json_bytes", pod_json)
    results.set("agent_rss_cache_loaded_mb", loaded)
    results.set("agent_rss_empty_cache_mb", empty)
    print(f"edge autonomy: node 2 with {args.pods} pods (Deployment + ConfigMap + Secret + Service), "
          f"{args.rounds} interleaved rounds")
    rounds_txt = " ".join(f"{x:.1f}" for x in got["cut"])
    base_txt = " ".join(f"{x:.1f}" for x in got["connected"])
    if cut_s is not None and conn_s is not None:
        print(f"  reboot → pods answering, cut off      median {cut_s:6.2f} s  (rounds {rounds_txt})"
              f"   ratio {cut_s / conn_s:.2f}")
        print(f"  baseline: the same, server reachable  median {conn_s:6.2f} s  (rounds {base_txt})")
    print(f"  cache on disk per pod                 {alloc / args.pods:8.0f} B allocated, "
          f"{size / args.pods:.0f} B of files ({files} files)   ratio {size / args.pods / pod_json:.2f}")
    print(f"  baseline: a pod's own JSON            {pod_json:8.0f} B")
    if loaded is not None:
        print(f"  agent RSS, cache loaded (cut off)     {loaded:8.1f} MB   +{loaded - empty:.1f} MB for the cache "
              f"and the {args.pods} pods it runs ({(loaded - empty) * 1024 / args.pods:.0f} KB per pod)")
    print(f"  baseline: agent RSS, empty cache      {empty:8.1f} MB")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--pods", type=int, default=4, help="web replicas on the edge node")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--settle", type=float, default=8.0, help="seconds after the agent's start to read RSS")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds for the pods to come back")
    benchlib.add_args(parser)
    args = parser.parse_args()
    results = benchlib.Results.from_args("edge", args)
    if os.geteuid() != 0 or not shutil.which("nsenter"):
        results.skip("needs root and nsenter (network namespaces)")
    benchlib.run(results, lambda: body(args, results))


if __name__ == "__main__":
    main()
