"""Stopping an aiohttp server that runs on its own event loop in a thread (the webhook, extension-API and
conversion-webhook servers of the tests).

`stop_server(loop, thread, runner)`: the runner's cleanup, then every task still on the loop cancelled and
awaited (a connection accepted just before the cleanup leaves a `RequestHandler.start` task that has not run:
left pending when the loop closes, it is destroyed later, during whichever test is running then, and pytest
fails that test with the unraisable "coroutine ... was never awaited"), then the loop stopped and closed.
"""

from __future__ import annotations

import asyncio
import threading

from aiohttp import web


async def _cancel_the_rest() -> None:
    tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


def stop_server(loop: asyncio.AbstractEventLoop, thread: threading.Thread, runner: web.AppRunner | None) -> None:
    if runner is not None:
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(10)
    asyncio.run_coroutine_threadsafe(_cancel_the_rest(), loop).result(10)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(10)
    loop.close()
