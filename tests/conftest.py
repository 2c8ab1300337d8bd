"""Fixtures shared by every test directory: a free loopback port and a private data dir.

Also the suite's closing check: whatever the tests leave on the host (pod netns, `lv*` veth links, pod
cgroups, container shims, nftables tables named after lite) that was not there when the session started fails
the run under CI (a warning elsewhere, where other work may run beside the tests).
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest
from liteproc import find_free_port

NETNS_PREFIXES = ("lite-", "ltest-")


def _host_leftovers() -> set[str]:
    """Everything on the host that looks like a lite pod's or a lite test's, one string per thing."""
    found: set[str] = set()
    run_netns = Path("/run/netns")
    if run_netns.is_dir():
        found |= {f"netns {n}" for n in os.listdir(run_netns) if n.startswith(NETNS_PREFIXES)}
    net = Path("/sys/class/net")
    if net.is_dir():
        found |= {f"link {n}" for n in os.listdir(net) if n.startswith("lv")}
    for top, dirs, _ in os.walk("/sys/fs/cgroup"):
        if "lite" in top:
            found |= {f"cgroup {top}/{d}" for d in dirs if d.startswith("pod")}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"shim" in argv and any(a.endswith((b"lite", b"lite.cli.main")) for a in argv[:3]):
            found.add(f"shim process {pid}")
    try:
        tables = subprocess.run(["nft", "list", "tables"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.TimeoutExpired):
        tables = ""
    found |= {f"nft {t.strip()}" for t in tables.splitlines() if "lite" in t}
    return found


def pytest_sessionstart(session: pytest.Session) -> None:
    session.config.stash[_BEFORE] = _host_leftovers()


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    before = session.config.stash.get(_BEFORE, set())
    left: set[str] = set()
    for _ in range(20):  # shims and netns of a just-stopped pod may need a moment to go
        left = _host_leftovers() - before
        if not left:
            return
        time.sleep(0.5)
    lines = "\n  ".join(sorted(left)[:50])
    print(f"\nLEFT BEHIND by this test session ({len(left)}):\n  {lines}", flush=True)
    if os.environ.get("CI") and session.exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


_BEFORE = pytest.StashKey[set[str]]()


@pytest.fixture
def free_port() -> int:
    return find_free_port()


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    """A not yet existing data dir under tmp_path (the server creates it, as on a real first start)."""
    return tmp_path / "data"
