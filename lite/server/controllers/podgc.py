"""Pod garbage collector (upstream pkg/controller/podgc), one periodic pass every `period` (20 s):

    orphaned     pods bound to a node that does not exist (absent from the cache *and* 404 from the API,
                 so a node the informer has not seen yet is never mistaken for a gone one) → force-deleted
    unscheduled  pods being deleted that were never bound (no node will ever finish them) → force-deleted
    terminated   Succeeded/Failed pods beyond `threshold` (12,500; 0 disables) → deleted, oldest first
                 (creationTimestamp, then name)

Invariants: the only key is "podgc"; a pass looks only at the caches (plus the node 404 check); NotFound on
delete is success (someone else got there first). Force = grace period 0, as upstream.
"""

from __future__ import annotations

from typing import Any, ClassVar

from lite.client import Client
from lite.errors import ApiError
from lite.events import EventRecorder
from lite.informer import SharedInformers
from lite.objects import is_deleting, meta, name_of, namespace_of
from lite.server.controllers.runtime import Controller, builtin

Obj = dict[str, Any]
KEY = "podgc"
TERMINATED_THRESHOLD = 12500
GC_PERIOD = 20.0


class PodGCController(Controller):
    name: ClassVar[str] = "podgc"

    def __init__(self, client: Client, informers: SharedInformers, recorder: EventRecorder | None = None, *,
                 threshold: int = TERMINATED_THRESHOLD, period: float = GC_PERIOD) -> None:
        super().__init__(client, informers, recorder or EventRecorder(client, "pod-garbage-collector"))
        self.pod_kind = builtin("", "Pod")
        self.node_kind = builtin("", "Node")
        self.threshold = threshold
        self.period = period
        self.pods = self.informer(self.pod_kind)
        self.nodes = self.informer(self.node_kind)

    def initial_keys(self) -> list[str]:
        return [KEY]

    async def reconcile(self, key: str) -> float | None:
        pods = self.pods.list()
        await self._terminated(pods)
        await self._orphaned(pods)
        for pod in pods:
            if is_deleting(pod) and not (pod.get("spec") or {}).get("nodeName"):
                await self._delete(pod, force=True)
        return self.period

    async def _terminated(self, pods: list[Obj]) -> None:
        if self.threshold <= 0:
            return
        done = [p for p in pods if (p.get("status") or {}).get("phase") in ("Succeeded", "Failed")
                and not is_deleting(p)]
        extra = len(done) - self.threshold
        if extra <= 0:
            return
        done.sort(key=lambda p: (str(meta(p).get("creationTimestamp") or ""), name_of(p)))
        for pod in done[:extra]:
            await self._delete(pod, force=False)

    async def _orphaned(self, pods: list[Obj]) -> None:
        gone: dict[str, bool] = {}
        for pod in pods:
            node = str((pod.get("spec") or {}).get("nodeName") or "")
            if not node or self.nodes.get(node) is not None:
                continue
            if node not in gone:
                gone[node] = await self._node_gone(node)
            if gone[node]:
                await self._delete(pod, force=True)

    async def _node_gone(self, node: str) -> bool:
        try:
            await self.client.get(self.node_kind, "", node)
        except ApiError as e:
            if e.code == 404:
                return True
            raise
        return False

    async def _delete(self, pod: Obj, *, force: bool) -> None:
        try:
            await self.client.delete(self.pod_kind, namespace_of(pod), name_of(pod),
                                     grace_period_seconds=0 if force else None)
        except ApiError as e:
            if e.code != 404:
                raise
