"""Pods for real: a `lite server` (control plane) plus a node agent process, driven by the real kubectl.

Safety: the agent runs with its bridge inside a node network namespace this module creates (a netns file under
tmp, made with `unshare --net=FILE`), pod netns files under tmp and cgroups under a unique root, so the host's
network is never touched. Images come from a local registry; registries.yaml mirrors docker.io to it.
Needs root, /usr/bin/docker-registry and busybox-static; skips otherwise.
"""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from e2ekit import KUBECTL, Cluster, unique
from liteproc import LiteServer, find_free_port, lite_command

from tests.helpers.images import BUSYBOX, Layer, Pusher, busybox_entries, push_test_images
from tests.helpers.registry import RegistryServer

pytestmark = [pytest.mark.root, pytest.mark.timeout(600)]
IMAGE = "busybox:1.36"  # pulled through the docker.io mirror = the test registry

AGENT_MAIN = """
import asyncio, json, sys
from pathlib import Path
from lite.agent.agent import AgentConfig, build_agent
raw = json.loads(sys.argv[1])
raw["data_dir"] = Path(raw["data_dir"]); raw["netns_dir"] = Path(raw["netns_dir"])
raw["registries"] = Path(raw["registries"]); raw["ca_data"] = raw["ca_data"].encode()
raw["resolv_conf"] = Path(raw["resolv_conf"])
asyncio.run(build_agent(AgentConfig(**raw)).run())
"""


