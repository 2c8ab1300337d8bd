"""The service proxy's data path, for real: a node netns with a bridge, pod netns serving HTTP and UDP, an outside
client netns, and the nftables table programmed through the proxier from Service/EndpointSlice dicts (root only).

Topology (all in netns this test creates; conftest removes them, the processes are killed here):
    pod a 10.42.0.2, pod b 10.42.0.3 (servers), pod c 10.42.0.4 (client) ── lite0 10.42.0.1 ── node netns
    node netns ul 10.99.0.1/24 ── veth ── ul 10.99.0.2/24 outside client netns
Services: 10.43.0.0/16 routed on the node via lite0 (the service-CIDR route). Nothing answers ARP for a
ClusterIP there, so a packet the proxy does not translate would fail with "no route to host" after 3 s.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from conftest import ip, needs_root

from lite.agent.proxy.healthcheck import HealthServers
from lite.agent.proxy.proxier import Proxier
from lite.agent.proxy.rules import ProxyConfig
from lite.netns import bridge, masq, nftables, pod, routes
from lite.netns.nftables import AsyncNft
from lite.netns.proxysync import TableSyncer

pytestmark = [
    pytest.mark.root,
    needs_root,
    pytest.mark.skipif(not nftables.available(), reason="libnftables.so.1 (Debian libnftables1) is not installed"),
]
Obj = dict[str, Any]
NODE_IP = "10.99.0.1"
OUTSIDE_IP = "10.99.0.2"
CONFIG = ProxyConfig("n1", (NODE_IP,), "10.42.0.0/16", service_cidr="10.43.0.0/16")

SERVER = """
import socket, sys, threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
name = sys.argv[1]
class H(BaseHTTPRequestHandler):
    def do_GET(self):
        body = f"{name} {self.client_address[0]}".encode()
        self.send_response(200); self.send_header("Content-Length", str(len(body))); self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args): pass
udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); udp.bind(("0.0.0.0", 5353))
def echo():
    while True:
        data, peer = udp.recvfrom(100); udp.sendto(name.encode(), peer)
threading.Thread(target=echo, daemon=True).start()
srv = ThreadingHTTPServer(("0.0.0.0", 8080), H)
print("ready", flush=True)
srv.serve_forever()
"""

CLIENT = """
import socket, sys, urllib.error, urllib.request
out = []
for url in sys.argv[2:]:
    try:
        out.append(urllib.request.urlopen(url, timeout=float(sys.argv[1])).read().decode().replace("\\n", " "))
    except urllib.error.HTTPError as exc:
        out.append(f"HTTP {exc.code}")
    except OSError as exc:
        reason = getattr(exc, "reason", exc)
        out.append(type(reason).__name__)
