"""exec and attach over WebSocket, every subprotocol kubectl and the client libraries use.

| subprotocol | frames | error channel (3) |
|---|---|---|
| `v5.channel.k8s.io` | binary | JSON Status, Success too; client may send CLOSE `[255, channel]` (stdin EOF) |
| `v4.channel.k8s.io` | binary | JSON Status, Success too |
| `v4.base64.channel.k8s.io` | text | as v4 |
| `channel.k8s.io` (also none asked for) | binary | only on failure, the message as plain text |
| `base64.channel.k8s.io` | text | as `channel.k8s.io` |

Framing: binary messages are one channel byte and a payload; text (base64) messages are the channel as an ASCII
digit and the payload in standard base64, both ways. What the client sends is read by the subprotocol, not by
the frame's type (as upstream's wsstream): a text frame under a binary subprotocol is its UTF-8 bytes, one
channel byte first (the Python client sends `str` stdin so). Client → server: 0 stdin, 4 resize
(`{"Width":w,"Height":h}`). Server → client: 1 stdout, 2 stderr (never with a TTY: clients then merge output),
3 the end as above, then a normal close. As the kubelet does, the server first sends an empty message on the
lowest open output channel (stdout, else stderr, else error) to say the stream is established.

Invariants:
- The agent's stream is ready (container found, process started) before the upgrade, so refusals are
  ordinary HTTP Status answers.
- All output the agent sent is forwarded before the end on channel 3; the agent's stream is always closed.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import orjson
from aiohttp import WSMsgType, web

from lite import wire
from lite.errors import bad_request
from lite.kubestreams.tunnel import AgentStream
from lite.records import dataclass

STDIN, STDOUT, STDERR, ERROR, RESIZE, CLOSE = 0, 1, 2, 3, 4, 255
MAX_MESSAGE = 16 * 1024 * 1024


@dataclass(frozen=True)
class Subprotocol:
    """How one channel subprotocol frames data and ends a stream."""

    version: int  # 1 (plain-text error on failure only), 4 (JSON Status always), 5 (v4 plus CLOSE)
    base64: bool

    def frame(self, channel: int, payload: bytes) -> bytes | str:
        if self.base64:
            return chr(ord("0") + channel) + base64.b64encode(payload).decode()
        return bytes([channel]) + payload

    def unframe(self, msg: bytes | str) -> tuple[int, bytes] | None:
        """(channel, payload) of a client message, text or binary alike; None for an empty or undecodable one.

        The frame's opcode does not matter, only the subprotocol does: a text message is its UTF-8 bytes
        (the Python client writes `str` stdin as text frames holding a raw channel byte).
        """
        data = msg.encode() if isinstance(msg, str) else msg
        if not data:
            return None
        if self.base64:
            try:
                return data[0] - ord("0"), base64.b64decode(data[1:], validate=True)
            except (binascii.Error, ValueError):
                return None
        return data[0], data[1:]

    def end(self, status: dict[str, Any]) -> bytes | None:
        """The channel-3 payload for the stream's end; None when this version sends nothing."""
        if self.version >= 4:
            return orjson.dumps(status)
        if status.get("status") == "Success":
            return None
        return str(status.get("message", "")).encode()


# In the order a server prefers them; the client's order decides (the first it offers that is here).
SUBPROTOCOLS = {
    "v5.channel.k8s.io": Subprotocol(5, False),
    "v4.channel.k8s.io": Subprotocol(4, False),
    "v4.base64.channel.k8s.io": Subprotocol(4, True),
    "channel.k8s.io": Subprotocol(1, False),
    "base64.channel.k8s.io": Subprotocol(1, True),
}
PROTOCOLS = tuple(SUBPROTOCOLS)


def offered_subprotocols(request: web.Request) -> list[str]:
    """The WebSocket subprotocols a request offers, in its order (every Sec-WebSocket-Protocol header)."""
    raw = ",".join(request.headers.getall("Sec-WebSocket-Protocol", ()))
    return [p.strip() for p in raw.split(",") if p.strip()]


def refuse_subprotocols(request: web.Request, supported: tuple[str, ...]) -> web.Response | None:
    """The kubelet's answer to a WebSocket upgrade offering subprotocols of which it serves none (apimachinery's
    wsstream handshake fails, golang.org/x/net/websocket then writes a bare `403 Forbidden`, no body, and closes
    the connection; kube-apiserver relays it), else None. Offering none at all is fine: the unnamed default."""
    offered = offered_subprotocols(request)
    if not offered or any(p in supported for p in offered) or not web.WebSocketResponse().can_prepare(request).ok:
        return None
    resp = web.Response(status=403)
    resp.force_close()
    return resp


