"""exec and attach over WebSocket, subprotocols `v5.channel.k8s.io` and `v4.channel.k8s.io`.

Framing: each binary message is one channel byte and a payload. Client → server: 0 stdin, 4 resize
(`{"Width":w,"Height":h}`), 255 CLOSE (v5: `[255, channel]`, stdin EOF). Server → client: 1 stdout,
2 stderr (never with a TTY: clients then merge output), 3 one Status at the end, then a normal close.

Invariants:
- The agent's stream is ready (container found, process started) before the upgrade, so refusals are
  ordinary HTTP Status answers.
- All output the agent sent is forwarded before the channel-3 Status; the agent's stream is always closed.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import orjson
from aiohttp import WSMsgType, web

from lite import wire
from lite.errors import bad_request
from lite.server.join.tunnel import AgentStream

PROTOCOLS = ("v5.channel.k8s.io", "v4.channel.k8s.io")
STDIN, STDOUT, STDERR, ERROR, RESIZE, CLOSE = 0, 1, 2, 3, 4, 255
MAX_MESSAGE = 16 * 1024 * 1024


def exit_status(code: int, message: str = "") -> dict[str, Any]:
    """The channel-3 Status for a process's end (kubectl exits with `code`)."""
    if code == 0:
        return {"metadata": {}, "status": "Success"}
    return {"metadata": {}, "status": "Failure", "reason": "NonZeroExitCode",
            "message": message or f"command terminated with non-zero exit code: exit status {code}",
            "details": {"causes": [{"reason": "ExitCode", "message": str(code)}]}}


def failure_status(message: str, reason: str = "InternalError", code: int = 500) -> dict[str, Any]:
    return {"metadata": {}, "status": "Failure", "message": message, "reason": reason, "code": code}


async def serve_exec(request: web.Request, stream: AgentStream, *, tty: bool) -> web.StreamResponse:
    try:
        ws = web.WebSocketResponse(protocols=PROTOCOLS, max_msg_size=MAX_MESSAGE, autoping=True)
        if not ws.can_prepare(request).ok:
            raise bad_request("Upgrade request required: exec and attach need a websocket (v5.channel.k8s.io)")
        await stream.ready()
        await ws.prepare(request)
        v5 = ws.ws_protocol == "v5.channel.k8s.io"
        out = asyncio.create_task(_agent_to_client(ws, stream, tty))
        try:
            await _client_to_agent(ws, stream, v5)
        finally:
            if not out.done():
                # The client went away first: stop reading; the agent learns it from the close below.
                out.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await out
        return ws
    finally:
        await stream.close()


async def _client_to_agent(ws: web.WebSocketResponse, stream: AgentStream, v5: bool) -> None:
    async for msg in ws:
        if msg.type != WSMsgType.BINARY or not msg.data:
            continue
        data: bytes = msg.data
        channel, payload = data[0], data[1:]
        if channel == STDIN:
            await stream.write(STDIN, payload)
        elif channel == RESIZE:
            try:
                size = orjson.loads(payload)
                await stream.resize(int(size.get("Width", 0)), int(size.get("Height", 0)))
            except (orjson.JSONDecodeError, AttributeError, TypeError, ValueError):
                continue
        elif channel == CLOSE and v5 and payload[:1] == bytes([STDIN]):
            await stream.close_channel(STDIN)


async def _agent_to_client(ws: web.WebSocketResponse, stream: AgentStream, tty: bool) -> None:
    status: dict[str, Any] | None = None
    while status is None:
        msg = await stream.next()
        if isinstance(msg, wire.StreamData):
            channel = STDOUT if tty else msg.channel
            if channel in (STDOUT, STDERR):
                await ws.send_bytes(bytes([channel]) + msg.data)
        elif isinstance(msg, wire.StreamExit):
            status = exit_status(msg.code, msg.message)
        elif isinstance(msg, wire.StreamError):
            status = failure_status(msg.message, msg.reason, msg.code)
        elif isinstance(msg, wire.StreamClose) and msg.channel == wire.WHOLE_STREAM:
            status = exit_status(0)
    await ws.send_bytes(bytes([ERROR]) + orjson.dumps(status))
    await ws.close()
