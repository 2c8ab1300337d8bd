"""NetworkPolicy benchmark: programming N policies over P local pods, and applying one policy change.

Prints (issue 8, item 4/5; no target given, the proxy's are <= 1 s for a full program and p99 <= 50 ms per
change):
- full program from an empty table through the Enforcer (compile + render + diff + one libnftables transaction),
  with compile+render and the kernel apply split;
- the baseline measured in the same run: the same rule set loaded by one `nft -f` process;
- one policy change (a policy's port) applied incrementally (enforcer.sync_once: recompile and re-render that
  policy and the pods it selects, diff, one small transaction), p50/p99 over K changes (issue 19's target:
  p99 <= 50 ms with 1,000 policies), next to the baseline of re-loading the whole table per change
  (delete + `nft -f`, one transaction too);
- process RSS.

Usage (root): python bench/netpol.py [--policies 1000] [--pods 1000] [--namespaces 10] [--changes 50] [--json FILE]
Exits 1, the error on the last line, when an nftables load fails (not root: "not measured").
Everything happens in a netns created here (`ltest-bench-<hex>-netpol`), removed at the end, also on failure.
Nothing touches the host netns. Figures are printed, never asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import benchlib
from benchlib import BenchFailed

from lite.agent.netpol.enforcer import Enforcer
from lite.netns import nftstate
from lite.netns.nftables import AsyncNft


def pod(i: int, namespaces: int) -> dict[str, Any]:
    return {"metadata": {"namespace": f"ns{i % namespaces}", "name": f"pod{i}", "uid": f"u{i}",
                         "labels": {"app": f"app{i % 100}", "tier": "web" if i % 2 else "db"}},
            "spec": {"nodeName": "n1", "containers": [{"ports": [{"name": "http", "containerPort": 8080}]}]},
            "status": {"podIP": f"10.42.{i // 250}.{i % 250 + 2}"}}


def policy(i: int, namespaces: int, port: int = 8080) -> dict[str, Any]:
    """Policy i selects app<i % 100> in its namespace; ingress from team namespaces' web tier, egress to db."""
    peer = {"namespaceSelector": {"matchLabels": {"team": f"t{i % 3}"}},
            "podSelector": {"matchLabels": {"tier": "web"}}}
    return {"metadata": {"namespace": f"ns{i % namespaces}", "name": f"pol{i}"},
            "spec": {"podSelector": {"matchLabels": {"app": f"app{i % 100}"}},
                     "policyTypes": ["Ingress", "Egress"],
                     "ingress": [{"from": [peer], "ports": [{"port": port}, {"port": "http"}]}],
                     "egress": [{"to": [{"podSelector": {"matchLabels": {"tier": "db"}}},
                                        {"ipBlock": {"cidr": "10.0.0.0/8", "except": ["10.42.0.0/16"]}}]}]}}


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def nft_file(netns: str, text: str) -> float:
    with tempfile.NamedTemporaryFile("w", suffix=".nft") as f:
        f.write(text)
        f.flush()
        start = time.perf_counter()
        nft_load(netns, f.name)
        return time.perf_counter() - start


def nft_load(netns: str, path: str) -> None:
    done = subprocess.run(["ip", "netns", "exec", netns, "nft", "-f", path], capture_output=True, text=True)
    if done.returncode != 0:
        raise BenchFailed(f"nft -f in {netns} exited {done.returncode}: {done.stderr[-500:]}")


