"""Pure pieces of the runtime: symlink-safe mount targets, the capability set, the shim command line."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from lite.agent.runtime import linux
from lite.agent.runtime.container import shim_command
from lite.agent.runtime.init import capability_set, resolve, secure_join
from lite.agent.runtime.shim import main as shim_main


def test_secure_join_keeps_symlinks_inside_the_root(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "etc").mkdir(parents=True)
    (root / "etc" / "evil").symlink_to("/etc/passwd")
    (root / "up").symlink_to("../../../../..")
    (root / "rel").symlink_to("etc")
    assert secure_join(str(root), "/etc/evil") == str(root / "etc" / "passwd")
    assert secure_join(str(root), "/up/etc/shadow") == str(root / "etc" / "shadow")
    assert secure_join(str(root), "/rel/hosts") == str(root / "etc" / "hosts")
    assert secure_join(str(root), "../../x") == str(root / "x")
    (root / "loop").symlink_to("loop")
    with pytest.raises(OSError):
        secure_join(str(root), "/loop/x")


def test_capability_set_like_containerd() -> None:
    default = linux.cap_numbers(linux.DEFAULT_CAPABILITIES)
    assert capability_set([], []) == default
    assert capability_set(["NET_ADMIN"], ["CAP_MKNOD"]) == (default | {12}) - {27}
    assert capability_set(["NET_BIND_SERVICE"], ["ALL"]) == {10}
    assert capability_set(["ALL"], ["SYS_ADMIN"]) == set(linux.CAPABILITIES.values()) - {21}
    with pytest.raises(ValueError):
        capability_set(["NOT_A_CAP"], [])


def test_resolve_uses_the_container_path(tmp_path: Path) -> None:
    (tmp_path / "tool").write_text("#!/bin/sh\n")
    os.chmod(tmp_path / "tool", 0o755)
    assert resolve("tool", {"PATH": f"/nonexistent:{tmp_path}"}) == str(tmp_path / "tool")
    assert resolve("./x", {}) == "./x"
    with pytest.raises(FileNotFoundError, match="executable file not found"):
        resolve("tool", {"PATH": "/nonexistent"})


def test_shim_command_dev_and_frozen(monkeypatch: pytest.MonkeyPatch) -> None:
    assert shim_command() == [sys.executable, "-m", "lite.agent.runtime.shim"]
    monkeypatch.setattr(sys, "frozen", True, raising=False)
    assert shim_command() == [sys.executable, "shim"]


def test_shim_main_usage(capsys: pytest.CaptureFixture[str]) -> None:
    assert shim_main(["bogus"]) == 2
    assert "usage: lite shim" in capsys.readouterr().err
