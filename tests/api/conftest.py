"""Shared fixtures of the API tests: a real `Resources` over a real SQLite store in tmp_path."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from lite.kinds import KindRegistry
from lite.server.api.resources import Resources
from lite.server.api.strategies import default_strategies
from lite.server.store import Store


@pytest.fixture
async def res(tmp_path: Path) -> AsyncIterator[Resources]:
    """Started Resources (system namespaces exist); bookmarks every 50 ms so watch tests need not wait."""
    store = await Store.open(str(tmp_path / "db.sqlite"))
    r = Resources(store, KindRegistry(), default_strategies(), bookmark_interval=0.05)
    await r.start()
    try:
        yield r
    finally:
        await store.close()
