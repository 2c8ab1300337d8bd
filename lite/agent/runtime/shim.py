"""The per-container shim: a small supervisor process that owns one container's init, so the agent may die.

`lite shim run <state_dir>` (or `python -m lite.agent.runtime.shim run <state_dir>`):
  the launched process forks the real shim and exits at once (so the shim is never the agent's child); the shim
  does setsid + PR_SET_CHILD_SUBREAPER, joins the pod netns, unshares pid/uts/ipc, forks init (see `init`), and
  reports `{"shim_pid", "init_pid"}` or `{"error"}` as one JSON line on its stdout (a pipe the agent reads to EOF).
  Then it copies init's stdout/stderr (or pty) into the CRI log, forwards TERM/INT/HUP/QUIT/USR1/USR2/WINCH to
  init, reaps orphans, and when init ends writes `exit.json` (code, signal, oom) and exits.
`lite shim zygote <fd>`: the fork-server that runs `run` in forks of one warm process (see `zygote`).
`lite shim exec <json>`: joins a running container (cgroups, then ipc/uts/net/pid/mnt namespaces of its init),
  forks, and runs argv there with the caller's stdio; exits with the child's code (128+signal when killed).

Single-threaded, stdlib + ctypes only, no asyncio: it starts fast and forks safely.
"""

from __future__ import annotations

import fcntl
import json
import os
import selectors
import signal
import sys
import termios
import time
import traceback
from pathlib import Path
from typing import Any

from lite.agent.runtime import linux as lx
from lite.agent.runtime.attach import AttachServer
from lite.agent.runtime.crilog import CriLogWriter
from lite.agent.runtime.init import drop_privileges, resolve, run_init
from lite.agent.runtime.spec import ContainerSpec, ExitStatus
from lite.agent.runtime.state import EXIT, SHIM, SPEC, STARTING, boot_id, start_time, write_atomic

FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2,
             signal.SIGWINCH)
DRAIN_SECONDS = 2.0


def reset_signals() -> None:
    """Default dispositions before execve: Python ignores SIGPIPE and SIGXFSZ, and ignored signals survive
    exec (a container would never die of a broken pipe)."""
    for sig in (*FORWARDED, signal.SIGPIPE, signal.SIGXFSZ):
        signal.signal(sig, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_SETMASK, set())


def oom_counters(procs_paths: list[str]) -> int:
    """Sum of oom_kill counters of the container cgroups and their parents (v1 counts at the limited level)."""
    total = 0
    dirs = {os.path.dirname(p) for p in procs_paths}
    for d in dirs | {os.path.dirname(d) for d in dirs}:
        for name in ("memory.oom_control", "memory.events"):
            try:
                with open(os.path.join(d, name)) as f:
                    for line in f:
                        key, _, value = line.partition(" ")
                        if key == "oom_kill":
                            total += int(value)
            except OSError:
                pass
    return total


def status_of(wait_status: int, oom_delta: int) -> ExitStatus:
    if os.WIFSIGNALED(wait_status):
        sig = os.WTERMSIG(wait_status)
        return ExitStatus(128 + sig, sig, oom=sig == signal.SIGKILL and oom_delta > 0, finished_at=time.time())
    code = os.waitstatus_to_exitcode(wait_status)
    return ExitStatus(code, None, oom=code == 137 and oom_delta > 0, finished_at=time.time())


class Stdio:
    """The container side and the shim side of init's stdio: pipes, or one pty."""

    def __init__(self, spec: ContainerSpec) -> None:
        self.tty = spec.tty
        self.stdin_w: int | None = None
        self.master = -1
        if spec.tty:
            self.master, slave = os.openpty()
            self.child = (slave, slave, slave)
            self.readers = {self.master: "stdout"}
            self.stdin_w = self.master if spec.stdin else None
            return
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        if spec.stdin:
            in_r, self.stdin_w = os.pipe()
        else:
            in_r = os.open(os.devnull, os.O_RDONLY)
        self.child = (in_r, out_w, err_w)
        self.readers = {out_r: "stdout", err_r: "stderr"}

    def setup_child(self) -> None:
        """In init: stdio onto 0/1/2; a session of its own (and the pty as controlling terminal)."""
        for target, fd in enumerate(self.child):
            os.dup2(fd, target)
        os.setsid()
        if self.tty:
            fcntl.ioctl(0, termios.TIOCSCTTY, 0)

    def close_child_ends(self) -> None:
        for fd in set(self.child):
            os.close(fd)


def _report(data: dict[str, Any]) -> None:
    os.write(1, (json.dumps(data) + "\n").encode())
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.close(devnull)


