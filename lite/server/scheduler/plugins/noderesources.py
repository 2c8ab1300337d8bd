"""NodeResourcesFit: filter nodes without room for the pod's requests (and pod count); score by
LeastAllocated (default) or MostAllocated over cpu and memory with weight 1 each.

Scores use the non-zero requests (100m cpu / 200Mi memory for containers that request nothing), as upstream,
so best-effort pods still spread.
"""

from __future__ import annotations

from typing import Literal

from lite.server.scheduler.framework import MAX_SCORE, Failure, no_normalize
from lite.server.scheduler.podinfo import PodInfo
from lite.server.scheduler.snapshot import NodeInfo, Snapshot

NAME = "NodeResourcesFit"
LEAST_ALLOCATED, MOST_ALLOCATED = "LeastAllocated", "MostAllocated"
TOO_MANY_PODS = "Too many pods"
Strategy = Literal["LeastAllocated", "MostAllocated"]


def insufficient(resource: str) -> str:
    return f"Insufficient {resource}"


def fit_reasons(pod: PodInfo, node: NodeInfo) -> list[str]:
    """Upstream `fitsRequest`: pod count first, then cpu, memory, ephemeral-storage, extended resources."""
    reasons: list[str] = []
    if len(node.pods) + 1 > node.node.allowed_pods:
        reasons.append(TOO_MANY_PODS)
    req, alloc, used = pod.requests, node.node.allocatable, node.requested
    if req.cpu > 0 and req.cpu > alloc.cpu - used.cpu:
        reasons.append(insufficient("cpu"))
    if req.memory > 0 and req.memory > alloc.memory - used.memory:
        reasons.append(insufficient("memory"))
    if req.ephemeral > 0 and req.ephemeral > alloc.ephemeral - used.ephemeral:
        reasons.append(insufficient("ephemeral-storage"))
    for name, amount in req.scalars:
        if amount > alloc.scalar(name) - used.scalar(name):
            reasons.append(insufficient(name))
    return reasons


def least_allocated(requested: int, capacity: int) -> int:
    if capacity == 0 or requested > capacity:
        return 0
    return (capacity - requested) * MAX_SCORE // capacity


def most_allocated(requested: int, capacity: int) -> int:
    if capacity == 0:
        return 0
    return min(requested, capacity) * MAX_SCORE // capacity


class NodeResourcesFit:
    name = NAME

    def __init__(self, strategy: Strategy = "LeastAllocated") -> None:
        self.strategy = strategy
        self._fn = most_allocated if strategy == MOST_ALLOCATED else least_allocated

    def pre_filter(self, pod: PodInfo, snap: Snapshot) -> bool:
        return True

    def filter(self, state: bool, pod: PodInfo, node: NodeInfo) -> Failure | None:
        req = pod.requests
        if node.free_pods > 0 and req.cpu <= node.free_cpu and req.memory <= node.free_mem \
                and req.ephemeral <= node.free_eph and not req.scalars:
            return None  # the common case, without building the reasons
        reasons = fit_reasons(pod, node)
        return Failure(tuple(reasons), plugin=NAME) if reasons else None

    def filter_many(self, state: bool, pod: PodInfo, nodes: list[NodeInfo]) -> list[Failure | None]:
        """`filter` over many nodes, same results; the fits-everything test inlined (hot path)."""
        req = pod.requests
        if req.scalars:
            return [self.filter(state, pod, n) for n in nodes]
        rc, rm, re = req.cpu, req.memory, req.ephemeral
        return [None if n.free_pods > 0 and rc <= n.free_cpu and rm <= n.free_mem and re <= n.free_eph
                else self.filter(state, pod, n) for n in nodes]

    def pre_score(self, pod: PodInfo, snap: Snapshot, nodes: list[NodeInfo]) -> bool:
        return True

    def score(self, state: bool, pod: PodInfo, node: NodeInfo) -> int:
        alloc = node.node.allocatable
        cpu = self._fn(node.nonzero_cpu + pod.nonzero_cpu, alloc.cpu)
        mem = self._fn(node.nonzero_mem + pod.nonzero_mem, alloc.memory)
        return (cpu + mem) // 2

    def score_nodes(self, state: bool, pod: PodInfo, nodes: list[NodeInfo]) -> list[int]:
        """`score` over many nodes (the hot loop of large clusters): same results, memoised per NodeInfo."""
        key = (NAME, self.strategy, pod.nonzero_cpu, pod.nonzero_mem)
        return [v if (v := n.memo.get(key)) is not None else n.memo.setdefault(key, self.score(state, pod, n))
                for n in nodes]

    normalize = staticmethod(no_normalize)
