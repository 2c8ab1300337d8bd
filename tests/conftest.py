"""Fixtures shared by every test directory: a free loopback port and a private data dir."""

from __future__ import annotations

from pathlib import Path

import pytest
from liteproc import find_free_port


@pytest.fixture
def free_port() -> int:
    return find_free_port()


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    """A not yet existing data dir under tmp_path (the server creates it, as on a real first start)."""
    return tmp_path / "data"
