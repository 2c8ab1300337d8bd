"""exec, attach and logs over WebSocket with each subprotocol, driven by a raw aiohttp WebSocket client.

What each must look like on the wire is upstream's (apimachinery wsstream, the kubelet's remotecommand):
`channel.k8s.io` sends nothing on the error channel for a success and plain text for a failure; the v4
variants a JSON Status either way; the base64 variants carry the channel as an ASCII digit and base64 text;
logs are plain binary or base64 messages.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import ssl
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
from joinstack import GUARD, POD, HostBackend, Stack, TestAgent, joined, pod, serve_join, set_running

LOG = (b"2026-11-22T10:00:00.000000001Z stdout F first line\n"
       b"2026-11-22T10:00:01.000000000Z stdout F second line\n")
EXEC = "/api/v1/namespaces/default/pods/p/exec"


@dataclass
class Env:
    stack: Stack
    http: aiohttp.ClientSession
    ssl: ssl.SSLContext

    async def ws(self, path: str, query: list[tuple[str, str]], protocols: tuple[str, ...]
                 ) -> aiohttp.ClientWebSocketResponse:
        headers = {"Authorization": f"Bearer {self.stack.creds.admin_token}"}
        return await self.http.ws_connect(f"{self.stack.url}{path}", params=query, protocols=protocols,
                                          headers=headers, ssl=self.ssl,
                                          timeout=aiohttp.ClientWSTimeout(ws_close=GUARD))


@pytest.fixture
async def env(tmp_path: Path, free_port: int) -> AsyncIterator[Env]:
    async with serve_join(tmp_path, free_port) as stack:
        backend = HostBackend()
        log = tmp_path / "c-0.log"
        log.write_bytes(LOG)
        backend.logs[("p", "c")] = log
        await stack.resources.create(POD, "default", pod("p", node="n1"))
        await set_running(stack.resources, "default", "p")
        ctx = ssl.create_default_context(cadata=stack.creds.ca_pem.decode())
        try:
            async with joined(stack, "n1", TestAgent(), backend), aiohttp.ClientSession() as http:
                yield Env(stack, http, ctx)
        finally:
            await backend.kill_all()


def _cmd(script: str) -> list[tuple[str, str]]:
    return [("command", "sh"), ("command", "-c"), ("command", script), ("stdout", "1"), ("stderr", "1")]


async def _collect(ws: aiohttp.ClientWebSocketResponse, b64: bool) -> list[tuple[int, bytes]]:
    """Every (channel, payload) the server sent until it closed."""
    out: list[tuple[int, bytes]] = []
    async with asyncio.timeout(GUARD):
        async for msg in ws:
            if b64:
                assert msg.type == aiohttp.WSMsgType.TEXT, msg
                out.append((ord(msg.data[0]) - ord("0"), base64.b64decode(msg.data[1:])))
            else:
                assert msg.type == aiohttp.WSMsgType.BINARY, msg
                out.append((msg.data[0], msg.data[1:]))
    return out


def _channel(frames: list[tuple[int, bytes]], n: int) -> bytes:
    return b"".join(p for c, p in frames if c == n)


@pytest.mark.parametrize("protocol", ["v4.channel.k8s.io", "v4.base64.channel.k8s.io", "v5.channel.k8s.io"])
async def test_v4_family_ends_with_a_json_status_on_success_and_failure(env: Env, protocol: str) -> None:
    b64 = "base64" in protocol
    ws = await env.ws(EXEC, _cmd("echo out; echo err >&2"), (protocol,))
    assert ws.protocol == protocol
    frames = await _collect(ws, b64)
    assert frames[0] == (1, b"")  # the kubelet's "stream established" message on the lowest output channel
    assert _channel(frames, 1) == b"out\n" and _channel(frames, 2) == b"err\n"
    assert orjson.loads(_channel(frames, 3)) == {"metadata": {}, "status": "Success"}

    ws = await env.ws(EXEC, _cmd("exit 7"), (protocol,))
    status: dict[str, Any] = orjson.loads(_channel(await _collect(ws, b64), 3))
    assert status["status"] == "Failure" and status["reason"] == "NonZeroExitCode"
    assert status["details"]["causes"] == [{"reason": "ExitCode", "message": "7"}]


@pytest.mark.parametrize("protocol", ["channel.k8s.io", "base64.channel.k8s.io"])
async def test_pre_v4_sends_nothing_on_success_and_plain_text_on_failure(env: Env, protocol: str) -> None:
    b64 = protocol.startswith("base64")
    ws = await env.ws(EXEC, _cmd("echo out"), (protocol,))
    assert ws.protocol == protocol
    frames = await _collect(ws, b64)
    assert _channel(frames, 1) == b"out\n"
    assert all(c != 3 for c, _ in frames)  # a success leaves the error channel silent

    ws = await env.ws(EXEC, _cmd("exit 3"), (protocol,))
    assert _channel(await _collect(ws, b64), 3) == b"command terminated with non-zero exit code: exit status 3"


async def test_client_order_picks_the_subprotocol_and_base64_stdin_reaches_the_process(env: Env) -> None:
    query = [("command", "cat"), ("stdin", "1"), ("stdout", "1")]
    ws = await env.ws(EXEC, query, ("base64.channel.k8s.io", "v4.channel.k8s.io"))
    assert ws.protocol == "base64.channel.k8s.io"
    first = await ws.receive(timeout=GUARD)
    assert first.data == "1"  # channel 1, empty payload
    await ws.send_str("0" + base64.b64encode(b"hello\n").decode())
    msg = await ws.receive(timeout=GUARD)
    assert msg.data[0] == "1" and base64.b64decode(msg.data[1:]) == b"hello\n"
    await ws.close()


@pytest.mark.parametrize("protocol", ["v4.channel.k8s.io", "v5.channel.k8s.io", "channel.k8s.io"])
async def test_stdin_in_text_frames_reaches_the_process(env: Env, protocol: str) -> None:
    """The frame's type does not matter, only the subprotocol (upstream's wsstream reads both alike): the Python
    client writes `str` stdin as a text frame whose first character is the raw channel byte."""
    query = [("command", "sh"), ("stdin", "1"), ("stdout", "1"), ("stderr", "1")]
    ws = await env.ws(EXEC, query, (protocol,))
    assert ws.protocol == protocol
    await ws.send_str("\x00echo text frame \u00e9\n")  # channel 0, then UTF-8 text
    await ws.send_bytes(b"\x00echo binary frame\n")
    await ws.send_str("\x00exit\n")
    frames = await _collect(ws, False)
    assert _channel(frames, 1) == "text frame \u00e9\nbinary frame\n".encode()


async def test_v5_close_of_stdin_ends_the_process_input(env: Env) -> None:
    """v5's CLOSE message `[255, 0]` is EOF on the process's stdin: `cat` then exits 0."""
    ws = await env.ws(EXEC, [("command", "cat"), ("stdin", "1"), ("stdout", "1")], ("v5.channel.k8s.io",))
    assert ws.protocol == "v5.channel.k8s.io"
    await ws.send_str("\x00before close\n")
    await ws.send_bytes(bytes([255, 0]))
    frames = await _collect(ws, False)
    assert _channel(frames, 1) == b"before close\n"
    assert orjson.loads(_channel(frames, 3)) == {"metadata": {}, "status": "Success"}


@pytest.mark.parametrize("protocol", ["binary.k8s.io", "base64.binary.k8s.io"])
async def test_logs_over_websocket(env: Env, protocol: str) -> None:
    ws = await env.ws("/api/v1/namespaces/default/pods/p/log", [], (protocol,))
    assert ws.protocol == protocol
    data = b""
    async for msg in ws:
        data += base64.b64decode(msg.data) if protocol.startswith("base64") else msg.data
    assert data == b"first line\nsecond line\n"


async def test_a_log_reader_that_goes_away_is_no_server_error(env: Env, tmp_path: Path,
                                                             caplog: pytest.LogCaptureFixture) -> None:
    """`kubectl logs p | head`: the client closes mid-stream; the server must end the stream quietly."""
    line = b"2026-11-22T10:00:02.000000000Z stdout F " + b"x" * 1000 + b"\n"
    (tmp_path / "c-0.log").write_bytes(LOG + line * 20000)  # ~20 MB: far more than the socket buffers
    headers = {"Authorization": f"Bearer {env.stack.creds.admin_token}"}
    async with env.http.get(f"{env.stack.url}/api/v1/namespaces/default/pods/p/log", params={"follow": "true"},
                            headers=headers, ssl=env.ssl) as resp:
        assert resp.status == 200
        assert (await resp.content.readexactly(64)).startswith(b"first line")
        resp.connection.transport.abort()  # type: ignore[union-attr]
    await asyncio.sleep(1.0)
    errors = [r for r in caplog.records if r.levelno >= 40]
    assert not errors, [r.getMessage() for r in errors]


# -- port-forward's channel protocol (the kubelet's websocket port-forward) --

PORTFORWARD = "/api/v1/namespaces/default/pods/p/portforward"


@contextlib.asynccontextmanager
async def _echo_server() -> AsyncIterator[int]:
    """A loopback TCP server echoing what it reads until the client closes."""
    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
        writer.close()
    server = await asyncio.start_server(echo, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        server.close()
        await server.wait_closed()


async def _frame(ws: aiohttp.ClientWebSocketResponse, b64: bool) -> tuple[int, bytes]:
    msg = await ws.receive(timeout=GUARD)
    if b64:
        assert msg.type == aiohttp.WSMsgType.TEXT, msg
        return ord(msg.data[0]) - ord("0"), base64.b64decode(msg.data[1:])
    assert msg.type == aiohttp.WSMsgType.BINARY, msg
    return msg.data[0], msg.data[1:]


@pytest.mark.parametrize(("offered", "chosen"), [
    (("v5.channel.k8s.io", "v4.channel.k8s.io"), "v4.channel.k8s.io"),  # what the Python client offers
    (("v4.base64.channel.k8s.io", "v4.channel.k8s.io"), "v4.base64.channel.k8s.io"),
    ((), None),  # none asked for: binary
])
async def test_portforward_channels_carry_the_port_first_then_data(env: Env, offered: tuple[str, ...],
                                                                   chosen: str | None) -> None:
    """Port i: channel 2i data, 2i+1 errors; each channel's first message is the port, 2 bytes little-endian."""
    b64 = chosen == "v4.base64.channel.k8s.io"
    async with _echo_server() as a, _echo_server() as b:
        ws = await env.ws(PORTFORWARD, [("ports", f"{a},{b}")], offered)
        assert ws.protocol == chosen
        firsts = [await _frame(ws, b64) for _ in range(4)]
        assert sorted(firsts) == [(0, a.to_bytes(2, "little")), (1, a.to_bytes(2, "little")),
                                  (2, b.to_bytes(2, "little")), (3, b.to_bytes(2, "little"))]
        if b64:
            await ws.send_str("2" + base64.b64encode(b"to b").decode())
            await ws.send_bytes(b"0" + base64.b64encode(b"to a"))  # the frame type does not matter
        else:
            await ws.send_str("\x02to b")  # a text frame with the raw channel byte, as the Python client's
            await ws.send_bytes(b"\x00to a")
        if not b64:
            await ws.send_bytes(b"\x01ignored: an error channel is the server's")
            await ws.send_bytes(b"\x09ignored: no such channel")
        got = {await _frame(ws, b64), await _frame(ws, b64)}
        assert got == {(0, b"to a"), (2, b"to b")}
        await ws.close()


