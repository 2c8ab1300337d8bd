"""pods/portforward: SPDY/3.1 tunnelled in a WebSocket (kubectl 1.31+) and the WebSocket channel protocol
(`?ports=`, the Python client and browsers). Each forwarded connection is one agent stream (kind
"portforward", params port), whose agent end is a TCP connection to 127.0.0.1:<port> in the pod's netns.

SPDY (subprotocol `SPDY/3.1+portforward.k8s.io`): the binary messages' payloads, concatenated, are a SPDY
byte stream. Per client connection kubectl opens an `error` stream and a `data` stream sharing a
`requestid`; both get a SYN_REPLY; bytes flow as DATA frames on the data stream; failures are written as
text on the error stream; the side that finishes sends an empty DATA+FIN.

Channel protocol, as the kubelet serves it (subprotocol `v4.channel.k8s.io`, or none asked for: binary
messages; `v4.base64.channel.k8s.io`: text messages, the channel as an ASCII digit and the payload in base64;
a client offering only others gets the kubelet's bare `403 Forbidden`, as upstream): port i (the i-th of
`?ports=`) uses channel 2i for data and 2i+1 for errors; the server's first message on each channel is the
port, 2 bytes little-endian; then data flows both ways on 2i, and a failure is written once as text on 2i+1
(`error forwarding port <p> to pod <name>, uid <uid>: <reason>`). What the client sends is read by the
subprotocol, not the frame's type; writes to an error channel or an unknown channel are ignored. The websocket
closes when every port's connection has ended.

Invariants: frames with compressed headers are built and sent under one lock, so the header-compression
context sees blocks in wire order; every agent stream opened here is closed when its connection ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import WSMsgType, web

from lite import wire
from lite.errors import ApiError, bad_request
from lite.kubestreams import spdy
from lite.kubestreams.exec_ws import Subprotocol, client_frames, offered_subprotocols, refuse_subprotocols
from lite.kubestreams.tunnel import AgentStream
from lite.records import dataclass

log = logging.getLogger("lite.kubestreams")

SPDY_WS = "SPDY/3.1+portforward.k8s.io"
# The kubelet's port-forward subprotocols; none asked for means binary (there is no v5 for port-forward).
CHANNEL_PROTOCOLS = {"v4.channel.k8s.io": Subprotocol(4, False), "v4.base64.channel.k8s.io": Subprotocol(4, True)}
BINARY = Subprotocol(4, False)
Obj = dict[str, Any]


def parse_ports(request: web.Request) -> list[int]:
    ports: list[int] = []
    for value in request.query.getall("ports", ()):
        for part in value.split(","):
            try:
                port = int(part)
            except ValueError:
                raise bad_request(f"invalid port {part!r}") from None
            if not 0 < port < 65536:
                raise bad_request(f"port {port} must be in the range 1-65535")
            ports.append(port)
    if not ports:
        raise bad_request('query parameter "ports" is required')
    return ports


async def serve_portforward(request: web.Request, session: Any, base: Obj) -> web.StreamResponse:
    offered = offered_subprotocols(request)
    if SPDY_WS in offered:
        ws = web.WebSocketResponse(protocols=(SPDY_WS,), max_msg_size=0)
        await ws.prepare(request)
        pf = SpdyPortForward(ws.send_bytes, session, base)
        try:
            async for msg in ws:
                if msg.type == WSMsgType.BINARY and not await pf.feed(msg.data):
                    break
        except spdy.SpdyError as e:
            log.info("port-forward: %s", e)
        finally:
            await pf.close()
            await ws.close()
        return ws
    ports = parse_ports(request)  # the kubelet reads its options before the websocket handshake
    refused = refuse_subprotocols(request, (*CHANNEL_PROTOCOLS, SPDY_WS))
    if refused is not None:
        return refused
    chosen = next((p for p in offered if p in CHANNEL_PROTOCOLS), "")
    ws = web.WebSocketResponse(protocols=(chosen,) if chosen else (), max_msg_size=0)
    if not ws.can_prepare(request).ok:
        raise bad_request("Upgrade request required: port-forward needs a websocket")
    return await _serve_channels(request, ws, CHANNEL_PROTOCOLS.get(chosen, BINARY), session, base, ports)


# -- the channel protocol --

def forward_error(port: int, base: Obj, reason: str) -> str:
    """The kubelet's text for a port whose connection failed (both protocols)."""
    return f"error forwarding port {port} to pod {base.get('name', '')}, uid {base.get('uid', '')}: {reason}"


async def _serve_channels(request: web.Request, ws: web.WebSocketResponse, proto: Subprotocol, session: Any,
                          base: Obj, ports: list[int]) -> web.StreamResponse:
    streams: list[AgentStream] = [session.open_stream("portforward", {**base, "port": p}) for p in ports]
    await ws.prepare(request)

    async def send(channel: int, payload: bytes) -> None:
        frame = proto.frame(channel, payload)
        await (ws.send_str(frame) if isinstance(frame, str) else ws.send_bytes(frame))

    try:
        for i, port in enumerate(ports):
            for channel in (2 * i, 2 * i + 1):
                await send(channel, port.to_bytes(2, "little"))
        async with asyncio.TaskGroup() as tg:
            outs = [tg.create_task(_channel_out(send, s, i, ports[i], base)) for i, s in enumerate(streams)]
            reader = tg.create_task(_channel_in(ws, proto, streams))
            await asyncio.gather(*outs)
            await ws.close()
            reader.cancel()
    finally:
        for s in streams:
            await s.close()
    return ws


