"""Scheduler benchmark: 1,000 simulated nodes, 10,000 pods from Deployments, against a real `lite server`.

Prints (issue 3 targets in brackets): pods bound per second [>= 500/s], time from applying the Deployments
to all pods Running [<= 60 s], server RSS at the end [<= 300 MB]; also the time to bring the nodes up and
the simulator's RSS, and (informational, not the headline) the server's RSS once it has settled after the
last pod turned Running (under 5 % of a core, as bench/api.py's memory figures), and the server's CPU per pod
from apply to the last binding and to all Running (from /proc: the figure to compare on a shared machine,
where the rates move with the load). The server and
`lite agent --simulate` are child processes on 127.0.0.1 with a temporary data dir; both are stopped at the
end. One watch on the pods observes binding and Running.

Usage: python bench/scheduler.py [--nodes 1000] [--pods 10000] [--deployments 10] [--quick] [--timeline]
       [--json FILE]
Exits 1, the error on the last line, when a create fails or any pod is not Running within --timeout.
(`bench/rollout.py` reuses the process helpers below.)
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import benchlib
from benchlib import BenchFailed

from lite.errors import ApiError
from lite.httpclient import HttpClient
from lite.kinds import BUILTIN_KINDS, Kind

Obj = dict[str, Any]


def kind(group: str, name: str) -> Kind:
    return next(k for k in BUILTIN_KINDS if k.group == group and k.kind == name and not k.virtual)


NODE, POD, NAMESPACE = kind("", "Node"), kind("", "Pod"), kind("", "Namespace")
DEPLOYMENT = kind("apps", "Deployment")


def lite_command() -> list[str]:
    exe = Path(sys.executable).with_name("lite")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "lite.cli.main"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def rss_mb(pid: int) -> tuple[float, float]:
    """(current RSS, peak RSS) of a process in MB, from /proc."""
    values = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, rest = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            values[key] = int(rest.split()[0]) / 1024
    return values.get("VmRSS", 0.0), values.get("VmHWM", 0.0)


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def settle(pid: int, limit: float = 20.0) -> float:
    """Wait until a process is quiet (under 5 % of a core over half a second, as bench/api.py's memory figures;
    the simulated nodes' heartbeats keep some load), at most `limit` seconds; returns the seconds waited."""
    t0 = time.monotonic()
    last = cpu_seconds(pid)
    while time.monotonic() - t0 < limit:
        await asyncio.sleep(0.5)
        now = cpu_seconds(pid)
        if now - last < 0.025:
            break
        last = now
    return time.monotonic() - t0


def stop(proc: subprocess.Popen[bytes]) -> int:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return proc.returncode


@dataclass
class Bench:
    """A server and a simulator, both child processes, plus an admin client."""

    base: Path
    server: subprocess.Popen[bytes]
    url: str
    admin: HttpClient
    sim: subprocess.Popen[bytes] | None = None
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def data(self) -> Path:
        return self.base / "data"

    def start_simulator(self, nodes: int, *extra: str) -> None:
        # The simulator acts as a lite:node-simulators user (the join token is no API credential).
        kubeconfig = self.base / "simulator.kubeconfig"
        issued = subprocess.run([*lite_command(), "certificate", "issue-user", "lite-sim", "--group",
                                 "lite:node-simulators", "--data-dir", str(self.data)],
                                capture_output=True, text=True, check=True)
        kubeconfig.write_text(issued.stdout)
        log = open(self.base / "simulator.log", "ab")  # noqa: SIM115 - closed with the process's life
        self.sim = subprocess.Popen([*lite_command(), "agent", "--simulate", str(nodes), "--kubeconfig",
                                     str(kubeconfig), "--log-level", "warning", *extra],
                                    stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        log.close()
        self.procs.append(self.sim)

    async def wait_nodes(self, count: int, timeout: float = 300.0) -> float:
        """Seconds until `count` nodes are Ready with a pod CIDR."""
        start = time.monotonic()
        while time.monotonic() - start < timeout:
            if self.sim is not None and self.sim.poll() is not None:
                raise RuntimeError(f"simulator exited {self.sim.returncode}; see {self.base}/simulator.log")
            items = (await self.admin.list(NODE))["items"]
            ready = sum(1 for n in items if n.get("spec", {}).get("podCIDR") and any(
                c.get("type") == "Ready" and c.get("status") == "True"
                for c in n.get("status", {}).get("conditions") or []))
            if ready >= count:
                return time.monotonic() - start
            await asyncio.sleep(0.5)
        raise TimeoutError(f"only {ready}/{count} nodes Ready after {timeout}s")


@contextlib.asynccontextmanager
async def bench_cluster(tag: str) -> AsyncIterator[Bench]:
    """A fresh `lite server` in a temporary dir; stopped (with the simulator) on exit."""
    with tempfile.TemporaryDirectory(prefix=f"lite-bench-{tag}-") as tmp:
        base = Path(tmp)
        port = free_port()
        log = open(base / "server.log", "ab")  # noqa: SIM115
        server = subprocess.Popen([*lite_command(), "server", "--data-dir", str(base / "data"),
                                   "--https-listen-port", str(port), "--bind-address", "127.0.0.1",
                                   "--disable-agent", "--log-level", "warning",
                                   # a /24 per node: the default /16 holds only 256 nodes
                                   "--cluster-cidr", "10.128.0.0/12"],
                                  stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        log.close()
        kubeconfig = base / "data" / "kubeconfig.yaml"
        try:
            deadline = time.monotonic() + 60
            while not kubeconfig.exists():
                if server.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"server did not start:\n{(base / 'server.log').read_text()[-2000:]}")
                await asyncio.sleep(0.05)
            async with HttpClient.from_kubeconfig(str(kubeconfig)) as admin:
                bench = Bench(base, server, f"https://127.0.0.1:{port}", admin, procs=[server])
                try:
                    yield bench
                finally:
                    for p in reversed(bench.procs):
                        code = stop(p)
                        if code != 0:
                            print(f"warning: {p.args[1] if len(p.args) > 1 else p.args} exited {code}",
                                  file=sys.stderr)
            await asyncio.sleep(0.25)
        finally:
            stop(server)


def deployment(name: str, replicas: int, image: str = "registry.local/bench/app:1") -> Obj:
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}},
                                  "spec": {"containers": [{"name": "app", "image": image, "resources": {
                                      "requests": {"cpu": "10m", "memory": "16Mi"}}}]}}}}


