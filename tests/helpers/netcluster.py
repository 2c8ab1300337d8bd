"""A three-node lite cluster on one machine, each node in its own network namespace (issue 8's test cluster).

Not a conftest module (several test dirs may use it). Layout, every name carrying a unique `fab<hex>` prefix:

    netns <p>-sw      a "switch": bridge br0, one veth port per node and for the client
    netns <p>-n1      10.98.0.11  `lite server` (embedded agent), data dir <base>/n1
    netns <p>-n2/-n3  10.98.0.12/13  `lite agent --server https://10.98.0.11:6443 --token …`; the last node
                      finds its address from `--flannel-iface eth0` (no --node-ip) and has
                      `--node-external-ip 203.0.113.<n>` (EXTERNAL_IP)
    netns <p>-cl      10.98.0.100 a machine outside the cluster (the tests' client)

Processes join the namespaces with `nsenter --net` only (same mount namespace as the test, so pod netns files,
mounts and cgroups stay visible to `lite killall`). Each node has its own data dir and cgroup root; every node's
busybox image comes from an archive in `<data-dir>/agent/images/` (the agents' air-gap import), so nothing needs
a registry. `kubectl()` runs the real kubectl in n1's netns against the server's loopback address.

Teardown removes EVERYTHING, even after a failure: SIGTERM (then SIGKILL) to each process, `lite killall` per
data dir inside its node netns (pods, mounts, cgroups, pod netns, bridge, VXLAN device, nft tables), then the
namespaces (their links go with them).

Edge helpers (issue 21): `cut(node)` takes the node's switch port down (its uplink: the node keeps its own
addresses, loopback, bridge and pod traffic; nothing else reaches it), `restore(node)` brings it back, and
`reboot(node)` kills the node's agent and runs `lite killall` on its data dir inside its netns (every pod
process, mount, pod netns, bridge, VXLAN device and nft table gone, as after a power cycle) before starting the
agent again. `pods_running_on(node)` reads which pods have processes on the node from /proc (their cgroups).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.liteproc import lite_command

KUBECTL = "/usr/bin/kubectl"
SUBNET = "10.98.0"
CLIENT_IP = f"{SUBNET}.100"
PORT = 6443
IMAGE = "lite.test/busybox:fabric"
EXTERNAL_NET = "203.0.113"  # TEST-NET-3: only ever reported, never routed
Obj = dict[str, Any]


def sh(*cmd: str, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, check=check, timeout=timeout)


@dataclass
class NetNode:
    name: str
    netns: str
    ip: str
    data_dir: Path
    log: Path
    proc: subprocess.Popen[bytes] | None = None


@dataclass
class NetCluster:
    prefix: str
    base: Path
    backend: str
    nodes: list[NetNode]
    switch: str
    client: str
    extra: dict[str, Any] = field(default_factory=dict)
    port: int = PORT  # the API server's port on every address of n1

    @property
    def server(self) -> NetNode:
        return self.nodes[0]

    def run_in(self, netns: str, *cmd: str, check: bool = False, timeout: float = 60,
               input: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["nsenter", f"--net=/run/netns/{netns}", *cmd], capture_output=True, text=True,
                              check=check, timeout=timeout, input=input)

    def kubectl(self, *args: str, input: str | None = None, check: bool = True, timeout: float = 60,
                node: NetNode | None = None) -> subprocess.CompletedProcess[str]:
        """The real kubectl in n1's netns against the server; with `node`, in that node's netns against its
        node-local read-only API (`lite agent --local-api`: `<data-dir>/agent/local-api/kubeconfig`)."""
        where = node or self.server
        kc = node.data_dir / "agent" / "local-api" / "kubeconfig" if node else where.data_dir / "kubeconfig.yaml"
        proc = self.run_in(where.netns, KUBECTL, "--kubeconfig", str(kc), "--cache-dir",
                           str(self.base / "kube-cache"), *args, input=input, timeout=timeout)
        if check and proc.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}")
        return proc

    def json(self, *args: str, node: NetNode | None = None) -> Obj:
        out: Obj = json.loads(self.kubectl(*args, "-o", "json", node=node).stdout)
        return out

    def apply(self, manifest: Obj | list[Obj]) -> None:
        items = manifest if isinstance(manifest, list) else [manifest]
        self.kubectl("apply", "-f", "-", input="\n".join(json.dumps(i) for i in items))

    def exec(self, pod: str, *cmd: str, namespace: str = "default",
             timeout: float = 30) -> subprocess.CompletedProcess[str]:
        return self.kubectl("exec", "-n", namespace, pod, "--", *cmd, check=False, timeout=timeout)

    def wait(self, probe: Callable[[], Any], what: str, timeout: float = 90.0, interval: float = 0.3) -> Any:
        deadline = time.monotonic() + timeout
        last: Any = None
        while time.monotonic() < deadline:
            try:
                last = probe()
                if last:
                    return last
            except (AssertionError, subprocess.SubprocessError, ValueError) as e:
                last = e
            time.sleep(interval)
        raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last!r})\n{self.log_tails()}")

    def log_tails(self, n: int = 15) -> str:
        out = []
        for node in self.nodes:
            with contextlib.suppress(OSError):
                lines = node.log.read_text(errors="replace").splitlines()[-n:]
                out.append(f"--- {node.name} ---\n" + "\n".join(lines))
        return "\n".join(out)

    def pods(self, selector: str = "", namespace: str = "default") -> list[Obj]:
        args = ["get", "pods", "-n", namespace] + (["-l", selector] if selector else [])
        items: list[Obj] = self.json(*args)["items"]
        return items

    def wait_running(self, selector: str, count: int, namespace: str = "default") -> list[Obj]:
        def ready() -> list[Obj] | None:
            pods = [p for p in self.pods(selector, namespace) if running_ready(p)]
            return pods if len(pods) >= count else None

        found: list[Obj] = self.wait(ready, f"{count} ready pods {selector}", timeout=120)
        return found


def running_ready(pod: Obj) -> bool:
    st = pod.get("status") or {}
    if st.get("phase") != "Running" or (pod.get("metadata") or {}).get("deletionTimestamp"):
        return False
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in st.get("conditions") or [])


def busybox_pod(name: str, node: str, command: list[str], labels: dict[str, str] | None = None) -> Obj:
    """A busybox pod pinned to `node` (the image comes from the nodes' air-gap archive)."""
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels or {"app": name}},
            "spec": {"nodeName": node, "terminationGracePeriodSeconds": 0,
                     "containers": [{"name": "c", "image": IMAGE, "imagePullPolicy": "Never", "command": command}]}}


