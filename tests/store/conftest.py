"""Fixtures for the store tests: a real Store on a real SQLite file in tmp_path."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from lite.server.store import Store


@pytest.fixture
def db_path(tmp_path: Path) -> str:
    return str(tmp_path / "lite.db")


@pytest.fixture
async def store(db_path: str) -> AsyncIterator[Store]:
    s = await Store.open(db_path)
    yield s
    await s.close()
