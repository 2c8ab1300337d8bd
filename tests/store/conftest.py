"""Fixtures for the store tests: a real Store on a real SQLite file in tmp_path; a real PostgreSQL."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from lite.server.store import Store
from tests.helpers.pgserver import PgServer, missing_reason


@pytest.fixture
def db_path(tmp_path: Path) -> str:
    return str(tmp_path / "lite.db")


@pytest.fixture
async def store(db_path: str) -> AsyncIterator[Store]:
    s = await Store.open(db_path)
    yield s
    await s.close()


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer]:
    """One PostgreSQL (Debian's binaries, a temp dir, loopback) for the session; see tests/helpers/pgserver.py."""
    reason = missing_reason()
    if reason is not None:
        if os.environ.get("CI"):
            pytest.fail(f"{reason}: .ci/run installs it, so CI must run the PostgreSQL tests")
        pytest.skip(reason)
    server = PgServer.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
async def pg_dsn(pg_server: PgServer) -> AsyncIterator[str]:
    """The DSN of a fresh, empty database on the session's PostgreSQL (dropped after the test)."""
    async with pg_server.database() as dsn:
        yield dsn
