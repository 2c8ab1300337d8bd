"""Logs, exec and port-forward through the join tunnel, driven by the real kubectl and the Python client.

The node agent is a real JoinSession with a test-only HostBackend: CRI log files written here, exec as plain
host subprocesses, port connections to a loopback TCP server started here. It joins over TLS, or (tests
parametrized with env "in-process") in process, as the agent `lite server` embeds does (`local_join`).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from joinstack import GUARD, POD, HostBackend, Stack, TestAgent, joined, pod, serve_join, set_running
from liteproc import find_free_port

from lite.agent.session import JoinSession
from lite.server.join.routes import local_join

KUBECTL = "/usr/bin/kubectl"
pytestmark = pytest.mark.skipif(not os.path.exists(KUBECTL), reason="kubectl is not installed")

LOG = (b"2026-11-22T10:00:00.000000001Z stdout F first line\n"
       b"2026-11-22T10:00:01.500000000Z stderr F an error\n"
       b"2026-11-22T10:00:02.000000000Z stdout P part one, \n"
       b"2026-11-22T10:00:02.100000000Z stdout F part two\n"
       b"2026-11-22T10:00:03.000000000Z stdout F last line\n")


BIG = bytes(range(256)) * (6 * 4096)  # 6 MiB


@dataclass
class Env:
    stack: Stack
    backend: HostBackend
    tmp: Path
    session: JoinSession

    async def kubectl(self, *args: str, stdin: bytes | None = None, env: dict[str, str] | None = None
                      ) -> tuple[int, str, str]:
        proc = await asyncio.create_subprocess_exec(
            KUBECTL, "--kubeconfig", str(self.stack.kubeconfig), "--cache-dir", str(self.tmp / "kcache"),
            "-n", "default", *args, stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env={**os.environ, **(env or {})})
        async with asyncio.timeout(60):
            out, err = await proc.communicate(stdin)
        assert proc.returncode is not None
        return proc.returncode, out.decode(), err.decode()


@pytest.fixture
async def env(request: pytest.FixtureRequest, tmp_path: Path, free_port: int) -> AsyncIterator[Env]:
    async with serve_join(tmp_path, free_port) as stack:
        assert stack.issuer is not None
        dial = local_join(stack.hub, stack.issuer) if getattr(request, "param", "tls") == "in-process" else None
        backend = HostBackend()
        log = tmp_path / "c-0.log"
        log.write_bytes(LOG)
        prev = tmp_path / "c-prev.log"
        prev.write_bytes(b"2026-11-22T09:00:00Z stdout F from the previous instance\n")
        backend.logs[("p", "c")] = log
        backend.previous[("p", "c")] = prev
        await stack.resources.create(POD, "default", pod("p", node="n1"))
        await set_running(stack.resources, "default", "p", restarted=True)
        try:
            async with joined(stack, "n1", TestAgent(), backend, dial=dial) as session:
                yield Env(stack, backend, tmp_path, session)
        finally:
            await backend.kill_all()


async def test_kubectl_logs_with_options(env: Env) -> None:
    code, out, err = await env.kubectl("logs", "p")
    assert code == 0, err
    assert out == "first line\nan error\npart one, part two\nlast line\n"
    code, out, _ = await env.kubectl("logs", "p", "--tail=2")
    assert out == "part two\nlast line\n"
    code, out, _ = await env.kubectl("logs", "p", "--timestamps", "--tail=1")
    assert out == "2026-11-22T10:00:03.000000000Z last line\n"
    code, out, _ = await env.kubectl("logs", "p", "--limit-bytes=8")
    assert out == "first li"
    code, out, _ = await env.kubectl("logs", "p", "--since-time=2026-11-22T10:00:01Z")
    assert out == "an error\npart one, part two\nlast line\n"
    code, out, _ = await env.kubectl("logs", "p", "-c", "c", "--previous")
    assert out == "from the previous instance\n"
    await env.stack.resources.create(POD, "default", pod("fresh", node="n1"))
    await set_running(env.stack.resources, "default", "fresh")
    code, _, err = await env.kubectl("logs", "fresh", "--previous")
    assert code != 0 and 'previous terminated container "c" in pod "fresh" not found' in err
    code, _, err = await env.kubectl("logs", "p", "-c", "nope")
    assert code != 0 and "container nope is not valid for pod p" in err


async def test_kubectl_logs_follow_until_the_container_stops(env: Env) -> None:
    env.backend.still_running = True
    log = env.backend.logs[("p", "c")]
    proc = await asyncio.create_subprocess_exec(
        KUBECTL, "--kubeconfig", str(env.stack.kubeconfig), "--cache-dir", str(env.tmp / "kcache"), "-n",
        "default", "logs", "-f", "--tail=1", "p", stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    assert proc.stdout is not None
    async with asyncio.timeout(GUARD):
        assert await proc.stdout.readline() == b"last line\n"
        with open(log, "ab") as f:
            f.write(b"2026-11-22T10:00:04Z stdout F appended\n2026-11-22T10:00:05Z stdout P half")
        assert await proc.stdout.readline() == b"appended\n"
        with open(log, "ab") as f:
            f.write(b"\n2026-11-22T10:00:06Z stdout F done\n")
        env.backend.still_running = False
        rest = await proc.stdout.read()
        assert await proc.wait() == 0
    assert rest == b"halfdone\n"


@pytest.mark.parametrize("websockets", ["true", "false"])
async def test_kubectl_exec_exit_code_stdin_and_stderr(env: Env, websockets: str) -> None:
    """WebSocket v5 (1.30+ default), and SPDY on the upgraded connection (1.29, or websockets off)."""
    mode = {"KUBECTL_REMOTE_COMMAND_WEBSOCKETS": websockets}
    code, out, err = await env.kubectl("exec", "p", "--", "sh", "-c", "exit 3", env=mode)
    assert code == 3, err
    assert "command terminated with exit code 3" in err
    code, out, err = await env.kubectl("exec", "-i", "p", "--", "sh", "-c", "tr a-z A-Z", env=mode)
    assert code == 0, err
    code, out, err = await env.kubectl("exec", "-i", "p", "--", "sh", "-c", "tr a-z A-Z",
                                       stdin=b"hello from stdin\n", env=mode)
    assert (code, out) == (0, "HELLO FROM STDIN\n"), err
    code, out, err = await env.kubectl("exec", "p", "--", "sh", "-c", "echo out; echo err >&2", env=mode)
    assert (code, out, err) == (0, "out\n", "err\n")


async def test_exec_refused_for_a_pod_that_is_not_running(env: Env) -> None:
    await env.stack.resources.create(POD, "default", pod("pending", node="n1"))
    code, _, err = await env.kubectl("exec", "pending", "--", "true")
    assert code != 0 and "not running" in err
    await env.stack.resources.create(POD, "default", pod("elsewhere", node="n2"))
    await set_running(env.stack.resources, "default", "elsewhere")
    code, _, err = await env.kubectl("exec", "elsewhere", "--", "true")
    assert code != 0 and 'node agent of node "n2" is not connected' in err
    code, _, err = await env.kubectl("logs", "elsewhere")
    assert code != 0 and 'node agent of node "n2" is not connected' in err


async def test_kubectl_attach_with_stdin(env: Env) -> None:
    code, out, err = await env.kubectl("attach", "-i", "p", stdin=b"typed in\n")
    assert code == 0, err
    assert out == "attached\ntyped in\n"


@contextlib.asynccontextmanager
async def echo_server() -> AsyncIterator[int]:
    """A loopback TCP server answering `echo:<what it read>` and closing."""
    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        data = await reader.read(65536)
        writer.write(b"echo:" + (BIG if data == b"big" else data))
        await writer.drain()
        writer.close()
    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        server.close()
        await server.wait_closed()


async def _roundtrip(port: int, payload: bytes) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(payload)
    await writer.drain()
    data = await reader.read()
    writer.close()
    return data


@pytest.mark.parametrize(("env", "websockets"), [("tls", "true"), ("tls", "false"), ("in-process", "true")],
                         indirect=["env"])
async def test_kubectl_port_forward(env: Env, websockets: str) -> None:
    """SPDY tunnelled in a websocket (1.31+ default), and raw SPDY on the upgraded connection (1.29/1.30)."""
    local = find_free_port()
    async with echo_server() as remote:
        proc = await asyncio.create_subprocess_exec(
            KUBECTL, "--kubeconfig", str(env.stack.kubeconfig), "--cache-dir", str(env.tmp / "kcache"), "-n",
            "default", "port-forward", "pod/p", f"{local}:{remote}", "--address", "127.0.0.1",
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            env={**os.environ, "KUBECTL_PORT_FORWARD_WEBSOCKETS": websockets})
        assert proc.stdout is not None
        try:
            async with asyncio.timeout(GUARD):
                line = await proc.stdout.readline()
                assert b"Forwarding from 127.0.0.1" in line, (line, await proc.stderr.read())  # type: ignore[union-attr]
                assert await _roundtrip(local, b"one") == b"echo:one"
                assert await _roundtrip(local, b"two" * 10000) == b"echo:" + b"two" * 10000
                # Much more than the stream window: the agent must wait for acknowledgements, not stall.
                big = await _roundtrip(local, b"big")
                assert big == b"echo:" + BIG
        finally:
            with contextlib.suppress(ProcessLookupError):
                proc.terminate()
            await proc.wait()


async def test_kubectl_port_forward_to_a_closed_port_reports_the_error(env: Env) -> None:
    local = find_free_port()
    async with echo_server() as remote:
        pass  # now closed
    proc = await asyncio.create_subprocess_exec(
        KUBECTL, "--kubeconfig", str(env.stack.kubeconfig), "--cache-dir", str(env.tmp / "kcache"), "-n",
        "default", "port-forward", "pod/p", f"{local}:{remote}", "--address", "127.0.0.1",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    try:
        async with asyncio.timeout(GUARD):
            assert b"Forwarding from" in await proc.stdout.readline()
            assert await _roundtrip(local, b"x") == b""
            err = b""
            while not re.search(rb"connect|refused", err):
                err += await proc.stderr.read(4096)
    finally:
        proc.terminate()
        await proc.wait()


def _python_client(stack: Stack):  # type: ignore[no-untyped-def]
    kubernetes = pytest.importorskip("kubernetes")
    return kubernetes.client.CoreV1Api(kubernetes.config.new_client_from_config(config_file=str(stack.kubeconfig)))


async def test_python_client_exec_and_portforward(env: Env) -> None:
    from kubernetes.stream import portforward, stream

    v1 = _python_client(env.stack)

    def run_exec(command: list[str]) -> tuple[str, int]:
        # Without _preload_content=False the client never closes its websocket (a ResourceWarning here).
        resp = stream(v1.connect_get_namespaced_pod_exec, "p", "default", command=command, stderr=True,
                      stdin=False, stdout=True, tty=False, _preload_content=False)
        try:
            resp.run_forever(timeout=GUARD)
            code = int(resp.returncode)  # before read_all, which would consume the status channel too
            return "".join(resp.read_all()), code
        finally:
            resp.close()
            # websocket-client skips closing its socket once the server closed first: close it ourselves.
            resp.sock.shutdown()
    out, code = await asyncio.to_thread(run_exec, ["sh", "-c", "echo hi; echo there >&2"])
    assert "hi\n" in out and "there\n" in out and code == 0
    assert (await asyncio.to_thread(run_exec, ["sh", "-c", "exit 5"]))[1] == 5

    async with echo_server() as remote:
        def run_pf() -> bytes:
            pf = portforward(v1.connect_get_namespaced_pod_portforward, "p", "default", ports=str(remote))
            sock = pf.socket(remote)
            sock.settimeout(GUARD)
            sock.sendall(b"python")
            data = b""
            while chunk := sock.recv(4096):
                data += chunk
            sock.close()
            pf.close()
            pf.websocket.shutdown()  # as above: the library leaves it open after the server's close
            return data
        assert await asyncio.to_thread(run_pf) == b"echo:python"


async def test_kubectl_top_from_agent_metrics(env: Env) -> None:
    from lite import wire

    env.session.post(wire.Metrics("2026-11-22T00:00:00Z", "30s", {"cpu": "250m", "memory": "1Gi"},
                                   [{"namespace": "default", "name": "p", "containers": [
                                       {"name": "c", "usage": {"cpu": "1234567n", "memory": "10240Ki"}}]}]))
    async with asyncio.timeout(GUARD):
        while not await env.stack.hub.node_metrics(""):
            await asyncio.sleep(0.02)
    code, out, err = await env.kubectl("top", "pod", "p")
    assert code == 0, err
    assert re.search(r"^p\s+2m\s+10Mi", out, re.M), out
    code, out, err = await env.kubectl("top", "node")
    assert code == 0, err
    assert re.search(r"^n1\s+250m\s+\S+\s+1024Mi", out, re.M), out


@pytest.mark.parametrize("env", ["tls", "in-process"], indirect=True)
async def test_exec_ends_with_an_error_when_the_agent_drops(env: Env) -> None:
    proc = await asyncio.create_subprocess_exec(
        KUBECTL, "--kubeconfig", str(env.stack.kubeconfig), "--cache-dir", str(env.tmp / "kcache"), "-n",
        "default", "exec", "p", "--", "sh", "-c", "echo started; exec sleep 60",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    try:
        async with asyncio.timeout(GUARD):
            assert await proc.stdout.readline() == b"started\n"
            server_side = env.stack.hub.session("n1")
            assert server_side is not None
            await server_side.close()
            err = await proc.stderr.read()
            assert await proc.wait() != 0
        assert b"node agent disconnected" in err
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
