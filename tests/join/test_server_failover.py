"""An agent's join session over several API server addresses: the hub tells it the servers from the
`default/kubernetes` EndpointSlices, it remembers them, moves to its first choice when the list changes, and
when its server drops it, joins the next one without restarting pods. One real stack served on two ports."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp import web
from joinstack import GUARD, POD, Stack, TestAgent, joined, pod, serve_join

from lite import wire
from lite.agent import servers
from lite.server.certs import server_ssl_context
from lite.server.services.kubernetes import ensure_endpoints
from tests.liteproc import find_free_port


@pytest.fixture
async def stack(tmp_path: Path, free_port: int) -> AsyncIterator[Stack]:
    async with serve_join(tmp_path, free_port) as s:
        yield s


async def until(predicate, what: str) -> None:  # type: ignore[no-untyped-def]
    async with asyncio.timeout(GUARD):
        while not predicate():
            await asyncio.sleep(0.02)


async def test_agent_learns_moves_and_fails_over(stack: Stack, tmp_path: Path) -> None:
    assert stack.runner is not None
    port1 = int(stack.url.rsplit(":", 1)[1])
    port2 = find_free_port()
    url1, url2 = f"https://127.0.0.1:{port1}", f"https://127.0.0.1:{port2}"
    site2 = web.TCPSite(stack.runner, "127.0.0.1", port2, ssl_context=server_ssl_context(stack.creds))
    await site2.start()
    node = next(f"lb-{i}" for i in range(100) if servers.preference([url1, url2], f"lb-{i}")[0] == url2)
    await ensure_endpoints(stack.resources, [("127.0.0.1", port1)])
    await stack.resources.create(POD, "default", pod("keep", node))
    agent = TestAgent()
    data = tmp_path / "agent-data"
    async with joined(stack, node, agent, servers_dir=data) as session:
        # the Welcome lists the one server: remembered, and it is where the agent is
        assert session.servers == [url1] and session.base_url == url1 and session.sessions == 1
        assert json.loads((data / servers.FILE).read_text()) == {"server": url1, "servers": [url1]}
        await agent.wait_for(lambda: len(agent.running) == 1)
        # a second server appears: NodeConfig tells the agent, which moves to its first choice at once
        await ensure_endpoints(stack.resources, [("127.0.0.1", port1), ("127.0.0.1", port2)])
        await until(lambda: session.sessions == 2 and session.connected.is_set(), "the move to the second server")
        assert session.base_url == url2 and session.servers == sorted([url1, url2])
        assert servers.load(data, url1) == sorted([url1, url2])
        welcomes = [m.config.get("apiServers") for m in agent.messages if isinstance(m, wire.Welcome)]
        assert welcomes == [[url1], sorted([url1, url2])]  # the move's NodeConfig is not handed on
        # its server goes away (the port closes, its session ends): the agent joins the other one
        await site2.stop()
        live = stack.hub.session(node)
        assert live is not None
        await live.close()
        await until(lambda: session.sessions == 3 and session.connected.is_set(), "the failover")
        assert session.base_url == url1
        assert dict(agent.starts) == {next(iter(agent.running)): 1}, "a pod was started again"
        # the list is unchanged (the dead server is still listed): the agent stays where it is
        await asyncio.sleep(0.3)
        assert session.sessions == 3 and session.base_url == url1
        # the dead server drops out: the agent learns it, stays, and its agent sees no NodeConfig for it
        await ensure_endpoints(stack.resources, [("127.0.0.1", port1)])
        await until(lambda: session.servers == [url1], "the shorter list")
        assert session.sessions == 3 and session.base_url == url1
        assert servers.load(data, url1) == [url1]
        assert not [m for m in agent.messages if isinstance(m, wire.NodeConfig)]
