"""Pod garbage collector (upstream pkg/controller/podgc), one periodic pass every `period` (20 s):

    orphaned     pods bound to a node that does not exist (absent from the cache *and* 404 from the API,
                 so a node the informer has not seen yet is never mistaken for a gone one) → force-deleted
    unscheduled  pods being deleted that were never bound (no node will ever finish them) → force-deleted
    terminated   Succeeded/Failed pods beyond `threshold` (12,500; 0 disables) → deleted, oldest first
                 (creationTimestamp, then name)

Invariants: the only key is "podgc"; a pass looks only at the caches (plus the node 404 check); NotFound on
delete is success (someone else got there first). Force = grace period 0, as upstream. A pass reads only the
pods it may act on, through indexes (`GC_INDEX`: terminated and unscheduled-deleting pods; pods by node), not
every pod: a compact pod cache decodes what it hands out, and 10,000 pods every 20 s cost ~150 ms and a
transient ~200 MB.
"""

from __future__ import annotations

from typing import Any, ClassVar

from lite.client import Client
from lite.errors import ApiError
from lite.events import EventRecorder
from lite.informer import SharedInformers
from lite.objects import is_deleting, meta, name_of, namespace_of
from lite.server.controllers.nodelifecycle import NODE_NAME_INDEX, ensure_node_index
from lite.server.controllers.runtime import Controller, builtin

Obj = dict[str, Any]
KEY = "podgc"
TERMINATED_THRESHOLD = 12500
GC_PERIOD = 20.0
GC_INDEX = "podgc"
TERMINATED, UNSCHEDULED = "terminated", "unscheduled"


def gc_categories(pod: Obj) -> list[str]:
    """`GC_INDEX`'s values of a pod: TERMINATED (Succeeded/Failed, not being deleted), UNSCHEDULED (being
    deleted, never bound), or none."""
    if is_deleting(pod):
        return [] if (pod.get("spec") or {}).get("nodeName") else [UNSCHEDULED]
    return [TERMINATED] if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed") else []


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
        self.pods.ensure_index(GC_INDEX, gc_categories)
        ensure_node_index(self.pods)

    def initial_keys(self) -> list[str]:
        return [KEY]

    async def reconcile(self, key: str) -> float | None:
        await self._terminated()
        await self._orphaned()
        for pod in self.pods.by_index(GC_INDEX, UNSCHEDULED):
            await self._delete(pod, force=True)
        return self.period

    async def _terminated(self) -> None:
        if self.threshold <= 0:
            return
        extra = len(self.pods.index_keys(GC_INDEX, TERMINATED)) - self.threshold
        if extra <= 0:
            return
        done = self.pods.by_index(GC_INDEX, TERMINATED)
        done.sort(key=lambda p: (str(meta(p).get("creationTimestamp") or ""), name_of(p)))
        for pod in done[:extra]:
            await self._delete(pod, force=False)

    async def _orphaned(self) -> None:
        for node in self.pods.index_values(NODE_NAME_INDEX):
            if not node or self.nodes.get(node) is not None or not await self._node_gone(node):
                continue
            for pod in self.pods.by_index(NODE_NAME_INDEX, node):
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
