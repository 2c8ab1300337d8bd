"""The agent-side container runtime: start/wait/stop/adopt/exec containers that live under per-container shims.

Containers are never children of the agent: `start` launches the shim (which detaches itself) and returns
once init has exec'd, or raises `ContainerStartError`. All later knowledge comes from the state_dir files and the
shim's pid (pidfd), so a new agent process can `adopt` a container the old one started. `stop` = SIGTERM to init,
then SIGKILL after the grace period (a PID-namespace init ignores SIGTERM unless it handles it); killing init
tears down the container's pid namespace. `ProcessRuntime` runs plain host processes (no namespaces, no root fs,
host network) through the same shim, still placed in the pod's cgroups; there signals go to init's process group.

`exec` runs a helper (`shim exec`) as the agent's child that joins the container's namespaces and cgroups;
`attach` connects to the shim's unix socket (output from now on, stdin, resize), also after an agent restart.
In the process runtime the container's other processes outlive init: the pod's cgroup kill_all cleans them up.

Concurrency: any number of callers may `wait` on one handle at once; `stop` and `wait` are safe to call after
the container ended. Blocking work is limited to small state_dir file reads and writes.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import fcntl
import json
import os
import shutil
import signal
import struct
import sys
import termios
from pathlib import Path

from lite.agent.runtime.attach import CLOSE_STDIN, HEADER, RESIZE, STDIN, STDOUT, frame, short_path
from lite.agent.runtime.spec import ContainerSpec, ExitStatus, Mount
from lite.agent.runtime.state import (
    EXIT,
    SHIM,
    SHIM_LOG,
    SPEC,
    STARTING,
    ShimRecord,
    read_json,
    starting_pid,
    write_atomic,
)
from lite.agent.runtime.zygote import ZygoteClient
from lite.records import dataclass

__all__ = ["Attachment", "ContainerHandle", "ContainerSpec", "ContainerStartError", "ExecProcess", "ExitStatus",
           "Mount", "ProcessRuntime", "Runtime", "shim_command"]


class ContainerStartError(Exception):
    """The container could not be started (message as kubelet's StartError / CreateContainerError)."""


def shim_command() -> list[str]:
    """How to re-execute this program as a shim: the frozen `lite` binary, or this interpreter in dev."""
    if getattr(sys, "frozen", False):
        return [sys.executable, "shim"]
    return [sys.executable, "-m", "lite.agent.runtime.shim"]


@dataclass(frozen=True)
class ContainerHandle:
    id: str
    state_dir: str
    shim_pid: int
    init_pid: int
    record: ShimRecord
    spec: ContainerSpec

    def running(self) -> bool:
        return self.record.init_alive()


@dataclass
class ExecProcess:
    """A process run inside a container. With a tty, `master_fd` is the pty master (read output, write input);
    without, use `process.stdin/stdout/stderr` (None where not requested)."""

    process: asyncio.subprocess.Process
    master_fd: int | None = None

    async def wait(self) -> int:
        return await self.process.wait()

    def discard(self) -> None:
        """The output is no longer wanted (a probe timed out or was cancelled): kill the process and close its
        pipes now. Otherwise its transport closes only once both pipes reach EOF, which a descendant still
        holding them delays past the process's exit (and `wait`, which waits for them too); a transport still
        open when its loop closes warns from `__del__` and raises "Event loop is closed" there."""
        with contextlib.suppress(ProcessLookupError):
            self.process.kill()
        transport = getattr(self.process, "_transport", None)  # asyncio keeps no public handle on it
        if transport is not None:
            transport.close()

    def resize(self, rows: int, cols: int) -> None:
        if self.master_fd is not None:
            fcntl.ioctl(self.master_fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))

    def close(self) -> None:
        if self.master_fd is not None:
            os.close(self.master_fd)
            self.master_fd = None


