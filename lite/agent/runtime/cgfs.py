"""Shared pieces of the cgroup backends: resource/stat records, kubelet's CPU formulas, file helpers, kill/remove.

Blocking, short file I/O only. No module state. See `cgroups` for the public interface and the tree layout.
"""

from __future__ import annotations

import errno
import os
import signal
import time
from pathlib import Path
from typing import Protocol

from lite.records import dataclass

CFS_PERIOD_US = 100_000
MIN_SHARES = 2
MAX_SHARES = 262_144
V1_CONTROLLERS = ("cpu", "cpuacct", "memory", "pids", "devices")
# runc's default device allow-list: mknod of anything, access only to the usual character devices
V1_DEVICE_ALLOW = ("c *:* m", "b *:* m", "c 1:3 rwm", "c 1:5 rwm", "c 1:7 rwm", "c 1:8 rwm", "c 1:9 rwm",
                   "c 5:0 rwm", "c 5:1 rwm", "c 5:2 rwm", "c 136:* rwm", "c 10:200 rwm")
V2_CONTROLLERS = ("cpu", "memory", "pids")
QOS_CLASSES = ("Guaranteed", "Burstable", "BestEffort")


class CgroupError(Exception):
    """No usable cgroup hierarchy, or a cgroup that cannot be created or removed."""


def cpu_shares(milli: int) -> int:
    """kubelet MilliCPUToShares: milliCPU*1024/1000, at least 2, at most 262144."""
    if milli <= 0:
        return MIN_SHARES
    return max(MIN_SHARES, min(MAX_SHARES, milli * 1024 // 1000))


def shares_to_weight(shares: int) -> int:
    """kubelet CpuSharesToCpuWeight (cgroup v2): maps [2, 262144] linearly onto [1, 10000]."""
    return 1 + ((shares - 2) * 9999) // 262142


def cpu_quota(limit_milli: int, period_us: int = CFS_PERIOD_US) -> int:
    """kubelet MilliCPUToQuota: limit*period/1000 microseconds, at least 1 ms."""
    return max(1000, limit_milli * period_us // 1000)


@dataclass(frozen=True)
class CgroupResources:
    """Limits for one cgroup. None = unlimited; cpu_request_milli 0 = minimal shares (BestEffort)."""

    cpu_request_milli: int = 0
    cpu_limit_milli: int | None = None
    memory_limit: int | None = None
    pids_limit: int | None = None
    all_devices: bool = False  # a privileged container: every device, not just V1_DEVICE_ALLOW


@dataclass(frozen=True)
class CgroupStats:
    cpu_usage_ns: int
    memory_usage_bytes: int
    memory_working_set: int
    oom_kills: int
    pids: int


class Cgroup(Protocol):
    """One cgroup (pod or container) across all hierarchies of its driver."""

    @property
    def path(self) -> str: ...
    def procs_paths(self) -> list[str]: ...
    def add_pid(self, pid: int) -> None: ...
    def stats(self) -> CgroupStats: ...
    def kill_all(self) -> None: ...
    def remove(self) -> None: ...


def _write(path: Path, value: str) -> None:
    with open(path, "w") as f:
        f.write(value)


def _read(path: Path, default: str = "") -> str:
    try:
        return path.read_text()
    except (FileNotFoundError, ProcessLookupError):
        return default


def _kv(path: Path) -> dict[str, int]:
    out: dict[str, int] = {}
    for line in _read(path).splitlines():
        key, _, value = line.partition(" ")
        if value.strip().lstrip("-").isdigit():
            out[key] = int(value)
    return out


def _int(path: Path) -> int:
    text = _read(path).strip()
    return int(text) if text.isdigit() else 0


def _pids_in(dirs: list[Path]) -> set[int]:
    """Pids in these cgroup directories and all their descendants."""
    pids: set[int] = set()
    for top in dirs:
        if not top.is_dir():
            continue
        for here, _subdirs, _files in os.walk(top):
            pids.update(int(p) for p in _read(Path(here) / "cgroup.procs").split() if p.isdigit())
    return pids


def _rmdir_tree(top: Path) -> None:
    """rmdir children before parents; ENOENT is fine. Retries EBUSY briefly (exiting tasks still detaching)."""
    if not top.exists():
        return
    dirs = sorted((Path(h) for h, _d, _f in os.walk(top)), key=lambda p: len(p.parts), reverse=True)
    for d in dirs:
        for attempt in range(100):
            try:
                d.rmdir()
                break
            except FileNotFoundError:
                break
            except OSError as e:
                if e.errno == errno.ENOTEMPTY:
                    # Only a fake (test) tree holds plain files; real cgroupfs ignores its interface files.
                    _clear_fake(d)
                    continue
                if e.errno != errno.EBUSY or attempt == 99:
                    raise CgroupError(f"cannot remove cgroup {d}: {e}") from e
                time.sleep(0.02)


def _clear_fake(d: Path) -> None:
    for child in d.iterdir():
        if child.is_file():
            child.unlink()


def _kill_loop(dirs: list[Path]) -> None:
    """SIGKILL every pid found until the cgroups are empty (new forks may appear between rounds)."""
    for _ in range(100):
        pids = _pids_in(dirs)
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.01)
    raise CgroupError(f"processes keep appearing in {dirs[0]}")
