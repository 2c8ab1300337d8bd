"""Start, probe and stop a real `lite server` process (shared by the e2e, packaging and boot tests).

Not a test module. Everything talks to 127.0.0.1 only; the process is always reaped by `stop()`/`kill()`.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml


def find_free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (the kernel picked it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def lite_command() -> list[str]:
    """The console script next to this interpreter, else `python -m lite.cli.main`."""
    exe = Path(sys.executable).with_name("lite")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "lite.cli.main"]


def wait_for(what: str, check: Callable[[], Any], timeout: float = 20.0, every: float = 0.05) -> Any:
    """Poll `check` until it returns something true (returned); AssertionError naming `what` after `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(every)


class LiteServer:
    """One `lite server` child process on 127.0.0.1:<port> with its own data dir."""

    def __init__(self, data_dir: Path, port: int, command: list[str] | None = None,
                 extra: tuple[str, ...] = ()) -> None:
        self.data_dir, self.port = data_dir, port
        self.command = command or lite_command()
        self.extra = extra
        self.log_path = data_dir.parent / f"{data_dir.name}-server.log"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def kubeconfig(self) -> Path:
        return self.data_dir / "kubeconfig.yaml"

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def start(self) -> LiteServer:
        args = [*self.command, "server", "--data-dir", str(self.data_dir), "--https-listen-port",
                str(self.port), "--bind-address", "127.0.0.1", "--disable-agent", *self.extra]
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        return self

    def log_tail(self, n: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except FileNotFoundError:
            return "(no log)"

    def config(self) -> dict[str, Any]:
        data: dict[str, Any] = yaml.safe_load(self.kubeconfig.read_text())
        return data

    def token(self) -> str:
        return str(self.config()["users"][0]["user"]["token"])

    def ca(self) -> bytes:
        """The cluster CA (PEM) from the admin kubeconfig."""
        return base64.b64decode(self.config()["clusters"][0]["cluster"]["certificate-authority-data"])

    def ssl_context(self) -> ssl.SSLContext:
        ca = base64.b64decode(self.config()["clusters"][0]["cluster"]["certificate-authority-data"])
        return ssl.create_default_context(cadata=ca.decode())

    def request(self, path: str, method: str = "GET", body: Any = None, token: str | None = None,
                timeout: float = 10) -> tuple[int, Any]:
        """A verified-TLS request with the admin token (or `token`); returns (status, parsed JSON or text)."""
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method)
        req.add_header("Authorization", f"Bearer {self.token() if token is None else token}")
        if data is not None:
            req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, context=self.ssl_context(), timeout=timeout) as resp:
                status, raw = resp.status, resp.read()
        except urllib.error.HTTPError as e:
            status, raw = e.code, e.read()
        try:
            return status, json.loads(raw)
        except ValueError:
            return status, raw.decode(errors="replace")

    def wait_ready(self, timeout: float = 60) -> None:
        assert self.proc is not None
        deadline = time.monotonic() + timeout
        last: object = None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"lite server exited with {self.proc.returncode}:\n{self.log_tail()}")
            if self.kubeconfig.exists():
                try:
                    status, _ = self.request("/readyz", timeout=2)
                    if status == 200:
                        return
                    last = status
                except (OSError, ssl.SSLError) as e:
                    last = e
            time.sleep(0.05)
        raise TimeoutError(f"lite server not ready after {timeout}s ({last!r}):\n{self.log_tail()}")

    def stop(self, timeout: float = 15) -> int:
        """SIGTERM and wait; raises if the server does not exit in time (it is then killed)."""
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
                raise AssertionError(f"lite server ignored SIGTERM for {timeout}s:\n{self.log_tail()}") from None
        return self.proc.returncode

    def kill(self) -> None:
        """SIGKILL and reap (a crash, as far as the server can tell)."""
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)


def simulator_kubeconfig(data_dir: Path, dest: Path) -> Path:
    """A kubeconfig for `lite agent --simulate`, written to `dest` (0600): user `lite-sim` in the group
    `lite:node-simulators`, which the bootstrap policy binds to the ClusterRole `lite:node-simulator`; made by
    `lite certificate issue-user` from the server's data dir, as a user would."""
    proc = subprocess.run([*lite_command(), "certificate", "issue-user", "lite-sim", "--group", "lite:node-simulators",
                           "--data-dir", str(data_dir)], capture_output=True, text=True, check=True, timeout=60)
    dest.touch(mode=0o600)
    dest.write_text(proc.stdout)
    return dest
