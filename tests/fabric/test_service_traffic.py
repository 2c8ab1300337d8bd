"""Issue 8's three-node cluster (root, e2e): Service traffic from outside and under disruption.

From the client netns (a machine outside the cluster): a LoadBalancer Service gets the nodes' addresses in
`status.loadBalancer.ingress` and answers on them; the `lite.dev/lb-pool` node label limits those nodes;
`externalTrafficPolicy: Local` keeps the client's real source address (the backend's CGI echoes REMOTE_ADDR),
only the node with a local endpoint answers, and `healthCheckNodePort` answers 200 there and 503 elsewhere.
A Service without endpoints refuses at once; ClientIP session affinity sticks to one backend. Two clients loop
on a ClusterIP (from every node) while `kubectl rollout restart` replaces every backend (readiness probes,
preStop sleep) and while the agent of a joined node running a backend is killed and started again: no request
may fail.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fabric import trafficloop
from tests.fabric.fabrickit import fetch, httpd_command, web_deployment
from tests.helpers.netcluster import (
    CLIENT_IP,
    EXTERNAL_NET,
    IMAGE,
    NetCluster,
    busybox_pod,
    net_cluster,
    restart_agent,
)

pytestmark = [
    pytest.mark.root,
    pytest.mark.e2e,
    pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("nsenter") or not os.access("/usr/bin/kubectl", os.X_OK),
                       reason="needs root, nsenter and kubectl (network namespaces, real nodes)"),
]
POOL = "lite.dev/lb-pool"
Obj = dict[str, Any]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NetCluster]:
    with net_cluster(tmp_path_factory.mktemp("svc")) as c:
        # n3 reports its --node-external-ip as the LoadBalancer address: the client routes it to n3
        n3 = c.nodes[2]
        c.run_in(c.client, "ip", "route", "add", f"{EXTERNAL_NET}.13", "via", n3.ip, check=True)
        c.apply([*web_deployment("web", 3), busybox_pod("cli", c.nodes[0].name, ["sleep", "3600"])])
        c.wait_running("app in (web,cli)", 4)
        yield c


def lb_service(name: str, selector: str, port: int, **spec: Any) -> Obj:
    """Each LoadBalancer Service of the module has its own port: they all share the nodes' addresses."""
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name},
            "spec": {"type": "LoadBalancer", "selector": {"app": selector},
                     "ports": [{"name": "http", "port": port, "targetPort": 8080}], **spec}}


def ingress(cluster: NetCluster, name: str) -> list[str]:
    status = cluster.json("get", "svc", name).get("status") or {}
    return sorted(i["ip"] for i in (status.get("loadBalancer") or {}).get("ingress") or [])


def from_client(cluster: NetCluster, url: str, timeout: int = 3) -> str:
    r = cluster.run_in(cluster.client, "wget", "-qO-", "--tries=1", "-T", str(timeout), url, timeout=timeout + 10)
    return r.stdout.strip() if r.returncode == 0 else ""


def http_status(cluster: NetCluster, url: str) -> tuple[int, Obj]:
    r = cluster.run_in(cluster.client, "curl", "-s", "-m", "3", "-w", "\n%{http_code}", url, timeout=15)
    body, _, code = r.stdout.rpartition("\n")
    return int(code or 0), json.loads(body) if body.strip() else {}


def lb_addresses(cluster: NetCluster) -> list[str]:
    return sorted([n.ip for n in cluster.nodes[:2]] + [f"{EXTERNAL_NET}.13"])


def test_a_loadbalancer_gets_the_node_addresses_and_answers_on_them(cluster: NetCluster) -> None:
    cluster.apply(lb_service("lb", "web", 80))
    want = lb_addresses(cluster)
    assert cluster.wait(lambda: ingress(cluster, "lb") == want, "ingress = the three node addresses", timeout=30)
    names = {p["metadata"]["name"] for p in cluster.pods("app=web")}
    for ip in want:
        assert cluster.wait(lambda a=ip: from_client(cluster, f"http://{a}/") in names,  # type: ignore[misc]
                            f"the LoadBalancer on {ip}:80 from the client netns", timeout=30)