@dataclass
class Node:
    cluster: Cluster
    base: Path
    agent_args: list[str]
    agent: subprocess.Popen[bytes] | None = None

    def start_agent(self) -> None:
        log = open(self.base / "agent.log", "ab")  # noqa: SIM115 - owned by the child for its lifetime
        self.agent = subprocess.Popen(self.agent_args, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        log.close()

    def kubectl(self, *args: str, **kw: Any) -> subprocess.CompletedProcess[str]:
        return self.cluster.kubectl(*args, **kw)

    def wait(self, what: Callable[[], bool], limit: float = 90, message: str = "") -> None:
        end = time.monotonic() + limit
        while time.monotonic() < end:
            if what():
                return
            time.sleep(0.5)
        raise AssertionError(f"timed out: {message}\nagent log:\n{self.agent_log()}")

    def agent_log(self) -> str:
        try:
            return "\n".join((self.base / "agent.log").read_text(errors="replace").splitlines()[-30:])
        except FileNotFoundError:
            return ""

    def pod(self, ns: str, name: str) -> dict[str, Any]:
        out = self.kubectl("get", "pod", "-n", ns, name, "-o", "json", check=False)
        return json.loads(out.stdout) if out.returncode == 0 else {}

    def wait_ready(self, ns: str, name: str, limit: float = 90) -> dict[str, Any]:
        def ready() -> bool:
            conds = (self.pod(ns, name).get("status") or {}).get("conditions") or []
            return any(c["type"] == "Ready" and c["status"] == "True" for c in conds)

        self.wait(ready, limit, f"pod {ns}/{name} Ready")
        return self.pod(ns, name)


def _netns_file(path: Path) -> None:
    path.touch()
    subprocess.run(["unshare", f"--net={path}", "ip", "link", "set", "lo", "up"], check=True)


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    if os.geteuid() != 0:
        pytest.skip("needs root (namespaces, cgroups, netns)")
    if not os.access(KUBECTL, os.X_OK) or not RegistryServer.available() or not BUSYBOX.exists():
        pytest.skip("needs kubectl, docker-registry and busybox-static")
    from kubernetes import config

    base = tmp_path_factory.mktemp("pods")
    registry = RegistryServer.start(base / "registry")
    server = LiteServer(base / "data", find_free_port()).start()
    node_ns = base / "node-netns"
    netns_dir = base / "netns"
    cgroup_root = f"lite-e2e-{uuid.uuid4().hex[:8]}"
    n: Node | None = None
    try:
        server.wait_ready(60)
        if server.request("/cacerts")[0] == 404:
            pytest.skip("this server does not serve the join endpoint yet")
        pushed = push_test_images(Pusher(registry.url), Layer.build(busybox_entries()))
        Pusher(registry.url).push_image("library/busybox", "1.36", pushed.busybox)
        regs = base / "registries.yaml"
        regs.write_text(f'mirrors:\n  "docker.io":\n    endpoint: ["{registry.url}"]\n')
        resolv = base / "resolv.conf"  # the cluster DNS forwards other names here: a loopback nobody serves
        resolv.write_text("nameserver 127.0.53.53\n")
        _netns_file(node_ns)
        token = (base / "data" / "token").read_text().strip()
        import base64

        ca = base64.b64decode(server.config()["clusters"][0]["cluster"]["certificate-authority-data"]).decode()
        cfg = {"server_url": server.url, "token": token, "node_name": "e2e-node", "data_dir": str(base / "agent"),
               "node_netns": str(node_ns), "netns_dir": str(netns_dir), "registries": str(regs), "ca_data": ca,
               "cgroup_root": cgroup_root, "node_ip": "10.99.0.1", "service_proxy": True,
               "resolv_conf": str(resolv)}
        api = config.new_client_from_config(config_file=str(server.kubeconfig), persist_config=False)
        n = Node(Cluster(server, server.kubeconfig, base / "kube-cache", api), base,
                 [sys.executable, "-c", AGENT_MAIN, json.dumps(cfg)])
        n.start_agent()
        n.wait(lambda: "True" in n.kubectl("get", "node", "e2e-node", "-o",
                                           "jsonpath={.status.conditions[?(@.type=='Ready')].status}",
                                           check=False).stdout, 60, "node Ready")
        yield n
    finally:
        _teardown(n, server, registry)
        _cleanup_host(base / "agent", node_ns, netns_dir)


def _teardown(n: Node | None, server: LiteServer, registry: RegistryServer) -> None:
    """Every step runs whatever the previous one did (pods deleted gracefully first, then processes stopped)."""
    if n is not None:
        try:
            # the workloads first: a StatefulSet or a ReplicaSet would make its pods again, and the wait below
            # would then spend its whole minute (three modules share this fixture)
            n.kubectl("delete", "deployments,statefulsets,daemonsets,replicasets,jobs,cronjobs,replicationcontrollers",
                      "--all", "--all-namespaces", "--wait=false", check=False)
            n.kubectl("delete", "pods", "--all", "--all-namespaces", "--wait=false", check=False)
            n.wait(lambda: not n.kubectl("get", "pods", "-A", "-o", "name", check=False).stdout.strip(), 60, "")
        except Exception as e:  # the host cleanup below still kills whatever is left
            print(f"pods not deleted cleanly: {e}")
        if n.agent is not None:
            n.agent.kill()
            n.agent.wait()
        n.cluster.api.close()
    try:
        server.stop(timeout=15)
    finally:
        registry.stop()


def _cleanup_host(agent_data: Path, node_ns: Path, netns_dir: Path) -> None:
    """`lite killall` on the agent's data dir (every pod process, mount, netns, link and cgroup), then the
    test's own netns files. What killall misses, the session's closing check reports."""
    subprocess.run([*lite_command(), "killall", "--data-dir", str(agent_data)], check=False, timeout=120)
    subprocess.run(["umount", "-R", "-l", str(netns_dir)], check=False, capture_output=True)
    subprocess.run(["umount", "-l", str(node_ns)], check=False, capture_output=True)


def _apply(n: Node, ns: str, manifest: dict[str, Any]) -> None:
    n.kubectl("apply", "-n", ns, "-f", "-", input=json.dumps(manifest))


@pytest.fixture
def ns(node: Node) -> str:
    name = unique("pods")
    node.kubectl("create", "namespace", name)
    return name


def _deployment(name: str, replicas: int) -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}}, "spec": {
                         "terminationGracePeriodSeconds": 2,
                         "containers": [{"name": "web", "image": IMAGE,
                                         "command": ["httpd", "-f", "-p", "80", "-h", "/www"],
                                         "ports": [{"containerPort": 80}],
                                         "readinessProbe": {"httpGet": {"path": "/", "port": 80},
                                                            "periodSeconds": 1}}]}}}}


