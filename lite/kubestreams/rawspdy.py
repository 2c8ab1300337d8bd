"""Raw SPDY/3.1 upgrades (`Upgrade: SPDY/3.1` on the request itself): port-forward as kubectl 1.29/1.30 do it
(and 1.31+ with KUBECTL_PORT_FORWARD_WEBSOCKETS=false), and exec/attach as kubectl ≤ 1.29 do it (and later
ones with KUBECTL_REMOTE_COMMAND_WEBSOCKETS=false, or after a refused websocket).

aiohttp only hands over connections upgraded to websocket or tcp, so `_takeover` does it itself: before
answering 101 it points the (TLS) transport at a small protocol that queues the raw bytes, runs the SPDY
session on them, and gives the transport back to aiohttp (which then closes it: the response is marked
force-close) when the session ends.

SPDY exec (`v4.channel.k8s.io`): the client opens one stream per `streamtype` (error, stdin, stdout, stderr,
resize); each gets a SYN_REPLY; output goes to the stdout/stderr streams, stdin EOF is the stdin stream's FIN,
resize is a JSON stream of `{"Width","Height"}`; at the end one Status JSON on the error stream, then FIN on
every stream.

Invariant: the transport's original protocol is restored whatever happens, so aiohttp's connection
bookkeeping (timers, connection_lost) stays whole.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import orjson
from aiohttp import web

from lite import wire
from lite.kubestreams import spdy
from lite.kubestreams.exec_ws import end_status
from lite.kubestreams.portforward import SpdyPortForward
from lite.kubestreams.tunnel import AgentStream

log = logging.getLogger("lite.kubestreams")

Obj = dict[str, Any]
PORTFORWARD = "portforward.k8s.io"
EXEC_PROTOCOL = "v4.channel.k8s.io"
Send = Callable[[bytes], Awaitable[None]]


class _Raw(asyncio.Protocol):
    """Collects the peer's bytes (and EOF as b"") for the SPDY reader."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[bytes] = asyncio.Queue()

    def data_received(self, data: bytes) -> None:
        self.queue.put_nowait(data)

    def eof_received(self) -> bool | None:
        self.queue.put_nowait(b"")
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        self.queue.put_nowait(b"")


def is_spdy_upgrade(request: web.Request) -> bool:
    return request.headers.get("Upgrade", "").lower().startswith("spdy/3")


class _Session(Protocol):
    """A server-side SPDY session (exec, port-forward): fed the client's bytes, closed once at the end."""

    async def feed(self, chunk: bytes) -> bool: ...

    async def close(self) -> None: ...


async def _drive(session: _Session, incoming: asyncio.Queue[bytes], what: str) -> None:
    """Feed the client's bytes to `session` until EOF (b""), its end (feed returns False) or a protocol error
    (logged); the session is closed whatever happens."""
    try:
        while chunk := await incoming.get():
            if not await session.feed(chunk):
                break
    except spdy.SpdyError as e:
        log.info("%s (raw SPDY): %s", what, e)
    finally:
        await session.close()


async def _takeover(request: web.Request, protocol: str, make: Callable[[Send], _Session],
                    what: str) -> web.StreamResponse:
    transport = request.transport
    if transport is None:
        raise ConnectionResetError("the client went away")
    original = transport.get_protocol()
    raw = _Raw()
    transport.set_protocol(raw)
    resp = web.StreamResponse(status=101, headers={"Connection": "Upgrade", "Upgrade": "SPDY/3.1",
                                                   "X-Stream-Protocol-Version": protocol})
    resp.force_close()
    try:
        await resp.prepare(request)

        async def send(frame: bytes) -> None:
            if transport.is_closing():
                raise ConnectionResetError("the client went away")
            transport.write(frame)

        await _drive(make(send), raw.queue, what)
    finally:
        transport.set_protocol(original)
    return resp