def test_the_lb_pool_label_limits_the_nodes(cluster: NetCluster) -> None:
    cluster.apply(lb_service("lb", "web", 80))
    n1, n2, _ = cluster.nodes
    try:
        for node in (n1, n2):
            cluster.kubectl("label", "node", node.name, f"{POOL}=edge", "--overwrite")
        assert cluster.wait(lambda: ingress(cluster, "lb") == sorted([n1.ip, n2.ip]), "ingress = the pool's nodes",
                            timeout=30)
        pooled = lb_service("lb-inner", "web", 81)
        pooled["metadata"]["labels"] = {POOL: "inner"}
        cluster.apply(pooled)
        cluster.kubectl("label", "node", n2.name, f"{POOL}=inner", "--overwrite")
        # lb-inner only on its pool's node; lb (no pool of its own) on every labelled node
        assert cluster.wait(lambda: ingress(cluster, "lb-inner") == [n2.ip], "lb-inner on its own pool", timeout=30)
        assert ingress(cluster, "lb") == sorted([n1.ip, n2.ip])
        assert cluster.wait(lambda: from_client(cluster, f"http://{n2.ip}:81/"), "lb-inner answers on n2", timeout=30)
    finally:
        for node in (n1, n2):
            cluster.kubectl("label", "node", node.name, f"{POOL}-", check=False)
        cluster.kubectl("delete", "svc", "lb-inner", "--ignore-not-found", check=False)
    assert cluster.wait(lambda: ingress(cluster, "lb") == lb_addresses(cluster), "every node again", timeout=30)


# One TCP connect to argv[1]:argv[2] (timeout argv[3], default 5 s): prints ConnectionRefusedError (a reset),
# TimeoutError (dropped) or "connected", and how long it took.
CONNECT = """
import socket, sys, time
started = time.monotonic()
timeout = float(sys.argv[3]) if len(sys.argv) > 3 else 5.0
try:
    socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=timeout).close()
    outcome = "connected"
except OSError as e:
    outcome = type(e).__name__
print(f"{outcome} after {time.monotonic() - started:.3f}s")
"""


def echo_deployment(node: str) -> Obj:
    labels = {"app": "echo"}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "echo"},
            "spec": {"replicas": 1, "selector": {"matchLabels": labels},
                     "template": {"metadata": {"labels": labels},
                                  "spec": {"nodeSelector": {"kubernetes.io/hostname": node},
                                           "terminationGracePeriodSeconds": 0,
                                           "containers": [{"name": "c", "image": IMAGE, "imagePullPolicy": "Never",
                                                           "command": httpd_command("echo")}]}}}}


def test_external_traffic_policy_local_keeps_the_client_ip(cluster: NetCluster) -> None:
    n1, n2, n3 = cluster.nodes
    cluster.apply([echo_deployment(n2.name), lb_service("echo", "echo", 82, externalTrafficPolicy="Local")])
    cluster.wait_running("app=echo", 1)
    svc = cluster.json("get", "svc", "echo")
    hc = svc["spec"].get("healthCheckNodePort")
    assert hc, f"no healthCheckNodePort allocated: {svc['spec']}"
    node_port = svc["spec"]["ports"][0]["nodePort"]

    def seen(url: str) -> str:  # busybox httpd listens on [::]
        return from_client(cluster, url).removeprefix("[::ffff:").removesuffix("]")

    assert cluster.wait(lambda: seen(f"http://{n2.ip}:82/cgi-bin/ip"), "the LB on n2", timeout=30) == CLIENT_IP
    assert seen(f"http://{n2.ip}:{node_port}/cgi-bin/ip") == CLIENT_IP
    # the nodes without a local endpoint do not answer (dropped, as kube-proxy does)
    # (each node's proxy learns of the endpoint on its own: until then it refuses, as for no endpoint at all)
    for ip, port in [(n1.ip, node_port), (n3.ip, node_port), (n1.ip, 82)]:
        def dropped(ip: str = ip, port: int = port) -> str:
            r = cluster.run_in(cluster.client, sys.executable, "-c", CONNECT, ip, str(port), "2", timeout=20)
            return r.stdout if r.stdout.startswith("TimeoutError") else ""

        assert cluster.wait(dropped, f"{ip}:{port} to drop (no local endpoint there)", timeout=30)
    # pods still use the whole Service through its ClusterIP
    assert cluster.wait(lambda: fetch(cluster, "cli", "http://echo:82/"), "echo from a pod on n1") == "echo"

    def health(ip: str) -> tuple[int, Obj]:
        return http_status(cluster, f"http://{ip}:{hc}/healthz")

    _code, doc = cluster.wait(lambda: (health(n2.ip)[0] == 200) and health(n2.ip), "200 from n2's health port")
    assert doc["localEndpoints"] == 1 and doc["service"] == {"namespace": "default", "name": "echo"}
    for node in (n1, n3):
        assert cluster.wait(lambda ip=node.ip: health(ip)[0] == 503, f"503 on {node.name}")  # type: ignore[misc]