def _pods(n: Node, ns: str, selector: str) -> list[dict[str, Any]]:
    return list(json.loads(n.kubectl("get", "pods", "-n", ns, "-l", selector, "-o", "json").stdout)["items"])


def test_deployment_pods_talk_logs_exec_port_forward(node: Node, ns: str) -> None:
    _apply(node, ns, _deployment("web", 2))

    def two_ready() -> bool:
        pods = _pods(node, ns, "app=web")
        return len(pods) == 2 and all(any(c["type"] == "Ready" and c["status"] == "True"
                                          for c in p["status"].get("conditions") or []) for p in pods)

    node.wait(two_ready, 120, "2 ready web pods")
    a, b = _pods(node, ns, "app=web")
    cidr = json.loads(node.kubectl("get", "node", "e2e-node", "-o", "json").stdout)["spec"]["podCIDR"]
    import ipaddress

    for p in (a, b):
        assert ipaddress.ip_address(p["status"]["podIP"]) in ipaddress.ip_network(cidr)
    an, bip = a["metadata"]["name"], b["status"]["podIP"]
    out = node.kubectl("exec", "-n", ns, an, "--", "wget", "-qO-", f"http://{bip}/")
    assert "hello from lite" in out.stdout
    rc = node.kubectl("exec", "-n", ns, an, "--", "sh", "-c", "exit 3", check=False)
    assert rc.returncode == 3
    ps = node.kubectl("exec", "-n", ns, an, "--", "ps", "-o", "pid,comm").stdout.split("\n")[1:]
    assert len([ln for ln in ps if ln.strip()]) <= 3  # neither host processes nor the other pod's
    assert "hello from lite" not in node.kubectl("exec", "-n", ns, an, "--", "sh", "-c",
                                                 "ls /proc/*/root/www 2>/dev/null; true").stdout
    # kubectl exec -it with a real tty
    master, slave = pty.openpty()
    proc = subprocess.Popen(node.cluster._argv(("exec", "-it", "-n", ns, an, "--", "sh", "-c",
                                                  "test -t 0 && test -t 1 && echo is-a-tty; exit 5")),
                            stdin=slave, stdout=slave, stderr=slave, env=node.cluster._env())
    os.close(slave)
    assert proc.wait(60) == 5
    got = b""
    while True:
        try:
            chunk = os.read(master, 4096)
        except OSError:
            break
        if not chunk:
            break
        got += chunk
    os.close(master)
    assert b"is-a-tty" in got
    # port-forward
    with node.cluster.kubectl_stream("port-forward", "-n", ns, f"pod/{an}", ":80") as (_, lines):
        line = lines.wait_for(lambda ln: "Forwarding from 127.0.0.1:" in ln, 30)
        port = int(line.split("127.0.0.1:")[1].split()[0])
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=10) as r:
            assert b"hello from lite" in r.read()
    # the proxy subresources: a pod's port, a service (by port number and by its only port), kubectl proxy,
    # the node's kubelet-like paths
    raw = node.kubectl("get", "--raw", f"/api/v1/namespaces/{ns}/pods/{an}:80/proxy/").stdout
    assert "hello from lite" in raw
    node.kubectl("expose", "deployment", "web", "-n", ns, "--port", "8080", "--target-port", "80")
    node.wait(lambda: node.kubectl("get", "--raw", f"/api/v1/namespaces/{ns}/services/web:8080/proxy/",
                                   check=False).returncode == 0, 30, "services/proxy answering")
    assert "hello from lite" in node.kubectl("get", "--raw", f"/api/v1/namespaces/{ns}/services/web/proxy/").stdout
    missing = node.kubectl("get", "--raw", f"/api/v1/namespaces/{ns}/pods/{an}:80/proxy/nope.html", check=False)
    assert missing.returncode != 0 and "NotFound" in missing.stderr  # the pod's own 404, passed through
    with node.cluster.kubectl_stream("proxy", "--port", "0") as (_, lines):
        line = lines.wait_for(lambda ln: "Starting to serve on 127.0.0.1:" in ln, 30)
        port = int(line.rsplit(":", 1)[1])
        url = f"http://127.0.0.1:{port}/api/v1/namespaces/{ns}/services/http:web:8080/proxy/"
        with urllib.request.urlopen(url, timeout=10) as r:
            assert b"hello from lite" in r.read()
    assert node.kubectl("get", "--raw", "/api/v1/nodes/e2e-node/proxy/healthz").stdout == "ok"
    on_node = json.loads(node.kubectl("get", "--raw", "/api/v1/nodes/e2e-node/proxy/pods").stdout)
    assert an in {p["metadata"]["name"] for p in on_node["items"]}
    # logs -f
    _apply(node, ns, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "ticker"}, "spec": {
        "terminationGracePeriodSeconds": 1, "containers": [{"name": "t", "image": IMAGE, "command": [
            "sh", "-c", "i=0; while :; do echo tick $i; i=$((i+1)); sleep 0.2; done"]}]}})
    node.wait(lambda: (node.pod(ns, "ticker").get("status") or {}).get("phase") == "Running", 60, "ticker")
    with node.cluster.kubectl_stream("logs", "-f", "-n", ns, "ticker") as (_, lines):
        lines.wait_for(lambda ln: "tick 3" in ln, 30)


