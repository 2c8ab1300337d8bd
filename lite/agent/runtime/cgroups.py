"""Pod and container cgroups: one interface over a cgroup v1 backend and a cgroup v2 backend.

Tree (like kubelet's): `<root>/pod<uid>` for Guaranteed pods, `<root>/burstable/pod<uid>` and
`<root>/besteffort/pod<uid>` for the others; containers in `pod<uid>/<name>`. v1 mirrors that path in each
controller hierarchy (cpu, cpuacct, memory, pids; discovered from /proc/self/mountinfo, where cpu and cpuacct may be
separate mounts); v2 uses one directory and enables `+cpu +memory +pids` in every ancestor's subtree_control, so
processes live only in leaf (container) cgroups (the no-internal-process rule).

`detect()` picks v2 only when the unified hierarchy offers memory, cpu and pids; a hybrid host whose cgroup2 mount
has none of them runs v1. All calls block briefly (a few small file writes): fine on the loop for one pod, else
run them in a thread. `ensure_*` are idempotent (create, or update limits); `remove()` is idempotent.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Protocol

from lite.agent.runtime import devices
from lite.agent.runtime.cgfs import (
    CFS_PERIOD_US,
    QOS_CLASSES,
    V1_CONTROLLERS,
    V1_DEVICE_ALLOW,
    V2_CONTROLLERS,
    Cgroup,
    CgroupError,
    CgroupResources,
    CgroupStats,
    _int,
    _kill_loop,
    _kv,
    _pids_in,
    _read,
    _rmdir_tree,
    _write,
    cpu_quota,
    cpu_shares,
    shares_to_weight,
)

__all__ = [
    "CFS_PERIOD_US", "Cgroup", "CgroupDriver", "CgroupError", "CgroupResources", "CgroupStats", "ContainerCgroup",
    "PodCgroup", "cpu_quota", "cpu_shares", "detect", "qos_dir", "shares_to_weight",
]


class _Backend(Protocol):
    version: int

    def dirs(self, rel: str) -> list[Path]: ...
    def create(self, rel: str, *, leaf: bool) -> None: ...
    def apply(self, rel: str, res: CgroupResources, *, container: bool) -> None: ...
    def stats(self, rel: str) -> CgroupStats: ...
    def kill(self, rel: str) -> None: ...


class _V1:
    """One directory per controller hierarchy; limits written per controller."""

    version = 1

    def __init__(self, mounts: dict[str, Path]) -> None:
        self.mounts = mounts

    def _dir(self, controller: str, rel: str) -> Path:
        return self.mounts[controller] / rel

    def dirs(self, rel: str) -> list[Path]:
        return sorted({m / rel for m in self.mounts.values()})

    def create(self, rel: str, *, leaf: bool) -> None:
        for d in self.dirs(rel):
            d.mkdir(parents=True, exist_ok=True)

    def apply(self, rel: str, res: CgroupResources, *, container: bool) -> None:
        cpu = self._dir("cpu", rel)
        _write(cpu / "cpu.shares", str(cpu_shares(res.cpu_request_milli)))
        if res.cpu_limit_milli:
            _write(cpu / "cpu.cfs_period_us", str(CFS_PERIOD_US))
            _write(cpu / "cpu.cfs_quota_us", str(cpu_quota(res.cpu_limit_milli)))
        else:
            _write(cpu / "cpu.cfs_quota_us", "-1")
        _write(self._dir("memory", rel) / "memory.limit_in_bytes", str(res.memory_limit or -1))
        _write(self._dir("pids", rel) / "pids.max", str(res.pids_limit) if res.pids_limit else "max")
        if container and "devices" in self.mounts:
            # without this a container with CAP_MKNOD could open the host's disks (v2: the BPF program below)
            devices = self._dir("devices", rel)
            if res.all_devices:
                _write(devices / "devices.allow", "a")
            else:
                _write(devices / "devices.deny", "a")
                for rule in V1_DEVICE_ALLOW:
                    _write(devices / "devices.allow", rule)

    def stats(self, rel: str) -> CgroupStats:
        mem = self._dir("memory", rel)
        usage = _int(mem / "memory.usage_in_bytes")
        inactive = _kv(mem / "memory.stat").get("total_inactive_file", 0)
        acct = self.mounts.get("cpuacct", self.mounts["cpu"]) / rel
        return CgroupStats(
            cpu_usage_ns=_int(acct / "cpuacct.usage"),
            memory_usage_bytes=usage,
            memory_working_set=max(0, usage - inactive),
            oom_kills=_kv(mem / "memory.oom_control").get("oom_kill", 0),
            pids=_int(self._dir("pids", rel) / "pids.current"),
        )

    def kill(self, rel: str) -> None:
        _kill_loop(self.dirs(rel))


class _V2:
    """The unified hierarchy: one directory; controllers enabled top-down through subtree_control."""

    version = 2

    def __init__(self, mount: Path) -> None:
        self.mount = mount

    def dirs(self, rel: str) -> list[Path]:
        return [self.mount / rel]

    def create(self, rel: str, *, leaf: bool) -> None:
        parts = Path(rel).parts
        for depth in range(len(parts) + 1):
            here = self.mount.joinpath(*parts[:depth])
            here.mkdir(exist_ok=True)
            if depth == len(parts) and leaf:
                break
            control = here / "cgroup.subtree_control"
            enabled = set(_read(control).split())
            missing = [c for c in V2_CONTROLLERS if c not in enabled]
            if missing:
                _write(control, " ".join(f"+{c}" for c in missing))

    def apply(self, rel: str, res: CgroupResources, *, container: bool) -> None:
        d = self.mount / rel
        _write(d / "cpu.weight", str(shares_to_weight(cpu_shares(res.cpu_request_milli))))
        quota = str(cpu_quota(res.cpu_limit_milli)) if res.cpu_limit_milli else "max"
        _write(d / "cpu.max", f"{quota} {CFS_PERIOD_US}")
        _write(d / "memory.max", str(res.memory_limit) if res.memory_limit else "max")
        _write(d / "pids.max", str(res.pids_limit) if res.pids_limit else "max")
        if container:
            # kubelet (>=1.28) kills a container's whole process group on OOM, not just one process.
            _write(d / "memory.oom.group", "1")
            # v2 has no devices controller: runc's device program, from the same list v1 gets
            rules = ["a"] if res.all_devices else list(V1_DEVICE_ALLOW)
            if devices.is_cgroup2(str(d)):  # (not a test's fake tree)
                try:
                    devices.attach(str(d), devices.program([devices.parse_rule(r) for r in rules]))
                except OSError as e:
                    raise CgroupError(f"device access of {d}: {e}") from e

    def stats(self, rel: str) -> CgroupStats:
        d = self.mount / rel
        usage = _int(d / "memory.current")
        inactive = _kv(d / "memory.stat").get("inactive_file", 0)
        return CgroupStats(
            cpu_usage_ns=_kv(d / "cpu.stat").get("usage_usec", 0) * 1000,
            memory_usage_bytes=usage,
            memory_working_set=max(0, usage - inactive),
            oom_kills=_kv(d / "memory.events").get("oom_kill", 0),
            pids=_int(d / "pids.current"),
        )

    def kill(self, rel: str) -> None:
        d = self.mount / rel
        if not d.is_dir():
            return
        try:
            _write(d / "cgroup.kill", "1")
        except OSError:
            _kill_loop([d])
            return
        for _ in range(200):
            if not _pids_in([d]):
                return
            time.sleep(0.01)
        _kill_loop([d])


class _Node:
    """A cgroup across its hierarchies; `rel` is the path below each mount point."""

    def __init__(self, backend: _Backend, rel: str) -> None:
        self._b = backend
        self.rel = rel

    @property
    def path(self) -> str:
        return self.rel

    def dirs(self) -> list[Path]:
        return self._b.dirs(self.rel)

    def procs_paths(self) -> list[str]:
        return [str(d / "cgroup.procs") for d in self.dirs()]

    def add_pid(self, pid: int) -> None:
        for p in self.procs_paths():
            _write(Path(p), str(pid))

    def pids(self) -> set[int]:
        """Pids in this cgroup and its descendants."""
        return _pids_in(self.dirs())

    def stats(self) -> CgroupStats:
        return self._b.stats(self.rel)

    def kill_all(self) -> None:
        """SIGKILL every process in this cgroup and below (v2 cgroup.kill; v1 repeated kill of cgroup.procs)."""
        self._b.kill(self.rel)

    def remove(self) -> None:
        """Remove this cgroup and its children (idempotent). Raises CgroupError while processes remain."""
        for d in self.dirs():
            _rmdir_tree(d)


class ContainerCgroup(_Node):
    pass


class PodCgroup(_Node):
    def ensure_container(self, name: str, resources: CgroupResources) -> ContainerCgroup:
        if not name or "/" in name or name.startswith("."):
            raise CgroupError(f"invalid container cgroup name {name!r}")
        rel = f"{self.rel}/{name}"
        self._b.create(rel, leaf=True)
        self._b.apply(rel, resources, container=True)
        return ContainerCgroup(self._b, rel)

    def container(self, name: str) -> ContainerCgroup:
        return ContainerCgroup(self._b, f"{self.rel}/{name}")

    def container_names(self) -> list[str]:
        d = self.dirs()[0]
        return sorted(p.name for p in d.iterdir() if p.is_dir()) if d.is_dir() else []


def qos_dir(qos: str) -> str:
    """Path of a QoS class below the lite root: "" (Guaranteed), "burstable" or "besteffort"."""
    if qos not in QOS_CLASSES:
        raise CgroupError(f"unknown QoS class {qos!r}")
    return {"Guaranteed": "", "Burstable": "burstable", "BestEffort": "besteffort"}[qos]


class CgroupDriver:
    """Creates and finds pod cgroups below `root` in one backend (`version` 1 or 2)."""

    def __init__(self, backend: _Backend, root: str = "lite") -> None:
        self._b = backend
        self.root = root.strip("/")

    @classmethod
    def v1(cls, mounts: dict[str, Path], root: str = "lite") -> CgroupDriver:
        missing = [c for c in ("cpu", "memory", "pids") if c not in mounts]
        if missing:
            raise CgroupError(f"cgroup v1 controllers not mounted: {', '.join(missing)}")
        return cls(_V1(mounts), root)

    @classmethod
    def v2(cls, mount: Path, root: str = "lite") -> CgroupDriver:
        return cls(_V2(mount), root)

    @property
    def version(self) -> int:
        return self._b.version

    def describe(self) -> str:
        """One line for the agent's log: the version, where each hierarchy is and which controllers it has."""
        if isinstance(self._b, _V1):
            where = ", ".join(f"{c} at {m}" for c, m in sorted(self._b.mounts.items()))
            return f"cgroup v1 ({where}), pods under {self.root}/"
        if isinstance(self._b, _V2):
            ctrls = _read(self._b.mount / "cgroup.controllers").split()
            return f"cgroup v2 at {self._b.mount} (controllers: {' '.join(ctrls)}), pods under {self.root}/"
        return f"cgroup v{self.version}, pods under {self.root}/"

    def _pod_rel(self, pod_uid: str, qos: str) -> str:
        if not pod_uid or "/" in pod_uid or pod_uid.startswith("."):
            raise CgroupError(f"invalid pod uid {pod_uid!r}")
        return "/".join(p for p in (self.root, qos_dir(qos), f"pod{pod_uid}") if p)

    def pod(self, pod_uid: str, qos: str) -> PodCgroup:
        """The pod's cgroup handle without creating anything (for stats, kill and removal)."""
        return PodCgroup(self._b, self._pod_rel(pod_uid, qos))

    def ensure_pod(
        self, pod_uid: str, qos: str, *, cpu_request_milli: int = 0, cpu_limit_milli: int | None = None,
        memory_limit: int | None = None, pids_limit: int | None = None,
    ) -> PodCgroup:
        self._ensure_qos(qos)
        rel = self._pod_rel(pod_uid, qos)
        self._b.create(rel, leaf=False)
        res = CgroupResources(cpu_request_milli, cpu_limit_milli, memory_limit, pids_limit)
        self._b.apply(rel, res, container=False)
        return PodCgroup(self._b, rel)

    def _ensure_qos(self, qos: str) -> None:
        sub = qos_dir(qos)
        rel = f"{self.root}/{sub}" if sub else self.root
        self._b.create(rel, leaf=False)
        if qos == "BestEffort":
            self._b.apply(rel, CgroupResources(), container=False)

    def ensure_shims(self) -> ContainerCgroup:
        """`<root>/shims`, a leaf without limits for the container shims (`ContainerSpec.shim_cgroup_procs`)."""
        self._b.create(self.root, leaf=False)
        rel = f"{self.root}/shims"
        self._b.create(rel, leaf=True)
        return ContainerCgroup(self._b, rel)

    def pods(self) -> list[tuple[str, str]]:
        """(qos, pod uid) of every pod cgroup present, for garbage collection after a restart."""
        out: list[tuple[str, str]] = []
        for qos in QOS_CLASSES:
            sub = qos_dir(qos)
            base = self._b.dirs(f"{self.root}/{sub}" if sub else self.root)[0]
            if base.is_dir():
                out.extend((qos, p.name[3:]) for p in base.iterdir() if p.is_dir() and p.name.startswith("pod"))
        return sorted(out)