class Attachment:
    """A connection to a running container's stdio through its shim (see `attach`): output from now on, and
    input when the container was started with `stdin`."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader, self._writer = reader, writer

    async def read(self) -> tuple[str, bytes] | None:
        """The next ("stdout" | "stderr", data) chunk; None once the container ended or we were dropped."""
        try:
            header = await self._reader.readexactly(HEADER.size)
            kind, length = HEADER.unpack(header)
            payload = await self._reader.readexactly(length)
        except (asyncio.IncompleteReadError, ConnectionError):
            return None
        return ("stdout" if kind == STDOUT else "stderr"), payload

    async def write(self, data: bytes) -> None:
        self._writer.write(frame(STDIN, data))
        await self._writer.drain()

    async def close_stdin(self) -> None:
        self._writer.write(frame(CLOSE_STDIN))
        await self._writer.drain()

    async def resize(self, rows: int, cols: int) -> None:
        self._writer.write(frame(RESIZE, struct.pack(">HH", rows, cols)))
        await self._writer.drain()

    async def close(self) -> None:
        self._writer.close()
        try:
            await self._writer.wait_closed()
        except ConnectionError:
            pass


class Runtime:
    """Namespaced containers (pid/mnt/uts/ipc, pod netns, pivot_root into the image root fs)."""

    isolate = True

    def __init__(self, command: list[str] | None = None) -> None:
        self.command = command or shim_command()
        # the default shim is forked from a warm zygote; a custom command (tests, wrappers) is exec'd per start
        self.zygote: ZygoteClient | None = ZygoteClient() if command is None else None

    def _prepare(self, spec: ContainerSpec) -> ContainerSpec:
        return spec if spec.isolate == self.isolate else dataclasses.replace(spec, isolate=self.isolate)

    def close(self) -> None:
        """Stop the zygote (containers and their shims keep running)."""
        if self.zygote is not None:
            self.zygote.close()

    async def start(self, spec: ContainerSpec) -> ContainerHandle:
        spec = self._prepare(spec)
        state = Path(spec.state_dir)
        await asyncio.to_thread(_reset_state_dir, state, spec)
        out, how = await self._launch(state)
        try:
            report = json.loads(out.decode().strip() or "{}")
        except json.JSONDecodeError:
            report = {}
        if "error" in report:
            raise ContainerStartError(str(report["error"]))
        record = ShimRecord.load(state)
        if record is None or "init_pid" not in report:
            tail = (state / SHIM_LOG).read_text(errors="replace")[-2000:]
            raise ContainerStartError(f"shim failed to start ({how}): {tail}")
        return ContainerHandle(spec.id, spec.state_dir, record.shim_pid, record.init_pid, record, spec)

    async def _launch(self, state: Path) -> tuple[bytes, str]:
        """Start the shim on `state`; its report line (and how it ended, for errors)."""
        for _ in (0, 1):
            if self.zygote is None:
                break
            try:
                fd = self.zygote.launch(str(state))
            except BlockingIOError:
                break  # the zygote is stuck or far behind: this shim is exec'd
            except OSError:  # no zygote can be started here: one process per shim from now on
                self.zygote.close()
                self.zygote = None
                break
            out = await _read_to_eof(fd)
            if out or self.zygote.alive():
                return out, "zygote fork"
            # The zygote died with this request queued (it was killed): no shim was forked; ask a new one.
            self.zygote.close()
        shim_log = os.open(state / SHIM_LOG, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)
        try:
            proc = await asyncio.create_subprocess_exec(
                *self.command, "run", str(state), stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE, stderr=shim_log)
        finally:
            os.close(shim_log)
        out, _ = await proc.communicate()
        return out, f"exit {proc.returncode}"

    async def wait(self, handle: ContainerHandle) -> ExitStatus:
        """Until the container has ended; its `ExitStatus` (also after an agent restart, via the state_dir)."""
        state = Path(handle.state_dir)
        status = _read_exit(state)
        if status is not None:
            return status
        if handle.record.shim_alive():
            try:
                pidfd = os.pidfd_open(handle.shim_pid)
            except ProcessLookupError:
                pidfd = -1
            if pidfd >= 0:
                try:
                    await _readable(pidfd)
                finally:
                    os.close(pidfd)
        status = _read_exit(state)
        if status is None:  # the shim was killed; init died with it (PDEATHSIG)
            status = ExitStatus(128 + signal.SIGKILL, signal.SIGKILL, reason="ShimLost")
        return status

    async def stop(self, handle: ContainerHandle, grace: float) -> ExitStatus:
        """SIGTERM, then SIGKILL after `grace` seconds if init is still there; returns the exit status."""
        waiter = asyncio.ensure_future(self.wait(handle))
        try:
            self._signal(handle, signal.SIGTERM)
            done, _ = await asyncio.wait({waiter}, timeout=max(0.0, grace))
            if not done:
                self._signal(handle, signal.SIGKILL)
            return await waiter
        finally:
            waiter.cancel()

    def signal(self, handle: ContainerHandle, signum: int) -> None:
        self._signal(handle, signum)

    def _signal(self, handle: ContainerHandle, signum: int) -> None:
        if not handle.record.init_alive():
            return
        try:
            if self.isolate:
                os.kill(handle.init_pid, signum)
            else:
                os.killpg(handle.init_pid, signum)
        except ProcessLookupError:
            pass

    async def adopt(self, state_dir: str) -> ContainerHandle | ExitStatus:
        """Re-attach to a container started by an earlier agent process, or its final status."""
        state = Path(state_dir)
        status = _read_exit(state)
        if status is not None:
            return status
        record = ShimRecord.load(state)
        if record is None:
            record = await _await_starting_shim(state)
        raw = read_json(state / SPEC)
        if record is None or raw is None or not record.shim_alive():
            status = _read_exit(state)  # the shim may have finished in between
            return status or ExitStatus(128 + signal.SIGKILL, signal.SIGKILL, reason="ShimLost")
        spec = ContainerSpec.from_json(json.dumps(raw))
        return ContainerHandle(spec.id, state_dir, record.shim_pid, record.init_pid, record, spec)

    async def exec(self, handle: ContainerHandle, argv: list[str], *, tty: bool = False, stdin: bool = False,
                   env: dict[str, str] | None = None) -> ExecProcess:
        """Run argv in the container's namespaces and cgroups (as the container's user), streaming via pipes
        or a pty."""
        if not handle.record.init_alive():
            raise ContainerStartError(f"container {handle.id} is not running")
        spec = dataclasses.replace(handle.spec, env={**handle.spec.env, **(env or {})})
        req = {"init_pid": handle.init_pid, "argv": argv, "tty": tty, "isolate": self.isolate,
               "cgroup_procs": spec.cgroup_procs, "spec": json.loads(spec.to_json())}
        args = [*self.command, "exec", json.dumps(req)]
        if tty:
            master, slave = os.openpty()
            try:
                proc = await asyncio.create_subprocess_exec(*args, stdin=slave, stdout=slave, stderr=slave)
            finally:
                os.close(slave)
            return ExecProcess(proc, master)
        pipe = asyncio.subprocess.PIPE
        proc = await asyncio.create_subprocess_exec(
            *args, stdin=pipe if stdin else asyncio.subprocess.DEVNULL, stdout=pipe, stderr=pipe)
        return ExecProcess(proc)

    async def attach(self, handle: ContainerHandle) -> Attachment:
        """Connect to the container's stdio (served by its shim; works across agent restarts)."""
        with short_path(handle.state_dir) as path:
            reader, writer = await asyncio.open_unix_connection(path)
        return Attachment(reader, writer)

    async def remove(self, state_dir: str) -> None:
        """Delete a finished container's state_dir (the root fs mount died with init's mount namespace)."""
        await asyncio.to_thread(shutil.rmtree, state_dir, True)