print("\\n".join(out))
"""

UDP_CLIENT = """
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(("0.0.0.0", 40000)); s.settimeout(3)
s.sendto(b"x", (sys.argv[1], int(sys.argv[2])))
print(s.recvfrom(100)[0].decode())
"""


@dataclass
class Cluster:
    node: str
    outside: str
    pods: dict[str, str]  # name → netns name
    proxier: Proxier

    async def sync(self) -> None:
        await self.proxier.sync_once()


def svc(name: str, cluster_ip: str, **spec: Any) -> Obj:
    ports = [
        {"name": "http", "port": 80, "protocol": "TCP", "nodePort": 30080},
        {"name": "dns", "port": 53, "protocol": "UDP", "nodePort": 30053},
    ]
    return {
        "metadata": {"namespace": "default", "name": name},
        "spec": {"clusterIP": cluster_ip, "ports": ports, **spec},
    }


def slice_(name: str, *pod_ips: str, node: str = "n1") -> Obj:
    meta = {"namespace": "default", "name": f"{name}-1", "labels": {"kubernetes.io/service-name": name}}
    ports = [{"name": "http", "port": 8080, "protocol": "TCP"}, {"name": "dns", "port": 5353, "protocol": "UDP"}]
    return {"metadata": meta, "ports": ports, "endpoints": [{"addresses": [a], "nodeName": node} for a in pod_ips]}


def get(netns: str, *urls: str, timeout: float = 5.0) -> list[str]:
    done = subprocess.run(
        ["ip", "netns", "exec", netns, sys.executable, "-c", CLIENT, str(timeout), *urls],
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return done.stdout.splitlines()


def udp(netns: str, host: str, port: int) -> str:
    cmd = ["ip", "netns", "exec", netns, sys.executable, "-c", UDP_CLIENT, host, str(port)]
    return subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=30).stdout.strip()


@pytest.fixture
def servers() -> Iterator[list[subprocess.Popen[str]]]:
    procs: list[subprocess.Popen[str]] = []
    try:
        yield procs
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()


@pytest.fixture
def outside(prefix: str, node_netns: str) -> Iterator[str]:
    name = f"{prefix}-out"
    ip("netns", "add", name)
    try:
        ip("-n", node_netns, "link", "add", "ul", "type", "veth", "peer", "name", "ul", "netns", name)
        for netns, address in ((node_netns, f"{NODE_IP}/24"), (name, f"{OUTSIDE_IP}/24")):
            ip("-n", netns, "addr", "add", address, "dev", "ul")
            ip("-n", netns, "link", "set", "ul", "up")
            ip("-n", netns, "link", "set", "lo", "up")
        yield name
    finally:
        subprocess.run(["ip", "netns", "del", name], check=False, capture_output=True)


@pytest.fixture
async def cluster(
    prefix: str, node_netns: str, outside: str, servers: list[subprocess.Popen[str]]
) -> AsyncIterator[Cluster]:
    await bridge.ensure_bridge("lite0", "10.42.0.1/24", node_netns=node_netns)
    await routes.ensure_service_route("10.43.0.0/16", gateway="10.42.0.1", node_netns=node_netns)
    pods: dict[str, str] = {}
    for i, name in enumerate(("a", "b", "c")):
        await pod.setup_pod_network(f"{prefix}-{name}", f"10.42.0.{2 + i}", "10.42.0.1", 24, node_netns=node_netns)
        pods[name] = pod.netns_name(f"{prefix}-{name}")
    for name in ("a", "b"):
        proc = subprocess.Popen(
            ["ip", "netns", "exec", pods[name], sys.executable, "-c", SERVER, f"pod-{name}"],
            stdout=subprocess.PIPE,
            text=True,
        )
        servers.append(proc)
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    nft = AsyncNft(node_netns)
    try:
        proxier = Proxier(CONFIG, TableSyncer(nft), netns=node_netns, min_interval=0)
        yield Cluster(node_netns, outside, pods, proxier)
    finally:
        nft.close()  # the table goes with the node netns


async def test_a_pod_reaches_the_cluster_ip_and_requests_spread_over_both_endpoints(cluster: Cluster) -> None:
    cluster.proxier.set_service(svc("web", "10.43.0.10"))
    cluster.proxier.set_slice(slice_("web", "10.42.0.2", "10.42.0.3"))
    await cluster.sync()
    answers = get(cluster.pods["c"], *["http://10.43.0.10/"] * 24)
    assert {a.split()[0] for a in answers} == {"pod-a", "pod-b"}
    assert {a.split()[1] for a in answers} == {"10.42.0.4"}  # pod to service: client IP preserved


async def test_client_ip_affinity_keeps_a_client_on_one_endpoint(cluster: Cluster) -> None:
    cluster.proxier.set_service(svc("sticky", "10.43.0.13", sessionAffinity="ClientIP"))
    cluster.proxier.set_slice(slice_("sticky", "10.42.0.2", "10.42.0.3"))
    await cluster.sync()
    answers = get(cluster.pods["c"], *["http://10.43.0.13/"] * 16)
    assert len(answers) == 16 and len({a.split()[0] for a in answers}) == 1, answers
    assert answers[0].split()[0] in ("pod-a", "pod-b")


async def test_a_service_without_endpoints_refuses_at_once(cluster: Cluster) -> None:
    cluster.proxier.set_service(svc("empty", "10.43.0.11", type="NodePort"))
    await cluster.sync()
    # A refusal (ICMP port unreachable from the reject rule) and not a silent drop, which would time out.
    assert get(cluster.pods["c"], "http://10.43.0.11/", timeout=20) == ["ConnectionRefusedError"]
    assert get(cluster.node, "http://10.43.0.11/", timeout=20) == ["ConnectionRefusedError"]
    assert get(cluster.outside, f"http://{NODE_IP}:30080/", timeout=20) == ["ConnectionRefusedError"]


async def test_hairpin_a_pod_reaches_itself_through_its_service(cluster: Cluster) -> None:
    cluster.proxier.set_service(svc("self", "10.43.0.12"))
    cluster.proxier.set_slice(slice_("self", "10.42.0.2"))
    await cluster.sync()
    assert get(cluster.pods["a"], "http://10.43.0.12/") == ["pod-a 10.42.0.1"]  # masqueraded to the bridge


async def test_an_endpoint_change_takes_effect(cluster: Cluster) -> None:
    cluster.proxier.set_service(svc("web", "10.43.0.10"))
    cluster.proxier.set_slice(slice_("web", "10.42.0.2"))
    await cluster.sync()
    assert {a.split()[0] for a in get(cluster.pods["c"], *["http://10.43.0.10/"] * 4)} == {"pod-a"}
    cluster.proxier.set_slice(slice_("web", "10.42.0.3"))
    assert await cluster.proxier.sync_once() is True
    assert {a.split()[0] for a in get(cluster.pods["c"], *["http://10.43.0.10/"] * 4)} == {"pod-b"}
    cluster.proxier.delete_slice("default", "web-1")
    await cluster.sync()
    assert get(cluster.pods["c"], "http://10.43.0.10/", timeout=20) == ["ConnectionRefusedError"]


async def test_the_node_itself_reaches_the_cluster_ip(cluster: Cluster) -> None:
    cluster.proxier.set_service(svc("web", "10.43.0.10"))
    cluster.proxier.set_slice(slice_("web", "10.42.0.3"))
    await cluster.sync()
    assert get(cluster.node, "http://10.43.0.10/") == ["pod-b 10.42.0.1"]


async def test_node_port_from_an_outside_client(cluster: Cluster) -> None:
    cluster.proxier.set_service(svc("web", "10.43.0.10", type="NodePort"))
    cluster.proxier.set_slice(slice_("web", "10.42.0.2"))
    await cluster.sync()
    # externalTrafficPolicy Cluster: the source is masqueraded to the node's address on the pod's side.
    assert get(cluster.outside, f"http://{NODE_IP}:30080/") == ["pod-a 10.42.0.1"]


async def test_external_traffic_policy_local_preserves_the_client_address(cluster: Cluster) -> None:
    cluster.proxier.set_service(svc("web", "10.43.0.10", type="NodePort", externalTrafficPolicy="Local"))
    cluster.proxier.set_slice(slice_("web", "10.42.0.2"))
    await cluster.sync()
    assert get(cluster.outside, f"http://{NODE_IP}:30080/") == [f"pod-a {OUTSIDE_IP}"]


async def test_health_check_node_port_answers_for_local_endpoints(cluster: Cluster) -> None:
    health = HealthServers(cluster.node)
    cluster.proxier.health = health
    try:
        spec = {"type": "LoadBalancer", "externalTrafficPolicy": "Local", "healthCheckNodePort": 32100}
        cluster.proxier.set_service(svc("lb", "10.43.0.20", **spec))
        cluster.proxier.set_slice(slice_("lb", "10.42.0.2"))
        await cluster.sync()
        url = f"http://{NODE_IP}:32100/healthz"
        (body,) = await asyncio.to_thread(get, cluster.outside, url)
        assert json.loads(body)["localEndpoints"] == 1
        cluster.proxier.set_slice(slice_("lb", "10.42.1.9", node="n2"))
        await cluster.sync()
        assert await asyncio.to_thread(get, cluster.outside, url) == ["HTTP 503"]  # no local endpoint
        cluster.proxier.delete_service("default", "lb")
        await cluster.sync()
        assert health.ports == []
        assert await asyncio.to_thread(get, cluster.outside, url, timeout=20) == ["ConnectionRefusedError"]
    finally:
        await health.close()


async def test_external_ips_and_load_balancer_ingress_from_an_outside_client(cluster: Cluster) -> None:
    ip("-n", cluster.outside, "route", "add", "192.0.2.0/24", "via", NODE_IP)
    cluster.proxier.set_service(svc("ext", "10.43.0.30", externalIPs=["192.0.2.10"]))
    cluster.proxier.set_slice(slice_("ext", "10.42.0.3"))
    lb = {
        **svc("lb", "10.43.0.31", type="LoadBalancer"),
        "status": {"loadBalancer": {"ingress": [{"ip": "192.0.2.11"}]}},
    }
    cluster.proxier.set_service(lb)
    cluster.proxier.set_slice(slice_("lb", "10.42.0.2"))
    await cluster.sync()
    assert get(cluster.outside, "http://192.0.2.10/", "http://192.0.2.11/") == ["pod-b 10.42.0.1", "pod-a 10.42.0.1"]


async def test_the_kubernetes_service_reaches_the_api_server_on_the_node(
    cluster: Cluster, servers: list[subprocess.Popen[str]]
) -> None:
    code = "import http.server as h; h.HTTPServer(('0.0.0.0', 6443), h.SimpleHTTPRequestHandler).serve_forever()"
    servers.append(subprocess.Popen(["ip", "netns", "exec", cluster.node, sys.executable, "-c", code]))
    api = {
        "metadata": {"namespace": "default", "name": "kubernetes"},
        "spec": {"clusterIP": "10.43.0.1", "ports": [{"name": "https", "port": 443, "protocol": "TCP"}]},
    }
    slice_meta = {"namespace": "default", "name": "kubernetes", "labels": {"kubernetes.io/service-name": "kubernetes"}}
    cluster.proxier.set_service(api)
    cluster.proxier.set_slice(
        {
            "metadata": slice_meta,
            "ports": [{"name": "https", "port": 6443, "protocol": "TCP"}],
            "endpoints": [{"addresses": [NODE_IP]}],
        }
    )
    await cluster.sync()
    for _ in range(100):  # the stand-in API server may still be starting
        answer = get(cluster.pods["c"], "http://10.43.0.1:443/", timeout=5)
        if answer != ["ConnectionRefusedError"]:
            break
    assert answer[0].startswith("<!DOCTYPE HTML")


async def test_udp_flow_moves_to_the_new_endpoint_once_the_old_one_is_gone(cluster: Cluster) -> None:
    cluster.proxier.set_service(svc("dns", "10.43.0.53"))
    cluster.proxier.set_slice(slice_("dns", "10.42.0.2"))
    await cluster.sync()
    assert udp(cluster.pods["c"], "10.43.0.53", 53) == "pod-a"
    cluster.proxier.set_slice(slice_("dns", "10.42.0.3"))
    await cluster.sync()
    # Same client address and port: without removing the stale conntrack entry this would still reach pod a.
    assert udp(cluster.pods["c"], "10.43.0.53", 53) == "pod-b"


async def test_changes_never_interrupt_a_service_that_stays(cluster: Cluster) -> None:
    """While transactions keep rewriting its own chain (an endpoint added and removed) and other services come
    and go, a steady service answers every request: no transaction opens a window without it."""
    cluster.proxier.set_service(svc("steady", "10.43.0.10"))
    cluster.proxier.set_slice(slice_("steady", "10.42.0.2"))
    await cluster.sync()
    stop = asyncio.Event()

    async def churn() -> int:
        n = 0
        while not stop.is_set():
            n += 1
            cluster.proxier.set_slice(slice_("steady", *("10.42.0.2", "10.42.0.3")[: 1 + n % 2]))
            cluster.proxier.set_service(svc(f"churn{n % 7}", f"10.43.1.{n % 7 + 1}"))
            cluster.proxier.set_slice(slice_(f"churn{n % 7}", *("10.42.0.3", "10.42.0.2")[: 1 + n % 2]))
            cluster.proxier.delete_service("default", f"churn{(n + 3) % 7}")
            assert await cluster.proxier.sync_once() is True
            await asyncio.sleep(0.001)
        return n

    churner = asyncio.create_task(churn())
    try:
        answers = await asyncio.to_thread(get, cluster.pods["c"], *["http://10.43.0.10/"] * 100)
    finally:
        stop.set()
    assert await churner > 5
    assert [a.split()[0] in ("pod-a", "pod-b") for a in answers] == [True] * 100, answers


def untranslated_flows(netns: str, address: str) -> list[str]:
    """This netns's conntrack entries to `address` that were not DNATed (their reply comes from `address`)."""
    table = subprocess.run(["ip", "netns", "exec", netns, "cat", "/proc/net/nf_conntrack"], capture_output=True,
                           text=True, check=True).stdout
    return [line for line in table.splitlines() if f"dst={address} " in line and f"src={address} " in line]