def test_init_configmap_secret_prestop_grace(node: Node, ns: str) -> None:
    node.kubectl("create", "configmap", "-n", ns, "site", "--from-literal=index.html=from a configmap")
    node.kubectl("create", "secret", "generic", "-n", ns, "s", "--from-literal=pw=hunter2")
    _apply(node, ns, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {
        "terminationGracePeriodSeconds": 4,
        "initContainers": [{"name": "init", "image": IMAGE, "command": ["sh", "-c", "echo init > /work/order"],
                            "volumeMounts": [{"name": "work", "mountPath": "/work"}]}],
        "containers": [{"name": "c", "image": IMAGE, "command": ["sh", "-c",
                        "echo app >> /work/order; trap 'sleep 1; exit 0' TERM; while :; do sleep 0.1; done"],
                        "env": [{"name": "PW", "valueFrom": {"secretKeyRef": {"name": "s", "key": "pw"}}}],
                        "lifecycle": {"preStop": {"exec": {"command": ["sh", "-c", "echo prestop > /work/prestop"]}}},
                        "volumeMounts": [{"name": "site", "mountPath": "/site"},
                                         {"name": "work", "mountPath": "/work"}]}],
        "volumes": [{"name": "site", "configMap": {"name": "site"}},
                    {"name": "work", "hostPath": {"path": str(node.base / f"work-{ns}"),
                                                  "type": "DirectoryOrCreate"}}]}})
    node.wait_ready(ns, "p")
    assert node.kubectl("exec", "-n", ns, "p", "--", "cat", "/site/index.html").stdout == "from a configmap"
    assert node.kubectl("exec", "-n", ns, "p", "--", "sh", "-c", "echo $PW").stdout == "hunter2\n"
    assert (node.base / f"work-{ns}" / "order").read_text() == "init\napp\n"
    t0 = time.monotonic()
    node.kubectl("delete", "pod", "-n", ns, "p", "--wait=true", timeout=60)
    assert time.monotonic() - t0 >= 1.0  # the TERM trap's sleep ran inside the grace period
    assert (node.base / f"work-{ns}" / "prestop").read_text() == "prestop\n"


