"""`lite.server.listener.Listener` in process, on 127.0.0.1: every connection is counted out when it closes,
including one whose transport a handler took over (as raw SPDY upgrades do) while the client went away."""

from __future__ import annotations

import asyncio
import select
import socket
import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from helpers.tls import make_pki

from lite.server.config import ConnectionLimits
from lite.server.listener import Listener

GUARD = 10.0
HOLD: web.AppKey[asyncio.Event] = web.AppKey("hold", asyncio.Event)


class _Swallow(asyncio.Protocol):
    def __init__(self) -> None:
        self.lost = asyncio.get_running_loop().create_future()

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.lost.done():
            self.lost.set_result(None)


async def _takeover(request: web.Request) -> web.StreamResponse:
    transport = request.transport
    assert transport is not None
    original, raw = transport.get_protocol(), _Swallow()
    transport.set_protocol(raw)
    resp = web.StreamResponse(status=101, headers={"Connection": "Upgrade", "Upgrade": "test/1"})
    resp.force_close()
    try:
        await resp.prepare(request)
        await asyncio.wait_for(raw.lost, GUARD)  # the client goes away mid-session
    finally:
        transport.set_protocol(original)
    return resp


async def _hello(request: web.Request) -> web.Response:
    return web.Response(text="hi")


async def _hold(request: web.Request) -> web.Response:
    await asyncio.wait_for(request.app[HOLD].wait(), GUARD)
    return web.Response(text="held")


@pytest.fixture
def limits() -> ConnectionLimits:
    return ConnectionLimits()


@pytest.fixture
async def served(tmp_path: Path, limits: ConnectionLimits) -> AsyncIterator[tuple[Listener, int, ssl.SSLContext]]:
    pki = make_pki(tmp_path)
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_ctx.load_cert_chain(pki.cert_file, pki.key_file)
    client_ctx = ssl.create_default_context(cafile=str(pki.ca_file))
    listener = Listener(server_ctx, limits, max_total=1000)
    app = web.Application()
    app.router.add_get("/takeover", _takeover)
    app.router.add_get("/hello", _hello)
    app.router.add_get("/hold", _hold)
    app[HOLD] = asyncio.Event()
    runner = web.AppRunner(app, handle_signals=False, access_log=None)
    await runner.setup()
    listener.server = runner.server
    srv = await listener.start("127.0.0.1", 0)
    try:
        listener.hold = app[HOLD]  # type: ignore[attr-defined]
        yield listener, srv.port, client_ctx
    finally:
        srv.close()
        listener.abort_handshakes()
        await runner.cleanup()


async def _counted_out(listener: Listener) -> None:
    async with asyncio.timeout(GUARD):
        while listener.table.total:
            await asyncio.sleep(0.05)


