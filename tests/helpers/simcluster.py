"""A real `lite server` plus a `lite agent --simulate` process: a cluster of hollow nodes for e2e tests.

Not a test module. `sim_cluster(base, sim_args, server_args)` is a context manager yielding a `SimCluster`
(an e2ekit `Cluster` plus the simulator process); both processes are stopped with SIGTERM at the end and
must exit 0. Polling helpers here fail with what they last saw, never hang.
"""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from e2ekit import Cluster
from liteproc import LiteServer, find_free_port, lite_command, simulator_kubeconfig

Obj = dict[str, Any]


@dataclass
class SimCluster(Cluster):
    sim: subprocess.Popen[bytes] | None = None
    sim_log: Path | None = None

    def json(self, *args: str) -> Obj:
        out: Obj = json.loads(self.kubectl(*args, "-o", "json").stdout)
        return out

    def pods(self, ns: str, selector: str = "") -> list[Obj]:
        args = ["get", "pods", "-n", ns] + (["-l", selector] if selector else [])
        items: list[Obj] = self.json(*args)["items"]
        return items

    def sim_tail(self, n: int = 30) -> str:
        if self.sim_log is None or not self.sim_log.exists():
            return "(no simulator log)"
        return "\n".join(self.sim_log.read_text(errors="replace").splitlines()[-n:])

    def wait(self, probe: Callable[[], Any], what: str, timeout: float = 60.0, interval: float = 0.25) -> Any:
        """Call `probe` until it returns something truthy; fail with `what` and its last answer."""
        deadline = time.monotonic() + timeout
        last: Any = None
        while time.monotonic() < deadline:
            last = probe()
            if last:
                return last
            if self.sim is not None and self.sim.poll() is not None:
                raise AssertionError(f"simulator exited {self.sim.returncode}:\n{self.sim_tail()}")
            time.sleep(interval)
        raise AssertionError(f"timed out after {timeout}s waiting for {what}; last: {last!r}\n"
                             f"server log:\n{self.server.log_tail(15)}\nsimulator log:\n{self.sim_tail(15)}")


def running_ready(pod: Obj) -> bool:
    st = pod.get("status") or {}
    if st.get("phase") != "Running" or (pod.get("metadata") or {}).get("deletionTimestamp"):
        return False
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in st.get("conditions") or [])


def _stop(proc: subprocess.Popen[bytes], what: str, timeout: float = 15) -> int:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise AssertionError(f"{what} ignored SIGTERM for {timeout}s") from None
    return proc.returncode


@contextlib.contextmanager
def sim_cluster(base: Path, nodes: int, sim_args: tuple[str, ...],
                server_args: tuple[str, ...] = ()) -> Iterator[SimCluster]:
    """Start a server in `base`, then the simulator; wait until its `nodes` nodes are Ready with a pod CIDR."""
    from kubernetes import config

    server = LiteServer(base / "data", find_free_port(), extra=server_args).start()
    sim: subprocess.Popen[bytes] | None = None
    api = None
    try:
        server.wait_ready(60)
        sim_kubeconfig = simulator_kubeconfig(server.data_dir, base / "simulator.kubeconfig")
        sim_log = base / "simulator.log"
        with open(sim_log, "ab") as log:
            sim = subprocess.Popen([*lite_command(), "agent", "--kubeconfig", str(sim_kubeconfig), *sim_args],
                                   stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        api = config.new_client_from_config(config_file=str(server.kubeconfig), persist_config=False)
        cluster = SimCluster(server, server.kubeconfig, base / "kube-cache", api, sim, sim_log)
        cluster.wait(lambda: _all_nodes_ready(cluster, nodes), f"{nodes} simulated nodes Ready with a pod CIDR")
        yield cluster
    finally:
        if api is not None:
            api.close()
        sim_code = _stop(sim, "simulator") if sim is not None else 0
        server_code = _stop(server.proc, "lite server") if server.proc is not None else 0
        assert sim_code == 0, f"simulator exited {sim_code}"
        assert server_code == 0, f"lite server exited {server_code}:\n{server.log_tail()}"


def _all_nodes_ready(cluster: SimCluster, count: int) -> bool:
    nodes = cluster.json("get", "nodes")["items"]
    if len(nodes) < count:
        return False
    for n in nodes:
        ready = [c for c in n.get("status", {}).get("conditions") or [] if c.get("type") == "Ready"]
        if not ready or ready[0].get("status") != "True" or not n.get("spec", {}).get("podCIDR"):
            return False
    return True
