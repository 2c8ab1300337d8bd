"""The guest harness' pure parts: the qemu command line, the image cache key, the skip reasons
(tests/helpers/guestvm.py), the parsing of a scenario's verdicts (tests/helpers/liteguest.py) and the
wheelhouse's pins (tests/helpers/wheelhouse.py)."""

from __future__ import annotations

import sys
from importlib.metadata import version
from pathlib import Path

import pytest

from tests.helpers import guestvm, liteguest, wheelhouse

IMAGE = guestvm.GuestImage(Path("/c/vmlinuz"), Path("/c/initrd"), Path("/c/base.img"))


def _argv(accel: str) -> list[str]:
    return guestvm.qemu_argv(IMAGE, Path("/w/o.qcow2"), Path("/w/share"), Path("/w/console.log"), accel=accel,
                             cpus=2, memory_mib=1024)


@pytest.mark.parametrize(("accel", "want_accel", "want_cpu"), [
    ("tcg", "tcg,thread=multi,tb-size=512", "max"),
    ("kvm", "kvm", "host,-arch-capabilities"),
    ("anything-else", "tcg,thread=multi,tb-size=512", "max"),
])
def test_qemu_argv(accel: str, want_accel: str, want_cpu: str) -> None:
    argv = _argv(accel)
    assert argv[argv.index("-accel") + 1] == want_accel and argv[argv.index("-cpu") + 1] == want_cpu
    # no packet leaves the guest: restricted user net, nothing forwarded
    assert "user,id=n0,restrict=on" in argv and not any("hostfwd" in a or "guestfwd" in a for a in argv)
    # the base image is only ever the overlay's backing file
    assert "file=/w/o.qcow2,if=virtio,format=qcow2,cache=unsafe" in argv and "/c/base.img" not in " ".join(argv)
    assert "-daemonize" not in argv  # a child of the test, killed with it (PR_SET_PDEATHSIG)
    assert argv[argv.index("-smp") + 1] == "2" and argv[argv.index("-m") + 1] == "1024"


def test_recipe_key_follows_what_goes_into_the_image() -> None:
    key = guestvm.recipe_key("bookworm")
    assert key == guestvm.recipe_key("bookworm")
    assert key != guestvm.recipe_key("trixie")
    assert key != guestvm.recipe_key("bookworm", (*guestvm.PACKAGES, "strace"))


def test_unavailable_names_a_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(guestvm.os, "geteuid", lambda: 1000)
    assert "root" in (guestvm.unavailable() or "")
    monkeypatch.setattr(guestvm.os, "geteuid", lambda: 0)
    monkeypatch.setattr(guestvm.os, "cpu_count", lambda: 1)
    assert "one CPU" in (guestvm.unavailable() or "")
    monkeypatch.setattr(guestvm.os, "cpu_count", lambda: 2)
    monkeypatch.setattr(guestvm.shutil, "which", lambda tool: None)
    reason = guestvm.unavailable() or ""
    assert "qemu-system-x86" in reason and "apt-get" in reason


@pytest.mark.parametrize(("text", "checks", "times"), [
    ("CHECK a PASS fine\nCHECK b FAIL want 1, got 2\nTIME boot 3.5\n",
     {"a": (True, "fine"), "b": (False, "want 1, got 2")}, {"boot": 3.5}),
    ("noise CHECK x PASS\nCHECK c PASS\nCHECK c FAIL later\n", {"c": (True, "")}, {}),
    ("", {}, {}),
])
def test_parse(text: str, checks: dict[str, tuple[bool, str]], times: dict[str, float]) -> None:
    assert liteguest.parse(text) == (checks, times)


def test_wheelhouse_pins_what_the_test_venv_runs_but_not_lite() -> None:
    """The guest's pip installs the dependency versions this venv tested (tests/helpers/wheelhouse.py)."""
    pinned = wheelhouse.pins(sys.executable).splitlines()
    for dist in ("aiohttp", "cryptography", "pyroute2"):
        assert f"{dist}=={version(dist)}" in pinned
    assert not [p for p in pinned if p.lower().startswith("lite==")] and all("==" in p for p in pinned)