def _write_image(data_dir: Path) -> None:
    from tests.helpers.images import Image, Layer, busybox_entries, docker_save_tar

    drop = data_dir / "agent" / "images"
    drop.mkdir(parents=True, exist_ok=True)
    docker_save_tar(drop / "busybox.tar", Image([Layer.build(busybox_entries())]), [IMAGE])


def _topology(prefix: str, nodes: list[NetNode]) -> tuple[str, str]:
    switch, client = f"{prefix}-sw", f"{prefix}-cl"
    sh("ip", "netns", "add", switch)
    sh("ip", "-n", switch, "link", "add", "br0", "type", "bridge")
    sh("ip", "-n", switch, "link", "set", "br0", "up")
    for i, (ns, ip) in enumerate([*((n.netns, n.ip) for n in nodes), (client, CLIENT_IP)]):
        sh("ip", "netns", "add", ns)
        sh("ip", "-n", ns, "link", "set", "lo", "up")
        sh("ip", "-n", switch, "link", "add", f"p{i}", "type", "veth", "peer", "name", "eth0", "netns", ns)
        sh("ip", "-n", switch, "link", "set", f"p{i}", "master", "br0", "up")
        sh("ip", "-n", ns, "addr", "add", f"{ip}/24", "dev", "eth0")
        sh("ip", "-n", ns, "link", "set", "eth0", "up")
    return switch, client


