"""Volumes hook: materialise `spec.volumes` under the pod dir (see `lite.agent.volumes`), give them the pod's
fsGroup (`lite.agent.fsgroup`), refresh content volumes when relayed ConfigMaps/Secrets or the pod's
labels/annotations change, unmount and remove them at stop. File work runs in a thread."""

from __future__ import annotations

import asyncio

from lite.agent import fsgroup, volumes
from lite.agent.hooks.base import Hook, PodState


class VolumesHook(Hook):
    name = "volumes"

    async def prerun(self, st: PodState) -> None:
        ctx = st.context(self.deps)
        pod = st.pod
        st.volume_paths = await asyncio.to_thread(volumes.setup, pod, st.pod_dir, ctx)
        await asyncio.to_thread(fsgroup.apply_pod, st.spec, st.volume_paths)
        if st.pod is not pod:  # a new pod version (labels, annotations) came during the setup: catch up
            await self.update(st)

    async def update(self, st: PodState) -> None:
        if st.volume_paths:
            await asyncio.to_thread(volumes.refresh, st.pod, st.pod_dir, st.context(self.deps))
            # new files get the group again (content volumes only: emptyDirs keep theirs)
            await asyncio.to_thread(fsgroup.apply_pod, st.spec, st.volume_paths, fsgroup.READ_ONLY)

    async def stop(self, st: PodState) -> None:
        st.volume_paths = {}  # a later refresh (the runner serialises it with stop) then writes nothing
        await asyncio.to_thread(volumes.teardown, st.pod_dir)