def exit_status(code: int, message: str = "") -> dict[str, Any]:
    """The channel-3 Status for a process's end (kubectl exits with `code`)."""
    if code == 0:
        return {"metadata": {}, "status": "Success"}
    return {"metadata": {}, "status": "Failure",
            "message": message or f"command terminated with non-zero exit code: exit status {code}",
            "reason": "NonZeroExitCode", "details": {"causes": [{"reason": "ExitCode", "message": str(code)}]}}


def failure_status(message: str, reason: str = "InternalError", code: int = 500) -> dict[str, Any]:
    return {"metadata": {}, "status": "Failure", "message": message, "reason": reason, "code": code}


def end_status(msg: object) -> dict[str, Any] | None:
    """The Status that ends an exec/attach stream (websocket and raw SPDY alike) for the agent's message `msg`:
    its process exited (`exit_status`), the agent failed the stream (`failure_status`), or it closed the whole
    stream (Success); None for any other message (output)."""
    if isinstance(msg, wire.StreamExit):
        return exit_status(msg.code, msg.message)
    if isinstance(msg, wire.StreamError):
        return failure_status(msg.message, msg.reason, msg.code)
    if isinstance(msg, wire.StreamClose) and msg.channel == wire.WHOLE_STREAM:
        return exit_status(0)
    return None


async def client_frames(ws: web.WebSocketResponse, proto: Subprotocol) -> AsyncIterator[tuple[int, bytes]]:
    """(channel, payload) of each data message the client sends, unframed by `proto`; other messages and
    frames that `proto` cannot read are passed over (exec's and the channel port-forward's reader)."""
    async for msg in ws:
        if msg.type not in (WSMsgType.BINARY, WSMsgType.TEXT):
            continue
        got = proto.unframe(msg.data)
        if got is not None:
            yield got


async def serve_exec(request: web.Request, stream: AgentStream, *, tty: bool, stdout: bool = True,
                     stderr: bool = True) -> web.StreamResponse:
    try:
        ws = web.WebSocketResponse(protocols=PROTOCOLS, max_msg_size=MAX_MESSAGE, autoping=True)
        if not ws.can_prepare(request).ok:
            raise bad_request("Upgrade request required: exec and attach need a websocket (v5.channel.k8s.io)")
        await stream.ready()
        await ws.prepare(request)
        proto = SUBPROTOCOLS.get(ws.ws_protocol or "channel.k8s.io", SUBPROTOCOLS["channel.k8s.io"])
        first = STDOUT if stdout else STDERR if stderr and not tty else ERROR
        await _send(ws, proto, first, b"")
        out = asyncio.create_task(_agent_to_client(ws, stream, tty, proto))
        try:
            await _client_to_agent(ws, stream, proto)
        finally:
            if not out.done():
                # The client went away first: stop reading; the agent learns it from the close below.
                out.cancel()
            with contextlib.suppress(asyncio.CancelledError, ConnectionResetError):
                await out
        return ws
    finally:
        await stream.close()


async def _send(ws: web.WebSocketResponse, proto: Subprotocol, channel: int, payload: bytes) -> None:
    frame = proto.frame(channel, payload)
    if isinstance(frame, str):
        await ws.send_str(frame)
    else:
        await ws.send_bytes(frame)


async def _client_to_agent(ws: web.WebSocketResponse, stream: AgentStream, proto: Subprotocol) -> None:
    async for channel, payload in client_frames(ws, proto):
        if channel == STDIN:
            await stream.write(STDIN, payload)
        elif channel == RESIZE:
            try:
                size = orjson.loads(payload)
                await stream.resize(int(size.get("Width", 0)), int(size.get("Height", 0)))
            except (orjson.JSONDecodeError, AttributeError, TypeError, ValueError):
                continue
        elif channel == CLOSE and proto.version >= 5 and payload[:1] == bytes([STDIN]):
            await stream.close_channel(STDIN)


async def _agent_to_client(ws: web.WebSocketResponse, stream: AgentStream, tty: bool, proto: Subprotocol) -> None:
    status: dict[str, Any] | None = None
    while status is None:
        msg = await stream.next()
        if isinstance(msg, wire.StreamData):
            channel = STDOUT if tty else msg.channel
            if channel in (STDOUT, STDERR):
                await _send(ws, proto, channel, msg.data)
        else:
            status = end_status(msg)
    end = proto.end(status)
    if end is not None:
        await _send(ws, proto, ERROR, end)
    await ws.close()
