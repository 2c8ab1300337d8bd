"""Cluster DNS from a pod, for real (root): the agent with --service-proxy serves 10.43.0.10 in a node netns.

Topology (all in netns this test creates and removes):
    pod netns 10.42.0.4 ── lite0 10.42.0.1 ── node netns (dummy `lite-dns` 10.43.0.10/32, the agent's DNS server)
The agent runs in this process (host netns) with its node netns pointing at the test's; its upstream resolver is
the test's own on 127.0.53.2 (the host netns's loopback, where the agent's forwarder lives).
The pod resolves with glibc (Python's getaddrinfo) through the resolv.conf lite writes for a ClusterFirst pod
(placed where `ip netns exec` bind-mounts it), and with busybox's nslookup and dnspython (UDP and TCP).
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from dnsupstream import UPSTREAM_HOST, FixedUpstream, running_upstream

from lite import wire
from lite.agent.agent import Agent, AgentConfig
from lite.netns import files, nftables, nsfs, pod

pytestmark = [
    pytest.mark.root,
    pytest.mark.skipif(os.geteuid() != 0 or shutil.which("ip") is None, reason="needs root and iproute2"),
    pytest.mark.skipif(not nftables.available(), reason="libnftables.so.1 (Debian libnftables1) is not installed"),
]
CLUSTER_DNS = "10.43.0.10"
RESOLVE = """
import socket, sys
for name in sys.argv[1:]:
    try:
        print(name, sorted({a[4][0] for a in socket.getaddrinfo(name, 80, socket.AF_INET, socket.SOCK_STREAM)}))
    except OSError as exc:
        print(name, type(exc).__name__)
"""
DNSPYTHON = """
import sys, dns.message, dns.query
q = dns.message.make_query(sys.argv[1], sys.argv[2])
for ask in (dns.query.udp, dns.query.tcp):
    r = ask(q, sys.argv[3], timeout=5)
    print(ask.__name__, sorted(rd.to_text() for rs in r.answer for rd in rs))
