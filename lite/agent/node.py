"""The Node's status as this agent reports it: capacity/allocatable, addresses, nodeInfo, conditions, images.

`NodeReporter.status()` builds the `status` dict (kubelet's shape; every field the Python client's
`V1NodeSystemInfo` requires is present). Conditions Ready/MemoryPressure/DiskPressure/PIDPressure use kubelet's
reasons and keep `lastTransitionTime` while a condition's status does not change; `lastHeartbeatTime` is now.
Pressure thresholds are kubelet's hard eviction defaults: memory.available < 100Mi, nodefs.available < 10%,
free pids < 5% of pid_max. Whether pods' resource limits are enforced (`limits`, `lite.agent.limits`) rewrites
Ready (Ready=False, reason CgroupsUnavailable, on a node that refuses pods) or adds the condition
ResourceLimitsUnenforced. `changed(status)` tells whether a status differs from the last one sent in more
than heartbeat times (the agent sends those at once, and the rest only every `STATUS_REFRESH` seconds).
The lease is renewed every `LEASE_RENEW` seconds (10 s, as kubelet). Reads /proc and statvfs: tiny, on the loop.
"""

from __future__ import annotations

import os
import platform
import socket
from pathlib import Path
from typing import Any

from lite.agent.limits import ENFORCED, Limits
from lite.agent.limits import conditions as limits_conditions
from lite.objects import rfc3339

Obj = dict[str, Any]
LEASE_RENEW = 10.0
LEASE_DURATION = 40
STATUS_REFRESH = 60.0
MAX_PODS = 110
MEMORY_EVICTION = 100 * 1024 * 1024
VERSION = "v1.30.0-lite"


