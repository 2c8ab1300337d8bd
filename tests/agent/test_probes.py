"""Probe handlers against real loopback servers, and kubelet's threshold/initial-result semantics."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from lite.agent.probes import ProbeSpec, ProbeWorker, Target, probes_of, run_handler


@pytest.fixture
async def http_server() -> AsyncIterator[tuple[int, list[str]]]:
    seen: list[str] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = (await reader.readuntil(b"\r\n\r\n")).decode()
        seen.append(head)
        path = head.split()[1]
        code = {"/ok": 200, "/redirect": 302, "/fail": 500}.get(path, 404)
        writer.write(f"HTTP/1.1 {code} X\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".encode())
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    yield port, seen
    server.close()
    await server.wait_closed()


async def test_http_get(http_server: tuple[int, list[str]]) -> None:
    port, seen = http_server
    t = Target("127.0.0.1", {"web": port})
    assert await run_handler({"httpGet": {"path": "/ok", "port": "web",
                                          "httpHeaders": [{"name": "X-Probe", "value": "1"}]}}, t, 2) == (True, "")
    assert "X-Probe: 1" in seen[-1] and "User-Agent: kube-probe/" in seen[-1]
    assert (await run_handler({"httpGet": {"path": "/redirect", "port": port}}, t, 2))[0] is True
    ok, msg = await run_handler({"httpGet": {"path": "/fail", "port": port}}, t, 2)
    assert not ok and msg == "HTTP probe failed with statuscode: 500"
    ok, msg = await run_handler({"httpGet": {"path": "/", "port": "nope"}}, t, 2)
    assert not ok and "not found" in msg


async def test_tcp_and_exec(http_server: tuple[int, list[str]]) -> None:
    port, _ = http_server

    async def exec_fn(argv: list[str], limit: float) -> tuple[int, str]:
        proc = await asyncio.create_subprocess_exec(*argv, stdout=asyncio.subprocess.PIPE)
        out, _ = await proc.communicate()
        return proc.returncode or 0, out.decode()

    t = Target("127.0.0.1", {}, exec_fn)
    assert (await run_handler({"tcpSocket": {"port": port}}, t, 2))[0] is True
    closed = Target("127.0.0.1", {})
    probe_sock = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    free = probe_sock.sockets[0].getsockname()[1]
    probe_sock.close()
    await probe_sock.wait_closed()
    assert (await run_handler({"tcpSocket": {"port": free}}, closed, 2))[0] is False
    assert await run_handler({"exec": {"command": ["true"]}}, t, 2) == (True, "")
    ok, msg = await run_handler({"exec": {"command": ["sh", "-c", "echo boom; exit 4"]}}, t, 2)
    assert not ok and "exited with 4" in msg and "boom" in msg


def test_thresholds_and_initial_results() -> None:
    t = Target("127.0.0.1", {})
    ready = ProbeWorker(ProbeSpec("readiness", {}, success_threshold=2, failure_threshold=3), t, lambda s, ok: None)
    assert ready.result is False
    assert ready.observe(True) is False and ready.observe(True) is True and ready.result is True
    assert [ready.observe(False) for _ in range(3)] == [False, False, True] and ready.result is False
    live = ProbeWorker(ProbeSpec("liveness", {}), t, lambda s, ok: None)
    assert live.result is None
    assert live.observe(False) is False and live.observe(True) is True  # a success resets the failure streak
    specs = probes_of({"livenessProbe": {"exec": {"command": ["x"]}, "periodSeconds": 3, "initialDelaySeconds": 2},
                       "startupProbe": {"tcpSocket": {"port": 1}}})
    assert [(s.kind, s.period, s.initial_delay, s.failure_threshold) for s in specs] == \
        [("startup", 10, 0, 3), ("liveness", 3, 2, 3)]


async def test_worker_flips_and_waits_for_gate() -> None:
    flips: list[bool] = []
    results = iter([False, True, True])

    async def exec_fn(argv: list[str], limit: float) -> tuple[int, str]:
        return (0 if next(results, True) else 1), ""

    gate = asyncio.Event()
    w = ProbeWorker(ProbeSpec("readiness", {"exec": {"command": ["x"]}}, period=0.01), Target("", {}, exec_fn),
                    lambda s, ok: flips.append(ok), gate)
    task = asyncio.create_task(w.run())
    await asyncio.sleep(0.05)
    assert flips == []  # gated (startup not done yet)
    gate.set()
    for _ in range(100):
        if flips:
            break
        await asyncio.sleep(0.01)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert flips == [True]


async def test_startup_worker_stops_after_success() -> None:
    calls: list[int] = []

    async def exec_fn(argv: list[str], limit: float) -> tuple[int, str]:
        calls.append(1)
        return 0, ""

    w = ProbeWorker(ProbeSpec("startup", {"exec": {"command": ["x"]}}, period=0.01), Target("", {}, exec_fn),
                    lambda s, ok: None)
    await asyncio.wait_for(w.run(), 5)  # returns by itself
    assert w.result is True and len(calls) == 1
