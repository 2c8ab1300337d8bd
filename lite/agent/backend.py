"""The agent's `StreamBackend`: logs, exec and port-forward for streams the server opens over the join session.

- logs: the container's CRI log file for its current attempt (or the previous one with `previous`), growing
  while the container runs.
- exec: `Runtime.exec` into the running container; with a TTY the pty master is wrapped as asyncio streams
  (stdout carries both streams, as kubectl expects), otherwise the process's pipes are used.
- port-forward: a TCP connection to 127.0.0.1:<port> inside the pod's network namespace (the agent's own
  namespace for hostNetwork pods).
- attach: the container's live stdio through its shim (`Runtime.attach`); output from the moment of attaching
  (earlier output is in the log), stdin only for containers started with `stdin: true`.
Refusals are `ApiError`s with the messages kubelet gives (pod not found, container not found / not running).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from collections.abc import Awaitable, Callable
from pathlib import Path

from lite.agent.podrunner import PodRunner
from lite.agent.runtime.container import Attachment, ContainerHandle, ExitStatus
from lite.agent.runtime.container import ExecProcess as RuntimeProcess
from lite.agent.streams import netns_socket
from lite.agent.streams.backend import ExecProcess, LogSource, PodRef
from lite.errors import bad_request, internal, not_found


class _Exec:
    """A runtime exec process adapted to the stream server's `ExecProcess`."""

    def __init__(self, proc: RuntimeProcess, stdin: asyncio.StreamWriter | None,
                 stdout: asyncio.StreamReader | None, stderr: asyncio.StreamReader | None) -> None:
        self._proc = proc
        self._stdin, self._stdout, self._stderr = stdin, stdout, stderr

    @property
    def stdin(self) -> asyncio.StreamWriter | None:
        return self._stdin

    @property
    def stdout(self) -> asyncio.StreamReader | None:
        return self._stdout

    @property
    def stderr(self) -> asyncio.StreamReader | None:
        return self._stderr

    async def wait(self) -> int:
        code = await self._proc.wait()
        return code

    def resize(self, width: int, height: int) -> None:
        self._proc.resize(height, width)