async def _channel_in(ws: web.WebSocketResponse, proto: Subprotocol, streams: list[AgentStream]) -> None:
    async for channel, payload in client_frames(ws, proto):
        if channel % 2 == 0 and channel // 2 < len(streams) and payload:
            await streams[channel // 2].write(0, payload)
    for s in streams:  # the client is gone
        await s.close()


async def _channel_out(send: Callable[[int, bytes], Awaitable[None]], stream: AgentStream, i: int, port: int,
                       base: Obj) -> None:
    try:
        await stream.ready()
    except ApiError as e:
        await send(2 * i + 1, forward_error(port, base, e.message).encode())
        return
    while True:
        msg = await stream.next()
        if isinstance(msg, wire.StreamData):
            await send(2 * i, msg.data)
        elif isinstance(msg, wire.StreamError):
            await send(2 * i + 1, forward_error(port, base, msg.message).encode())
            return
        elif isinstance(msg, (wire.StreamClose, wire.StreamExit)):
            return


# -- SPDY --

@dataclass
class _Conn:
    """One forwarded connection: kubectl's error and data streams with the same requestid."""

    request_id: str
    port: int = 0
    error_sid: int = 0
    data_sid: int = 0
    stream: AgentStream | None = None
    task: asyncio.Task[None] | None = None
    done: bool = False


class SpdyPortForward(spdy.SpdySession):
    """The server side of kubectl's port-forward SPDY session; `feed` it the client's bytes."""

    def __init__(self, send: Callable[[bytes], Awaitable[None]], session: Any, base: Obj) -> None:
        super().__init__(send)
        self._session = session
        self._base = base
        self._conns: dict[str, _Conn] = {}
        self._by_sid: dict[int, _Conn] = {}

    async def feed(self, chunk: bytes) -> bool:
        """Handle the client's bytes; False once the client said GOAWAY."""
        for frame in self._reader.feed(chunk):
            if frame.type == spdy.SYN_STREAM:
                await self._syn_stream(frame)
            elif frame.type == 0:
                await self._data(frame)
            elif frame.type == spdy.PING:
                await self._out(lambda f=frame: self._writer.ping(f.value))  # type: ignore[misc]
            elif frame.type == spdy.RST_STREAM:
                conn = self._by_sid.get(frame.stream_id)
                if conn is not None:
                    await self._finish(conn)
            elif frame.type == spdy.GOAWAY:
                return False
        return True

    async def _syn_stream(self, frame: spdy.Frame) -> None:
        h = frame.headers
        sid = frame.stream_id
        await self._out(lambda: self._writer.syn_reply(sid))
        conn = self._conns.setdefault(h.get("requestid", str(sid)), _Conn(h.get("requestid", str(sid))))
        self._by_sid[sid] = conn
        try:
            conn.port = int(h.get("port", "0"))
        except ValueError:
            conn.port = 0
        if h.get("streamtype") == "error":
            conn.error_sid = sid
        elif h.get("streamtype") == "data":
            conn.data_sid = sid
            conn.task = asyncio.create_task(self._pump(conn))
        else:
            await self._out(lambda: self._writer.rst_stream(sid, spdy.RST_PROTOCOL_ERROR))

    async def _data(self, frame: spdy.Frame) -> None:
        conn = self._by_sid.get(frame.stream_id)
        if conn is None or frame.stream_id != conn.data_sid or conn.stream is None:
            return  # the error stream's FIN, or data for a connection already over
        if frame.data:
            await conn.stream.write(0, frame.data)
        if frame.fin:
            await conn.stream.close_channel(0)

    async def _pump(self, conn: _Conn) -> None:
        """Agent → client for one connection."""
        try:
            conn.stream = self._session.open_stream("portforward", {**self._base, "port": conn.port})
            await conn.stream.ready()
            while True:
                msg = await conn.stream.next()
                if isinstance(msg, wire.StreamData):
                    await self._out(lambda m=msg: self._writer.data(conn.data_sid, m.data))  # type: ignore[misc]
                elif isinstance(msg, wire.StreamError):
                    await self._error(conn, forward_error(conn.port, self._base, msg.message))
                    break
                elif isinstance(msg, (wire.StreamClose, wire.StreamExit)):
                    break
        except ApiError as e:
            await self._error(conn, forward_error(conn.port, self._base, e.message))
        except (ConnectionError, RuntimeError):
            pass  # the client's websocket closed under us
        finally:
            await self._finish(conn)

    async def _error(self, conn: _Conn, text: str) -> None:
        if conn.error_sid:
            with contextlib.suppress(ConnectionError, RuntimeError):
                await self._out(lambda: self._writer.data(conn.error_sid, text.encode()))

    async def _finish(self, conn: _Conn) -> None:
        if conn.done:
            return
        conn.done = True
        with contextlib.suppress(ConnectionError, RuntimeError):
            for sid in (conn.data_sid, conn.error_sid):
                if sid:
                    await self._out(lambda s=sid: self._writer.data(s, b"", fin=True))  # type: ignore[misc]
        if conn.stream is not None:
            await conn.stream.close()
        if conn.task is not None and conn.task is not asyncio.current_task():
            conn.task.cancel()
        self._conns.pop(conn.request_id, None)
        for sid in (conn.data_sid, conn.error_sid):
            self._by_sid.pop(sid, None)

    async def close(self) -> None:
        for conn in list(self._conns.values()):
            if conn.task is not None:
                conn.task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await conn.task
            if conn.stream is not None:
                await conn.stream.close()
