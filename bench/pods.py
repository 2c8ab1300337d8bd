"""Bench: 50 pods of a cached image on one node — create→Running p50/p99, pods/s, RSS, idle CPU.

Runs `lite server` with its embedded agent (namespaced runtime, real cgroups and pod networks). So the host's
network is never touched, the script re-executes itself inside a fresh network and mount namespace (`unshare`)
where the registry, the server, its `lite0` bridge and kubectl all live. Needs root, busybox-static and
docker-registry. Prints its figures; asserts nothing about speed.

    python bench/pods.py [--pods 50] [--idle 60] [--json FILE]   (issue 19 footprint: --pods 2, target <= 50 MB)

Exits 1, the error on the last line, when a kubectl call fails or a pod is not Running in time; not root or
a missing tool: "not measured" (exit 0).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

import benchlib  # noqa: E402
from benchlib import BenchFailed  # noqa: E402

KUBECTL = "/usr/bin/kubectl"
IMAGE = "busybox:1.36"


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _pss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith("Pss:"):
            return int(line.split()[1])
    return 0


def _zygotes(server: int) -> list[int]:
    return [int(child) for child in Path(f"/proc/{server}/task/{server}/children").read_text().split()
            if b"zygote" in Path(f"/proc/{child}/cmdline").read_bytes()]


def _floor_rss_kib() -> int:
    """RSS of this interpreter started afresh with only the libraries any aiohttp server on SQLite loads: the
    floor under lite's figure, measured in the same run."""
    code = ("import asyncio, ssl, sqlite3, aiohttp, aiohttp.web\n"
            "print([l.split()[1] for l in open('/proc/self/status') if l.startswith('VmRSS:')][0])")
    return int(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)


def _shim_memory(base: Path, server: int) -> tuple[int, int, int]:
    """(count, RSS KiB, PSS KiB) of the live shims (pids from their state dirs) plus the agent's zygote. RSS
    counts pages shared copy-on-write with the zygote once per shim; PSS splits them among the sharers."""
    pids = set(_zygotes(server))
    for rec in (base / "data" / "agent" / "pods").glob("*/containers/*/state/shim.json"):
        pids.add(int(json.loads(rec.read_text())["shim_pid"]))
    rss = pss = 0
    for pid in pids:
        try:
            rss, pss = rss + _rss_kib(pid), pss + _pss_kib(pid)
        except OSError:
            pass
    return len(pids), rss, pss


class Bench:
    def __init__(self, base: Path, pods: int) -> None:
        self.base, self.n = base, pods
        self.kubeconfig = base / "data" / "kubeconfig.yaml"

    def kubectl(self, *args: str, input: str | None = None) -> str:
        out = subprocess.run([KUBECTL, "--kubeconfig", str(self.kubeconfig), *args], input=input,
                             capture_output=True, text=True, timeout=120)
        if out.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(args)}: {out.stderr}")
        return out.stdout

    def pods(self) -> list[dict[str, Any]]:
        return list(json.loads(self.kubectl("get", "pods", "-n", "bench", "-o", "json"))["items"])

    def wait(self, cond: Any, limit: float, what: str) -> None:
        end = time.monotonic() + limit
        while time.monotonic() < end:
            try:
                if cond():
                    return
            except RuntimeError:
                pass
            time.sleep(0.2)
        raise BenchFailed(f"timed out after {limit:.0f} s waiting for {what}")

    def manifest(self, names: list[str]) -> str:
        return json.dumps({"apiVersion": "v1", "kind": "List", "items": [
            {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": n, "namespace": "bench"},
             "spec": {"terminationGracePeriodSeconds": 1, "containers": [
                 {"name": "c", "image": IMAGE, "imagePullPolicy": "IfNotPresent",
                  "command": ["sh", "-c", "sleep 100000"]}]}} for n in names]})

    def run_pods(self) -> dict[str, float]:
        """Create the pods in one request (`kubectl create` of a List: one POST per pod) and watch them; the
        watch is opened before the create, so each pod's create→Running is measured by one clock, from the
        watch's first event for it to the first one where a container status says running."""
        from kubernetes import client, config, watch

        api = client.CoreV1Api(config.new_client_from_config(config_file=str(self.kubeconfig)))
        names = [f"p{i:03d}" for i in range(self.n)]
        seen: dict[str, float] = {}
        added: dict[str, float] = {}
        rv = api.list_namespaced_pod("bench").metadata.resource_version
        w = watch.Watch()
        opened = threading.Event()

        def watcher() -> None:
            stream = w.stream(api.list_namespaced_pod, "bench", resource_version=rv, timeout_seconds=600)
            opened.set()
            for ev in stream:
                now = time.time()
                p = ev["object"]
                name = p.metadata.name
                added.setdefault(name, now)
                statuses = p.status.container_statuses or []
                if name not in seen and any(c.state and c.state.running for c in statuses):
                    seen[name] = now
                    if len(seen) == self.n:
                        w.stop()

        thread = threading.Thread(target=watcher, daemon=True)
        thread.start()
        opened.wait(30)
        time.sleep(0.5)  # the watch request is on the wire (and replays from rv anyway)
        t0 = time.time()
        self.kubectl("create", "--validate=false", "-f", "-", input=self.manifest(names))
        created = time.time()
        thread.join(600)
        api.api_client.close()
        if len(seen) < self.n:
            raise BenchFailed(f"{len(seen)} of {self.n} pods Running within 600 s")
        lat = sorted(seen[n] - added.get(n, t0) for n in seen)
        return {"running": len(seen), "p50": statistics.median(lat), "p99": lat[min(len(lat) - 1, int(len(lat) * .99))],
                "pods_per_s": len(seen) / (max(seen.values()) - t0), "create_s": created - t0,
                "all_s": max(seen.values()) - t0}


