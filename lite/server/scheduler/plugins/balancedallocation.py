"""NodeResourcesBalancedAllocation score: prefer nodes whose cpu and memory fractions (with the pod) stay
close: score = (1 - standard deviation of the fractions) x 100. Best-effort pods are skipped (upstream
since 1.33: they would otherwise all pile on one node)."""

from __future__ import annotations

from lite.server.scheduler.framework import MAX_SCORE, no_normalize
from lite.server.scheduler.podinfo import PodInfo
from lite.server.scheduler.snapshot import NodeInfo, Snapshot

NAME = "NodeResourcesBalancedAllocation"


def balanced_score(fractions: list[float]) -> int:
    if len(fractions) == 2:
        std = abs(fractions[0] - fractions[1]) / 2
    elif fractions:
        mean = sum(fractions) / len(fractions)
        std = (sum((f - mean) ** 2 for f in fractions) / len(fractions)) ** 0.5
    else:
        std = 0.0
    return int((1 - std) * MAX_SCORE)


class BalancedAllocation:
    name = NAME

    def pre_score(self, pod: PodInfo, snap: Snapshot, nodes: list[NodeInfo]) -> bool | None:
        return True if pod.requests.cpu or pod.requests.memory else None

    def score(self, state: bool, pod: PodInfo, node: NodeInfo) -> int:
        alloc, used, req = node.node.allocatable, node.requested, pod.requests
        fractions: list[float] = []
        if alloc.cpu:
            fractions.append(min((used.cpu + req.cpu) / alloc.cpu, 1.0))
        if alloc.memory:
            fractions.append(min((used.memory + req.memory) / alloc.memory, 1.0))
        return balanced_score(fractions)

    def score_nodes(self, state: bool, pod: PodInfo, nodes: list[NodeInfo]) -> list[int]:
        """`score` over many nodes: same results, memoised per NodeInfo."""
        key = (NAME, pod.requests.cpu, pod.requests.memory)
        return [v if (v := n.memo.get(key)) is not None else n.memo.setdefault(key, self.score(state, pod, n))
                for n in nodes]

    normalize = staticmethod(no_normalize)
