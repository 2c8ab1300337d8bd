"""A throw-away etcd (Debian's `etcd-server`, with `etcd-client`'s etcdctl) for tests: loopback ports, a temp data dir.

`etcd_or_skip()` starts one and stops it (and removes its data dir) on exit; it skips the test with the reason
when the etcd binary is missing. `EtcdServer.restart()` (or `stop()` then `start()`) runs the same member again
on the same ports and data, for tests of reconnection; `wipe()` deletes every key, so that tests sharing one
server (a module- or session-scoped fixture) can each start from an empty keyspace. With `tls=True` the client
URL is https, with client certificates required (a throw-away CA from tests/helpers/tls.py; its server
certificate doubles as the client's).

The data dir lives on /dev/shm when there is one: etcd fsyncs its WAL on every commit, and tests measure
behaviour, not the disk.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from tests.helpers.tls import Pki, make_pki

ETCD = "/usr/bin/etcd"
ETCDCTL = "/usr/bin/etcdctl"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class EtcdServer:
    """One single-member etcd cluster on 127.0.0.1; see the module docstring."""

    def __init__(self, root: Path, *, tls: bool = False) -> None:
        self.root = root
        self.data = root / "data"
        self.client_port, self.peer_port = _free_port(), _free_port()
        self.pki: Pki | None = make_pki(root) if tls else None
        scheme = "https" if tls else "http"
        self.endpoint = f"{scheme}://127.0.0.1:{self.client_port}"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def tls_files(self) -> dict[str, str]:
        """EtcdBackend.open's keyword arguments for this server's TLS (empty without TLS)."""
        if self.pki is None:
            return {}
        return {"cafile": str(self.pki.ca_file), "certfile": str(self.pki.cert_file),
                "keyfile": str(self.pki.key_file)}

    def _etcdctl(self) -> list[str]:
        cmd = [shutil.which("etcdctl") or ETCDCTL, "--endpoints", self.endpoint, "--dial-timeout", "1s",
               "--command-timeout", "5s"]
        if self.pki is not None:
            cmd += ["--cacert", str(self.pki.ca_file), "--cert", str(self.pki.cert_file),
                    "--key", str(self.pki.key_file)]
        return cmd

    def start(self) -> None:
        peer = f"http://127.0.0.1:{self.peer_port}"
        args = [shutil.which("etcd") or ETCD, "--name", "lite-test", "--data-dir", str(self.data),
                "--listen-client-urls", self.endpoint, "--advertise-client-urls", self.endpoint,
                "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
                "--initial-cluster", f"lite-test={peer}", "--logger", "zap", "--log-level", "error",
                "--log-outputs", str(self.root / "etcd.log")]
        if self.pki is not None:
            args += ["--cert-file", str(self.pki.cert_file), "--key-file", str(self.pki.key_file),
                     "--trusted-ca-file", str(self.pki.ca_file), "--client-cert-auth"]
        self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        self._wait_ready()

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                log = (self.root / "etcd.log").read_text(errors="replace")[-2000:]
                raise RuntimeError(f"etcd exited with {self.proc.returncode}: {log}")
            health = subprocess.run([*self._etcdctl(), "endpoint", "health"], capture_output=True,
                                    env={"ETCDCTL_API": "3"})
            if health.returncode == 0:
                return
            time.sleep(0.1)
        raise RuntimeError("etcd did not become healthy within 30 s")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def etcdctl(self, *args: str) -> bytes:
        """etcd's own command-line client against this server (v3 API); its stdout."""
        return subprocess.run([*self._etcdctl(), *args], check=True, capture_output=True,
                              env={"ETCDCTL_API": "3"}).stdout

    def wipe(self) -> None:
        """Delete every key and compact the history away (revisions go on counting): a clean keyspace with no
        history for the next test, without a restart. The compaction is at a put of a key outside lite's
        keyspace, since etcd keeps the compaction revision itself (it must not be a delete of a lite key)."""
        self.etcdctl("del", "--prefix", "")
        rev = json.loads(self.etcdctl("put", "wiped", "", "-w", "json"))["header"]["revision"]
        self.etcdctl("compact", str(rev))

    def restart(self) -> None:
        self.stop()
        self.start()


@contextlib.contextmanager
def etcd_or_skip(*, tls: bool = False) -> Iterator[EtcdServer]:
    """A running EtcdServer for the block; skips (with the reason) when Debian's etcd-server is missing."""
    import pytest  # here, not at the top: benchmarks import EtcdServer without pytest

    if not Path(ETCD).exists() and shutil.which("etcd") is None:
        pytest.skip("etcd is not installed (Debian package etcd-server; .ci/run installs it)")
    if not Path(ETCDCTL).exists() and shutil.which("etcdctl") is None:
        pytest.skip("etcdctl is not installed (Debian package etcd-client; .ci/run installs it)")
    shm = Path("/dev/shm")
    root = Path(tempfile.mkdtemp(prefix="lite-etcd-", dir=shm if shm.is_dir() else None))
    server = EtcdServer(root, tls=tls)
    try:
        server.start()
        yield server
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)