def inner(args: argparse.Namespace, results: benchlib.Results) -> None:
    sys.path.insert(0, str(ROOT))
    from tests.helpers.images import Layer, Pusher, busybox_entries, push_test_images
    from tests.helpers.registry import RegistryServer

    base = Path(tempfile.mkdtemp(prefix="lite-bench-pods-"))
    registry = RegistryServer.start(base / "registry")
    pushed = push_test_images(Pusher(registry.url), Layer.build(busybox_entries()))
    Pusher(registry.url).push_image("library/busybox", "1.36", pushed.busybox)
    regs = base / "registries.yaml"
    regs.write_text(f'mirrors:\n  "docker.io":\n    endpoint: ["{registry.url}"]\n')
    port = 16443
    log = open(base / "server.log", "ab")  # noqa: SIM115 - held by the child
    server = subprocess.Popen([sys.executable, "-m", "lite.cli.main", "server", "--data-dir", str(base / "data"),
                               "--https-listen-port", str(port), "--bind-address", "127.0.0.1",
                               "--node-name", "bench-node", "--private-registry", str(regs)],
                              stdout=log, stderr=subprocess.STDOUT)
    b = Bench(base, args.pods)
    try:
        b.wait(lambda: b.kubeconfig.exists() and "True" in b.kubectl(
            "get", "node", "bench-node", "-o", "jsonpath={.status.conditions[?(@.type=='Ready')].status}"),
            120, "node Ready")
        rss_idle = _rss_kib(server.pid)  # node Ready, nothing scheduled yet
        b.kubectl("create", "namespace", "bench")
        # the warm-up pod pulls the image once: the 50 then use the cache
        b.kubectl("create", "--validate=false", "-f", "-", input=b.manifest(["warm"]))
        b.wait(lambda: any(p["status"].get("phase") == "Running" for p in b.pods()), 120, "warm-up pod")
        b.kubectl("delete", "pod", "-n", "bench", "warm", "--wait=true")
        res = b.run_pods()
        rss_before = _rss_kib(server.pid)
        zygote_rss = sum(_rss_kib(z) for z in _zygotes(server.pid))
        shims, shim_rss, shim_pss = _shim_memory(base, server.pid)
        cpu0, w0 = _cpu_seconds(server.pid), time.monotonic()
        time.sleep(args.idle)
        idle = (_cpu_seconds(server.pid) - cpu0) / (time.monotonic() - w0) * 100
        print(f"pods Running: {res['running']}/{args.pods}")
        print(f"create→Running: p50 {res['p50']:.3f} s, p99 {res['p99']:.3f} s; {res['pods_per_s']:.1f} pods/s "
              f"(kubectl create took {res['create_s']:.2f} s, all Running after {res['all_s']:.2f} s)")
        print(f"RSS lite server (embedded agent, idle, node Ready): {rss_idle / 1024:.1f} MiB; baseline, a bare "
              f"interpreter with asyncio, ssl, sqlite3 and aiohttp loaded: {_floor_rss_kib() / 1024:.1f} MiB")
        print(f"RSS lite server (embedded agent, {args.pods} pods): {rss_before / 1024:.1f} MiB; "
              f"{shims - 1} shims + zygote: RSS {shim_rss / 1024:.1f} MiB total, PSS {shim_pss / 1024:.1f} MiB total")
        print(f"idle CPU of lite server over {args.idle} s: {idle:.2f} % of one core")
        results.set("pods", args.pods)
        results.set("running", res["running"])
        results.set("create_running_p50_s", res["p50"])
        results.set("create_running_p99_s", res["p99"])
        results.set("server_rss_mb", rss_before / 1024)
        results.set("zygote_rss_mb", zygote_rss / 1024)
        results.set("shims_zygote_pss_mb", shim_pss / 1024)
        results.set("idle_cpu_percent", idle)
    finally:
        try:
            b.kubectl("delete", "pods", "-n", "bench", "--all", "--wait=true")
        except RuntimeError as e:
            results.error(f"cleanup: {e}")
            print(f"cleanup: {e}")
        server.terminate()
        server.wait(30)
        log.close()
        registry.stop()
        _remove_empty_cgroups("lite")
        remove_base(base)


