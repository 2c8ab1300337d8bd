"""The install path: packaging/install.sh into a fake root (k3s's INSTALL_* variables), the units it writes
(checked by systemd-analyze when present), the killall and uninstall scripts it writes, and the READY=1
that `Type=notify` waits for, sent by a real `lite server`."""

from __future__ import annotations

import os
import shutil
import socket
import stat
import subprocess
from pathlib import Path

import pytest
from liteproc import LiteServer, find_free_port, lite_command

INSTALL = Path(__file__).resolve().parent.parent / "packaging" / "install.sh"


def _install(tmp: Path, **env: str) -> subprocess.CompletedProcess[str]:
    exe = lite_command()
    if len(exe) != 1:
        pytest.skip("no lite console script beside this interpreter")
    base = {"PATH": os.environ["PATH"], "INSTALL_LITE_BIN": exe[0], "INSTALL_LITE_BIN_DIR": str(tmp / "bin"),
            "INSTALL_LITE_SYSTEMD_DIR": str(tmp / "systemd"), "INSTALL_LITE_SKIP_START": "true",
            "INSTALL_LITE_DATA_DIR": str(tmp / "data"), "INSTALL_LITE_CONFIG_DIR": str(tmp / "etc-lite")}
    return subprocess.run(["sh", str(INSTALL)], env={**base, **env}, capture_output=True, text=True, timeout=60)


def _unit(path: Path) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for line in path.read_text().splitlines():
        if "=" in line and not line.startswith("#"):
            k, _, v = line.partition("=")
            out.setdefault(k, []).append(v)
    return out


def _verify(unit: Path) -> None:
    if not shutil.which("systemd-analyze"):
        return
    done = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True, text=True, timeout=60)
    problems = [ln for ln in done.stderr.splitlines() if unit.name in ln and "Unknown" in ln]
    assert not problems, done.stderr


def test_server_install_writes_the_unit_and_the_scripts(tmp_path: Path) -> None:
    done = _install(tmp_path, INSTALL_LITE_EXEC="--disable-agent --tls-san lb.example")
    assert done.returncode == 0, done.stderr
    bin_dir, units = tmp_path / "bin", tmp_path / "systemd"
    for name in ("lite", "lite-killall.sh", "lite-uninstall.sh"):
        assert (bin_dir / name).stat().st_mode & stat.S_IXUSR, name
    assert sorted(p.name for p in units.iterdir()) == ["lite.service", "lite.service.env"]
    unit = _unit(units / "lite.service")
    assert unit["Type"] == ["notify"] and unit["KillMode"] == ["process"] and unit["Delegate"] == ["yes"]
    assert unit["Restart"] == ["always"]
    assert unit["ExecStart"] == [f"{bin_dir}/lite server --disable-agent --tls-san lb.example"]
    assert f"-{units}/lite.service.env" in unit["EnvironmentFile"]
    _verify(units / "lite.service")
    version = subprocess.run([str(bin_dir / "lite"), "--version"], capture_output=True, text=True, timeout=60)
    assert version.stdout.startswith("lite "), version


def test_agent_install_keeps_the_token_in_a_private_env_file(tmp_path: Path) -> None:
    done = _install(tmp_path, LITE_URL="https://10.0.0.1:6443", LITE_TOKEN="K10abc::server:secret")
    assert done.returncode == 0, done.stderr
    units = tmp_path / "systemd"
    env = units / "lite-agent.service.env"
    assert stat.S_IMODE(env.stat().st_mode) == 0o600
    assert env.read_text() == "LITE_URL=https://10.0.0.1:6443\nLITE_TOKEN=K10abc::server:secret\n"
    unit = _unit(units / "lite-agent.service")
    assert unit["ExecStart"] == [f"{tmp_path}/bin/lite agent "] and unit["Type"] == ["notify"]
    assert "K10abc" not in (units / "lite-agent.service").read_text()  # the unit file is world-readable

    bad = _install(tmp_path, LITE_URL="https://10.0.0.1:6443")
    assert bad.returncode != 0 and "LITE_TOKEN" in bad.stderr


def test_uninstall_removes_units_executables_and_data(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("the killall step needs root")
    assert _install(tmp_path).returncode == 0
    (tmp_path / "data" / "agent").mkdir(parents=True)
    (tmp_path / "etc-lite").mkdir()
    done = subprocess.run([str(tmp_path / "bin" / "lite-uninstall.sh")], capture_output=True, text=True, timeout=120,
                          env={"PATH": os.environ["PATH"]})
    assert "0 processes killed" in done.stdout, done.stdout + done.stderr
    assert not list((tmp_path / "bin").iterdir()) and not list((tmp_path / "systemd").iterdir())
    assert not (tmp_path / "data").exists() and not (tmp_path / "etc-lite").exists()


def test_lite_server_tells_systemd_it_is_ready(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sock_path = tmp_path / "notify.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind(str(sock_path))
        sock.settimeout(60)
        monkeypatch.setenv("NOTIFY_SOCKET", str(sock_path))
        server = LiteServer(tmp_path / "data", find_free_port()).start()
        try:
            msg = sock.recv(256)
            assert msg == b"READY=1"
            status, _ = server.request("/readyz")
            assert status == 200  # READY=1 comes once it serves
        finally:
            server.stop(timeout=15)


def test_install_checks_the_release_checksum(tmp_path: Path) -> None:
    """A release tarball's layout (lite, install.sh, sha256sum): a matching lite installs, a changed one does
    not, and nothing is written then."""
    rel = tmp_path / "release"
    rel.mkdir()
    shutil.copy(INSTALL, rel / "install.sh")
    (rel / "lite").write_text("#!/bin/sh\necho lite 9.9.9\n")
    (rel / "lite").chmod(0o755)
    subprocess.run("sha256sum lite > sha256sum", shell=True, cwd=rel, check=True)

    def install(dest: str) -> subprocess.CompletedProcess[str]:
        env = {"PATH": os.environ["PATH"], "INSTALL_LITE_BIN_DIR": str(tmp_path / dest / "bin"),
               "INSTALL_LITE_SYSTEMD_DIR": str(tmp_path / dest / "systemd"), "INSTALL_LITE_SKIP_START": "true"}
        return subprocess.run(["sh", str(rel / "install.sh")], env=env, capture_output=True, text=True, timeout=60)

    ok = install("good")
    assert ok.returncode == 0 and "Verified the sha256" in ok.stdout, ok.stderr
    assert (tmp_path / "good" / "bin" / "lite").read_bytes() == (rel / "lite").read_bytes()
    with open(rel / "lite", "a") as f:
        f.write("# changed after the checksum\n")
    bad = install("bad")
    assert bad.returncode == 1 and "checksum mismatch" in bad.stderr, bad
    assert not (tmp_path / "bad").exists()
