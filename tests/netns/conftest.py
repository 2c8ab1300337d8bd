"""Fixtures for lite.netns tests: a private "node" netns per test; every name carries a unique `ltest-` prefix.

Nothing here touches the host netns: node-side code runs against the node netns created here, pods live in
their own netns, and cleanup deletes every netns file with the test's prefix even when the test failed.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
from collections.abc import Iterator

import pytest

from lite.netns import nsfs, pod

needs_root = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("ip") is None, reason="needs root and iproute2 (network namespaces)"
)


def ip(*args: str) -> str:
    return subprocess.run(["ip", *args], check=True, capture_output=True, text=True).stdout


@pytest.fixture
def prefix() -> str:
    return f"ltest-{secrets.token_hex(3)}"


@pytest.fixture
def node_netns(prefix: str) -> Iterator[str]:
    """A fresh netns standing in for the node, with lo up; removed with every pod netns of this test."""
    name = f"{prefix}-node"
    ip("netns", "add", name)
    try:
        ip("-n", name, "link", "set", "lo", "up")
        yield name
    finally:
        for pod_id in pod.list_pod_netns():
            if pod_id.startswith(prefix):
                nsfs.remove_netns(pod.pod_netns_path(pod_id))
        subprocess.run(["ip", "netns", "del", name], check=False, capture_output=True)