def _enter_namespaces(spec: ContainerSpec) -> None:
    if not spec.isolate:
        return
    if spec.netns:
        fd = os.open(spec.netns, os.O_RDONLY | os.O_CLOEXEC)
        try:
            lx.setns(fd, lx.CLONE_NEWNET)
        finally:
            os.close(fd)
    if spec.pid_ns:
        fd = os.open(spec.pid_ns, os.O_RDONLY | os.O_CLOEXEC)
        try:
            lx.setns(fd, lx.CLONE_NEWPID)  # init (forked next) is born in the pod's shared pid namespace
        finally:
            os.close(fd)
    own_pid = not (spec.host_pid or spec.pid_ns)
    lx.unshare((lx.CLONE_NEWPID if own_pid else 0) | lx.CLONE_NEWUTS | (0 if spec.host_ipc else lx.CLONE_NEWIPC))


def kill_leftovers(spec: ContainerSpec) -> None:
    """Without a pid namespace of its own, init's end does not end its children: kill what is left in the
    container's cgroup (as runc does for containers sharing a pid namespace)."""
    if not (spec.host_pid or spec.pid_ns):
        return
    for procs in spec.cgroup_procs:
        try:
            with open(procs) as f:
                pids = [int(p) for p in f.read().split()]
        except OSError:
            continue
        for pid in pids:
            if pid != os.getpid():
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass


def _fork_init(spec: ContainerSpec, stdio: Stdio) -> tuple[int, str]:
    """Fork init; returns (pid, error text or "") once init has exec'd or failed."""
    err_r, err_w = os.pipe2(os.O_CLOEXEC)
    shim_pid = os.getpid()
    pid = os.fork()
    if pid == 0:
        try:
            reset_signals()
            os.close(err_r)
            stdio.setup_child()
            run_init(spec, shim_pid)
        except BaseException as e:
            os.write(err_w, f"{type(e).__name__}: {e}".encode()[:4000])
        os._exit(127)
    os.close(err_w)
    stdio.close_child_ends()
    chunks = []
    while chunk := os.read(err_r, 4096):
        chunks.append(chunk)
    os.close(err_r)
    return pid, b"".join(chunks).decode(errors="replace")


def _pump(spec: ContainerSpec, stdio: Stdio, init_pid: int, log: CriLogWriter) -> int:
    """Copy output (log file, attached clients) and input until init has exited and the streams are drained;
    returns init's wait status."""
    sel = selectors.DefaultSelector()
    attach = AttachServer(spec.state_dir, stdio.stdin_w, stdio.master if spec.tty else None, spec.stdin_once)
    sel.register(attach.listener, selectors.EVENT_READ, "accept")
    pidfd = os.pidfd_open(init_pid)
    sel.register(pidfd, selectors.EVENT_READ, "exit")
    for fd, stream in stdio.readers.items():
        os.set_blocking(fd, False)
        sel.register(fd, selectors.EVENT_READ, stream)
    status: int | None = None
    deadline = 0.0
    while True:
        timeout = None if status is None else max(0.0, deadline - time.monotonic())
        if status is not None and (not stdio.readers or timeout == 0.0):
            break
        if attach.pending:
            attach.flush_stdin()
            timeout = 0.05 if timeout is None else min(timeout, 0.05)  # poll until the container reads it
        for key, _ in sel.select(timeout):
            if key.data == "exit":
                continue  # reaped below, together with any orphan (this shim is a subreaper)
            fd = int(key.fd)
            if key.data == "accept":
                conn = attach.accept()
                if conn is not None:
                    sel.register(conn, selectors.EVENT_READ, "client")
                continue
            if key.data == "client":
                if not attach.readable(fd):
                    sel.unregister(fd)
                continue
            try:
                data = os.read(fd, 65536)
            except BlockingIOError:
                continue
            except OSError:  # EIO: the pty has no more writers
                data = b""
            if data:
                log.write(str(key.data), data)
                for gone in attach.broadcast(str(key.data), data):
                    sel.unregister(gone)
            else:
                sel.unregister(fd)
                del stdio.readers[fd]
        reaped = _reap(init_pid)
        if reaped is not None and status is None:
            status = reaped
            sel.unregister(pidfd)
            deadline = time.monotonic() + DRAIN_SECONDS
    os.close(pidfd)
    attach.close()
    return status


def _reap(init_pid: int) -> int | None:
    """Reap every exited child; init's wait status if init was among them."""
    found: int | None = None
    while True:
        try:
            pid, wait_status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return found
        if pid == 0:
            return found
        if pid == init_pid:
            found = wait_status


