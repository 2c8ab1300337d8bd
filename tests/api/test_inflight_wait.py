"""`http._wait_for_slot`, the aiohttp side of the in-flight queues, on a real aiohttp server on 127.0.0.1: a
queued request gets the slot handed over, or leaves its queue when its wait limit passes (`time-out`), when its
client goes away (`cancelled`), or when its handler is cancelled (the slot it may have got meanwhile goes on)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

import aiohttp
import pytest
from aiohttp import web

from lite.server.api.http import _wait_for_slot
from lite.server.api.inflight import CANCELLED, MUTATING, QUEUE_FULL, TIME_OUT, InFlight, Waiter

BUDGET: web.AppKey[InFlight] = web.AppKey("budget", InFlight)
OUTCOMES: web.AppKey[list[str]] = web.AppKey("outcomes", list)
CANCELS: web.AppKey[bool] = web.AppKey("handler_cancellation", bool)


async def _queued(request: web.Request) -> web.Response:
    """Waits for the one mutating slot (the test holds it), then answers whether it got it."""
    budget = request.app[BUDGET]
    waiter = budget.enter(MUTATING, False, "u")
    assert isinstance(waiter, Waiter)
    try:
        got = await _wait_for_slot(request, budget, waiter)
    except asyncio.CancelledError:
        request.app[OUTCOMES].append("cancelled")
        raise
    request.app[OUTCOMES].append(str(got))
    if got:
        budget.leave(MUTATING)
    return web.Response(text=str(got))


class Server:
    def __init__(self, app: web.Application, url: str) -> None:
        self.app, self.url = app, url


@pytest.fixture(params=[False, True], ids=["plain", "handler-cancellation"])
async def server(request: pytest.FixtureRequest) -> AsyncIterator[Server]:
    """lite's runner leaves handler cancellation off (aiohttp's default); both ways are covered."""
    app = web.Application()
    app[BUDGET] = InFlight(1, 1)
    app[OUTCOMES] = []
    app[CANCELS] = request.param
    app.router.add_post("/", _queued)
    runner = web.AppRunner(app, handler_cancellation=request.param)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    assert app[BUDGET].enter(MUTATING, False, "holder") is True  # the slot every request waits for
    try:
        yield Server(app, f"http://127.0.0.1:{port}/")
    finally:
        await runner.cleanup()


async def _until(cond: Callable[[], bool]) -> None:
    async with asyncio.timeout(20):  # a hang guard
        while not cond():
            await asyncio.sleep(0.01)


async def test_the_slot_is_handed_over(server: Server) -> None:
    budget = server.app[BUDGET]
    async with aiohttp.ClientSession() as session:
        call = asyncio.ensure_future(session.post(server.url))
        await _until(lambda: budget.queued[MUTATING] == 1)
        budget.leave(MUTATING)
        async with await call as resp:
            assert await resp.text() == "True"
    assert budget.inflight[MUTATING] == 0 and budget.queued[MUTATING] == 0


async def test_the_wait_ends_at_a_quarter_of_the_timeout(server: Server) -> None:
    budget = server.app[BUDGET]
    async with aiohttp.ClientSession() as session, session.post(server.url + "?timeout=400ms") as resp:
        assert await resp.text() == "False"
    assert budget.rejected[MUTATING] == {QUEUE_FULL: 0, TIME_OUT: 1, CANCELLED: 0}
    assert budget.queued[MUTATING] == 0 and budget.inflight[MUTATING] == 1  # the holder's, still held


async def test_a_client_that_left_leaves_the_queue(server: Server) -> None:
    budget = server.app[BUDGET]
    async with aiohttp.ClientSession() as session:
        call = asyncio.ensure_future(session.post(server.url))
        await _until(lambda: budget.queued[MUTATING] == 1)
        call.cancel()  # the client gives up: its connection closes
        with pytest.raises(asyncio.CancelledError):
            await call
    await _until(lambda: budget.queued[MUTATING] == 0)
    assert budget.rejected[MUTATING] == {QUEUE_FULL: 0, TIME_OUT: 0, CANCELLED: 1}
    # With handler cancellation (aiohttp's option) the handler is cancelled; without, the periodic check ends it.
    await _until(lambda: bool(server.app[OUTCOMES]))
    assert server.app[OUTCOMES] == ["cancelled" if server.app[CANCELS] else "False"]
    budget.leave(MUTATING)
    assert budget.inflight[MUTATING] == 0  # no one left to hand the slot to
