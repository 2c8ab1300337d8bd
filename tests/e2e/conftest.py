"""One real `lite server` per test session, driven by the real kubectl and the official Python client.

The server is a child process (the console script, else `python -m lite.cli.main`) on a free loopback port
with a tmp data dir; it must answer /readyz before any test runs and exit 0 on SIGTERM at the end (the
session errors otherwise). Tests share it, so each test works in its own namespace or with unique names.
"""

from __future__ import annotations

import os
import queue
import shutil
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from liteproc import LiteServer, find_free_port

KUBECTL = "/usr/bin/kubectl"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.e2e)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


class Lines:
    """Reads a subprocess's stdout line by line on a thread, so tests can wait for lines with a deadline."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.proc = proc
        self.q: queue.Queue[str | None] = queue.Queue()
        self.seen: list[str] = []
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.q.put(line.rstrip("\n"))
        self.q.put(None)

    def wait_for(self, pred: Any, timeout: float = 20) -> str:
        """The first new line for which pred(line) holds; fails with everything seen so far."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            try:
                line = self.q.get(timeout=max(left, 0.01))
            except queue.Empty:
                line = None
                left = -1
            if line is None:
                raise AssertionError(f"no matching line within {timeout}s; saw:\n" + "\n".join(self.seen))
            self.seen.append(line)
            if pred(line):
                return line


@dataclass
class Cluster:
    server: LiteServer
    kubeconfig: Path
    cache_dir: Path
    api: Any  # kubernetes.client.ApiClient

    def _argv(self, args: tuple[str, ...]) -> list[str]:
        return [KUBECTL, "--kubeconfig", str(self.kubeconfig), "--cache-dir", str(self.cache_dir), *args]

    def _env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
        env["HOME"] = str(self.cache_dir.parent)
        return env

    def kubectl(self, *args: str, input: str | None = None, check: bool = True,
                timeout: float = 60) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(self._argv(args), input=input, capture_output=True, text=True, timeout=timeout,
                              env=self._env())
        if check and proc.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} exited {proc.returncode}\n"
                                 f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}")
        return proc

    def kubectl_stream(self, *args: str) -> tuple[subprocess.Popen[str], Lines]:
        proc = subprocess.Popen(self._argv(args), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, text=True, env=self._env())
        return proc, Lines(proc)


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    if not os.access(KUBECTL, os.X_OK):
        if os.environ.get("CI"):
            pytest.fail(f"{KUBECTL} is required for the e2e tests in CI")
        pytest.skip(f"{KUBECTL} not installed")
    from kubernetes import config

    base = tmp_path_factory.mktemp("e2e")
    server = LiteServer(base / "data", find_free_port()).start()
    try:
        server.wait_ready(60)
    except BaseException:
        server.kill()
        raise
    api = config.new_client_from_config(config_file=str(server.kubeconfig), persist_config=False)
    try:
        yield Cluster(server, server.kubeconfig, base / "kube-cache", api)
    finally:
        api.close()
        code = server.stop(timeout=15)
        assert code == 0, f"lite server exited {code} on SIGTERM:\n{server.log_tail()}"
        shutil.rmtree(base / "kube-cache", ignore_errors=True)


@pytest.fixture
def ns(cluster: Cluster) -> str:
    """A fresh namespace for one test (left behind: the session's data dir is thrown away)."""
    from kubernetes import client

    name = unique("e2e")
    client.CoreV1Api(cluster.api).create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    return name
