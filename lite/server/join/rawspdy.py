"""Port-forward over a raw SPDY/3.1 upgrade (`POST .../portforward`, `Upgrade: SPDY/3.1`), as kubectl 1.29/1.30
(and 1.31+ with KUBECTL_PORT_FORWARD_WEBSOCKETS=false, or after a failed websocket attempt) do it.

aiohttp only hands over connections upgraded to websocket or tcp, so this takes the connection over itself:
before answering 101 it points the (TLS) transport at a small protocol that queues the raw bytes, runs the
same `SpdyPortForward` as the websocket tunnel on them, and gives the transport back to aiohttp (which
then closes it: the response is marked force-close) when the session ends.

Invariant: the transport's original protocol is restored whatever happens, so aiohttp's connection
bookkeeping (timers, connection_lost) stays whole.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from aiohttp import web

from lite.server.join import spdy
from lite.server.join.portforward import SpdyPortForward

log = logging.getLogger("lite.server.join")

Obj = dict[str, Any]
PROTOCOL = "portforward.k8s.io"


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


async def serve_raw_spdy(request: web.Request, session: Any, base: Obj) -> web.StreamResponse:
    transport = request.transport
    if transport is None:
        raise ConnectionResetError("the client went away")
    original = transport.get_protocol()
    raw = _Raw()
    transport.set_protocol(raw)
    resp = web.StreamResponse(status=101, headers={"Connection": "Upgrade", "Upgrade": "SPDY/3.1",
                                                   "X-Stream-Protocol-Version": PROTOCOL})
    resp.force_close()
    try:
        await resp.prepare(request)

        async def send(frame: bytes) -> None:
            if transport.is_closing():
                raise ConnectionResetError("the client went away")
            transport.write(frame)

        pf = SpdyPortForward(send, session, base)
        try:
            while chunk := await raw.queue.get():
                if not await pf.feed(chunk):
                    break
        except spdy.SpdyError as e:
            log.info("port-forward (raw SPDY): %s", e)
        finally:
            await pf.close()
    finally:
        transport.set_protocol(original)
    return resp
