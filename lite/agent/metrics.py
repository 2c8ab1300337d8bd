"""Resource usage for metrics.k8s.io: per pod and container from cgroup stats, for the node from /proc.

`UsageSampler.sample(pods)` reads each container cgroup's cumulative CPU time and memory working set, keeps the
previous reading, and reports CPU as a rate over the interval between the two readings (as cAdvisor does for
metrics-server), memory as the current working set. A container seen for the first time has no rate yet and
reports "0". Output: one `wire.Metrics` (node usage plus PodMetrics-like items). Cgroup reads are a few small
files per container: call it from a thread when the node runs many pods.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from pathlib import Path

from lite import wire
from lite.agent.runtime.cgroups import PodCgroup
from lite.objects import rfc3339
from lite.records import dataclass


@dataclass(frozen=True)
class PodSample:
    namespace: str
    name: str
    cgroup: PodCgroup
    containers: tuple[str, ...]


def _cpu(nanocores: float) -> str:
    return f"{max(0, int(nanocores))}n"


def _mem(b: int) -> str:
    return f"{max(0, b) // 1024}Ki"


def _node_cpu_ns() -> int:
    """Busy CPU time of the whole node in ns, from /proc/stat (user+nice+system+irq+softirq+steal)."""
    try:
        fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
        busy = sum(int(fields[i]) for i in (0, 1, 2, 5, 6, 7) if i < len(fields))
    except (OSError, ValueError, IndexError):
        return 0
    return busy * (1_000_000_000 // os.sysconf("SC_CLK_TCK"))


def _node_mem() -> int:
    try:
        info = {ln.split(":")[0]: int(ln.split()[1]) * 1024 for ln in Path("/proc/meminfo").read_text().splitlines()}
    except (OSError, ValueError, IndexError):
        return 0
    return info.get("MemTotal", 0) - info.get("MemAvailable", 0)


class UsageSampler:
    def __init__(self) -> None:
        self._prev: dict[str, tuple[float, int]] = {}

    def _rate(self, key: str, now: float, cpu_ns: int) -> float:
        prev = self._prev.get(key)
        self._prev[key] = (now, cpu_ns)
        if prev is None or now <= prev[0] or cpu_ns < prev[1]:
            return 0.0
        return (cpu_ns - prev[1]) / (now - prev[0])

    def sample(self, pods: Iterable[PodSample], window: float = 30.0) -> wire.Metrics:
        now = time.monotonic()
        items = []
        seen: set[str] = {"node"}
        for p in pods:
            containers = []
            for name in p.containers:
                key = f"{p.namespace}/{p.name}/{name}"
                try:
                    st = p.cgroup.container(name).stats()
                except OSError:
                    continue
                seen.add(key)
                containers.append({"name": name, "usage": {"cpu": _cpu(self._rate(key, now, st.cpu_usage_ns)),
                                                           "memory": _mem(st.memory_working_set)}})
            items.append({"namespace": p.namespace, "name": p.name, "containers": containers})
        node = {"cpu": _cpu(self._rate("node", now, _node_cpu_ns())), "memory": _mem(_node_mem())}
        for gone in [k for k in self._prev if k not in seen]:
            del self._prev[gone]
        return wire.Metrics(timestamp=rfc3339(), window=f"{int(window)}s", node=node, pods=items)
