"""TaintToleration: filter out nodes with an untolerated NoSchedule/NoExecute taint; score nodes by how few
PreferNoSchedule taints the pod does not tolerate (upstream counts, then reverse-normalises)."""

from __future__ import annotations

from lite.client import Obj
from lite.server.scheduler.framework import Failure, default_normalize
from lite.server.scheduler.podinfo import PodInfo, Toleration, tolerated
from lite.server.scheduler.snapshot import NodeInfo, Snapshot

NAME = "TaintToleration"


def untolerated_reason(taint: Obj) -> str:
    return f"node(s) had untolerated taint {{{taint.get('key', '')}: {taint.get('value', '')}}}"


class TaintToleration:
    name = NAME

    def pre_filter(self, pod: PodInfo, snap: Snapshot) -> bool | None:
        return True if snap.tainted_nodes else None

    def filter(self, state: bool, pod: PodInfo, node: NodeInfo) -> Failure | None:
        for taint in node.node.hard_taints:
            if not tolerated(taint, pod.tolerations):
                return Failure((untolerated_reason(taint),), unresolvable=True, plugin=NAME)
        return None

    def pre_score(self, pod: PodInfo, snap: Snapshot, nodes: list[NodeInfo]) -> tuple[Toleration, ...] | None:
        if not any(n.node.soft_taints for n in nodes):
            return None
        return tuple(t for t in pod.tolerations if t.effect in ("", "PreferNoSchedule"))

    def score(self, state: tuple[Toleration, ...], pod: PodInfo, node: NodeInfo) -> int:
        return sum(1 for t in node.node.soft_taints if not tolerated(t, state))

    def normalize(self, state: tuple[Toleration, ...], scores: list[int]) -> None:
        default_normalize(scores, reverse=True)