def _start(cluster: NetCluster, node: NetNode, args: list[str]) -> None:
    with open(node.log, "ab") as log:
        node.proc = subprocess.Popen(["nsenter", f"--net=/run/netns/{node.netns}", *lite_command(), *args],
                                     stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)


def _node_args(cluster: NetCluster, node: NetNode) -> list[str]:
    resolv = cluster.base / "resolv.conf"
    if node is cluster.nodes[-1] and node is not cluster.server:
        where = ["--flannel-iface", "eth0", "--node-external-ip", f"{EXTERNAL_NET}.{node.ip.rsplit('.', 1)[1]}"]
    else:
        where = ["--node-ip", node.ip]
    return ["--data-dir", str(node.data_dir), "--node-name", node.name, *where,
            "--cgroup-root", f"lite-{node.netns}", "--resolv-conf", str(resolv), "--log-level", "info"]


def start_agent(cluster: NetCluster, node: NetNode, *extra: str) -> None:
    """Start the node's `lite agent` (with `extra` arguments, e.g. `--local-api`)."""
    token = (cluster.server.data_dir / "token").read_text().strip()
    _start(cluster, node, ["agent", "--server", f"https://{cluster.server.ip}:{cluster.port}", "--token", token,
                           *_node_args(cluster, node), *extra])


def stop_process(node: NetNode, timeout: float = 20) -> None:
    if node.proc is None or node.proc.poll() is not None:
        return
    node.proc.send_signal(signal.SIGTERM)
    try:
        node.proc.wait(timeout)
    except subprocess.TimeoutExpired:
        node.proc.kill()
        node.proc.wait(10)


def restart_agent(cluster: NetCluster, node: NetNode, sig: int = signal.SIGKILL) -> None:
    """Kill a joined node's `lite agent` (SIGKILL by default: no clean shutdown) and start it again on the same
    data dir; its pods keep running and its nftables rules stay in place meanwhile."""
    if node.proc is not None and node.proc.poll() is None:
        node.proc.send_signal(sig)
        node.proc.wait(20)
    start_agent(cluster, node)


def switch_port(cluster: NetCluster, node: NetNode) -> str:
    """The node's veth port on the switch bridge (`_topology` names them by node index)."""
    return f"p{cluster.nodes.index(node)}"


def cut(cluster: NetCluster, node: NetNode) -> None:
    """Cut the node off: its switch port goes down, so no packet leaves or reaches it through its eth0 (the
    uplink). Everything inside the node's netns (its addresses, loopback, pod bridge, service proxy, DNS)
    keeps working."""
    sh("ip", "-n", cluster.switch, "link", "set", switch_port(cluster, node), "down")


def restore(cluster: NetCluster, node: NetNode) -> None:
    sh("ip", "-n", cluster.switch, "link", "set", switch_port(cluster, node), "up")


def kill_agent(node: NetNode) -> None:
    """SIGKILL the node's `lite agent` (nsenter execs it: the Popen's pid is the agent's)."""
    if node.proc is not None and node.proc.poll() is None:
        node.proc.kill()
        node.proc.wait(20)


def killall(cluster: NetCluster, node: NetNode) -> subprocess.CompletedProcess[str]:
    """`lite killall` of the node's data dir inside its netns: what a reboot leaves (no pod process, mount,
    pod netns, bridge, VXLAN device, nft table or cgroup of the node; its data dir stays)."""
    r = cluster.run_in(node.netns, *lite_command(), "killall", "--data-dir", str(node.data_dir), timeout=120)
    if r.returncode != 0:
        raise AssertionError(f"lite killall on {node.name} exited {r.returncode}\n{r.stdout}\n{r.stderr}")
    return r


