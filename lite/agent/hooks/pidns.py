"""Pid-namespace hook: a pod with `shareProcessNamespace: true` gets one pid namespace for all its containers,
held by a pause process (PID 1 there, reaping orphans, like the sandbox's pause container), so containers see
and signal each other's processes.

The pause runs under its own shim (state under `<pod_dir>/sandbox/state`, cgroup `<pod>/_pause`, no
capabilities, uid 65535), so an agent restart adopts it (`prerun` is idempotent: a live pause is kept) and each
container's spec names `/proc/<pause>/ns/pid` to join. `stop` ends it after the containers. The process runtime
has no pid namespaces at all: there the hook does nothing.
"""

from __future__ import annotations

from lite.agent.hooks.base import Hook, PodState
from lite.agent.runtime.cgroups import CgroupResources
from lite.agent.runtime.container import ContainerHandle, ExitStatus
from lite.agent.runtime.spec import PAUSE, ContainerSpec

PAUSE_CGROUP = "_pause"  # not a DNS label: no container can have this name


class PidNamespaceHook(Hook):
    name = "pidns"

    def _spec(self, st: PodState) -> ContainerSpec:
        base = st.pod_dir / "sandbox"
        cg = st.cgroup.ensure_container(PAUSE_CGROUP, CgroupResources()) if st.cgroup is not None else None
        shims = self.deps.cgroups.ensure_shims().procs_paths() if self.deps.cgroups is not None else []
        return ContainerSpec(id=f"{st.uid}-pause", argv=[PAUSE], state_dir=str(base / "state"),
                             log_path=str(base / "pause.log"), cgroup_procs=cg.procs_paths() if cg else [],
                             shim_cgroup_procs=shims, uid=65535, gid=65535, cap_drop=["ALL"], no_new_privs=True)

    async def _running(self, st: PodState) -> ContainerHandle | None:
        state = st.pod_dir / "sandbox" / "state"
        if not (state / "spec.json").exists():
            return None
        got = await self.deps.runtime.adopt(str(state))
        return None if isinstance(got, ExitStatus) or not got.running() else got

    async def prerun(self, st: PodState) -> None:
        if not st.spec.get("shareProcessNamespace") or st.spec.get("hostPID") or not self.deps.runtime.isolate:
            return
        handle = await self._running(st)
        if handle is None:
            handle = await self.deps.runtime.start(self._spec(st))
        st.pid_ns = f"/proc/{handle.init_pid}/ns/pid"

    async def stop(self, st: PodState) -> None:
        st.pid_ns = ""
        handle = await self._running(st)
        if handle is not None:
            await self.deps.runtime.stop(handle, 0)