"""


@pytest.fixture(scope="module")
def upstream_servers() -> Iterator[tuple[FixedUpstream, int]]:
    with running_upstream() as running:
        yield running


@pytest.fixture
def upstream(upstream_servers: tuple[FixedUpstream, int]) -> tuple[FixedUpstream, int]:
    upstream_servers[0].asked.clear()
    return upstream_servers


def ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


def in_pod(netns: str, *cmd: str) -> str:
    done = subprocess.run(["ip", "netns", "exec", netns, *cmd], capture_output=True, text=True, timeout=60)
    return done.stdout + done.stderr


class Session:
    def post(self, msg: wire.Message) -> None:
        pass

    async def run(self) -> None:
        await asyncio.Event().wait()


def write_pod_resolv(netns: str, pod_obj: dict[str, Any]) -> None:
    """The resolv.conf lite writes for this pod, where `ip netns exec` bind-mounts it over /etc/resolv.conf."""
    etc = Path(f"/etc/netns/{netns}")
    etc.mkdir(parents=True)
    (etc / "resolv.conf").write_text(files.resolv_content(pod_obj, host_resolv="", cluster_dns=[CLUSTER_DNS]))


def upsert(kind: str, obj: dict[str, Any]) -> wire.ObjectUpsert:
    return wire.ObjectUpsert(kind, obj)


@pytest.fixture
def prefix() -> Iterator[str]:
    name = f"ltest-{secrets.token_hex(3)}"
    yield name
    for pod_id in pod.list_pod_netns():
        if pod_id.startswith(name):
            shutil.rmtree(f"/etc/netns/{pod.netns_name(pod_id)}", ignore_errors=True)
            nsfs.remove_netns(pod.pod_netns_path(pod_id))
    subprocess.run(["ip", "netns", "del", f"{name}-node"], check=False, capture_output=True)


@pytest.fixture
async def agent(prefix: str, tmp_path: Path, upstream: tuple[FixedUpstream, int]) -> AsyncIterator[Agent]:
    node = f"{prefix}-node"
    ip("netns", "add", node)
    ip("-n", node, "link", "set", "lo", "up")
    resolv = tmp_path / "resolv.conf"
    resolv.write_text(f"nameserver {UPSTREAM_HOST}\nnameserver {CLUSTER_DNS}\n")  # the second is dropped
    a = Agent(AgentConfig(server_url="https://127.0.0.1:1", token="unused", node_name="n1", data_dir=tmp_path,
                          runtime="process", node_netns=node, node_ip="10.99.0.1", service_proxy=True,
                          resolv_conf=resolv))
    assert a.dns is not None
    a.dns.upstream_port = upstream[1]
    task = asyncio.create_task(a.serve(Session()))
    try:
        yield a
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        assert a.dns.server is None  # closed with the agent


async def test_a_pod_resolves_services_headless_pods_srv_and_external_names(
        agent: Agent, prefix: str, upstream: tuple[FixedUpstream, int]) -> None:
    config = {"clusterDNS": [CLUSTER_DNS], "clusterDomain": "cluster.local", "podCIDR": "10.42.0.0/24"}
    await agent.handle(wire.Welcome(config=config))
    ports = [{"name": "http", "port": 80, "protocol": "TCP"}]
    await agent.handle(upsert("Service", {"metadata": {"namespace": "default", "name": "web"},
                                          "spec": {"clusterIP": "10.43.0.20", "ports": ports}}))
    await agent.handle(upsert("Service", {"metadata": {"namespace": "default", "name": "nginx"},
                                          "spec": {"clusterIP": "None", "ports": ports}}))
    endpoints = [{"addresses": [f"10.42.0.{i + 5}"], "hostname": f"web-{i}", "conditions": {"ready": True}}
                 for i in range(2)]
    await agent.handle(upsert("EndpointSlice", {
        "metadata": {"namespace": "default", "name": "nginx-1", "labels": {"kubernetes.io/service-name": "nginx"}},
        "addressType": "IPv4", "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
        "endpoints": endpoints}))
    await agent.handle(upsert("Service", {"metadata": {"namespace": "default", "name": "ext"},
                                          "spec": {"type": "ExternalName", "externalName": "www.example.test"}}))
    await agent.handle(wire.Synced([]))
    async with asyncio.timeout(30):
        while agent.dns is None or agent.dns.server is None or not agent.net_ready.is_set():
            await asyncio.sleep(0.05)

    pod_id = f"{prefix}-c"
    await pod.setup_pod_network(pod_id, "10.42.0.4", "10.42.0.1", 24, node_netns=agent.config.node_netns)
    netns = pod.netns_name(pod_id)
    write_pod_resolv(netns, {"metadata": {"namespace": "default", "name": "c"}, "spec": {}})  # ClusterFirst

    out = await asyncio.to_thread(in_pod, netns, "busybox", "nslookup", "web.default.svc.cluster.local", CLUSTER_DNS)
    assert "10.43.0.20" in out, out
    out = await asyncio.to_thread(in_pod, netns, sys.executable, "-c", RESOLVE, "web", "nginx", "web-0.nginx",
                                  "web.default", "ext", "www.example.test", "nope")
    assert out.splitlines() == [
        "web ['10.43.0.20']",
        "nginx ['10.42.0.5', '10.42.0.6']",
        "web-0.nginx ['10.42.0.5']",
        "web.default ['10.43.0.20']",
        "ext ['192.0.2.10']",
        "www.example.test ['192.0.2.10']",
        "nope gaierror",
    ], out
    out = await asyncio.to_thread(in_pod, netns, sys.executable, "-c", DNSPYTHON,
                                  "_http._tcp.nginx.default.svc.cluster.local.", "SRV", CLUSTER_DNS)
    srv = ["'0 50 8080 web-0.nginx.default.svc.cluster.local.'", "'0 50 8080 web-1.nginx.default.svc.cluster.local.'"]
    assert out.splitlines() == [f"udp [{', '.join(srv)}]", f"tcp [{', '.join(srv)}]"], out
    assert "www.example.test. A" in upstream[0].asked

    # the zone follows the feed: the service goes away, its name with it
    await agent.handle(wire.ObjectDelete("Service", "default", "web"))
    out = await asyncio.to_thread(in_pod, netns, sys.executable, "-c", RESOLVE, "web")
    assert out.splitlines() == ["web gaierror"], out


def test_killall_removes_the_cluster_dns_address(prefix: str, tmp_path: Path) -> None:
    from lite.agent.killall import HostRecord, killall
    from lite.netns.dnsaddr import ensure_dns_address

    node = f"{prefix}-node"
    ip("netns", "add", node)
    asyncio.run(ensure_dns_address(CLUSTER_DNS, node_netns=node))
    agent_root = tmp_path / "data" / "agent"
    HostRecord(cgroup_root=f"{prefix}-none", netns_dir=str(tmp_path / "netns"), node_netns=f"/run/netns/{node}",
               bridge=f"{prefix}-br").save(agent_root)
    (agent_root / "node-config.json").write_text(json.dumps({"clusterDNS": [CLUSTER_DNS]}))
    addrs = ["ip", "-n", node, "-o", "addr", "show", "dev", "lo"]
    assert CLUSTER_DNS in subprocess.run(addrs, capture_output=True, text=True, check=True).stdout
    report = killall(tmp_path / "data")
    assert report.addresses == 1 and not report.errors, report
    assert CLUSTER_DNS not in subprocess.run(addrs, capture_output=True, text=True, check=True).stdout
    assert killall(tmp_path / "data").addresses == 0  # idempotent
