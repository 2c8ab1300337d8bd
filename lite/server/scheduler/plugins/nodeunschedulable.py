"""NodeUnschedulable filter: cordoned nodes (spec.unschedulable) take only pods tolerating
`node.kubernetes.io/unschedulable:NoSchedule`."""

from __future__ import annotations

from lite.server.scheduler.framework import Failure
from lite.server.scheduler.podinfo import PodInfo, tolerated
from lite.server.scheduler.snapshot import NodeInfo, Snapshot

NAME = "NodeUnschedulable"
ERR_REASON = "node(s) were unschedulable"
TAINT = {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}


class NodeUnschedulable:
    name = NAME

    def pre_filter(self, pod: PodInfo, snap: Snapshot) -> bool | None:
        if not snap.unschedulable_nodes or tolerated(TAINT, pod.tolerations):
            return None
        return True

    def filter(self, state: bool, pod: PodInfo, node: NodeInfo) -> Failure | None:
        if node.node.unschedulable:
            return Failure((ERR_REASON,), unresolvable=True, plugin=NAME)
        return None
