"""`lite.joinpipe`: the in-process join session's two ends (frames in order, close in both directions,
backpressure, receive timeouts), as the join session on either side uses them."""

from __future__ import annotations

import asyncio

import pytest
from aiohttp import WSMsgType

from lite.joinpipe import LIMIT, pipe


async def test_frames_cross_in_order_and_iteration_stops_at_close() -> None:
    agent, server = pipe()
    for i in range(5):
        await agent.send_bytes(b"a%d" % i)
    await agent.close(code=4403, message=b"bye")
    got = [m.data async for m in server]
    assert got == [b"a0", b"a1", b"a2", b"a3", b"a4"]  # everything sent before the close arrives
    assert server.closed and server.close_code == 4403
    assert (await server.receive()).type == WSMsgType.CLOSED  # and CLOSED from then on
    assert (await agent.receive()).type == WSMsgType.CLOSE  # the closing end's own reader stops too


async def test_a_close_from_the_peer_arrives_with_its_code_and_ends_sends_both_ways() -> None:
    agent, server = pipe()
    await server.send_bytes(b"welcome")
    assert await server.close(code=4408, message=b"no hello")
    assert not await server.close()  # once
    first = await agent.receive()
    assert first.type == WSMsgType.BINARY and first.data == b"welcome"
    close = await agent.receive()
    assert close.type == WSMsgType.CLOSE and close.data == 4408 and close.extra == "no hello"
    for end in (agent, server):
        with pytest.raises(ConnectionResetError):
            await end.send_bytes(b"late")


async def test_a_full_peer_makes_send_wait_until_it_reads_or_closes() -> None:
    agent, server = pipe()
    for i in range(LIMIT):
        await agent.send_bytes(b"%d" % i)
    blocked = asyncio.create_task(agent.send_bytes(b"more"))
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert not blocked.done()  # LIMIT frames unread: the sender waits, as on a full socket
    assert (await server.receive()).data == b"0"
    await asyncio.wait_for(blocked, 5)
    stuck = asyncio.create_task(agent.send_bytes(b"stuck"))
    await asyncio.sleep(0)
    await server.close()
    with pytest.raises(ConnectionResetError):
        await asyncio.wait_for(stuck, 5)  # a close releases a waiting sender


async def test_receive_times_out_and_async_with_closes() -> None:
    agent, server = pipe()
    with pytest.raises(TimeoutError):
        await server.receive(timeout=0.01)
    async with agent:
        await agent.send_bytes(b"x")
    assert agent.closed and (await server.receive()).data == b"x"
    assert (await server.receive()).type == WSMsgType.CLOSE
    assert server.exception() is None
