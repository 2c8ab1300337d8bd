"""`lite agent`'s cluster CA (`lite.cli.agentcmd.cluster_ca`): held ones are used without any server; a node that
holds none waits for its server (one line while it is away) instead of exiting, then keeps what it verified.
A real aiohttp server on 127.0.0.1 serves `/cacerts`."""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
from aiohttp import web
from liteproc import find_free_port

from lite.agent import trust
from lite.cli.agentcmd import cluster_ca

PEM = b"-----BEGIN CERTIFICATE-----\nMIIBcluster\n-----END CERTIFICATE-----\n"
TOKEN = f"K10{trust.sha256_hex(PEM)}::server:secret"


@pytest.fixture
async def cacerts() -> AsyncIterator[Callable[[bytes], web.AppRunner]]:
    """start(pem) → a runner whose site serves `pem` at /cacerts on `url` (started by the caller)."""
    runners: list[web.AppRunner] = []

    def make(pem: bytes) -> web.AppRunner:
        async def handler(_: web.Request) -> web.Response:
            return web.Response(body=pem)

        app = web.Application()
        app.router.add_get("/cacerts", handler)
        runner = web.AppRunner(app)
        runners.append(runner)
        return runner

    yield make
    for r in runners:
        await r.cleanup()


async def _until(check: Callable[[], bool]) -> None:
    for _ in range(500):
        if check():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("timed out")


async def test_a_held_ca_needs_no_server(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    trust.keep(tmp_path, PEM)
    caplog.set_level(logging.DEBUG, "lite.agent")
    # nothing listens on port 1: any attempt would fail (and be logged)
    assert await cluster_ca("https://127.0.0.1:1", TOKEN, tmp_path, delays=iter(())) == PEM
    assert not caplog.records


async def test_a_node_holding_no_ca_waits_for_its_server_then_keeps_it(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, cacerts: Callable[[bytes], web.AppRunner]) -> None:
    port = find_free_port()
    url = f"http://127.0.0.1:{port}"
    trust.keep(tmp_path, b"the CA of another cluster")  # an old token's CA: not used, replaced
    caplog.set_level(logging.INFO, "lite.agent")
    task = asyncio.create_task(cluster_ca(url, TOKEN, tmp_path, delays=itertools.repeat(0.02)))
    await _until(lambda: any("unreachable" in r.getMessage() for r in caplog.records))
    await asyncio.sleep(0.2)  # ~10 more attempts while away: still one line
    assert not task.done()
    runner = cacerts(PEM)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    assert await asyncio.wait_for(task, 10) == PEM
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2, lines
    assert lines[0].startswith(f"server {url} unreachable (Connection refused); retrying every ≤30 s")
    assert lines[0].endswith("waiting for it: this node holds no cluster CA yet (it has never joined)")
    assert lines[1].startswith(f"server {url} is back after ")
    assert trust.held(tmp_path, trust.sha256_hex(PEM)) == PEM


async def test_a_ca_that_does_not_match_is_never_kept(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, cacerts: Callable[[bytes], web.AppRunner]) -> None:
    port = find_free_port()
    runner = cacerts(b"an impostor's CA")
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    caplog.set_level(logging.INFO, "lite.agent")
    task = asyncio.create_task(cluster_ca(f"http://127.0.0.1:{port}", TOKEN, tmp_path,
                                          delays=itertools.repeat(0.02)))
    await _until(lambda: len(caplog.records) > 0)
    await asyncio.sleep(0.2)
    assert not task.done()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert [r.levelno for r in caplog.records] == [logging.ERROR]
    assert "does not match the hash in the join token" in caplog.records[0].getMessage()
    assert not (tmp_path / trust.CA_FILE).exists()


async def test_a_token_without_a_ca_hash_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="--ca-file"):
        await cluster_ca("https://127.0.0.1:1", "bare-secret", tmp_path)


@pytest.mark.parametrize("flag", [False, True])
def test_the_flag_reaches_both_agents(tmp_path: Path, flag: bool) -> None:
    from types import SimpleNamespace

    from lite.cli.agentcmd import embedded_config, remote_config
    from lite.cli.main import build_parser
    from lite.server.config import ServerConfig

    extra = ["--allow-no-resource-limits"] if flag else []
    args = build_parser().parse_args(["agent", "--server", "https://10.0.0.1:6443", "--token", TOKEN, *extra])
    assert remote_config(args, tmp_path, PEM).allow_no_limits is flag
    srv = build_parser().parse_args(["server", *extra])
    assert srv.allow_no_resource_limits is flag
    config = ServerConfig.create(tmp_path, agent_allow_no_limits=srv.allow_no_resource_limits)
    server = SimpleNamespace(config=config, creds=SimpleNamespace(join_token=TOKEN, ca_pem=PEM), join_local=None)
    assert embedded_config(server).allow_no_limits is flag
