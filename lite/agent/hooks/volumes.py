"""Volumes hook: materialise `spec.volumes` under the pod dir (see `lite.agent.volumes`), give them the pod's
fsGroup (`lite.agent.fsgroup`), refresh content volumes when relayed ConfigMaps/Secrets or the pod's
labels/annotations change, unmount and remove them at stop. File work runs in a thread.

ServiceAccount tokens (`serviceAccountToken` projected sources): fetched from the server (`Deps.request_token`)
before the volumes are written, and fetched again at 80 % of their life by a renewal task owned by this pod's
state, which rewrites the volumes in place; `stop` cancels it. A failed renewal is retried every
`RENEW_RETRY` seconds while the old token is still valid."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from lite.agent import fsgroup, satokens, volumes
from lite.agent.hooks.base import Deps, Hook, PodState

log = logging.getLogger("lite.agent.volumes")
RENEW_RETRY = 10.0


class VolumesHook(Hook):
    name = "volumes"

    def __init__(self, deps: Deps) -> None:
        super().__init__(deps)
        self._renewers: dict[str, asyncio.Task[None]] = {}

    async def prerun(self, st: PodState) -> None:
        try:
            await self._fetch_tokens(st)
        except satokens.TokenError as e:
            raise volumes.VolumeError(str(e)) from None
        ctx = st.context(self.deps)
        pod = st.pod
        st.volume_paths = await asyncio.to_thread(volumes.setup, pod, st.pod_dir, ctx)
        await asyncio.to_thread(fsgroup.apply_pod, st.spec, st.volume_paths)
        if st.pod is not pod:  # a new pod version (labels, annotations) came during the setup: catch up
            await self.update(st)
        if st.tokens and st.uid not in self._renewers:
            self._renewers[st.uid] = asyncio.get_running_loop().create_task(self._renew(st),
                                                                            name=f"token-renew-{st.uid}")

    async def update(self, st: PodState) -> None:
        if st.volume_paths:
            await asyncio.to_thread(volumes.refresh, st.pod, st.pod_dir, st.context(self.deps))
            # new files get the group again (content volumes only: emptyDirs keep theirs)
            await asyncio.to_thread(fsgroup.apply_pod, st.spec, st.volume_paths, fsgroup.READ_ONLY)

    async def stop(self, st: PodState) -> None:
        task = self._renewers.pop(st.uid, None)
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        st.volume_paths = {}  # a later refresh (the runner serialises it with stop) then writes nothing
        await asyncio.to_thread(volumes.teardown, st.pod_dir)

    async def _fetch_tokens(self, st: PodState) -> None:
        request = self.deps.request_token
        if request is None:
            return
        now, renew = time.time(), float("inf")
        fresh: dict[str, str] = {}
        for audience, seconds in satokens.token_sources(st.pod):
            token, expires = await request(st.pod, audience, seconds)
            fresh[satokens.token_key(audience, seconds)] = token
            renew = min(renew, satokens.renew_at(now, expires))
        st.tokens = fresh
        st.tokens_renew_at = renew if fresh else 0.0

    async def _renew(self, st: PodState) -> None:
        while True:
            await asyncio.sleep(max(st.tokens_renew_at - time.time(), 1.0))
            try:
                await self._fetch_tokens(st)
                await self.update(st)
            except (satokens.TokenError, volumes.VolumeError, OSError) as e:
                log.warning("pod %s/%s: renewing its service account token failed: %s", st.namespace, st.name, e)
                st.tokens_renew_at = time.time() + RENEW_RETRY
