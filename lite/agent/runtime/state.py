"""The files of a container's state_dir and how they are written (atomic rename) and read.

- `spec.json`   written by the agent before the shim starts.
- `starting.json` written by the shim first: its pid, start time and boot id (lets a restarted agent wait for a
                  start; `starting_pid`).
- `shim.json`   written by the shim once init has exec'd: shim pid, init pid, both start times and the boot id
                (pid reuse guard: a start time counts from boot, so after a reboot only the boot id tells a
                recorded pid from a new process that happens to have the same pid and start time).
- `exit.json`   written by the shim when init has ended (an `ExitStatus`); the shim exits right after.
- `shim.log`    the shim's own stderr (diagnostics only).
- `rootfs/`     the mount point of the container's root inside init's private mount namespace.
A reader never sees a half-written JSON file: writers use `lite.atomicfile` (temp file, fsync, rename, fsync of
the directory).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from lite import atomicfile
from lite.records import dataclass

SPEC = "spec.json"
SHIM = "shim.json"
STARTING = "starting.json"
EXIT = "exit.json"
SHIM_LOG = "shim.log"
BOOT_ID = Path("/proc/sys/kernel/random/boot_id")


def boot_id() -> str:
    """This boot's id (new at every boot of the machine); "" where the kernel does not say."""
    try:
        return BOOT_ID.read_text().strip()
    except OSError:
        return ""


def write_atomic(path: Path, text: str) -> None:
    """Replace a state file (0644, as files made under the agent's umask were), durably: `lite.atomicfile`."""
    atomicfile.write(path, text, mode=0o644)


def read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None
    return data if isinstance(data, dict) else None


def _stat(pid: int) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return stat.rsplit(")", 1)[1].split()  # fields from 3 (state) on; comm may contain spaces and ")"


def start_time(pid: int) -> int | None:
    """The process start time (clock ticks since boot, /proc/<pid>/stat field 22) or None if it is gone."""
    fields = _stat(pid)
    return None if fields is None else int(fields[19])


def alive(pid: int, started: int) -> bool:
    """The same process (pid reuse guard) is still running, not a zombie."""
    fields = _stat(pid)
    return fields is not None and int(fields[19]) == started and fields[0] not in ("Z", "X")


@dataclass(frozen=True)
class ShimRecord:
    shim_pid: int
    init_pid: int
    shim_start: int
    init_start: int
    boot: str = ""  # the boot the shim ran in ("" in records of older shims: not checked)

    def this_boot(self) -> bool:
        return not self.boot or self.boot == boot_id()

    def shim_alive(self) -> bool:
        return self.this_boot() and alive(self.shim_pid, self.shim_start)

    def init_alive(self) -> bool:
        return self.this_boot() and alive(self.init_pid, self.init_start)

    @classmethod
    def load(cls, state_dir: Path) -> ShimRecord | None:
        raw = read_json(state_dir / SHIM)
        if raw is None:
            return None
        return cls(**{k: v for k, v in raw.items() if k in cls.__dataclass_fields__})


def starting_pid(state_dir: Path) -> int | None:
    """The pid of the shim still starting in `state_dir` (its `starting.json`, same process and boot), else None."""
    raw = read_json(state_dir / STARTING) or {}
    try:
        pid, started = int(raw["shim_pid"]), int(raw["shim_start"])
    except (KeyError, TypeError, ValueError):
        return None
    if raw.get("boot") and raw.get("boot") != boot_id():
        return None
    return pid if alive(pid, started) else None