async def test_a_connection_started_before_its_service_is_programmed_connects_once_it_is(
    cluster: Cluster,
) -> None:
    """The first SYN to a ClusterIP the proxy does not know yet is dropped without a conntrack entry, so its
    retransmit (1 s later) is translated: the client connects. Routed on untranslated, the SYN would leave an
    entry without DNAT that the retransmits follow: "no route to host" although the service exists."""
    cluster.proxier.set_service(svc("other", "10.43.0.20"))  # the table exists, without the late service
    await cluster.sync()
    client = asyncio.create_task(asyncio.to_thread(get, cluster.pods["c"], "http://10.43.0.30/", timeout=10))
    await asyncio.sleep(0.5)  # the first SYN has gone
    cluster.proxier.set_service(svc("late", "10.43.0.30"))
    cluster.proxier.set_slice(slice_("late", "10.42.0.2"))
    await cluster.sync()
    assert await client == ["pod-a 10.42.0.4"]
    assert untranslated_flows(cluster.node, "10.43.0.30") == []


async def test_a_cluster_ip_port_no_service_has_is_refused_and_an_unallocated_address_dropped(
    cluster: Cluster,
) -> None:
    cluster.proxier.set_service(svc("web", "10.43.0.10"))
    cluster.proxier.set_slice(slice_("web", "10.42.0.2"))
    await cluster.sync()
    for source in (cluster.pods["c"], cluster.node):  # forwarded, and sent by the node itself
        assert get(source, "http://10.43.0.10:81/", timeout=20) == ["ConnectionRefusedError"]
        assert get(source, "http://10.43.7.7/", timeout=5) == ["TimeoutError"]
        assert get(source, "http://10.43.0.10/", timeout=5)[0].startswith("pod-a")
    assert untranslated_flows(cluster.node, "10.43.7.7") == []