def _meminfo() -> dict[str, int]:
    out: dict[str, int] = {}
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            key, _, rest = line.partition(":")
            out[key] = int(rest.split()[0]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return out


def _read(path: str, default: str = "") -> str:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return default


def _pids() -> tuple[int, int]:
    """(running processes, pid_max)."""
    running = sum(1 for d in os.listdir("/proc") if d.isdigit())
    return running, int(_read("/proc/sys/kernel/pid_max", "32768") or 32768)


def _os_image() -> str:
    for line in _read("/etc/os-release").splitlines():
        if line.startswith("PRETTY_NAME="):
            return line.partition("=")[2].strip('"')
    return platform.system()


def _cond(ctype: str, ok: bool, reason: str, message: str) -> Obj:
    return {"type": ctype, "status": "True" if ok else "False", "reason": reason, "message": message}


class NodeReporter:
    def __init__(self, node_name: str, data_dir: Path, *, node_ip: str = "", image_list: Any = None,
                 max_pods: int = MAX_PODS, external_ip: str = "") -> None:
        self.node_name = node_name
        self.data_dir = data_dir
        self.node_ip = node_ip
        self.external_ip = external_ip
        self.image_list = image_list  # callable -> list[ImageInfo] or None
        self.max_pods = max_pods
        self.limits: Limits = ENFORCED  # set by the agent once it looked for cgroups (`lite.agent.limits`)
        self._last: Obj | None = None

    def resources(self) -> tuple[Obj, Obj]:
        mem = _meminfo().get("MemTotal", 0)
        st = os.statvfs(self.data_dir if self.data_dir.exists() else "/")
        disk = st.f_blocks * st.f_frsize
        capacity = {"cpu": str(os.cpu_count() or 1), "memory": f"{mem // 1024}Ki",
                    "pods": str(self.max_pods), "ephemeral-storage": f"{disk // 1024}Ki",
                    "hugepages-2Mi": "0", "hugepages-1Gi": "0"}
        allocatable = dict(capacity)
        allocatable["memory"] = f"{max(0, mem - MEMORY_EVICTION) // 1024}Ki"
        allocatable["ephemeral-storage"] = str(int(disk * 0.9))
        return capacity, allocatable

    def conditions(self) -> list[Obj]:
        mem = _meminfo()
        avail = mem.get("MemAvailable", MEMORY_EVICTION * 2)
        st = os.statvfs(self.data_dir if self.data_dir.exists() else "/")
        disk_low = st.f_blocks and st.f_bavail / st.f_blocks < 0.10
        running, pid_max = _pids()
        conds = [
            _cond("MemoryPressure", avail < MEMORY_EVICTION,
                  "KubeletHasInsufficientMemory" if avail < MEMORY_EVICTION else "KubeletHasSufficientMemory",
                  "kubelet has insufficient memory available" if avail < MEMORY_EVICTION
                  else "kubelet has sufficient memory available"),
            _cond("DiskPressure", bool(disk_low), "KubeletHasDiskPressure" if disk_low else "KubeletHasNoDiskPressure",
                  "kubelet has disk pressure" if disk_low else "kubelet has no disk pressure"),
            _cond("PIDPressure", running > pid_max * 0.95,
                  "KubeletHasInsufficientPID" if running > pid_max * 0.95 else "KubeletHasSufficientPID",
                  "kubelet has sufficient PID available"),
            _cond("Ready", True, "KubeletReady", "kubelet is posting ready status"),
        ]
        conds = limits_conditions(self.limits, conds)
        now = rfc3339()
        prev = {c["type"]: c for c in (self._last or {}).get("conditions") or []}
        for c in conds:
            old = prev.get(c["type"])
            c["lastHeartbeatTime"] = now
            c["lastTransitionTime"] = old["lastTransitionTime"] if old and old["status"] == c["status"] else now
        return conds

    def node_info(self) -> Obj:
        u = os.uname()
        machine = _read("/etc/machine-id") or _read("/var/lib/dbus/machine-id") or self.node_name
        arch = {"x86_64": "amd64", "aarch64": "arm64"}.get(u.machine, u.machine)
        return {"architecture": arch, "bootID": _read("/proc/sys/kernel/random/boot_id"),
                "containerRuntimeVersion": "lite://0.1", "kernelVersion": u.release,
                "kubeProxyVersion": VERSION, "kubeletVersion": VERSION, "machineID": machine,
                "operatingSystem": "linux", "osImage": _os_image(), "systemUUID": _read(
                    "/sys/class/dmi/id/product_uuid") or machine}

    def images(self) -> list[Obj]:
        if self.image_list is None:
            return []
        out = []
        for info in self.image_list():
            names = list(info.repo_digests) + list(info.repo_tags)
            if names:
                out.append({"names": names, "sizeBytes": int(info.size)})
        return out

    def addresses(self) -> list[Obj]:
        out = [{"type": "Hostname", "address": self.node_name}]
        if self.external_ip:
            out.insert(0, {"type": "ExternalIP", "address": self.external_ip})
        if self.node_ip:
            out.insert(0, {"type": "InternalIP", "address": self.node_ip})
        return out

    def status(self) -> Obj:
        capacity, allocatable = self.resources()
        status = {"capacity": capacity, "allocatable": allocatable, "conditions": self.conditions(),
                  "addresses": self.addresses(), "nodeInfo": self.node_info(), "images": self.images(),
                  "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}}}
        return status

    def changed(self, status: Obj) -> bool:
        """True when `status` differs from the last one sent beyond heartbeat times; remembers it."""
        def strip(s: Obj | None) -> Obj | None:
            if s is None:
                return None
            out = dict(s)
            out["conditions"] = [{k: v for k, v in c.items() if k != "lastHeartbeatTime"}
                                 for c in s.get("conditions") or []]
            out["capacity"] = {k: v for k, v in (s.get("capacity") or {}).items() if k != "ephemeral-storage"}
            out.pop("allocatable", None)
            return out

        differs = strip(status) != strip(self._last)
        self._last = status
        return differs


def default_node_ip() -> str:
    """The address the default route leaves from (no packet is sent), else loopback."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        s.connect(("10.255.255.255", 1))
        return str(s.getsockname()[0])
    except OSError:
        return "127.0.0.1"
    finally:
        s.close()


def iface_address(name: str) -> str:
    """The first IPv4 address of interface `name` in this process's netns ("" when it has none)."""
    import fcntl
    import struct

    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        packed = fcntl.ioctl(s.fileno(), 0x8915, struct.pack("256s", name.encode()[:15]))  # SIOCGIFADDR
        return socket.inet_ntoa(packed[20:24])
    except OSError:
        return ""
    finally:
        s.close()