async def _pty_streams(fd: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """asyncio reader/writer over a pty master (reads end with EOF when the slave side hangs up)."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    rfile = os.fdopen(os.dup(fd), "rb", buffering=0)
    wfile = os.fdopen(os.dup(fd), "wb", buffering=0)
    await loop.connect_read_pipe(lambda: _PtyReadProtocol(reader), rfile)
    wt, wp = await loop.connect_write_pipe(asyncio.streams.FlowControlMixin, wfile)
    writer = asyncio.StreamWriter(wt, wp, None, loop)
    return reader, writer


class _PtyReadProtocol(asyncio.StreamReaderProtocol):
    def connection_lost(self, exc: Exception | None) -> None:
        # a pty master read fails with EIO once the last slave fd closes: that is end of output, not an error
        super().connection_lost(None)


class _AttachProcess:
    """A runtime `Attachment` (framed unix socket to the shim) as an `ExecProcess`: output frames are pumped into
    stdout/stderr readers; stdin is a socketpair whose far end is pumped into the attachment."""

    def __init__(self, att: Attachment, wait: Callable[[], Awaitable[ExitStatus]]) -> None:
        self._att, self._wait = att, wait
        self.stdout, self.stderr = asyncio.StreamReader(), asyncio.StreamReader()
        self.stdin: asyncio.StreamWriter | None = None
        self._own: asyncio.StreamWriter | None = None  # our end of the stdin socketpair
        self._tasks: list[asyncio.Task[None]] = []

    @classmethod
    async def open(cls, att: Attachment, wait: Callable[[], Awaitable[ExitStatus]], stdin: bool) -> _AttachProcess:
        p = cls(att, wait)
        p._tasks.append(asyncio.create_task(p._pump_out()))
        if stdin:
            ours, theirs = socket.socketpair()
            reader, p._own = await asyncio.open_connection(sock=ours)
            _, p.stdin = await asyncio.open_connection(sock=theirs)
            p._tasks.append(asyncio.create_task(p._pump_in(reader)))
        return p

    async def _pump_out(self) -> None:
        while (chunk := await self._att.read()) is not None:
            (self.stdout if chunk[0] == "stdout" else self.stderr).feed_data(chunk[1])
        self.stdout.feed_eof()
        self.stderr.feed_eof()

    async def _pump_in(self, reader: asyncio.StreamReader) -> None:
        with contextlib.suppress(ConnectionError):
            while data := await reader.read(65536):
                await self._att.write(data)
            await self._att.close_stdin()

    async def wait(self) -> int:
        try:
            return (await self._wait()).code
        finally:
            for t in self._tasks:
                t.cancel()
            for w in (self.stdin, self._own):
                if w is not None:
                    w.close()
            await self._att.close()

    def resize(self, width: int, height: int) -> None:
        self._tasks.append(asyncio.create_task(self._att.resize(height, width)))


class AgentStreams:
    """`StreamBackend` over the agent's pod runners (`runners()` gives uid → runner)."""

    def __init__(self, runners: Callable[[], dict[str, PodRunner]], node_netns_connect: bool = True) -> None:
        self._runners = runners

    def _runner(self, pod: PodRef) -> PodRunner:
        runner = self._runners().get(pod.uid)
        if runner is None:
            for r in self._runners().values():
                if r.st.namespace == pod.namespace and r.st.name == pod.name:
                    return r
            raise not_found("pods", pod.name)
        return runner

    def log_source(self, pod: PodRef, container: str, *, previous: bool) -> LogSource:
        runner = self._runner(pod)
        path = runner.log_path(container, previous)
        if path is None:
            if previous:
                raise bad_request(f'previous terminated container "{container}" in pod "{pod.name}" not found')
            raise bad_request(f"container {container} is not valid for pod {pod.name}")
        if not path.exists():
            raise bad_request(f'container "{container}" in pod "{pod.name}" is waiting to start: '
                              "ContainerCreating")

        def running() -> bool:
            return not previous and container in runner.st.handles and runner.log_path(container) == path

        return LogSource(str(path), running)

    def _handle_of(self, pod: PodRef, container: str) -> tuple[PodRunner, object]:
        runner = self._runner(pod)
        handle = runner.st.handles.get(container)
        if handle is None:
            names = [r.name for r in [*runner.st.inits, *runner.st.apps]]
            if container not in names:
                raise bad_request(f"container {container} is not valid for pod {pod.name}")
            raise bad_request(f"unable to upgrade connection: container not found (\"{container}\")")
        return runner, handle

    async def exec(self, pod: PodRef, container: str, command: list[str], *, stdin: bool,
                   tty: bool) -> ExecProcess:
        runner, handle = self._handle_of(pod, container)
        assert isinstance(handle, ContainerHandle)
        try:
            proc = await runner.deps.runtime.exec(handle, command, tty=tty, stdin=stdin)
        except Exception as e:
            raise internal(f"failed to exec in container: {e}") from e
        if proc.master_fd is not None:
            reader, writer = await _pty_streams(proc.master_fd)
            proc.close()
            return _Exec(proc, writer if stdin else None, reader, None)
        p = proc.process
        return _Exec(proc, p.stdin, p.stdout, p.stderr)

    async def attach(self, pod: PodRef, container: str, *, stdin: bool, tty: bool) -> ExecProcess:
        runner, handle = self._handle_of(pod, container)
        assert isinstance(handle, ContainerHandle)
        att = None
        for _ in range(20):  # the shim opens attach.sock right after the container started
            try:
                att = await runner.deps.runtime.attach(handle)
                break
            except FileNotFoundError:
                await asyncio.sleep(0.1)
            except OSError as e:
                raise internal(f"unable to attach to container {container}: {e}") from e
        if att is None:
            raise internal(f"unable to attach to container {container}: the shim serves no attach socket")
        return await _AttachProcess.open(att, lambda: runner.deps.runtime.wait(handle), stdin)

    async def connect(self, pod: PodRef, port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        runner = self._runner(pod)
        netns = "" if runner.st.host_network else str(
            Path(runner.deps.netns_dir or "/run/netns") / f"lite-{runner.st.uid}")
        try:
            return await netns_socket.open_localhost(netns, port)
        except OSError as e:
            # the server prefixes the kubelet's "error forwarding port <p> to pod <name>, uid <uid>: "
            raise internal(f"failed to connect to localhost:{port} inside the pod's network namespace: "
                           f"{e.strerror or e}") from e