def test_oom_liveness_readiness_endpoints(node: Node, ns: str) -> None:
    _apply(node, ns, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "hog"}, "spec": {
        "containers": [{"name": "c", "image": IMAGE, "command": ["sh", "-c", "head -c 200m /dev/zero | tail"],
                        "resources": {"limits": {"memory": "32Mi"}}}]}})
    _apply(node, ns, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "live", "labels": {"app": "live"}},
                      "spec": {"terminationGracePeriodSeconds": 1, "containers": [{
                          "name": "c", "image": IMAGE, "command": ["sh", "-c", "touch /tmp/ok; sleep 3600"],
                          "livenessProbe": {"exec": {"command": ["test", "-f", "/tmp/ok"]}, "periodSeconds": 1,
                                            "failureThreshold": 1, "timeoutSeconds": 5},
                          "readinessProbe": {"exec": {"command": ["test", "-f", "/tmp/ready"]}, "periodSeconds": 1,
                                             "timeoutSeconds": 5},
                          "ports": [{"containerPort": 80}]}]}})
    _apply(node, ns, {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "live"},
                      "spec": {"selector": {"app": "live"}, "ports": [{"port": 80}]}})

    def cs(name: str) -> dict[str, Any]:
        return dict(((node.pod(ns, name).get("status") or {}).get("containerStatuses") or [{}])[0])

    node.wait(lambda: (cs("hog").get("lastState") or {}).get("terminated", {}).get("reason") == "OOMKilled"
              and cs("hog")["restartCount"] >= 1, 120, "hog OOMKilled and restarted")
    node.wait(lambda: cs("live").get("state", {}).get("running") is not None, 60, "live running")

    def endpoints() -> list[Any]:
        ep = json.loads(node.kubectl("get", "endpoints", "-n", ns, "live", "-o", "json").stdout)
        return [a for s in ep.get("subsets") or [] for a in s.get("addresses") or []]

    assert cs("live")["ready"] is False and endpoints() == []
    node.kubectl("exec", "-n", ns, "live", "--", "touch", "/tmp/ready")
    node.wait(lambda: len(endpoints()) == 1, 60, "endpoint after readiness")
    node.kubectl("exec", "-n", ns, "live", "--", "rm", "/tmp/ok")
    node.wait(lambda: cs("live").get("restartCount", 0) >= 1, 60, "liveness restart")


def test_top_pods(node: Node, ns: str) -> None:
    _apply(node, ns, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "busy"}, "spec": {
        "terminationGracePeriodSeconds": 1,
        "containers": [{"name": "c", "image": IMAGE, "command": ["sh", "-c", "while :; do :; done"],
                        "resources": {"limits": {"cpu": "200m"}}}]}})
    node.wait(lambda: "busy" in node.kubectl("top", "pods", "-n", ns, check=False).stdout, 90, "kubectl top pods")


def test_pod_start_latency_and_image_pulls_in_metrics(node: Node, ns: str) -> None:
    """The agent's pod start latency and image pulls (a pull that works, one that fails) reach the server's
    `/metrics` by node; the agent sends them with its usage samples (every 15 s). Runs before the restart test
    below: the counters start at zero with each agent process, as kubelet's do."""
    from prometheus_client.parser import text_string_to_metric_families

    _apply(node, ns, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "starter"}, "spec": {
        "terminationGracePeriodSeconds": 1,
        "containers": [{"name": "c", "image": IMAGE, "command": ["sleep", "3600"]}]}})
    _apply(node, ns, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "nosuch"}, "spec": {
        "terminationGracePeriodSeconds": 1, "containers": [{"name": "c", "image": "busybox:no-such-tag"}]}})
    node.wait_ready(ns, "starter")
    got: dict[tuple[str, str], float] = {}

    def moved() -> bool:
        status, body = node.cluster.server.request("/metrics")
        assert status == 200 and isinstance(body, str), body
        got.clear()
        for fam in text_string_to_metric_families(body):
            for smp in fam.samples:
                if smp.labels.get("node") == "e2e-node" and "le" not in smp.labels:
                    got[(smp.name, smp.labels.get("result", ""))] = smp.value
        return (got.get(("kubelet_pod_start_duration_seconds_count", ""), 0) >= 1
                and got.get(("lite_image_pulls_total", "failure"), 0) >= 1
                and got.get(("lite_image_pulls_total", "success"), 0) >= 1
                and got.get(("lite_image_pull_bytes_total", ""), 0) > 0)

    node.wait(moved, 60, f"pod start and image pull metrics for e2e-node: {got}")
    assert got[("kubelet_pod_start_duration_seconds_sum", "")] > 0
    assert got[("kubelet_image_pull_duration_seconds_count", "")] >= 2


