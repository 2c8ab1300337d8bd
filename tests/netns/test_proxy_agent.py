"""The agent's service proxy fed by join messages, programming a test netns (root): resync and restart."""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path
from typing import Any

import pytest
from conftest import needs_root

from lite import wire
from lite.agent.agent import Agent, AgentConfig
from lite.netns import nftables

pytestmark = [
    pytest.mark.root,
    needs_root,
    pytest.mark.skipif(not nftables.available(), reason="libnftables.so.1 (Debian libnftables1) is not installed"),
]


def service(name: str, cluster_ip: str) -> wire.ObjectUpsert:
    spec = {"clusterIP": cluster_ip, "ports": [{"name": "http", "port": 80, "protocol": "TCP"}]}
    return wire.ObjectUpsert("Service", {"metadata": {"namespace": "default", "name": name}, "spec": spec})


def endpoint_slice(name: str, ip: str) -> wire.ObjectUpsert:
    meta = {"namespace": "default", "name": f"{name}-1", "labels": {"kubernetes.io/service-name": name}}
    body = {"metadata": meta, "ports": [{"name": "http", "port": 8080}], "endpoints": [{"addresses": [ip]}]}
    return wire.ObjectUpsert("EndpointSlice", body)


def agent(tmp_path: Path, node_netns: str) -> Agent:
    config = AgentConfig(
        server_url="https://127.0.0.1:1",
        token="unused",
        node_name="n1",
        data_dir=tmp_path,
        runtime="process",
        node_netns=node_netns,
        node_ip="10.99.0.1",
        service_proxy=True,
    )
    return Agent(config)


def table(node_netns: str) -> str:
    cmd = ["ip", "netns", "exec", node_netns, "nft", "list", "table", "ip", "lite"]
    return subprocess.run(cmd, capture_output=True, text=True).stdout


async def resync(a: Agent, *messages: Any) -> None:
    await a.handle(wire.Welcome(config={}))
    for msg in messages:
        await a.handle(msg)
    await a.handle(wire.Synced([]))


async def test_objects_reach_the_kernel_only_as_a_complete_set(tmp_path: Path, node_netns: str) -> None:
    a = agent(tmp_path, node_netns)
    assert a.proxy is not None and a.hello_info()["serviceProxy"] is True
    try:
        await a.handle(wire.Welcome(config={}))
        await a.handle(service("web", "10.43.0.10"))
        await a.handle(endpoint_slice("web", "10.42.0.2"))
        assert a.proxy.proxier.desired()[0] == []  # mid-resync: nothing taken over yet
        await a.handle(wire.Synced([]))
        await a.proxy.proxier.sync_once()
        assert "10.43.0.10 . tcp . 80" in table(node_netns) and "10.42.0.2:8080" in table(node_netns)
        await a.handle(wire.ObjectDelete("EndpointSlice", "default", "web-1"))
        await a.proxy.proxier.sync_once()
        assert "10.42.0.2" not in table(node_netns) and "goto reject-chain" in table(node_netns)
    finally:
        a.proxy.proxier.syncer.close()


async def test_a_restarted_agent_leaves_the_rules_alone_until_it_knows_the_state(
    tmp_path: Path, node_netns: str
) -> None:
    first = agent(tmp_path / "1", node_netns)
    assert first.proxy is not None
    await resync(first, service("web", "10.43.0.10"), endpoint_slice("web", "10.42.0.2"), service("old", "10.43.0.11"))
    await first.proxy.proxier.sync_once()
    first.proxy.proxier.syncer.close()
    before = table(node_netns)
    assert "10.43.0.11" in before

    second = agent(tmp_path / "2", node_netns)
    assert second.proxy is not None
    proxier = second.proxy.proxier
    task = asyncio.create_task(proxier.run())
    try:
        for _ in range(20):
            await asyncio.sleep(0.01)
        assert proxier.synced == 0 and table(node_netns) == before
        await resync(second, service("web", "10.43.0.10"), endpoint_slice("web", "10.42.0.3"))
        while proxier.synced == 0:
            await asyncio.sleep(0.01)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        proxier.syncer.close()
    after = table(node_netns)
    assert "10.42.0.3:8080" in after and "10.42.0.2" not in after and "10.43.0.11" not in after


async def test_a_restarted_agent_told_its_config_first_still_waits_for_the_state(
    tmp_path: Path, node_netns: str
) -> None:
    # The server's Welcome carries the cluster CIDR before the objects arrive: that config change alone must not
    # sync (it would program a table without a single service until Synced, refusing every connection).
    first = agent(tmp_path / "1", node_netns)
    assert first.proxy is not None
    await resync(first, service("web", "10.43.0.10"), endpoint_slice("web", "10.42.0.2"))
    await first.proxy.proxier.sync_once()
    first.proxy.proxier.syncer.close()
    before = table(node_netns)
    assert "10.42.0.2:8080" in before

    second = agent(tmp_path / "2", node_netns)
    assert second.proxy is not None
    proxier = second.proxy.proxier
    proxier.min_interval = 0
    task = asyncio.create_task(proxier.run())
    try:
        await second.handle(wire.Welcome(config={"clusterCIDR": "10.42.0.0/16"}))
        await second.handle(service("web", "10.43.0.10"))
        for _ in range(30):
            await asyncio.sleep(0.01)
        assert proxier.synced == 0 and table(node_netns) == before
        await second.handle(endpoint_slice("web", "10.42.0.2"))
        await second.handle(wire.Synced([]))
        while proxier.synced == 0:
            await asyncio.sleep(0.01)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        proxier.syncer.close()
    after = table(node_netns)
    assert "10.42.0.2:8080" in after and "10.42.0.0/16" in after


async def test_the_service_cidr_comes_from_the_server_and_drops_untranslated_flows(
    tmp_path: Path, node_netns: str
) -> None:
    a = agent(tmp_path, node_netns)
    assert a.proxy is not None and a.proxy.proxier.config.service_cidr == "10.43.0.0/16"  # the agent's default
    try:
        await resync(a, service("web", "10.43.0.10"), endpoint_slice("web", "10.42.0.2"))
        await a.handle(wire.Welcome(config={"serviceCIDR": "10.96.0.0/12,fd00:43::/112"}))
        assert a.proxy.proxier.config.service_cidr == "10.96.0.0/12" and a.config.service_cidr == "10.96.0.0/12"
        await a.proxy.proxier.sync_once()
        assert "ip daddr 10.96.0.0/12 drop" in table(node_netns)
    finally:
        a.proxy.proxier.syncer.close()
