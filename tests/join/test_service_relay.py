"""Services and EndpointSlices relayed to agents that run a service proxy (real API stack, real JoinSession)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from joinstack import KINDS, Stack, TestAgent, joined, serve_join

from lite import wire

SERVICE = KINDS.by_gvk("", "v1", "Service")
SLICE = KINDS.by_gvk("discovery.k8s.io", "v1", "EndpointSlice")
assert SERVICE and SLICE


@dataclass
class ProxyAgent(TestAgent):
    __test__ = False

    def hello_info(self) -> dict[str, Any]:
        return {**super().hello_info(), "serviceProxy": True}


@pytest.fixture
async def stack(tmp_path: Path, free_port: int) -> AsyncIterator[Stack]:
    async with serve_join(tmp_path, free_port) as s:
        yield s


def service(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": {"ports": [{"name": "http", "port": 80}]}}


def endpoint_slice(name: str, service_name: str, ip: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {"kubernetes.io/service-name": service_name}},
        "addressType": "IPv4",
        "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
        "endpoints": [{"addresses": [ip], "conditions": {"ready": True}}],
    }


def proxy_kinds(agent: TestAgent) -> set[tuple[str, str, str]]:
    return {key for key in agent.objects if key[0] in ("Service", "EndpointSlice")}


async def test_the_whole_set_arrives_before_synced_then_every_change(stack: Stack) -> None:
    r = stack.resources
    await r.create(SERVICE, "default", service("web"))
    await r.create(SLICE, "default", endpoint_slice("web-1", "web", "10.42.0.2"))
    agent = ProxyAgent()
    async with joined(stack, "n1", agent):
        await agent.wait_for(lambda: any(isinstance(m, wire.Synced) for m in agent.messages))
        synced_at = next(i for i, m in enumerate(agent.messages) if isinstance(m, wire.Synced))
        before = {
            (m.kind, m.obj["metadata"]["name"]) for m in agent.messages[:synced_at] if isinstance(m, wire.ObjectUpsert)
        }
        assert {("Service", "web"), ("EndpointSlice", "web-1")} <= before
        assert not any("managedFields" in m.obj["metadata"] for m in agent.messages if isinstance(m, wire.ObjectUpsert))

        await r.patch(SLICE, "default", "web-1", {"endpoints": [{"addresses": ["10.42.0.3"]}]})
        await agent.wait_for(
            lambda: agent.objects[("EndpointSlice", "default", "web-1")]["endpoints"][0]["addresses"] == ["10.42.0.3"]
        )
        await r.create(SERVICE, "default", service("api"))
        await agent.wait_for(lambda: ("Service", "default", "api") in agent.objects)
        await r.delete(SERVICE, "default", "web")
        await agent.wait_for(lambda: ("Service", "default", "web") not in agent.objects)
        assert any(isinstance(m, wire.ObjectDelete) and m.kind == "Service" and m.name == "web" for m in agent.messages)


async def test_agents_without_a_proxy_get_no_services(stack: Stack) -> None:
    r = stack.resources
    await r.create(SERVICE, "default", service("web"))
    plain, proxy = TestAgent(), ProxyAgent()
    async with joined(stack, "n1", plain), joined(stack, "n2", proxy):
        await proxy.wait_for(lambda: ("Service", "default", "web") in proxy.objects)
        await r.create(SLICE, "default", endpoint_slice("web-1", "web", "10.42.0.2"))
        await proxy.wait_for(lambda: ("EndpointSlice", "default", "web-1") in proxy.objects)
        await plain.wait_for(lambda: any(isinstance(m, wire.Synced) for m in plain.messages))
    assert proxy_kinds(plain) == set()


async def test_every_resync_hands_the_services_over_again(stack: Stack) -> None:
    """Consumers of Services replace their set at each Synced, so an unchanged Service must not be filtered
    out as already seen when the session is re-established (it would vanish from the proxy and DNS)."""
    r = stack.resources
    await r.create(SERVICE, "default", service("web"))
    agent = ProxyAgent()
    async with joined(stack, "n1", agent) as session:
        await agent.wait_for(lambda: any(isinstance(m, wire.Synced) for m in agent.messages))
        first = len(agent.messages)
        await stack.hub.close()  # the server ends the session; the agent redials and is resynced
        await agent.wait_for(lambda: session.sessions >= 2
                             and any(isinstance(m, wire.Synced) for m in agent.messages[first:]))
        again = agent.messages[first:]
        synced_at = next(i for i, m in enumerate(again) if isinstance(m, wire.Synced))
        assert any(isinstance(m, wire.ObjectUpsert) and m.kind == "Service" and m.obj["metadata"]["name"] == "web"
                   for m in again[:synced_at])
