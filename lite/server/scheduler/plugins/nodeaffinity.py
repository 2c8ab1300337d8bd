"""NodeAffinity: filter on spec.nodeSelector and required node affinity (terms ORed, expressions ANDed);
score by the summed weights of matching preferred terms, normalised to the best node."""

from __future__ import annotations

from lite.server.scheduler.framework import Failure, default_normalize
from lite.server.scheduler.podinfo import PodInfo
from lite.server.scheduler.snapshot import NodeInfo, Snapshot

NAME = "NodeAffinity"
ERR_REASON_POD = "node(s) didn't match Pod's node affinity/selector"


def required_matches(pod: PodInfo, node: NodeInfo) -> bool:
    """nodeSelector and required terms (shared with PodTopologySpread's nodeAffinityPolicy: Honor)."""
    labels = node.node.labels
    for k, v in pod.node_selector.items():
        if labels.get(k) != v:
            return False
    terms = pod.required_node_terms
    if terms is None:
        return True
    return any(t.matches(labels, node.name) for t in terms)


class NodeAffinity:
    name = NAME

    def pre_filter(self, pod: PodInfo, snap: Snapshot) -> bool | None:
        return True if pod.node_selector or pod.required_node_terms is not None else None

    def filter(self, state: bool, pod: PodInfo, node: NodeInfo) -> Failure | None:
        if required_matches(pod, node):
            return None
        return Failure((ERR_REASON_POD,), unresolvable=True, plugin=NAME)

    def pre_score(self, pod: PodInfo, snap: Snapshot, nodes: list[NodeInfo]) -> bool | None:
        return True if pod.preferred_node_terms else None

    def score(self, state: bool, pod: PodInfo, node: NodeInfo) -> int:
        return sum(w for w, t in pod.preferred_node_terms if w and t.matches(node.node.labels, node.name))

    def normalize(self, state: bool, scores: list[int]) -> None:
        default_normalize(scores, reverse=False)