async def test_portforward_to_a_closed_port_reports_on_its_error_channel(env: Env) -> None:
    async with _echo_server() as closed:
        pass
    async with _echo_server() as open_:
        ws = await env.ws(PORTFORWARD, [("ports", f"{open_},{closed}")], ("v4.channel.k8s.io",))
        frames = [await _frame(ws, False) for _ in range(5)]
        errors = [p for c, p in frames if c == 3 and len(p) > 2]
        assert len(errors) == 1, frames
        text = errors[0].decode()
        assert text.startswith(f"error forwarding port {closed} to pod p, uid "), text
        assert f"localhost:{closed}" in text
        await ws.send_bytes(b"\x00still works")
        assert await _frame(ws, False) == (0, b"still works")
        await ws.close()


def _upgrade_headers(env: Env, protocols: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {env.stack.creds.admin_token}", "Connection": "Upgrade",
            "Upgrade": "websocket", "Sec-WebSocket-Version": "13",
            "Sec-WebSocket-Key": base64.b64encode(b"0123456789abcdef").decode(), "Sec-WebSocket-Protocol": protocols}


async def test_portforward_refuses_subprotocols_the_kubelet_does_not_serve(env: Env) -> None:
    # upstream: wsstream's handshake fails, x/net/websocket answers a bare 403 and closes; kube-apiserver relays it
    headers = {"Authorization": f"Bearer {env.stack.creds.admin_token}"}
    with pytest.raises(aiohttp.WSServerHandshakeError) as e:
        await env.http.ws_connect(f"{env.stack.url}{PORTFORWARD}", params=[("ports", "80")],
                                  protocols=("v5.channel.k8s.io", "channel.k8s.io"), headers=headers, ssl=env.ssl)
    assert e.value.status == 403
    async with env.http.get(f"{env.stack.url}{PORTFORWARD}", params=[("ports", "80")], ssl=env.ssl,
                            headers=_upgrade_headers(env, "v5.channel.k8s.io")) as resp:
        body = await resp.read()
    assert (resp.status, body) == (403, b""), body
    assert "Content-Type" not in resp.headers and resp.headers.get("Connection", "").lower() == "close"
    # the kubelet reads ?ports= first: a bad one stays a 400 Status
    async with env.http.get(f"{env.stack.url}{PORTFORWARD}", params=[("ports", "x")], ssl=env.ssl,
                            headers=_upgrade_headers(env, "v5.channel.k8s.io")) as resp:
        assert resp.status == 400 and (await resp.json())["reason"] == "BadRequest"