def parse_mountinfo(text: str) -> tuple[Path | None, dict[str, Path]]:
    """(cgroup2 mount point or None, v1 controller → mount point) from /proc/self/mountinfo text."""
    unified: Path | None = None
    v1: dict[str, Path] = {}
    for line in text.splitlines():
        left, sep, right = line.partition(" - ")
        if not sep:
            continue
        fields, rfields = left.split(), right.split()
        if len(fields) < 5 or len(rfields) < 3:
            continue
        point = Path(fields[4].replace("\\040", " "))
        if rfields[0] == "cgroup2":
            unified = unified or point
        elif rfields[0] == "cgroup":
            for opt in rfields[2].split(","):
                if opt in V1_CONTROLLERS:
                    v1.setdefault(opt, point)
    return unified, v1


def detect(root: str = "lite", mountinfo: str | None = None) -> CgroupDriver:
    """The cgroup driver for this host: v2 only when its unified hierarchy has cpu, memory and pids."""
    if mountinfo is None:
        with open("/proc/self/mountinfo") as f:
            mountinfo = f.read()
    unified, v1 = parse_mountinfo(mountinfo)
    if unified is not None:
        available = set(_read(unified / "cgroup.controllers").split())
        if all(c in available for c in V2_CONTROLLERS):
            return CgroupDriver.v2(unified, root)
    if v1:
        return CgroupDriver.v1(v1, root)
    raise CgroupError("no usable cgroup hierarchy (need cgroup2 with cpu/memory/pids, or v1 cpu/memory/pids)")


def own_cgroup_pids(procs_path: str) -> list[int]:
    """Pids listed in one cgroup.procs file (empty when it is gone)."""
    return [int(p) for p in _read(Path(procs_path)).split() if p.isdigit()]