async def run(netns: str, n_policies: int, n_pods: int, n_namespaces: int, n_changes: int,
              res: benchlib.Results) -> None:
    pods = [pod(i, n_namespaces) for i in range(n_pods)]
    namespaces = [{"metadata": {"name": f"ns{i}", "labels": {"team": f"t{i % 3}"}}} for i in range(n_namespaces)]
    policies = [policy(i, n_namespaces) for i in range(n_policies)]
    nft = AsyncNft(netns)
    try:
        enforcer = Enforcer("n1", nft, min_interval=0)
        enforcer.replace({"PolicyPod": pods, "Namespace": namespaces, "NetworkPolicy": policies})
        start = time.perf_counter()
        compiled, table = enforcer.desired()
        build = time.perf_counter() - start
        start = time.perf_counter()
        await enforcer.sync_once()
        full = time.perf_counter() - start
        chains = len(table.chains)
        rules = sum(len(c.rules or ()) for c in table.chains.values())
        text = nftstate.transaction(None, table)
        await enforcer.syncer.delete()
        base_full = nft_file(netns, text)
        print(f"{n_policies} policies, {n_pods} local pods ({len(compiled)} isolated), {chains} chains, "
              f"{rules} rules")
        print(f"full program via Enforcer:   {full * 1000:8.1f} ms  (compile+render {build * 1000:.1f} ms)")
        print(f"baseline `nft -f` same rules:{base_full * 1000:8.1f} ms")

        enforcer = Enforcer("n1", nft, min_interval=0)  # reconciles the table nft -f left
        enforcer.replace({"PolicyPod": pods, "Namespace": namespaces, "NetworkPolicy": policies})
        await enforcer.sync_once()
        inc: list[float] = []
        builds: list[float] = []
        commands: list[int] = []
        for k in range(n_changes):
            i = k % n_policies
            enforcer.set("NetworkPolicy", policy(i, n_namespaces, port=9000 + k))
            start = time.perf_counter()
            enforcer.desired()
            builds.append(time.perf_counter() - start)
            start = time.perf_counter()
            changed = await enforcer.sync_once()
            inc.append(time.perf_counter() - start)
            res.count(changed, f"change {k} (policy pol{i}'s port) programmed nothing")
            commands.append(enforcer.syncer.last_commands)
        base: list[float] = []
        for _ in range(min(n_changes, 10)):
            with tempfile.NamedTemporaryFile("w", suffix=".nft") as f:
                f.write(f"delete table inet lite-policy\n{text}")
                f.flush()
                start = time.perf_counter()
                nft_load(netns, f.name)
                base.append(time.perf_counter() - start)
        print(f"one policy change, incremental: p50 {pct(inc, 0.5) * 1000:7.1f} ms  p99 {pct(inc, 0.99) * 1000:7.1f} ms"
              f"  ({statistics.mean(commands):.0f} nft commands each; compile+render p50 "
              f"{pct(builds, 0.5) * 1000:.1f} ms)")
        print(f"baseline full reload per change: p50 {pct(base, 0.5) * 1000:7.1f} ms  "
              f"p99 {pct(base, 0.99) * 1000:7.1f} ms")
        res.set("policies", n_policies)
        res.set("full_program_ms", full * 1000)
        res.set("full_program_nft_f_ms", base_full * 1000)
        res.set("change_p50_ms", pct(inc, 0.5) * 1000)
        res.set("change_p99_ms", pct(inc, 0.99) * 1000)
        res.set("full_reload_p99_ms", pct(base, 0.99) * 1000)
        print(f"RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")
    finally:
        nft.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--policies", type=int, default=1000)
    parser.add_argument("--pods", type=int, default=1000)
    parser.add_argument("--namespaces", type=int, default=10)
    parser.add_argument("--changes", type=int, default=50)
    benchlib.add_args(parser)
    args = parser.parse_args()
    res = benchlib.Results.from_args("netpol", args)
    if os.geteuid() != 0:
        res.skip("needs root (a network namespace and nftables)")
    if shutil.which("nft") is None:
        res.skip("nft not installed (apt-get install nftables)")

    def body() -> None:
        netns = f"ltest-bench-{secrets.token_hex(3)}-netpol"
        subprocess.run(["ip", "netns", "add", netns], check=True)
        try:
            asyncio.run(run(netns, args.policies, args.pods, args.namespaces, args.changes, res))
        finally:
            subprocess.run(["ip", "netns", "del", netns], check=False)

    benchlib.run(res, body)


if __name__ == "__main__":
    main()
