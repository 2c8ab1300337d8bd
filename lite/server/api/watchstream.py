"""Watch responses: a `Client.watch` iterator streamed as newline-delimited JSON over chunked HTTP.

Role: turn `WatchEvent`s into `{"type":..,"object":..}\\n` lines, written as they come: the events that
arrive in one pass of the loop (a store commit's burst) go out as one chunk, a lone event on the next pass;
keep a registry of open streams so the app can end them all at shutdown.

Invariants:
- An event's `raw` bytes are written as they are (no decode/encode round trip) unless the client asked
  for Tables, where each object becomes a one-row Table; ERROR and BOOKMARK objects pass unchanged.
- Errors raised before the stream starts (bad selector, unknown RV form) answer as an ordinary Status
  response; errors after it started become one ERROR event carrying the Status (with `code`), then the
  stream ends. HTTP status is 200 once the stream started, as upstream.
- The stream ends when the iterator ends (timeoutSeconds, server timeout, dropped slow watcher), when the
  client goes away, or when `WatchRegistry.close_all` runs at shutdown; the iterator is always closed.
- Bounded life and memory whatever the client does: `lifetime` (timeoutSeconds) ends the response even
  while a write is blocked on a client that stopped reading; a single write blocked longer than
  `WatchRegistry.write_timeout` means the client is stalled and its connection is aborted (it re-watches,
  as client-go does when the apiserver closes an unresponsive watcher); a client that disconnected is
  noticed within `WatchRegistry.disconnect_check` seconds even on an idle resource, and its watch released.
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
    """The open watch streams of one app, so shutdown can end them instead of waiting for timeouts.

    `write_timeout` and `disconnect_check` (seconds) are the stall and disconnect bounds of every stream.
    """

    def __init__(self, *, write_timeout: float = 30.0, disconnect_check: float = 1.0) -> None:
        self._tasks: set[asyncio.Task[Any]] = set()
        self.closing = False
        self.write_timeout = write_timeout
        self.disconnect_check = disconnect_check

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
                      transform: ObjectTransform | None = None, lifetime: float | None = None) -> web.StreamResponse:
    """Stream `events` as the response to `request`. Raises ApiError only before the stream starts."""
    task = asyncio.current_task()
    assert task is not None
    loop = asyncio.get_running_loop()
    deadline = loop.time() + lifetime if lifetime is not None and lifetime > 0 else None
    first: asyncio.Future[WatchEvent] = asyncio.ensure_future(anext(events))
    resp = web.StreamResponse(headers={"Content-Type": "application/json"})
    registry.add(task)
    gone = _Disconnect(request, task, registry.disconnect_check)
    try:
        done, _ = await asyncio.wait({first}, timeout=_FIRST_EVENT_WAIT)
        if first in done:
            exc = first.exception()
            if exc is not None and not isinstance(exc, StopAsyncIteration):
                raise exc
        resp.enable_chunked_encoding()
        await resp.prepare(request)
        ended = await _pump(resp, first, events, transform, _Deadlines(deadline, registry.write_timeout))
        try:
            if ended:
                async with asyncio.timeout(registry.write_timeout):
                    await resp.write_eof()
        except TimeoutError:
            ended = False
        if not ended:
            _abort(request)  # stalled: nothing more can be written; the client re-watches
    except asyncio.CancelledError:
        if not (registry.closing or gone.cancelled):
            raise
        task.uncancel()  # our own cancel (shutdown, or the client left): end the response quietly instead
        if resp.prepared and not gone.cancelled:
            with contextlib.suppress(ConnectionError):
                await resp.write_eof()
    except ConnectionError:
        pass  # the client went away; nothing more to say
    finally:
        gone.stop()
        registry.discard(task)
        if not first.done():
            first.cancel()
        await _aclose(events)
    return resp


class _Disconnect:
    """A timer that checks every `interval` seconds whether the client's connection is gone, and if so
    cancels the handler: an idle watch would otherwise wait for its next event to notice."""

    def __init__(self, request: web.Request, task: asyncio.Task[Any], interval: float) -> None:
        self.request, self.task, self.interval = request, task, interval
        self.cancelled = False
        self._handle: asyncio.TimerHandle | None = asyncio.get_running_loop().call_later(interval, self._check)

    def _check(self) -> None:
        transport = self.request.transport
        if transport is None or transport.is_closing():
            self.cancelled = True
            self._handle = None
            self.task.cancel()
            return
        self._handle = asyncio.get_running_loop().call_later(self.interval, self._check)

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None


def _abort(request: web.Request) -> None:
    transport = request.transport
    if transport is not None:
        transport.abort()


class _Deadlines:
    """When a write must have finished: the stream's end (timeoutSeconds) or `write_timeout` from now."""

    def __init__(self, end: float | None, write_timeout: float) -> None:
        self.end, self.write_timeout = end, write_timeout

    def for_write(self) -> float:
        limit = asyncio.get_running_loop().time() + self.write_timeout
        return limit if self.end is None else min(limit, self.end)