async def create_namespace(admin: HttpClient, name: str) -> None:
    """Create a namespace; one that already exists is fine, any other error is raised."""
    try:
        await admin.create(NAMESPACE, "", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    except ApiError as exc:
        if exc.code != 409:
            raise


@dataclass
class PodTimes:
    """First time (monotonic) each pod was seen bound and Running."""

    created: dict[str, float] = field(default_factory=dict)
    bound: dict[str, float] = field(default_factory=dict)
    running: dict[str, float] = field(default_factory=dict)
    on_all_bound: Callable[[], None] | None = None  # called once, when `want` pods have been seen bound


async def track_pods(admin: HttpClient, ns: str, rv: str, times: PodTimes, want: int) -> None:
    """Watch the namespace's pods from `rv` until `want` pods have been Running."""
    while len(times.running) < want:
        stream = admin.watch(POD, ns, resource_version=rv, timeout_seconds=300)
        try:
            async for ev in stream:
                if ev.type == "ERROR":
                    raise RuntimeError(f"watch failed: {ev.object}")
                obj = ev.object
                rv = obj["metadata"]["resourceVersion"]
                if ev.type == "BOOKMARK" or ev.type == "DELETED":
                    continue
                name, now = obj["metadata"]["name"], time.monotonic()
                times.created.setdefault(name, now)
                if obj.get("spec", {}).get("nodeName") and name not in times.bound:
                    times.bound[name] = now
                    if len(times.bound) == want and times.on_all_bound is not None:
                        times.on_all_bound()
                if obj.get("status", {}).get("phase") == "Running":
                    times.running.setdefault(name, now)
                    if len(times.running) >= want:
                        return
        finally:
            await stream.aclose()  # type: ignore[attr-defined]


def print_timeline(times: PodTimes, t0: float, step: float = 0.5) -> None:
    """How many pods had been created, bound and seen Running at each `step` seconds from apply."""
    end = max((*times.created.values(), *times.running.values()), default=t0)
    print("seconds  created    bound  Running")
    t = step
    while t0 + t - step <= end:
        counts = [sum(1 for v in d.values() if v - t0 <= t) for d in (times.created, times.bound, times.running)]
        print(f"{t:7.1f} {counts[0]:8d} {counts[1]:8d} {counts[2]:8d}")
        t += step


async def run(nodes: int, pods: int, deployments: int, timeout: float, res: benchlib.Results,
              timeline: bool = False) -> None:
    per = pods // deployments
    async with bench_cluster("scheduler") as b:
        b.start_simulator(nodes)
        up = await b.wait_nodes(nodes)
        print(f"{nodes} simulated nodes Ready with pod CIDRs in {up:.1f} s")
        await create_namespace(b.admin, "bench")
        await asyncio.sleep(2)  # the node heartbeats and informers settle before the idle figure
        idle_rss, _ = rss_mb(b.server.pid)
        rv = (await b.admin.list(POD, "bench", limit=1))["metadata"]["resourceVersion"]
        times = PodTimes()
        cpu0 = cpu_seconds(b.server.pid), cpu_seconds(b.sim.pid) if b.sim is not None else 0.0
        cpu_bound: list[float] = []  # the server's CPU seconds when the last pod was seen bound
        times.on_all_bound = lambda: cpu_bound.append(cpu_seconds(b.server.pid))
        tracker = asyncio.create_task(track_pods(b.admin, "bench", rv, times, per * deployments))
        t0 = time.monotonic()
        for i in range(deployments):
            await b.admin.create(DEPLOYMENT, "bench", deployment(f"d{i}", per))
        applied = time.monotonic() - t0
        try:
            await asyncio.wait_for(tracker, timeout)
        except TimeoutError:
            raise BenchFailed(f"{len(times.bound)} of {per * deployments} pods bound, {len(times.running)} Running "
                              f"after {timeout:.0f} s") from None
        total = len(times.bound)
        last_bound = max(times.bound.values()) - t0 if times.bound else float("nan")
        all_running = max(times.running.values()) - t0 if times.running else float("nan")
        cpu1 = cpu_seconds(b.server.pid), cpu_seconds(b.sim.pid) if b.sim is not None else 0.0
        server_rss, server_peak = rss_mb(b.server.pid)
        sim_rss, _ = rss_mb(b.sim.pid) if b.sim is not None else (0.0, 0.0)
        waited = await settle(b.server.pid)
        settled_rss, _ = rss_mb(b.server.pid)
        print(f"{deployments} Deployments x {per} replicas applied in {applied:.2f} s")
        if times.created:
            print(f"pods created: {len(times.created)} in {max(times.created.values()) - t0:.1f} s from apply")
        print(f"pods bound: {total} in {last_bound:.1f} s from apply -> {total / last_bound:.0f} pods/s")
        print(f"apply -> all {len(times.running)} Running: {all_running:.1f} s")
        lag = sorted(times.running[n] - times.bound[n] for n in times.running if n in times.bound)
        if lag:
            print(f"bound -> Running (simulated kubelet): p50 {lag[len(lag) // 2]:.2f} s, "
                  f"p99 {lag[len(lag) * 99 // 100]:.2f} s")
        print(f"server RSS at the end: {server_rss:.0f} MB (peak {server_peak:.0f} MB)")
        print(f"server RSS with {nodes} nodes before the pods: {idle_rss:.0f} MB; "
              f"{(server_rss - idle_rss) * 1024 / total:.1f} KB per pod above that")
        print(f"server RSS settled ({waited:.1f} s later, informational): {settled_rss:.0f} MB; "
              f"{(settled_rss - idle_rss) * 1024 / total:.1f} KB per pod above the RSS with the nodes")
        print(f"simulator RSS: {sim_rss:.0f} MB")
        res.set("nodes", nodes)
        res.set("pods", total)
        res.set("bound_per_s", total / last_bound)
        res.set("all_running_s", all_running)
        res.set("running", len(times.running))
        res.set("server_idle_rss_mb", idle_rss)
        res.set("server_rss_mb", server_rss)
        res.set("server_kb_per_pod", (server_rss - idle_rss) * 1024 / total)
        res.set("server_settled_rss_mb", settled_rss)
        res.set("server_settled_kb_per_pod", (settled_rss - idle_rss) * 1024 / total)
        res.set("simulator_rss_mb", sim_rss)
        print(f"CPU seconds from apply to the end: server {cpu1[0] - cpu0[0]:.1f}, simulator {cpu1[1] - cpu0[1]:.1f}")
        per_pod = (cpu1[0] - cpu0[0]) * 1e6 / total if total else float("nan")
        per_bound = (cpu_bound[0] - cpu0[0]) * 1e6 / total if total and cpu_bound else float("nan")
        print(f"server CPU per pod: {per_bound:.0f} us from apply to the last binding, {per_pod:.0f} us to all "
              f"Running")
        res.set("server_cpu_us_per_pod_bound", per_bound)
        res.set("server_cpu_us_per_pod", per_pod)
        if timeline:
            print_timeline(times, t0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--pods", type=int, default=10000)
    ap.add_argument("--deployments", type=int, default=10)
    ap.add_argument("--quick", action="store_true", help="300 nodes, 3,000 pods in 3 Deployments (issue 19)")
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds for every pod to be Running")
    ap.add_argument("--timeline", action="store_true", help="print created/bound/Running counts every 0.5 s")
    benchlib.add_args(ap)
    args = ap.parse_args()
    if args.quick:
        args.nodes, args.pods, args.deployments = 300, 3000, 3
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    res = benchlib.Results.from_args("scheduler", args)
    benchlib.run(res, lambda: asyncio.run(run(args.nodes, args.pods, args.deployments, args.timeout, res,
                                              args.timeline)))


if __name__ == "__main__":
    main()
