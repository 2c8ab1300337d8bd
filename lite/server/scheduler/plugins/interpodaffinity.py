"""InterPodAffinity: required pod affinity / anti-affinity of the incoming pod and required anti-affinity of
existing pods (filter); preferred terms both ways and existing pods' required affinity (score).

Counts are kept per topology pair (topologyKey, value of that label on the pod's node), as upstream: a node
is in a pair's domain when it carries the same label value.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import field

from lite.records import dataclass
from lite.server.scheduler.framework import MAX_SCORE, Failure
from lite.server.scheduler.podinfo import AffinityTerm, PodInfo
from lite.server.scheduler.snapshot import NodeInfo, Snapshot

NAME = "InterPodAffinity"
ERR_AFFINITY = "node(s) didn't match pod affinity rules"
ERR_ANTI_AFFINITY = "node(s) didn't match pod anti-affinity rules"
ERR_EXISTING_ANTI_AFFINITY = "node(s) didn't satisfy existing pods anti-affinity rules"
HARD_POD_AFFINITY_WEIGHT = 1

Pair = tuple[str, str]


@dataclass
class FilterState:
    existing_anti: dict[Pair, int] = field(default_factory=dict)
    affinity: dict[Pair, int] = field(default_factory=dict)
    anti: dict[Pair, int] = field(default_factory=dict)
    self_match: bool = False


def _bump(counts: dict[Pair, int], key: str, labels: Mapping[str, str], by: int = 1) -> None:
    if key in labels:
        pair = (key, labels[key])
        counts[pair] = counts.get(pair, 0) + by


def _all_pods(snap: Snapshot) -> Iterator[tuple[NodeInfo, PodInfo]]:
    for ni in snap.nodes:
        for p in ni.pods:
            yield ni, p


def filter_state(pod: PodInfo, snap: Snapshot) -> FilterState:
    st = FilterState()
    nsl = snap.namespace_labels
    if snap.anti_affinity_pod_count:
        for ni in snap.nodes:
            for p in ni.anti_affinity_pods:
                for t in p.anti_affinity:
                    if t.matches(pod, nsl):
                        _bump(st.existing_anti, t.topology_key, ni.node.labels)
    if pod.affinity or pod.anti_affinity:
        for ni, p in _all_pods(snap):
            labels = ni.node.labels
            if pod.affinity and all(t.matches(p, nsl) for t in pod.affinity):
                for t in pod.affinity:
                    _bump(st.affinity, t.topology_key, labels)
            for t in pod.anti_affinity:
                if t.matches(p, nsl):
                    _bump(st.anti, t.topology_key, labels)
        st.self_match = all(t.matches(pod, nsl) for t in pod.affinity)
    return st


def _satisfies_affinity(st: FilterState, terms: tuple[AffinityTerm, ...], labels: Mapping[str, str]) -> bool:
    exist = True
    for t in terms:
        if t.topology_key not in labels:
            return False
        if st.affinity.get((t.topology_key, labels[t.topology_key]), 0) <= 0:
            exist = False
    # The first pod of a group with affinity to itself may go anywhere that has the topology labels.
    return exist or (not st.affinity and st.self_match)


class InterPodAffinity:
    name = NAME

    def pre_filter(self, pod: PodInfo, snap: Snapshot) -> FilterState | None:
        if not pod.affinity and not pod.anti_affinity and not snap.anti_affinity_pod_count:
            return None
        return filter_state(pod, snap)

    def filter(self, state: FilterState, pod: PodInfo, node: NodeInfo) -> Failure | None:
        labels = node.node.labels
        if pod.affinity and not _satisfies_affinity(state, pod.affinity, labels):
            return Failure((ERR_AFFINITY,), unresolvable=True, plugin=NAME)
        for t in pod.anti_affinity:
            value = labels.get(t.topology_key)
            if value is not None and state.anti.get((t.topology_key, value), 0) > 0:
                return Failure((ERR_ANTI_AFFINITY,), plugin=NAME)
        if state.existing_anti:
            for pair in labels.items():
                if state.existing_anti.get(pair, 0) > 0:
                    return Failure((ERR_EXISTING_ANTI_AFFINITY,), plugin=NAME)
        return None

    def pre_score(self, pod: PodInfo, snap: Snapshot, nodes: list[NodeInfo]) -> dict[Pair, int] | None:
        has_pref = bool(pod.preferred_affinity or pod.preferred_anti_affinity)
        if not has_pref and not snap.affinity_pod_count:
            return None
        scores: dict[Pair, int] = {}
        nsl = snap.namespace_labels
        for ni in snap.nodes:
            labels = ni.node.labels
            for p in ni.pods if has_pref else ni.affinity_pods:
                for t in pod.preferred_affinity:
                    if t.matches(p, nsl):
                        _bump(scores, t.topology_key, labels, t.weight)
                for t in pod.preferred_anti_affinity:
                    if t.matches(p, nsl):
                        _bump(scores, t.topology_key, labels, -t.weight)
                for t in p.affinity:
                    if t.matches(pod, nsl):
                        _bump(scores, t.topology_key, labels, HARD_POD_AFFINITY_WEIGHT)
                for t in p.preferred_affinity:
                    if t.matches(pod, nsl):
                        _bump(scores, t.topology_key, labels, t.weight)
                for t in p.preferred_anti_affinity:
                    if t.matches(pod, nsl):
                        _bump(scores, t.topology_key, labels, -t.weight)
        return scores or None

    def score(self, state: dict[Pair, int], pod: PodInfo, node: NodeInfo) -> int:
        return sum(state.get(pair, 0) for pair in node.node.labels.items())

    def normalize(self, state: dict[Pair, int], scores: list[int]) -> None:
        if not scores:
            return
        lo, hi = min(scores), max(scores)
        diff = hi - lo
        for i, s in enumerate(scores):
            scores[i] = int(MAX_SCORE * (s - lo) / diff) if diff > 0 else 0
