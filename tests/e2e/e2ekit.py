"""Helpers of the e2e tests: the `Cluster` handle (kubectl runner, Python ApiClient), line reader, names.

Not a test module; `conftest.py` builds the `Cluster` and tests import these names from here.
"""

from __future__ import annotations

import contextlib
import os
import queue
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from liteproc import LiteServer

KUBECTL = "/usr/bin/kubectl"


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


class Lines:
    """Reads a subprocess's stdout line by line on a thread, so tests can wait for lines with a deadline."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.proc = proc
        self.q: queue.Queue[str | None] = queue.Queue()
        self.seen: list[str] = []
        self.thread = threading.Thread(target=self._pump, daemon=True)
        self.thread.start()

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

    @contextlib.contextmanager
    def kubectl_stream(self, *args: str) -> Iterator[tuple[subprocess.Popen[str], Lines]]:
        """A long-running kubectl (e.g. `get -w`) whose output lines are read as they come; ended on exit."""
        proc = subprocess.Popen(self._argv(args), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, text=True, env=self._env())
        lines = Lines(proc)
        try:
            yield proc, lines
        finally:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            lines.thread.join(10)
            assert proc.stdout is not None
            proc.stdout.close()