def test_a_service_without_endpoints_refuses_at_once(cluster: NetCluster) -> None:
    cluster.apply({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "empty"},
                   "spec": {"type": "NodePort", "selector": {"app": "nothing"}, "ports": [{"port": 80}]}})
    svc = cluster.json("get", "svc", "empty")
    ip, node_port = svc["spec"]["clusterIP"], svc["spec"]["ports"][0]["nodePort"]

    def refused_from_pod() -> str:
        started = time.monotonic()
        r = cluster.exec("cli", "nc", "-w", "5", ip, "80")  # busybox 1.35's wget -T crashes on a refusal
        took = time.monotonic() - started
        return f"{r.stderr.strip()} ({took:.2f}s)" if "refused" in r.stderr else ""

    print("from a pod:", cluster.wait(refused_from_pod, "connection refused from a pod", timeout=30))
    for node in cluster.nodes:
        r = cluster.run_in(cluster.client, sys.executable, "-c", CONNECT, node.ip, str(node_port), timeout=20)
        print(f"from the client to {node.ip}:{node_port}: {r.stdout.strip()}")
        assert r.stdout.startswith("ConnectionRefusedError"), r.stdout + r.stderr  # a reset, not the 5 s timeout


def test_client_ip_session_affinity_sticks(cluster: NetCluster) -> None:
    cluster.apply({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "sticky"},
                   "spec": {"selector": {"app": "web"}, "sessionAffinity": "ClientIP",
                            "ports": [{"port": 80, "targetPort": 8080}]}})
    names = {p["metadata"]["name"] for p in cluster.pods("app=web")}
    first = cluster.wait(lambda: fetch(cluster, "cli", "http://sticky/"), "sticky from a pod")
    assert first in names
    assert {fetch(cluster, "cli", "http://sticky/") for _ in range(20)} == {first}


def rolling_deployment() -> list[Obj]:
    labels = {"app": "roll"}
    spread = [{"maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "ScheduleAnyway",
               "labelSelector": {"matchLabels": labels}}]
    container = {"name": "httpd", "image": IMAGE, "imagePullPolicy": "Never",
                 "command": ["sh", "-c", "hostname > /www/index.html; exec httpd -f -p 8080 -h /www"],
                 "readinessProbe": {"httpGet": {"path": "/", "port": 8080}, "periodSeconds": 1},
                 "lifecycle": {"preStop": {"exec": {"command": ["sleep", "3"]}}}}
    deploy = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "roll"},
              "spec": {"replicas": 3, "selector": {"matchLabels": labels},
                       "strategy": {"rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}},
                       "template": {"metadata": {"labels": labels},
                                    "spec": {"topologySpreadConstraints": spread, "terminationGracePeriodSeconds": 10,
                                             "containers": [container]}}}}
    service = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "roll"},
               "spec": {"selector": labels, "ports": [{"port": 80, "targetPort": 8080}]}}
    return [deploy, service]


class Loop:
    """trafficloop.py running in a node's netns against one URL."""

    def __init__(self, cluster: NetCluster, netns: str, url: str, stop: Path) -> None:
        self.proc = subprocess.Popen(["nsenter", f"--net=/run/netns/{netns}", sys.executable, trafficloop.__file__,
                                      url, str(stop)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def result(self) -> Obj:
        out, err = self.proc.communicate(timeout=30)
        assert self.proc.returncode == 0, err
        result: Obj = json.loads(out)
        return result


def test_no_request_fails_during_a_rollout_and_an_agent_restart(cluster: NetCluster) -> None:
    cluster.apply(rolling_deployment())
    before = {p["metadata"]["name"] for p in cluster.wait_running("app=roll", 3)}
    ip = cluster.json("get", "svc", "roll")["spec"]["clusterIP"]

    def answers(netns: str) -> bool:
        return cluster.run_in(netns, "wget", "-qO-", "-T", "2", f"http://{ip}/").returncode == 0

    cluster.wait(lambda: all(answers(n.netns) for n in cluster.nodes), "the roll Service from every node", timeout=30)
    stop = cluster.base / "netdone-loop-stop"
    loops = [Loop(cluster, node.netns, f"http://{ip}/", stop) for node in cluster.nodes]
    try:
        cluster.kubectl("rollout", "restart", "deployment/roll")
        cluster.kubectl("rollout", "status", "deployment/roll", "--timeout=150s", timeout=180)

        def replaced() -> list[Obj] | None:
            pods = cluster.pods("app=roll")
            return pods if len(pods) == 3 and not before & {p["metadata"]["name"] for p in pods} else None

        after: list[Obj] = cluster.wait(replaced, "only new pods left", timeout=60)
        # the agent of a joined node that runs a backend dies and comes back on the same data dir
        hosts = {p["spec"]["nodeName"] for p in after}
        target = next(n for n in reversed(cluster.nodes[1:]) if n.name in hosts)
        restart_agent(cluster, target)
        time.sleep(8)  # keep the loops running while the agent starts again and reconciles its rules
        assert target.proc is not None and target.proc.poll() is None, cluster.log_tails()
    finally:
        stop.touch()
        results = [loop.result() for loop in loops]
    for node, result in zip(cluster.nodes, results, strict=True):
        print(f"client in {node.name}: {result['ok']} ok, {result['failed']} failed {result['errors']}")
    assert all(r["ok"] > 0 for r in results)
    assert [r["failed"] for r in results] == [0, 0, 0], results