def test_agent_and_server_kill9_keep_pods(node: Node, ns: str) -> None:
    _apply(node, ns, _deployment("keep", 1))
    node.wait(lambda: len(_pods(node, ns, "app=keep")) == 1, 60, "keep pod")
    name = _pods(node, ns, "app=keep")[0]["metadata"]["name"]
    before = node.wait_ready(ns, name)
    cid = before["status"]["containerStatuses"][0]["containerID"]
    ip = before["status"]["podIP"]
    assert node.agent is not None
    node.agent.kill()
    node.agent.wait()
    # the pod keeps serving while the agent is gone: fetch from the node netns
    out = subprocess.run(["nsenter", f"--net={node.base / 'node-netns'}", str(BUSYBOX), "wget", "-qO-",
                          f"http://{ip}/"], capture_output=True, text=True, timeout=30)
    assert "hello from lite" in out.stdout
    node.start_agent()
    time.sleep(5)
    after = node.wait_ready(ns, name)
    st = after["status"]["containerStatuses"][0]
    assert st["containerID"] == cid and st["restartCount"] == 0 and after["status"]["podIP"] == ip
    assert len(_pods(node, ns, "app=keep")) == 1
    server = node.cluster.server
    assert server.proc is not None
    server.proc.kill()
    server.proc.wait()
    out = subprocess.run(["nsenter", f"--net={node.base / 'node-netns'}", str(BUSYBOX), "wget", "-qO-",
                          f"http://{ip}/"], capture_output=True, text=True, timeout=30)
    assert "hello from lite" in out.stdout
    server.start()
    server.wait_ready(60)
    time.sleep(5)
    again = node.wait_ready(ns, name)
    assert again["status"]["containerStatuses"][0]["containerID"] == cid
    assert again["status"]["containerStatuses"][0]["restartCount"] == 0


def _node_wget(node: Node, url: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["nsenter", f"--net={node.base / 'node-netns'}", str(BUSYBOX), "wget", "-qO-", url],
                          capture_output=True, text=True, timeout=30)


def test_service_cluster_ip_from_the_node_and_a_pod(node: Node, ns: str) -> None:
    """The agent's service proxy (nftables in the node netns) from Services/EndpointSlices relayed by the server."""
    _apply(node, ns, _deployment("svcweb", 2))
    _apply(node, ns, {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "svcweb"},
                      "spec": {"selector": {"app": "svcweb"}, "ports": [{"port": 8080, "targetPort": 80}]}})
    cip = node.kubectl("get", "service", "-n", ns, "svcweb", "-o", "jsonpath={.spec.clusterIP}").stdout.strip()
    node.wait(lambda: "hello from lite" in _node_wget(node, f"http://{cip}:8080/").stdout, 90,
              "ClusterIP from the node")
    pod = _pods(node, ns, "app=svcweb")[0]["metadata"]["name"]
    node.wait_ready(ns, pod)
    out = node.kubectl("exec", "-n", ns, pod, "--", "wget", "-qO-", f"http://{cip}:8080/", check=False)
    assert "hello from lite" in out.stdout, out.stderr
    node.kubectl("scale", "deployment", "-n", ns, "svcweb", "--replicas=0")
    node.wait(lambda: "refused" in _node_wget(node, f"http://{cip}:8080/").stderr.lower(), 90,
              "no endpoints: refused")