def remove_base(base: Path) -> None:
    """Remove the run's temporary dir, unless something is still mounted under it (then say so: deleting
    through a live mount would reach into what is mounted)."""
    mounted = [line.split()[1] for line in Path("/proc/self/mounts").read_text().splitlines()
               if line.split()[1].startswith(str(base) + "/")]
    if mounted:
        print(f"left {base}: {len(mounted)} mounts still under it, e.g. {mounted[0]}")
        return
    shutil.rmtree(base, ignore_errors=True)


def _remove_empty_cgroups(root: str) -> None:
    """The embedded agent's QoS cgroups (`lite/burstable`, `lite/besteffort`) outlive its pods: remove them."""
    for top in Path("/sys/fs/cgroup").glob(f"*/{root}"):
        for dirpath, _d, _f in sorted(os.walk(top), key=lambda w: -len(w[0])):
            try:
                os.rmdir(dirpath)
            except OSError as e:
                print(f"cgroup {dirpath} left: {e}")


def run_inner_isolated(script: str, args: list[str]) -> None:
    """Re-execute `script --inner ARGS` as root in a fresh network namespace (only `lo`, so no packet can reach
    the host's network) and a private mount namespace with /run/netns emptied of whatever mounts are stacked
    there on this host (a shared mount point bound onto itself N times copies every netns mount N times and
    makes every container's mount namespace N times larger): the bench measures a node, not this VM's
    leftovers. Exits with the inner run's status."""
    if os.geteuid() != 0:
        raise BenchFailed(f"{Path(script).name} needs root")
    cmd = " ".join(["ip link set lo up && exec", sys.executable, script, "--inner", *args])
    clean = "while umount -l /run/netns 2>/dev/null; do :; done"
    raise SystemExit(subprocess.call(["unshare", "--net", "--mount", "--propagation", "private", "sh", "-c",
                                      f"{clean}; {cmd}"], cwd=ROOT))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pods", type=int, default=50)
    ap.add_argument("--idle", type=float, default=60.0)
    ap.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    benchlib.add_args(ap)
    args = ap.parse_args()
    results = benchlib.Results.from_args("pods", args)
    if args.inner:
        benchlib.run(results, lambda: inner(args, results))
    if os.geteuid() != 0:
        results.skip("needs root (network, mount and cgroup namespaces for real pods)")
    missing = [tool for tool in ("docker-registry", "busybox", "unshare") if shutil.which(tool) is None]
    if missing:
        results.skip(f"{', '.join(missing)} not installed")
    # the inner run writes the results file and prints its own error last
    run_inner_isolated(__file__, ["--pods", str(args.pods), "--idle", str(args.idle),
                                  *(["--json", args.json] if args.json else [])])


if __name__ == "__main__":
    main()