async def serve_raw_spdy(request: web.Request, session: Any, base: Obj) -> web.StreamResponse:
    """Port-forward on the upgraded connection."""
    return await _takeover(request, PORTFORWARD, lambda send: SpdyPortForward(send, session, base), "port-forward")


def expected_streams(params: Obj) -> set[str]:
    tty = bool(params.get("tty"))
    want = {"error"}
    for name in ("stdin", "stdout"):
        if params.get(name):
            want.add(name)
    if params.get("stderr") and not tty:
        want.add("stderr")
    if tty:
        want.add("resize")
    return want


async def serve_spdy_exec(request: web.Request, stream: AgentStream, params: Obj) -> web.StreamResponse:
    """exec/attach on the upgraded connection (the agent's stream is already ready)."""
    return await _takeover(request, EXEC_PROTOCOL,
                           lambda send: _SpdyExec(send, stream, expected_streams(params), bool(params.get("tty"))),
                           "exec")


class _SpdyExec(spdy.SpdySession):
    def __init__(self, send: Send, stream: AgentStream, expected: set[str], tty: bool) -> None:
        super().__init__(send)
        self._stream = stream
        self._expected = expected
        self._tty = tty
        self._sids: dict[str, int] = {}
        self._types: dict[int, str] = {}
        self._resize = json.JSONDecoder()
        self._resize_buf = ""
        self._pump: asyncio.Task[None] | None = None

    async def feed(self, chunk: bytes) -> bool:
        for frame in self._reader.feed(chunk):
            if frame.type == spdy.SYN_STREAM:
                kind = frame.headers.get("streamtype", "")
                sid = frame.stream_id
                await self._out(lambda s=sid: self._writer.syn_reply(s))  # type: ignore[misc]
                self._sids[kind] = sid
                self._types[sid] = kind
                if self._pump is None and self._expected <= set(self._sids):
                    self._pump = asyncio.create_task(self._agent_to_client())
            elif frame.type == 0:
                await self._data(self._types.get(frame.stream_id, ""), frame)
            elif frame.type == spdy.PING:
                await self._out(lambda f=frame: self._writer.ping(f.value))  # type: ignore[misc]
            elif frame.type == spdy.GOAWAY:
                return False
        return not (self._pump is not None and self._pump.done())

    async def _data(self, kind: str, frame: spdy.Frame) -> None:
        if kind == "stdin":
            await self._stream.write(0, frame.data)
            if frame.fin:
                await self._stream.close_channel(0)
        elif kind == "resize" and frame.data:
            self._resize_buf += frame.data.decode(errors="replace")
            while self._resize_buf.strip():
                try:
                    size, end = self._resize.raw_decode(self._resize_buf.lstrip())
                except ValueError:
                    break  # an incomplete document: wait for more
                self._resize_buf = self._resize_buf.lstrip()[end:]
                with contextlib.suppress(AttributeError, TypeError, ValueError):
                    await self._stream.resize(int(size.get("Width", 0)), int(size.get("Height", 0)))

    async def _agent_to_client(self) -> None:
        status: Obj | None = None
        while status is None:
            msg = await self._stream.next()
            if isinstance(msg, wire.StreamData):
                kind = "stdout" if self._tty or msg.channel == 1 else "stderr"
                sid = self._sids.get(kind)
                if sid:
                    await self._out(lambda s=sid, m=msg: self._writer.data(s, m.data))  # type: ignore[misc]
            else:
                status = end_status(msg)
        body = orjson.dumps({"kind": "Status", "apiVersion": "v1", **status})
        await self._out(lambda: self._writer.data(self._sids["error"], body))
        for sid in self._sids.values():
            await self._out(lambda s=sid: self._writer.data(s, b"", fin=True))  # type: ignore[misc]
        # The client closes the connection once it has the status: the reader then sees EOF.

    async def close(self) -> None:
        if self._pump is not None and not self._pump.done():
            self._pump.cancel()
        if self._pump is not None:
            with contextlib.suppress(asyncio.CancelledError, ConnectionError):
                await self._pump
