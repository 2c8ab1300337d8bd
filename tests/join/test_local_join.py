"""The in-process join of the agent `lite server` embeds (`join.routes.local_join`, `JoinSession(dial=)`), over
a real API stack with the hub: the same node password check as the credentials endpoint, a session that is
its node's alone, and desired state and reports flowing as over the TLS websocket, with no certificate made."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp import WSMsgType
from joinstack import GUARD, LEASE, NODE, POD, SECRET, Stack, TestAgent, joined, pod, serve_join

from lite import wire
from lite.errors import ApiError
from lite.server.join.routes import LocalJoin, local_join


@pytest.fixture
async def stack(tmp_path: Path, free_port: int) -> AsyncIterator[Stack]:
    async with serve_join(tmp_path, free_port) as s:
        yield s


def door(stack: Stack) -> LocalJoin:
    assert stack.issuer is not None
    return local_join(stack.hub, stack.issuer)


async def test_an_in_process_agent_joins_with_its_node_password_and_no_certificate(stack: Stack) -> None:
    await stack.resources.create(POD, "default", pod("p", node="lj1"))
    agent = TestAgent()
    async with joined(stack, "lj1", agent, dial=door(stack)) as session:
        await agent.wait_for(lambda: len(agent.running) == 1)  # desired state flows in
        assert stack.hub.connected_nodes() == ["lj1"]
        node = await stack.resources.get(NODE, "", "lj1")
        assert node["status"]["capacity"]["cpu"] == "2"
        async with asyncio.timeout(GUARD):  # reports flow out: the lease the session renews
            while True:
                try:
                    lease = await stack.resources.get(LEASE, "kube-node-lease", "lj1")
                    break
                except ApiError:
                    await asyncio.sleep(0.05)
        assert lease["spec"]["holderIdentity"] == "lj1"
        # the name is claimed with the node password, as a first join over TLS claims it; no certificate
        secret = await stack.resources.get(SECRET, "kube-system", "lj1.node-password.lite")
        password = (session.credentials.dir / "node-password").read_text()
        assert password not in str(secret)
        assert not session.credentials.cert_path.exists() and not session.credentials.key_path.exists()


async def test_a_name_claimed_with_another_password_is_refused_in_process_too(stack: Stack) -> None:
    async with joined(stack, "lj2", TestAgent()):  # a machine joined over TLS: the name is its
        pass
    join = door(stack)
    with pytest.raises(ApiError) as refused:
        await join("lj2", "y" * 32)
    assert refused.value.code == 403 and "different node password" in refused.value.message
    for node, password in (("Bad_Name", "p" * 32), ("lj2", "short")):
        with pytest.raises(ApiError) as bad:
            await join(node, password)
        assert bad.value.code == 422 and bad.value.reason == "Invalid"
    assert stack.hub.connected_nodes() == []


async def test_an_in_process_session_is_its_node_alone(stack: Stack) -> None:
    end = await door(stack)("lj3", "z" * 32)
    await end.send_bytes(wire.encode(wire.Hello("lj4", wire.PROTOCOL_VERSION, {}, {})))
    msg = await end.receive(timeout=GUARD)
    assert msg.type == WSMsgType.CLOSE and msg.data == 4403
    assert stack.hub.connected_nodes() == []
    with pytest.raises(ApiError):
        await stack.resources.get(NODE, "", "lj4")


async def test_an_in_process_session_that_fails_is_closed_for_the_agent(stack: Stack) -> None:
    """A server-side failure (here: a Node the API refuses) closes the pipe (1011), as aiohttp closes the
    websocket of a handler that raised: the agent is not left waiting for a Welcome."""
    end = await door(stack)("lj5", "w" * 32)
    await end.send_bytes(wire.encode(wire.Hello("lj5", wire.PROTOCOL_VERSION, {"labels": {"bad key!": "x"}}, {})))
    msg = await end.receive(timeout=GUARD)
    assert msg.type == WSMsgType.CLOSE and msg.data == 1011
    assert stack.hub.connected_nodes() == []
