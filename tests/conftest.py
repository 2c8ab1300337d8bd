"""Fixtures shared by every test directory: a free loopback port and a private data dir."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest


def find_free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (the kernel picked it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def free_port() -> int:
    return find_free_port()


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    """A not yet existing data dir under tmp_path (the server creates it, as on a real first start)."""
    return tmp_path / "data"