async def test_a_service_whose_endpoint_is_its_own_local_address_answers_node_and_pods(
    cluster: Cluster, servers: list[subprocess.Popen[str]]
) -> None:
    """The cluster DNS pattern: the ClusterIP is a local address of the node and its own endpoint, so the DNAT
    changes nothing (no DNAT status on the flow); the ClusterIP check must still let it through."""
    ip("-n", cluster.node, "addr", "add", "10.43.0.60/32", "dev", "lo")
    code = "import http.server as h; h.HTTPServer(('10.43.0.60', 8080), h.SimpleHTTPRequestHandler).serve_forever()"
    servers.append(subprocess.Popen(["ip", "netns", "exec", cluster.node, sys.executable, "-c", code]))
    own = {"metadata": {"namespace": "default", "name": "own"},
           "spec": {"clusterIP": "10.43.0.60", "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}]}}
    meta = {"namespace": "default", "name": "own-1", "labels": {"kubernetes.io/service-name": "own"}}
    cluster.proxier.set_service(own)
    cluster.proxier.set_slice({"metadata": meta, "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
                               "endpoints": [{"addresses": ["10.43.0.60"]}]})
    await cluster.sync()
    for source in (cluster.node, cluster.pods["c"]):
        for _ in range(100):  # the server may still be starting
            answer = get(source, "http://10.43.0.60:8080/", timeout=5)
            if answer != ["ConnectionRefusedError"]:
                break
        assert answer[0].startswith("<!DOCTYPE HTML"), (source, answer)


async def test_a_flow_that_began_before_the_first_sync_is_translated_once_the_rules_exist(
    cluster: Cluster,
) -> None:
    """Before the proxy's first sync there is no table to drop the SYN, so it is routed on untranslated and
    leaves an entry without DNAT; the first sync removes such entries, and the client's retransmit connects.
    The fabric's masquerading table comes first on a node (and makes the netns track connections)."""
    await asyncio.to_thread(masq.ensure_masquerade, "10.42.0.0/16", node_netns=cluster.node)
    client = asyncio.create_task(asyncio.to_thread(get, cluster.pods["c"], "http://10.43.0.30/", timeout=10))
    for _ in range(100):
        if untranslated_flows(cluster.node, "10.43.0.30"):
            break
        await asyncio.sleep(0.02)
    assert untranslated_flows(cluster.node, "10.43.0.30")  # the entry the old rules would leave behind
    cluster.proxier.set_service(svc("late", "10.43.0.30"))
    cluster.proxier.set_slice(slice_("late", "10.42.0.2"))
    await cluster.sync()
    assert await client == ["pod-a 10.42.0.4"]
    assert untranslated_flows(cluster.node, "10.43.0.30") == []
