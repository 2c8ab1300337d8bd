"""A join session whose server is away logs one line when it goes and one when it is back (lite.agent.away),
not one per retry: an edge node may retry for hours. The server is the in-process join stack (tests.join)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from pathlib import Path

import pytest

from lite.agent.session import JoinSession
from lite.server.certs import ensure_credentials
from lite.server.config import ServerConfig
from tests.join.joinstack import GUARD, TestAgent, serve_join


async def test_one_line_while_the_server_is_away(tmp_path: Path, free_port: int,
                                                 caplog: pytest.LogCaptureFixture) -> None:
    # the server's credentials exist before it serves (the node holds the CA from an earlier join)
    creds = await asyncio.to_thread(ensure_credentials, ServerConfig.create(tmp_path / "data", port=free_port,
                                                                            bind_address="127.0.0.1"))
    caplog.set_level(logging.DEBUG, "lite.agent.session")
    session = JoinSession(f"https://127.0.0.1:{free_port}", creds.join_token, node_name="away-node",
                          agent=TestAgent(), credentials_dir=tmp_path / "agent", ca_data=creds.ca_pem,
                          backoff=(0.01, 0.05))
    task = asyncio.create_task(session.run())

    async def stop() -> None:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    try:
        async with asyncio.timeout(GUARD):
            while sum("still unreachable" in r.getMessage() for r in caplog.records) < 5:
                await asyncio.sleep(0.02)
        async with serve_join(tmp_path, free_port) as stack:
            assert stack.creds.ca_pem == creds.ca_pem
            async with asyncio.timeout(GUARD):
                await session.connected.wait()
            await stop()  # before the server stops: its stopping would be a second absence, a second line
    finally:
        await stop()
    said = [(r.levelno, r.getMessage()) for r in caplog.records if r.levelno >= logging.INFO]
    away = [m for level, m in said if "unreachable" in m]
    assert len(away) == 1 and away[0].startswith(f"server https://127.0.0.1:{free_port} unreachable (")
    assert [level for level, m in said if "unreachable" in m] == [logging.WARNING]
    assert len([m for _, m in said if "is back after" in m]) == 1