async def test_exec_refuses_subprotocols_the_kubelet_does_not_serve(env: Env) -> None:
    query = [("command", "true"), ("stdout", "1")]
    async with env.http.get(f"{env.stack.url}{EXEC}", params=query, ssl=env.ssl,
                            headers=_upgrade_headers(env, "v6.channel.k8s.io, nonsense")) as resp:
        assert (resp.status, await resp.read()) == (403, b"")
    ws = await env.ws(EXEC, query, ("v6.channel.k8s.io", "v4.channel.k8s.io"))  # one it serves among them
    assert ws.protocol == "v4.channel.k8s.io"
    await ws.close()


def _awaiting(name: str) -> bool:
    """Whether some task of this loop is (transitively) inside a coroutine function called `name`."""
    for task in asyncio.all_tasks():
        coro: Any = task.get_coro()
        while coro is not None and hasattr(coro, "cr_code"):
            if coro.cr_code.co_name == name:
                return True
            coro = coro.cr_await
    return False


async def test_portforward_handler_ends_when_the_client_goes_away(env: Env) -> None:
    """The client closing its websocket ends the handler, though the pod's connection never closed first."""
    async with _echo_server() as port:
        ws = await env.ws(PORTFORWARD, [("ports", str(port))], ("v4.channel.k8s.io",))
        for _ in range(2):
            await _frame(ws, False)
        await ws.send_bytes(b"\x00hello")
        assert await _frame(ws, False) == (0, b"hello")
        assert _awaiting("_serve_channels")
        await ws.close()
        async with asyncio.timeout(GUARD):
            while _awaiting("_serve_channels"):
                await asyncio.sleep(0.05)