def run(state_dir: Path) -> int:
    if os.fork():
        os._exit(0)  # the agent reaps this one at once; the shim below is adopted by a subreaper or PID 1
    os.setsid()
    lx.prctl(lx.PR_SET_CHILD_SUBREAPER, 1)
    write_atomic(state_dir / STARTING, json.dumps({"shim_pid": os.getpid(), "shim_start": start_time(os.getpid()),
                                                   "boot": boot_id()}))
    spec = ContainerSpec.from_json((state_dir / SPEC).read_text())
    for procs in spec.shim_cgroup_procs:
        # out of the agent's cgroup: a service manager stopping the agent must not take the containers along
        with open(procs, "w") as f:
            f.write("0")
    init_pid = 0

    def forward(signum: int, _frame: object) -> None:
        if init_pid:
            try:
                os.kill(init_pid, signum)
            except ProcessLookupError:
                pass

    for sig in FORWARDED:
        signal.signal(sig, forward)
    oom_before = oom_counters(spec.cgroup_procs)
    try:
        stdio = Stdio(spec)
        log = CriLogWriter(spec.log_path, max_bytes=spec.log_max_bytes, max_files=spec.log_max_files)
        _enter_namespaces(spec)
        init_pid, error = _fork_init(spec, stdio)
    except Exception as e:
        traceback.print_exc()
        error, init_pid = f"{type(e).__name__}: {e}", 0
    if error:
        if init_pid:
            os.waitpid(init_pid, 0)
        write_atomic(state_dir / EXIT, ExitStatus(128, reason=f"StartError: {error}", finished_at=time.time())
                     .to_json())
        _report({"error": error})
        return 1
    record = {"shim_pid": os.getpid(), "init_pid": init_pid, "shim_start": start_time(os.getpid()),
              "init_start": start_time(init_pid), "boot": boot_id()}
    write_atomic(state_dir / SHIM, json.dumps(record))
    _report(record)
    status = _pump(spec, stdio, init_pid, log)
    kill_leftovers(spec)
    log.close()
    result = status_of(status, oom_counters(spec.cgroup_procs) - oom_before)
    write_atomic(state_dir / EXIT, result.to_json())
    return 0


def exec_in(req: dict[str, Any]) -> int:
    """Run req["argv"] inside the container whose init is req["init_pid"]; returns the exit code."""
    init_pid = int(req["init_pid"])
    # Opened now (the host cgroupfs is invisible after setns(mnt)) but written by the child only, so this
    # helper's own memory is not charged to the container.
    cgroup_fds = [os.open(p, os.O_WRONLY | os.O_CLOEXEC) for p in req.get("cgroup_procs", [])]
    if req.get("isolate", True):
        fds = [(os.open(f"/proc/{init_pid}/ns/{ns}", os.O_RDONLY | os.O_CLOEXEC), flag) for ns, flag in (
            ("ipc", lx.CLONE_NEWIPC), ("uts", lx.CLONE_NEWUTS), ("net", lx.CLONE_NEWNET),
            ("pid", lx.CLONE_NEWPID), ("cgroup", lx.CLONE_NEWCGROUP), ("mnt", lx.CLONE_NEWNS))]
        for fd, flag in fds:
            lx.setns(fd, flag)
            os.close(fd)
    spec = ContainerSpec.from_json(json.dumps(req["spec"]))
    pid = os.fork()
    if pid == 0:
        try:
            reset_signals()
            for fd in cgroup_fds:
                os.write(fd, b"0")
            os.setsid()
            if req.get("tty"):
                fcntl.ioctl(0, termios.TIOCSCTTY, 0)
            env = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", **spec.env}
            drop_privileges(spec)
            lx.prctl(lx.PR_SET_PDEATHSIG, signal.SIGKILL)
            os.chdir(spec.cwd or "/")
            os.execve(resolve(req["argv"][0], env), req["argv"], env)
        except BaseException as e:
            os.write(2, f"exec failed: {type(e).__name__}: {e}\n".encode())
            os._exit(126 if not isinstance(e, FileNotFoundError) else 127)

    for fd in cgroup_fds:
        os.close(fd)

    def forward(signum: int, _frame: object) -> None:
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            pass

    for sig in FORWARDED:
        signal.signal(sig, forward)
    return status_of(os.waitpid(pid, 0)[1], 0).code


def main(argv: list[str]) -> int:
    """Entry point of `lite shim ...` (the CLI calls this with the words after "shim")."""
    if len(argv) == 2 and argv[0] == "run":
        return run(Path(argv[1]))
    if len(argv) == 2 and argv[0] == "exec":
        return exec_in(json.loads(argv[1]))
    if len(argv) == 2 and argv[0] == "zygote" and argv[1].isdigit():
        from lite.agent.runtime.zygote import serve

        return serve(int(argv[1]))
    print("usage: lite shim run <state_dir> | lite shim exec <json> | lite shim zygote <fd>", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
