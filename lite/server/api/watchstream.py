"""Watch responses: a `Client.watch` iterator streamed as newline-delimited JSON over chunked HTTP.

Role: turn `WatchEvent`s into `{"type":..,"object":..}\\n` lines, one chunk per event, flushed as it
comes; keep a registry of open streams so the app can end them all at shutdown.

Invariants:
- An event's `raw` bytes are written as they are (no decode/encode round trip) unless the client asked
  for Tables, where each object becomes a one-row Table; ERROR and BOOKMARK objects pass unchanged.
- Errors raised before the stream starts (bad selector, unknown RV form) answer as an ordinary Status
  response; errors after it started become one ERROR event carrying the Status (with `code`), then the
  stream ends. HTTP status is 200 once the stream started, as upstream.
- The stream ends when the iterator ends (timeoutSeconds, server timeout, dropped slow watcher), when the
  client goes away, or when `WatchRegistry.close_all` runs at shutdown; the iterator is always closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

import orjson
from aiohttp import web

from lite.client import WatchEvent
from lite.errors import ApiError, internal

log = logging.getLogger(__name__)

Obj = dict[str, Any]
ObjectTransform = Callable[[Obj], Obj]

# How long to wait for a first event before sending headers: long enough for an iterator to raise its
# argument errors as a proper HTTP error, short enough that an idle watch starts promptly.
_FIRST_EVENT_WAIT = 0.05

_PREFIX = {t: b'{"type":"' + t.encode() + b'","object":'
           for t in ("ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR")}


class WatchRegistry:
    """The open watch streams of one app, so shutdown can end them instead of waiting for timeouts."""

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[Any]] = set()
        self.closing = False

    def __len__(self) -> int:
        return len(self._tasks)

    def add(self, task: asyncio.Task[Any]) -> None:
        self._tasks.add(task)

    def discard(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)

    def close_all(self) -> None:
        """End every open stream (each handler finishes its response cleanly and returns)."""
        self.closing = True
        for task in list(self._tasks):
            task.cancel()


def encode_event(ev: WatchEvent, transform: ObjectTransform | None = None) -> bytes:
    prefix = _PREFIX.get(ev.type) or b'{"type":' + orjson.dumps(ev.type) + b',"object":'
    if transform is not None and ev.type not in ("ERROR", "BOOKMARK"):
        return prefix + orjson.dumps(transform(ev.object)) + b"}\n"
    return prefix + ev.encoded() + b"}\n"


def error_event(err: ApiError) -> bytes:
    return _PREFIX["ERROR"] + orjson.dumps(err.status()) + b"}\n"


async def _aclose(it: AsyncIterator[WatchEvent]) -> None:
    aclose = getattr(it, "aclose", None)
    if aclose is not None:
        with contextlib.suppress(Exception):
            await aclose()


async def serve_watch(request: web.Request, events: AsyncIterator[WatchEvent], registry: WatchRegistry,
                      transform: ObjectTransform | None = None) -> web.StreamResponse:
    """Stream `events` as the response to `request`. Raises ApiError only before the stream starts."""
    task = asyncio.current_task()
    assert task is not None
    first: asyncio.Future[WatchEvent] = asyncio.ensure_future(anext(events))
    resp = web.StreamResponse(headers={"Content-Type": "application/json"})
    registry.add(task)
    try:
        done, _ = await asyncio.wait({first}, timeout=_FIRST_EVENT_WAIT)
        if first in done:
            exc = first.exception()
            if exc is not None and not isinstance(exc, StopAsyncIteration):
                raise exc
        resp.enable_chunked_encoding()
        await resp.prepare(request)
        await _pump(resp, first, events, transform)
        await resp.write_eof()
    except asyncio.CancelledError:
        if not registry.closing:
            raise
        task.uncancel()  # our own shutdown cancel: end the response cleanly instead
        if resp.prepared:
            with contextlib.suppress(ConnectionError):
                await resp.write_eof()
    except ConnectionError:
        pass  # the client went away; nothing more to say
    finally:
        registry.discard(task)
        if not first.done():
            first.cancel()
        await _aclose(events)
    return resp


async def _pump(resp: web.StreamResponse, first: asyncio.Future[WatchEvent],
                events: AsyncIterator[WatchEvent], transform: ObjectTransform | None) -> None:
    try:
        ev = await first
    except StopAsyncIteration:
        return
    try:
        while True:
            await resp.write(encode_event(ev, transform))
            ev = await anext(events)
    except StopAsyncIteration:
        return
    except ApiError as e:
        await resp.write(error_event(e))
    except (asyncio.CancelledError, ConnectionError):
        raise
    except Exception:
        log.exception("watch stream failed")
        await resp.write(error_event(internal("an error on the server prevented the watch from continuing")))