class ProcessRuntime(Runtime):
    """`--runtime process`: host processes, no namespaces or root fs, host network; cgroups still apply."""

    isolate = False


def _reset_state_dir(state: Path, spec: ContainerSpec) -> None:
    state.mkdir(parents=True, exist_ok=True)
    for name in (SHIM, EXIT, STARTING):
        (state / name).unlink(missing_ok=True)
    write_atomic(state / SPEC, spec.to_json())


async def _await_starting_shim(state: Path, patience: float = 60.0) -> ShimRecord | None:
    """The agent died while a shim was starting: wait for it to finish starting (or give up and kill it)."""
    pid = starting_pid(state)
    if pid is None:
        return ShimRecord.load(state)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + patience
    while starting_pid(state) == pid and loop.time() < deadline:
        record = ShimRecord.load(state)
        if record is not None or _read_exit(state) is not None:
            return record
        await asyncio.sleep(0.05)
    if starting_pid(state) == pid:
        os.kill(pid, signal.SIGKILL)  # stuck before its init ran: nothing to adopt
    return ShimRecord.load(state)


def _read_exit(state: Path) -> ExitStatus | None:
    raw = read_json(state / EXIT)
    return None if raw is None else ExitStatus(**raw)


async def _read_to_eof(fd: int) -> bytes:
    """Everything written to the pipe `fd` until its writers closed it; closes `fd`."""
    chunks: list[bytes] = []
    try:
        os.set_blocking(fd, False)
        while True:
            try:
                chunk = os.read(fd, 65536)
            except BlockingIOError:
                await _readable(fd)
                continue
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)
    finally:
        os.close(fd)


async def _readable(fd: int) -> None:
    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()

    def ready() -> None:
        if not done.done():
            done.set_result(None)

    loop.add_reader(fd, ready)
    try:
        await done
    finally:
        loop.remove_reader(fd)
