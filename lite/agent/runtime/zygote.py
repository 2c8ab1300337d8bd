"""The shim fork-server: one small warm process that forks a shim per container start, instead of a new
interpreter per start (~150 ms of CPU and ~13 MiB each; a fork of the warm zygote costs a few ms and shares its
pages copy-on-write).

    agent (Runtime) ──SOCK_SEQPACKET: state_dir + report pipe (SCM_RIGHTS)──► zygote ──fork──► A ──fork──► shim
                    ◄───────────── one JSON line on the report pipe, then EOF ──────────────────────────────┘

- The zygote is started once per `Runtime`, lazily, as a fresh process (`lite shim zygote <fd>`, or in dev the
  interpreter with `-I -S`, so no site hooks are loaded): it never inherits the agent's threads, so forking it
  is safe. It imports only the shim's modules and freezes them out of the GC so children keep sharing pages.
- The fork `A` sets up stdio (stdin /dev/null, stdout the report pipe, stderr `<state_dir>/shim.log`) and runs
  `shim.run`, which forks the real shim and exits: shims are never children of the zygote nor of the agent,
  so they outlive both (agent restarts adopt them as before); the zygote reaps `A` at once.
- The zygote exits when the agent's end of the socket closes (agent exit or `close()`).
- `ZygoteClient.launch` is loop-independent (a blocking send of a few bytes); the caller reads the report
  pipe on its own loop. A dead zygote is replaced once per launch; if none can be started the caller falls
  back to starting the shim as a fresh process.
"""

from __future__ import annotations

import gc
import os
import socket
import subprocess
import sys
import threading
import traceback
from pathlib import Path

from lite.agent.runtime.state import SHIM_LOG

MAX_REQUEST = 8192


def zygote_command() -> list[str]:
    """How to start the zygote (the fd number is appended): the frozen binary, or a site-less interpreter."""
    if getattr(sys, "frozen", False):
        return [sys.executable, "shim", "zygote"]
    root = str(Path(__file__).resolve().parents[3])
    boot = (f"import sys; sys.path.insert(0, {root!r}); from lite.agent.runtime.shim import main; "
            "sys.exit(main(sys.argv[1:]))")
    return [sys.executable, "-I", "-S", "-c", boot, "zygote"]


# ---- the zygote process -------------------------------------------------------------------------------------

def serve(fd: int) -> int:
    """The zygote's loop (runs in its own process): one shim per request until the socket closes."""
    from lite.agent.runtime import shim  # the code every child runs, imported once here

    sock = socket.socket(fileno=fd)
    gc.collect()
    gc.freeze()  # objects of the warm image are never touched by a child's GC: pages stay shared
    while True:
        try:
            data, fds, _flags, _addr = socket.recv_fds(sock, MAX_REQUEST, 1)
        except InterruptedError:
            continue
        if not data:
            return 0
        if len(fds) != 1:
            for f in fds:
                os.close(f)
            continue
        pid = os.fork()
        if pid == 0:
            _child(sock, data.decode(), fds[0], shim.run)
        os.close(fds[0])
        os.waitpid(pid, 0)  # A exits right after forking the shim


def _child(sock: socket.socket, state_dir: str, report_fd: int, run: object) -> None:
    code = 1
    try:
        sock.close()
        log = os.open(os.path.join(state_dir, SHIM_LOG), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        null = os.open(os.devnull, os.O_RDONLY)
        for target, src in ((0, null), (1, report_fd), (2, log)):
            os.dup2(src, target)
        for f in {null, report_fd, log}:
            os.close(f)
        code = run(Path(state_dir))  # type: ignore[operator]
    except BaseException:
        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        os._exit(code)


# ---- the agent's side -------------------------------------------------------------------------------------

class ZygoteClient:
    """The agent's handle on its zygote (started on first use)."""

    def __init__(self, command: list[str] | None = None) -> None:
        self.command = command or zygote_command()
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None
        self._proc: subprocess.Popen[bytes] | None = None

    def _spawn(self) -> socket.socket:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self._proc = subprocess.Popen(
                [*self.command, str(theirs.fileno())], pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL, start_new_session=True)
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        ours.setblocking(False)  # a stuck zygote must never block the agent's loop: its queue fills instead
        self._sock = ours
        return ours

    def launch(self, state_dir: str) -> int:
        """Ask for a shim on `state_dir`; returns the read end of its report pipe (the caller closes it).
        Raises BlockingIOError when the zygote is too far behind, another OSError when none can be started."""
        r, w = os.pipe2(os.O_CLOEXEC)
        try:
            with self._lock:
                for attempt in (0, 1):
                    sock = self._sock or self._spawn()
                    try:
                        socket.send_fds(sock, [state_dir.encode()], [w])
                        break
                    except BlockingIOError:
                        raise  # alive but behind: this start goes another way, the zygote stays
                    except OSError:
                        self._drop()
                        if attempt:
                            raise
        except BaseException:
            os.close(r)
            raise
        finally:
            os.close(w)
        return r

    def _drop(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        if self._proc is not None:
            try:
                self._proc.wait(5)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
            self._proc = None

    def close(self) -> None:
        """End the zygote (running shims are not affected)."""
        with self._lock:
            self._drop()

    def alive(self) -> bool:
        """Whether the zygote process is running (a killed one may have swallowed a queued request)."""
        with self._lock:
            return self._proc is not None and self._proc.poll() is None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None
