"""NodeName filter: a pod that names its node fits only that node."""

from __future__ import annotations

from lite.server.scheduler.framework import Failure
from lite.server.scheduler.podinfo import PodInfo
from lite.server.scheduler.snapshot import NodeInfo, Snapshot

NAME = "NodeName"
ERR_REASON = "node(s) didn't match the requested node name"


class NodeName:
    name = NAME

    def pre_filter(self, pod: PodInfo, snap: Snapshot) -> bool | None:
        return True if pod.node_name else None

    def filter(self, state: bool, pod: PodInfo, node: NodeInfo) -> Failure | None:
        if pod.node_name == node.name:
            return None
        return Failure((ERR_REASON,), unresolvable=True, plugin=NAME)