async def test_connections_counted_out(served: tuple[Listener, int, ssl.SSLContext]) -> None:
    listener, port, ctx = served
    for _ in range(3):
        reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=ctx, server_hostname="127.0.0.1")
        writer.write(b"GET /hello HTTP/1.1\r\nHost: x\r\n\r\n")
        assert (await reader.readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 200")
        writer.close()
    _, silent = await asyncio.open_connection("127.0.0.1", port)  # plain TCP, closed before any TLS
    silent.close()
    await _counted_out(listener)
    assert listener.conns == {}


async def test_taken_over_connection_counted_out(served: tuple[Listener, int, ssl.SSLContext]) -> None:
    listener, port, ctx = served
    reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=ctx, server_hostname="127.0.0.1")
    writer.write(b"GET /takeover HTTP/1.1\r\nHost: x\r\n\r\n")
    assert (await reader.readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 101")
    assert listener.table.open_from("127.0.0.1") == 1
    writer.transport.abort()  # gone mid-session: only the handler's protocol hears of it
    await _counted_out(listener)
    assert listener.conns == {}


async def _closed_by_server(reader: asyncio.StreamReader) -> bool:
    async with asyncio.timeout(GUARD):
        try:
            return await reader.read() == b""
        except ConnectionResetError:
            return True


async def _get(port: int, ctx: ssl.SSLContext, path: str = "/hello") -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=ctx, server_hostname="127.0.0.1")
    writer.write(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    head = await reader.readuntil(b"\r\n\r\n")
    writer.close()
    return head


@pytest.mark.parametrize("limits", [ConnectionLimits(max_total=3, per_address=0)])
async def test_total_cap_closes_the_longest_idle_to_admit_a_new_one(
        served: tuple[Listener, int, ssl.SSLContext]) -> None:
    listener, port, ctx = served
    held = [await asyncio.open_connection("127.0.0.1", port) for _ in range(3)]  # idle, no TLS
    async with asyncio.timeout(GUARD):
        while listener.table.total < 3:
            await asyncio.sleep(0.01)
    assert (await _get(port, ctx)).startswith(b"HTTP/1.1 200")
    assert await _closed_by_server(held[0][0])  # the oldest made room, before any TLS
    assert listener.table.total <= 3
    for _, w in held:
        w.close()
    await _counted_out(listener)


@pytest.mark.parametrize("limits", [ConnectionLimits(max_total=2, per_address=0)])
async def test_total_cap_refuses_before_tls_only_when_every_connection_is_busy(
        served: tuple[Listener, int, ssl.SSLContext]) -> None:
    listener, port, ctx = served
    release: asyncio.Event = listener.hold  # type: ignore[attr-defined]
    busy = [asyncio.create_task(_get(port, ctx, "/hold")) for _ in range(2)]
    async with asyncio.timeout(GUARD):
        while len([c for c in listener.conns.values() if c._busy]) < 2:
            await asyncio.sleep(0.01)
    reader, _ = await asyncio.open_connection("127.0.0.1", port)
    assert await _closed_by_server(reader)  # refused: closed without a byte of TLS
    assert listener.table.total == 2
    release.set()
    for task in busy:
        assert (await task).startswith(b"HTTP/1.1 200")
    await _counted_out(listener)
    assert (await _get(port, ctx)).startswith(b"HTTP/1.1 200")


@pytest.mark.parametrize("limits", [ConnectionLimits(max_total=5, per_address=0)])
async def test_connections_evicted_in_one_burst_of_accepts_are_closed(
        served: tuple[Listener, int, ssl.SSLContext]) -> None:
    """Connections queued in the backlog are accepted in one go; the ones evicted then have handshake tasks
    that never started, and their sockets must be closed all the same."""
    listener, port, _ = served
    burst = [socket.create_connection(("127.0.0.1", port)) for _ in range(30)]  # the loop is blocked meanwhile
    try:
        poller = select.poll()
        for s in burst:
            poller.register(s, select.POLLIN)
        async with asyncio.timeout(GUARD):
            while len(poller.poll(0)) < 25:
                await asyncio.sleep(0.05)
        assert listener.table.total == 5 and len(listener.handshakes) == 5
    finally:
        for s in burst:
            s.close()
    await _counted_out(listener)


def _old_busybox_hello() -> bytes:
    """A TLS 1.2 ClientHello as older busybox wget releases send it: x25519 as their only group and no
    signature_algorithms, so no server holding a P-256 certificate can answer it."""
    import os
    import struct

    ciphers = b"".join(struct.pack(">H", c) for c in (0x00FF, 0xC02B, 0xC02F, 0xC009, 0xC013, 0x009C, 0x002F))
    body = b"\x03\x03" + os.urandom(32) + b"\x00" + struct.pack(">H", len(ciphers)) + ciphers + b"\x01\x00"
    ext = b"\x00\x0a\x00\x04\x00\x02\x00\x1d"
    body += struct.pack(">H", len(ext)) + ext
    hello = b"\x01" + struct.pack(">I", len(body))[1:] + body
    return b"\x16\x03\x01" + struct.pack(">H", len(hello)) + hello


async def test_refused_hello_is_logged_with_its_reason(served: tuple[Listener, int, ssl.SSLContext],
                                                      caplog: pytest.LogCaptureFixture) -> None:
    """Issue 18 item 13: such a client sees only a close before any TLS byte ("bad TLS record (len:0)"); the
    server's log says why. A connection closed without a byte (a TCP probe) is not worth a warning."""
    listener, port, _ = served
    caplog.set_level("DEBUG", logger="lite.server.listener")
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.close()
    await writer.wait_closed()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(_old_busybox_hello())
    async with asyncio.timeout(GUARD):
        assert await reader.read(100) == b""  # closed without an answer
    writer.close()
    await _counted_out(listener)
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1 and warnings[0].startswith("TLS handshake with 127.0.0.1 failed: "), warnings
    assert "NO_SUITABLE" in warnings[0] or "SHARED" in warnings[0], warnings


@pytest.mark.parametrize("limits", [ConnectionLimits(header_timeout=0.6)])
async def test_a_head_is_cut_off_its_own_header_timeout_after_its_first_byte(
        served: tuple[Listener, int, ssl.SSLContext]) -> None:
    """The header timer is armed by one request's head and not cancelled when that head completes: when it
    fires for a later head, it waits for that head's own deadline instead of cutting it early."""
    listener, port, ctx = served
    loop = asyncio.get_running_loop()
    reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=ctx, server_hostname="127.0.0.1")
    writer.write(b"GET /hello HTTP/1.1\r\nHost: x\r\n\r\n")  # arms the timer; completes at once
    assert (await reader.readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 200")
    await reader.readexactly(2)
    await asyncio.sleep(0.4)
    started = loop.time()
    writer.write(b"GET /hello HTTP/1.1\r\nHost: x\r\n")  # a head that never completes
    await writer.drain()
    assert await _closed_by_server(reader)
    assert loop.time() - started >= 0.6
    writer.close()
    await _counted_out(listener)


async def test_routed_directly_as_the_application_would(served: tuple[Listener, int, ssl.SSLContext]) -> None:
    """An application without middleware is routed by the listener's handler itself (`_routed`): the same
    answers as `Application._handle` gives (a route, an unknown path, a wrong method, Expect: 100-continue)."""
    listener, port, ctx = served
    assert (await _get(port, ctx)).startswith(b"HTTP/1.1 200")
    assert (await _get(port, ctx, "/nowhere")).startswith(b"HTTP/1.1 404")
    reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=ctx, server_hostname="127.0.0.1")
    writer.write(b"POST /hello HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n")
    assert (await reader.readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 405")
    writer.close()
    reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=ctx, server_hostname="127.0.0.1")
    writer.write(b"GET /hello HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 0\r\n\r\n")
    head = await reader.readuntil(b"\r\n\r\n")
    if head.startswith(b"HTTP/1.1 100"):
        head = await reader.readuntil(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200")
    assert listener.conns and all(h.lite_direct is not None for h in listener.conns)  # type: ignore[attr-defined]
    writer.close()


async def test_an_application_with_middleware_keeps_its_own_handler(tmp_path: Path) -> None:
    pki = make_pki(tmp_path)
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_ctx.load_cert_chain(pki.cert_file, pki.key_file)
    client_ctx = ssl.create_default_context(cafile=str(pki.ca_file))
    seen: list[str] = []

    @web.middleware
    async def mark(request: web.Request, handler: Any) -> web.StreamResponse:
        seen.append(request.path)
        resp: web.StreamResponse = await handler(request)
        return resp

    listener = Listener(server_ctx, ConnectionLimits(), max_total=1000)
    app = web.Application(middlewares=[mark])
    app.router.add_get("/hello", _hello)
    runner = web.AppRunner(app, handle_signals=False, access_log=None)
    await runner.setup()
    listener.server = runner.server
    srv = await listener.start("127.0.0.1", 0)
    try:
        assert (await _get(srv.port, client_ctx)).startswith(b"HTTP/1.1 200")
        assert seen == ["/hello"]
    finally:
        srv.close()
        listener.abort_handshakes()
        await runner.cleanup()
