"""Pod cgroup hook: the pod's QoS class and its cgroup (requests → shares/weight, limits → quota/max, pids).

Pod-level limits are the sums over app containers (kubelet's pod cgroup), raised to the largest init container
when that is bigger; a resource without a limit on some container leaves the pod unlimited for it. Skipped when
the node has no usable cgroups (`deps.cgroups` None). `stop` kills what is left in the cgroup and removes it.
"""

from __future__ import annotations

import asyncio

from lite.agent.hooks.base import Hook, Obj, PodState
from lite.agent.runtime.cgroups import CgroupResources
from lite.agent.status import qos_class
from lite.quantity import to_int, to_milli

POD_PIDS_LIMIT = 4096


def _sum(containers: list[Obj], kind: str, res: str, milli: bool) -> int | None:
    total = 0
    for c in containers:
        resources = c.get("resources") or {}
        raw = (resources.get(kind) or {}).get(res)
        if raw is None and kind == "requests":  # a request defaults to the limit (API defaulting)
            raw = (resources.get("limits") or {}).get(res)
        if raw is None:
            if kind == "limits":
                return None
            continue
        total += to_milli(raw) if milli else to_int(raw)
    return total


def container_resources(c: Obj) -> CgroupResources:
    res = c.get("resources") or {}
    limits, requests = res.get("limits") or {}, res.get("requests") or {}
    cpu_req = requests.get("cpu", limits.get("cpu"))
    return CgroupResources(
        cpu_request_milli=to_milli(cpu_req) if cpu_req is not None else 0,
        cpu_limit_milli=to_milli(limits["cpu"]) if "cpu" in limits else None,
        memory_limit=to_int(limits["memory"]) if "memory" in limits else None,
        all_devices=(c.get("securityContext") or {}).get("privileged") is True,
    )


def pod_resources(pod: Obj) -> CgroupResources:
    spec = pod.get("spec") or {}
    apps, inits = spec.get("containers") or [], spec.get("initContainers") or []
    req = _sum(apps, "requests", "cpu", True) or 0
    cpu_lim, mem_lim = _sum(apps, "limits", "cpu", True), _sum(apps, "limits", "memory", False)
    for c in inits:
        one = container_resources(c)
        req = max(req, one.cpu_request_milli)
        if cpu_lim is not None and one.cpu_limit_milli is not None:
            cpu_lim = max(cpu_lim, one.cpu_limit_milli)
        if mem_lim is not None and one.memory_limit is not None:
            mem_lim = max(mem_lim, one.memory_limit)
    return CgroupResources(req, cpu_lim, mem_lim, POD_PIDS_LIMIT)


class CgroupHook(Hook):
    name = "cgroup"

    async def prerun(self, st: PodState) -> None:
        st.qos = qos_class(st.pod)
        drv = self.deps.cgroups
        if drv is None:
            return
        r = pod_resources(st.pod)
        st.cgroup = await asyncio.to_thread(
            drv.ensure_pod, st.uid, st.qos, cpu_request_milli=r.cpu_request_milli,
            cpu_limit_milli=r.cpu_limit_milli, memory_limit=r.memory_limit, pids_limit=r.pids_limit)

    async def stop(self, st: PodState) -> None:
        drv = self.deps.cgroups
        if drv is None:
            return
        cg = st.cgroup or drv.pod(st.uid, qos_class(st.pod))
        await asyncio.to_thread(cg.kill_all)
        await asyncio.to_thread(cg.remove)
