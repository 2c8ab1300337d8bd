"""`serve` + `run_until_signalled` in a real process with a minimal app: TLS as configured, clean SIGTERM.

The API app of lite is replaced by a tiny one here so the listener, credentials and shutdown path are tested
on their own; tests/e2e drives the full server.
"""

from __future__ import annotations

import signal
import socket
import ssl
import subprocess
import sys
import time
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
from liteproc import LiteServer

SCRIPT = r'''
import asyncio, sys
from pathlib import Path
from aiohttp import web
from lite.server.config import ServerConfig
from lite.server.certs import ensure_credentials, server_ssl_context
from lite.server.main import Server, serve, run_until_signalled

async def readyz(request):
    return web.Response(text="ok")

async def stream(request):  # a request that never ends on its own, like a watch
    resp = web.StreamResponse()
    await resp.prepare(request)
    await resp.write(b"started\n")
    await asyncio.Event().wait()

async def main():
    cfg = ServerConfig.create(sys.argv[1], bind_address="127.0.0.1", port=int(sys.argv[2]))
    creds = ensure_credentials(cfg)
    app = web.Application()
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/stream", stream)
    server = Server(cfg, creds, app, server_ssl_context(creds))
    async def ticker():
        while True:
            await asyncio.sleep(0.05)
    server.background.append(("ticker", ticker))
    await serve(server)

sys.exit(run_until_signalled(main))
'''


@pytest.fixture
def minimal(data_dir: Path, free_port: int) -> Iterator[LiteServer]:
    srv = LiteServer(data_dir, free_port, command=[sys.executable, "-c", SCRIPT, str(data_dir), str(free_port)])
    # The script takes its own argv; LiteServer appends `server ...` flags, which it ignores.
    srv.start()
    srv.wait_ready(30)
    yield srv
    srv.kill()


def test_tls_is_verified_and_offers_http11_only(minimal: LiteServer) -> None:
    ctx = minimal.ssl_context()
    ctx.set_alpn_protocols(["h2", "http/1.1"])
    with socket.create_connection(("127.0.0.1", minimal.port)) as raw, \
            ctx.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
        assert tls.selected_alpn_protocol() == "http/1.1"
        assert tls.version() in ("TLSv1.2", "TLSv1.3")
    old = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    old.check_hostname, old.verify_mode = False, ssl.CERT_NONE
    with warnings.catch_warnings():  # setting TLS 1.1 is deprecated, which is the point here
        warnings.simplefilter("ignore", DeprecationWarning)
        old.minimum_version = ssl.TLSVersion.TLSv1
        old.maximum_version = ssl.TLSVersion.TLSv1_1
    with socket.create_connection(("127.0.0.1", minimal.port)) as raw, pytest.raises(ssl.SSLError):
        old.wrap_socket(raw, server_hostname="127.0.0.1")


def test_an_unknown_ca_is_rejected(minimal: LiteServer) -> None:
    ctx = ssl.create_default_context()  # system CAs only
    with socket.create_connection(("127.0.0.1", minimal.port)) as raw, \
            pytest.raises(ssl.SSLCertVerificationError):
        ctx.wrap_socket(raw, server_hostname="127.0.0.1")


def test_sigterm_with_an_open_stream_exits_cleanly(minimal: LiteServer) -> None:
    ctx = minimal.ssl_context()
    with socket.create_connection(("127.0.0.1", minimal.port)) as raw, \
            ctx.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
        tls.sendall(b"GET /stream HTTP/1.1\r\nHost: x\r\n\r\n")
        assert b"started" in _read_until(tls, b"started")
        assert minimal.stop(timeout=15) == 0
    assert "Traceback" not in minimal.log_tail(200)


def _read_until(sock: ssl.SSLSocket, marker: bytes) -> bytes:
    buf = b""
    deadline = time.monotonic() + 10
    while marker not in buf and time.monotonic() < deadline:
        buf += sock.recv(4096)
    return buf


def test_second_signal_does_not_break_shutdown(minimal: LiteServer) -> None:
    assert minimal.proc is not None
    minimal.proc.send_signal(signal.SIGINT)
    minimal.proc.send_signal(signal.SIGTERM)
    assert minimal.proc.wait(15) == 0


def test_port_in_use_is_a_clean_error(data_dir: Path, free_port: int) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", free_port))
        s.listen()
        out = subprocess.run([sys.executable, "-m", "lite.cli.main", "server", "--data-dir", str(data_dir),
                              "--bind-address", "127.0.0.1", "--https-listen-port", str(free_port)],
                             capture_output=True, text=True, timeout=60)
    assert out.returncode == 1, out.stderr
    assert "address already in use" in out.stderr.lower() and "Traceback" not in out.stderr