def reboot(cluster: NetCluster, node: NetNode, *extra: str) -> float:
    """Power-cycle a non-server node as closely as one machine allows: kill its agent, `killall` everything its
    pods held, start the agent again (with whatever link the node has now; `extra` agent arguments). Returns
    the agent's start time (time.monotonic())."""
    kill_agent(node)
    killall(cluster, node)
    left = pods_running_on(node)
    if left:
        raise AssertionError(f"pods of {node.name} still have processes after killall: {sorted(left)}")
    started = time.monotonic()
    start_agent(cluster, node, *extra)
    return started


_POD_CGROUP = re.compile(r"/pod([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})(?:/|$)")


def pods_running_on(node: NetNode) -> set[str]:
    """The uids of the pods that have at least one process on the node: every process whose cgroup lies below
    the node's cgroup root (`lite-<netns>`, see `_node_args`) in a `pod<uid>` directory."""
    root = f"/lite-{node.netns}/"
    found: set[str] = set()
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            text = Path(f"/proc/{pid}/cgroup").read_text()
        except OSError:
            continue
        for line in text.splitlines():
            path = line.split(":", 2)[-1]
            if root in path + "/" and (m := _POD_CGROUP.search(path)):
                found.add(m.group(1))
    return found


def _ready_nodes(cluster: NetCluster) -> bool:
    items = cluster.json("get", "nodes")["items"]
    ok = [n for n in items if (n.get("spec") or {}).get("podCIDR") and any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (n.get("status") or {}).get("conditions") or [])]
    return len(ok) == len(cluster.nodes)


@contextlib.contextmanager
def net_cluster(base: Path, backend: str = "vxlan", count: int = 3, server_args: tuple[str, ...] = (),
                prepare: Callable[[NetNode], None] | None = None, port: int = PORT) -> Iterator[NetCluster]:
    """Start the cluster (see the module docstring) and wait until every node is Ready with a podCIDR.

    `prepare(node)` runs for each node before its process starts (e.g. to drop more images into
    `<data-dir>/agent/images/`); `port` is the API server's (bound to 0.0.0.0)."""
    prefix = f"fab{secrets.token_hex(3)}"
    nodes = [NetNode(f"{prefix}-n{i + 1}", f"{prefix}-n{i + 1}", f"{SUBNET}.{11 + i}", base / f"n{i + 1}",
                     base / f"n{i + 1}.log") for i in range(count)]
    cluster = NetCluster(prefix, base, backend, nodes, f"{prefix}-sw", f"{prefix}-cl", port=port)
    (base / "resolv.conf").write_text(f"nameserver {CLIENT_IP}\noptions timeout:1 attempts:1\n")
    try:
        cluster.switch, cluster.client = _topology(prefix, nodes)
        for node in nodes:
            _write_image(node.data_dir)
            if prepare is not None:
                prepare(node)
        server = cluster.server
        _start(cluster, server, ["server", "--https-listen-port", str(port), "--bind-address", "0.0.0.0",
                                 "--advertise-address", server.ip, "--tls-san", server.ip,
                                 "--flannel-backend", backend, "--disable-snapshots", *_node_args(cluster, server),
                                 *server_args])
        cluster.wait(lambda: cluster.kubectl("get", "--raw", "/readyz", timeout=5).stdout.strip() == "ok"
                     and (server.data_dir / "token").exists(), "the server to be ready", timeout=90)
        for node in nodes[1:]:
            start_agent(cluster, node)
        cluster.wait(lambda: _ready_nodes(cluster), f"{count} nodes Ready with a podCIDR", timeout=90)
        yield cluster
    finally:
        teardown(cluster)


def teardown(cluster: NetCluster) -> None:
    """Stop everything and remove everything the cluster made; never raises before all steps ran."""
    for node in reversed(cluster.nodes):
        with contextlib.suppress(Exception):
            stop_process(node)
    for node in cluster.nodes:
        if node.data_dir.exists():
            cluster.run_in(node.netns, *lite_command(), "killall", "--data-dir", str(node.data_dir), timeout=120)
    for ns in [*(n.netns for n in cluster.nodes), cluster.client, cluster.switch]:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True, check=False)
