"""The agent's NetworkPolicy enforcement fed by join messages, programming a test netns (root): the Hello flag,
a resync taken over only when complete, and a refusal reported as a Warning event through the session."""

from __future__ import annotations

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


class Posted:
    def __init__(self) -> None:
        self.messages: list[wire.Message] = []

    def post(self, msg: wire.Message) -> None:
        self.messages.append(msg)


def agent(tmp_path: Path, node_netns: str, **extra: Any) -> Agent:
    return Agent(AgentConfig(server_url="https://127.0.0.1:1", token="unused", node_name="n1", data_dir=tmp_path,
                             runtime="process", node_netns=node_netns, node_ip="10.99.0.1", service_proxy=True,
                             **extra))


def table(node_netns: str) -> str:
    cmd = ["ip", "netns", "exec", node_netns, "nft", "list", "table", "inet", "lite-policy"]
    return subprocess.run(cmd, capture_output=True, text=True).stdout


POD = wire.ObjectUpsert("PolicyPod", {"metadata": {"namespace": "default", "name": "web", "uid": "u1",
                                                   "labels": {"app": "web"}},
                                      "spec": {"nodeName": "n1"}, "status": {"podIP": "10.42.0.7"}})
DENY = wire.ObjectUpsert("NetworkPolicy", {"metadata": {"namespace": "default", "name": "deny"},
                                           "spec": {"podSelector": {}, "policyTypes": ["Egress"]}})


async def test_resync_programs_the_table_and_refusals_become_events(tmp_path: Path, node_netns: str) -> None:
    a = agent(tmp_path, node_netns)
    assert a.netpol is not None and a.hello_info()["networkPolicy"] is True
    posted = Posted()
    a.session = posted
    enforcer = a.netpol.enforcer
    assert a.proxy is not None and enforcer.nft is a.proxy.proxier.syncer.nft  # one libnftables context (~1 MB)
    try:
        await a.handle(wire.Welcome(config={}))
        await a.handle(POD)
        await a.handle(DENY)
        assert enforcer.desired()[0] == []  # mid-resync: nothing taken over yet
        assert ("ConfigMap", "default", "deny") not in a.objects and not a.objects  # not mistaken for volumes
        await a.handle(wire.Synced([]))
        await enforcer.sync_once()
        assert "10.42.0.7 : jump out-10-42-0-7" in table(node_netns)
        enforcer.report(("default", "web"))
        enforcer.report(("default", "web"))  # within the rate limit: no second event
        events = [m for m in posted.messages if isinstance(m, wire.Event)]
        assert len(events) == 1
        assert events[0].event["reason"] == "NetworkPolicyDenied" and events[0].event["type"] == "Warning"
        assert events[0].event["involvedObject"] == {"kind": "Pod", "apiVersion": "v1", "name": "web",
                                                     "namespace": "default", "uid": "u1"}
        await a.handle(wire.ObjectDelete("NetworkPolicy", "default", "deny"))
        await enforcer.sync_once()
        assert "jump out-" not in table(node_netns)
    finally:
        a.proxy.proxier.syncer.close()


def test_no_enforcement_without_the_proxy_or_when_disabled(tmp_path: Path, node_netns: str) -> None:
    off = agent(tmp_path, node_netns, network_policy=False)
    assert off.netpol is None and "networkPolicy" not in off.hello_info()
    assert off.proxy is not None
    off.proxy.proxier.syncer.close()