def test_cluster_dns_from_a_pod(node: Node, ns: str) -> None:
    """The agent's cluster DNS at 10.43.0.10: a ClusterIP, a headless Service and a StatefulSet pod's name."""
    _apply(node, ns, {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "dnsweb"},
                      "spec": {"selector": {"app": "dnsweb"}, "ports": [{"name": "http", "port": 8080}]}})
    _apply(node, ns, {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "nginx"},
                      "spec": {"clusterIP": "None", "selector": {"app": "sts"},
                               "ports": [{"name": "web", "port": 80}]}})
    _apply(node, ns, {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "web"}, "spec": {
        "serviceName": "nginx", "replicas": 2, "selector": {"matchLabels": {"app": "sts"}},
        "template": {"metadata": {"labels": {"app": "sts"}}, "spec": {
            "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "c", "image": IMAGE, "command": ["sleep", "3600"]}]}}}})
    cip = node.kubectl("get", "service", "-n", ns, "dnsweb", "-o", "jsonpath={.spec.clusterIP}").stdout.strip()
    node.wait(lambda: len(_pods(node, ns, "app=sts")) == 2, 120, "2 StatefulSet pods")
    for pod in ("web-0", "web-1"):
        node.wait_ready(ns, pod)
    ips = sorted(p["status"]["podIP"] for p in _pods(node, ns, "app=sts"))

    def ask(name: str) -> str:
        out = node.kubectl("exec", "-n", ns, "web-0", "--", "nslookup", name, check=False)
        return out.stdout + out.stderr

    node.wait(lambda: cip in ask("dnsweb"), 60, "dnsweb resolves to its ClusterIP")
    assert cip in ask(f"dnsweb.{ns}.svc.cluster.local")
    node.wait(lambda: all(ip in ask("nginx") for ip in ips), 60, "the headless Service gives every pod IP")
    web1 = next(p["status"]["podIP"] for p in _pods(node, ns, "app=sts") if p["metadata"]["name"] == "web-1")
    assert web1 in ask(f"web-1.nginx.{ns}.svc.cluster.local")
    assert "NXDOMAIN" in ask(f"nope.{ns}.svc.cluster.local")


def test_pod_api_credentials_inside_the_container(node: Node, ns: str) -> None:
    """The ServiceAccount admission's kube-api-access volume filled by the agent: a pod-bound token (fetched
    over the join session) that authenticates as the pod's ServiceAccount, the cluster CA, the namespace file,
    and the service environment variables; the token stops working once the pod is gone."""
    node.kubectl("create", "serviceaccount", "-n", ns, "reader")
    _apply(node, ns, {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "my-web"},
                      "spec": {"selector": {"app": "none"}, "ports": [{"name": "http", "port": 8080}]}})
    _apply(node, ns, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "client"}, "spec": {
        "serviceAccountName": "reader", "terminationGracePeriodSeconds": 1,
        "containers": [{"name": "c", "image": IMAGE, "command": ["sleep", "3600"]}]}})
    node.wait_ready(ns, "client")
    sa_dir = "/var/run/secrets/kubernetes.io/serviceaccount"

    def read(*cmd: str) -> str:
        return node.kubectl("exec", "-n", ns, "client", "--", *cmd).stdout

    token = read("cat", f"{sa_dir}/token").strip()
    assert read("cat", f"{sa_dir}/namespace") == ns
    ca = node.cluster.server.config()["clusters"][0]["cluster"]["certificate-authority-data"]
    import base64

    assert read("cat", f"{sa_dir}/ca.crt") == base64.b64decode(ca).decode()
    status, body = node.cluster.server.request("/apis/authentication.k8s.io/v1/selfsubjectreviews", method="POST",
                                               body={}, token=token)
    assert status == 201, body
    info = body["status"]["userInfo"]
    assert info["username"] == f"system:serviceaccount:{ns}:reader"
    assert info["extra"]["authentication.kubernetes.io/pod-name"] == ["client"]
    assert info["extra"]["authentication.kubernetes.io/node-name"] == ["e2e-node"]
    env = dict(line.partition("=")[::2] for line in read("env").splitlines() if "=" in line)
    api_ip = node.kubectl("get", "service", "kubernetes", "-o", "jsonpath={.spec.clusterIP}").stdout.strip()
    assert (env.get("KUBERNETES_SERVICE_HOST"), env.get("KUBERNETES_SERVICE_PORT")) == (api_ip, "443"), env
    assert env.get("KUBERNETES_SERVICE_PORT_HTTPS") == "443"
    assert env.get("KUBERNETES_PORT_443_TCP") == f"tcp://{api_ip}:443"
    web_ip = node.kubectl("get", "service", "-n", ns, "my-web", "-o", "jsonpath={.spec.clusterIP}").stdout.strip()
    assert env.get("MY_WEB_SERVICE_HOST") == web_ip and env.get("MY_WEB_SERVICE_PORT_HTTP") == "8080"
    node.kubectl("delete", "pod", "-n", ns, "client", "--wait=true", "--timeout=60s")
    assert node.cluster.server.request("/api", token=token)[0] == 401
