"""Termination messages (kubelet's `terminationMessagePath` and `terminationMessagePolicy`).

Each container attempt gets a host file `<pod_dir>/containers/<name>/termination-<attempt>`, created empty with
mode 0666 (any container user may write it) and bind-mounted at the container's `terminationMessagePath`
(default `/dev/termination-log`). When the attempt ends, its message is what the file holds, at most 4 KiB;
with `FallbackToLogsOnError`, an empty file and a non-zero exit, the end of the attempt's log instead: its
last 80 lines, at most the last 2,048 bytes (the kubelet's limits).

Invariants: reading is bounded (4 KiB from the file, 64 KiB from the end of the log), so it may run on the
event loop; nothing here follows a link out of the pod's directory (the file is created by the agent and
only its contents come from the container).
"""

from __future__ import annotations

import os
from pathlib import Path

from lite.agent.streams.crilog import parse_line

DEFAULT_PATH = "/dev/termination-log"  # what the API defaults terminationMessagePath to
MAX_MESSAGE = 4096
LOG_LINES = 80
LOG_BYTES = 2048
_LOG_WINDOW = 64 * 1024


def message_file(container_dir: Path, attempt: int) -> Path:
    return container_dir / f"termination-{attempt}"


def prepare(path: Path) -> None:
    """An empty, world-writable message file (replaced if an earlier attempt of this number left one)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_CREAT | os.O_TRUNC | os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)
    try:
        os.fchmod(fd, 0o666)
    finally:
        os.close(fd)


def read_message(path: Path) -> str:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return ""
    try:
        return os.read(fd, MAX_MESSAGE).decode(errors="replace")
    finally:
        os.close(fd)


def log_tail(log_path: Path) -> str:
    """The last LOG_LINES lines of a CRI log's content, at most its last LOG_BYTES bytes."""
    try:
        with open(log_path, "rb") as f:
            size = f.seek(0, os.SEEK_END)
            f.seek(max(0, size - _LOG_WINDOW))
            data = f.read()
    except OSError:
        return ""
    raw = data.split(b"\n")
    if size > _LOG_WINDOW:
        raw = raw[1:]  # the first line may be cut
    out, line = [], b""
    for rec in (parse_line(r) for r in raw if r):
        line += rec.message
        if rec.full:
            out.append(line + b"\n")
            line = b""
    if line:
        out.append(line)
    text = b"".join(out[-LOG_LINES:])
    return text[-LOG_BYTES:].decode(errors="replace")


def termination_message(container: dict[str, object], path: Path, log_path: Path, exit_code: int) -> str:
    """What `state.terminated.message` says for an attempt that ended with `exit_code`."""
    msg = read_message(path)
    if not msg and exit_code != 0 and container.get("terminationMessagePolicy") == "FallbackToLogsOnError":
        msg = log_tail(log_path)
    return msg
