"""An agent with no server brings its service proxy and cluster DNS up from the desired-state cache (root): the
cached Welcome's cluster DNS address answers the cached Service's name in the node netns this test creates, and
the proxy's nftables table there holds the cached Service and endpoint. The agent's session dials a closed port
on 127.0.0.1; DNS queries go only to the node netns."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import needs_root

from lite import wire
from lite.agent.agent import Agent, AgentConfig
from lite.agent.cache import DesiredCache
from lite.agent.session import JoinSession
from lite.netns import nftables

pytestmark = [
    pytest.mark.root,
    needs_root,
    pytest.mark.timeout(60),
    pytest.mark.skipif(not nftables.available(), reason="libnftables.so.1 (Debian libnftables1) is not installed"),
]
CLUSTER_DNS = "10.43.0.10"
QUERY = """
import sys, dns.message, dns.query
r = dns.query.udp(dns.message.make_query(sys.argv[1], "A"), sys.argv[2], timeout=2)
print(sorted(rd.to_text() for rs in r.answer for rd in rs))
"""


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_proxy_and_dns_come_up_from_the_cache(tmp_path: Path, node_netns: str) -> None:
    data = tmp_path / "data"
    cache = DesiredCache(data / "agent" / "cache", data / "agent" / "credentials" / "cache.key")
    cache.record(wire.Welcome(config={"clusterDNS": [CLUSTER_DNS], "clusterDomain": "cluster.local",
                                      "serviceCIDR": "10.43.0.0/16"}))
    spec = {"clusterIP": "10.43.0.20", "ports": [{"name": "http", "port": 80, "protocol": "TCP"}]}
    cache.record(wire.ObjectUpsert("Service", {"metadata": {"namespace": "default", "name": "web"}, "spec": spec}))
    cache.record(wire.ObjectUpsert("EndpointSlice", {
        "metadata": {"namespace": "default", "name": "web-1", "labels": {"kubernetes.io/service-name": "web"}},
        "ports": [{"name": "http", "port": 8080}], "endpoints": [{"addresses": ["10.42.0.2"]}]}))
    cache.record(wire.Synced([]))
    await cache.flush()

    resolv = tmp_path / "resolv.conf"
    resolv.write_text("nameserver 127.0.53.53\n")
    a = Agent(AgentConfig(server_url=f"https://127.0.0.1:{_closed_port()}", token="t", node_name="n1",
                          data_dir=data, runtime="process", use_cgroups=False, node_netns=node_netns,
                          node_ip="10.99.0.1", service_proxy=True, resolv_conf=resolv))
    a.replay_after = 0.3
    session = JoinSession(a.config.server_url, "t", node_name="n1", agent=a, credentials_dir=a.root / "credentials",
                          backoff=(0.2, 1.0))
    task = asyncio.create_task(a.serve(session))
    try:
        assert a.proxy is not None
        end = time.monotonic() + 30  # hang guard
        while a.proxy.proxier.synced == 0:
            assert time.monotonic() < end, "the proxy never synced"
            await asyncio.sleep(0.05)
        assert a.replayed
        table = subprocess.run(["ip", "netns", "exec", node_netns, "nft", "list", "table", "ip", "lite"],
                               capture_output=True, text=True).stdout
        assert "10.43.0.20 . tcp . 80" in table and "10.42.0.2:8080" in table
        answer = ""
        while "10.43.0.20" not in answer:
            assert time.monotonic() < end, f"no DNS answer from the cached zone: {answer}"
            out = await asyncio.to_thread(subprocess.run, ["ip", "netns", "exec", node_netns, sys.executable, "-c",
                                                           QUERY, "web.default.svc.cluster.local", CLUSTER_DNS],
                                          capture_output=True, text=True)
            answer = out.stdout + out.stderr
        assert answer.strip() == "['10.43.0.20']"
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