async def _write(resp: web.StreamResponse, data: bytes, deadlines: _Deadlines) -> bool:
    """Write one chunk; False if it could not be written in time (the client stopped reading)."""
    try:
        async with asyncio.timeout_at(deadlines.for_write()):
            await resp.write(data)
    except TimeoutError:
        return False
    return True


class _Sender:
    """A stream's writes, coalesced: `add` queues an encoded event and a writer task sends everything queued
    since its previous write as one chunk. The events of one store commit reach the pump in one pass of the
    loop, so a burst costs one chunk (one TLS record run, one send) instead of one per event, and an event
    alone is still sent on the next pass. At most `MAX_PENDING` bytes wait behind a write in progress (then
    `add` waits). A write that fails, or is not done by its deadline, ends the stream: the writer records
    why (`failed`, `error`) and cancels the task that owns the stream, which may be waiting for its next
    event; `_pump` turns that cancel back into its result."""

    MAX_PENDING = 256 << 10

    def __init__(self, resp: web.StreamResponse, deadlines: _Deadlines) -> None:
        owner = asyncio.current_task()
        assert owner is not None
        self.owner = owner
        self.resp, self.deadlines = resp, deadlines
        self.parts: list[bytes] = []
        self.size = 0
        self.failed = False
        self.error: BaseException | None = None
        self._wake = asyncio.Event()
        self._room = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._task = asyncio.create_task(self._run())

    async def add(self, data: bytes) -> None:
        self.parts.append(data)
        self.size += len(data)
        self._idle.clear()
        self._wake.set()
        if self.size > self.MAX_PENDING:
            self._room.clear()
            await self._room.wait()

    async def flush(self) -> None:
        """Wait until everything added was written."""
        if self.parts or not self._idle.is_set():
            await self._idle.wait()

    def close(self) -> None:
        self._task.cancel()

    async def _run(self) -> None:
        try:
            while True:
                while not self.parts:
                    self._idle.set()
                    self._wake.clear()
                    await self._wake.wait()
                parts, self.parts, self.size = self.parts, [], 0
                self._room.set()
                if not await _write(self.resp, parts[0] if len(parts) == 1 else b"".join(parts), self.deadlines):
                    break
        except asyncio.CancelledError:
            raise
        except Exception as e:  # handed to the owner, which raises it where it waits
            self.error = e
        self.failed = True
        self.owner.cancel()


async def _pump(resp: web.StreamResponse, first: asyncio.Future[WatchEvent], events: AsyncIterator[WatchEvent],
                transform: ObjectTransform | None, deadlines: _Deadlines) -> bool:
    """Write events until the iterator ends (True) or a write is stalled past its deadline (False)."""
    try:
        ev = await first
    except StopAsyncIteration:
        return True
    out = _Sender(resp, deadlines)
    try:
        try:
            while True:
                await out.add(encode_event(ev, transform))
                ev = await anext(events)
        except StopAsyncIteration:
            pass
        except ApiError as e:
            await out.add(error_event(e))
        except (asyncio.CancelledError, ConnectionError):
            raise
        except Exception:
            log.exception("watch stream failed")
            await out.add(error_event(internal("an error on the server prevented the watch from continuing")))
        await out.flush()
        return True
    except asyncio.CancelledError:
        if not out.failed:
            raise
        if out.owner.uncancel() > 0:  # cancelled for another reason as well (shutdown, client gone)
            raise
        if out.error is not None:
            raise out.error from None
        return False
    finally:
        out.close()
