"""One scheduling decision, pure: filter → score → select over a Snapshot (upstream `schedulePod`).

Invariants:
- Filtering starts at a rotating index and stops once `feasible_to_find(n)` nodes fit (upstream
  percentageOfNodesToScore: adaptive 50% - n/125, at least 5%, at least 100 nodes), so large clusters are
  not fully scanned per pod; nodes not reached get no status.
- A node runs the filters in registry order and reports the first failure only, as upstream.
- Pods nominated to a node with priority ≥ the pod's count on that node while filtering (their room is
  reserved for them); the pod's own nomination is evaluated first and taken directly if it fits.
- Ties on the best total score are broken uniformly at random.
- `fit_error_message` renders upstream's FitError: reasons counted per node, "N reason" strings sorted.
"""

from __future__ import annotations

import random
from dataclasses import field
from typing import Any

from lite.records import dataclass
from lite.server.scheduler.framework import Failure, FilterPlugin
from lite.server.scheduler.podinfo import PodInfo
from lite.server.scheduler.registry import Plugins, Profile
from lite.server.scheduler.snapshot import NodeInfo, Snapshot

NO_NODES = "no nodes available to schedule pods"
MIN_FEASIBLE_NODES_TO_FIND = 100
MIN_FEASIBLE_PERCENTAGE = 5

FilterStates = list[tuple[FilterPlugin, Any]]


@dataclass
class Result:
    node: str = ""
    statuses: dict[str, Failure] = field(default_factory=dict)   # node → why it failed
    num_nodes: int = 0
    evaluated: int = 0


def feasible_to_find(num_nodes: int, percentage: int = 0) -> int:
    if num_nodes < MIN_FEASIBLE_NODES_TO_FIND:
        return num_nodes
    if percentage <= 0:
        percentage = max(50 - num_nodes // 125, MIN_FEASIBLE_PERCENTAGE)
    return max(num_nodes * percentage // 100, MIN_FEASIBLE_NODES_TO_FIND)


def fit_error_message(num_nodes: int, statuses: dict[str, Failure], post_filter: str = "") -> str:
    if num_nodes == 0:
        return NO_NODES
    whole = next((f for f in statuses.values() if f.pre_filter), None)
    if whole is not None:
        msg = f"0/{num_nodes} nodes are available: {', '.join(whole.reasons)}."
        return f"{msg} {post_filter}." if post_filter else msg
    counts: dict[str, int] = {}
    for f in statuses.values():
        for r in f.reasons:
            counts[r] = counts.get(r, 0) + 1
    msg = f"0/{num_nodes} nodes are available:"
    if counts:
        msg += " " + ", ".join(sorted(f"{n} {r}" for r, n in counts.items())) + "."
    if post_filter:
        msg += f" {post_filter}."
    return msg


class Algorithm:
    """Holds the plugins, the rotating start index and the tie-breaking RNG; otherwise stateless."""

    def __init__(self, plugins: Plugins, profile: Profile, rng: random.Random | None = None) -> None:
        self.plugins = plugins
        self.profile = profile
        self.rng = rng or random.Random()
        self.next_start = 0

    def pre_filter(self, pod: PodInfo, snap: Snapshot) -> FilterStates:
        out: FilterStates = []
        for p in self.plugins.filters:
            st = p.pre_filter(pod, snap)
            if st is not None:
                out.append((p, st))
        return out

    @staticmethod
    def run_filters(states: FilterStates, pod: PodInfo, ni: NodeInfo) -> Failure | None:
        for plugin, st in states:
            f = plugin.filter(st, pod, ni)
            if f is not None:
                return f
        return None

    def filter_node(self, states: FilterStates, pod: PodInfo, ni: NodeInfo, snap: Snapshot) -> Failure | None:
        nominated = snap.nominated.get(ni.name)
        if nominated:
            for other in nominated:
                if other.key != pod.key and other.priority >= pod.priority:
                    ni = ni.with_pod(other)
        return self.run_filters(states, pod, ni)

    def schedule(self, pod: PodInfo, snap: Snapshot) -> Result:
        res = Result(num_nodes=len(snap.nodes))
        if not snap.nodes:
            return res
        states = self.pre_filter(pod, snap)
        nominated = snap.by_name.get(pod.nominated_node) if pod.nominated_node else None
        if nominated is not None and self.filter_node(states, pod, nominated, snap) is None:
            res.node, res.evaluated = nominated.name, 1
            return res
        feasible = self._find_feasible(pod, snap, states, res)
        if not feasible:
            return res
        res.node = feasible[0].name if len(feasible) == 1 else self._select(pod, snap, feasible)
        return res

    def _find_feasible(self, pod: PodInfo, snap: Snapshot, states: FilterStates, res: Result) -> list[NodeInfo]:
        """Filter nodes from the rotating start until `want` fit. Nodes are taken in chunks of the number
        still wanted, and each plugin filters a whole chunk at once (`filter_many` when it has one), so
        at most `want` nodes ever fit and the order of evaluation is the same as one node at a time."""
        nodes = snap.nodes
        n = len(nodes)
        want = feasible_to_find(n, self.profile.percentage_of_nodes_to_score)
        start = self.next_start % n
        ring = nodes[start:] + nodes[:start]
        feasible: list[NodeInfo] = []
        evaluated = 0
        while evaluated < n and len(feasible) < want:
            chunk = list(ring[evaluated:evaluated + want - len(feasible)])
            evaluated += len(chunk)
            feasible.extend(self._filter_chunk(states, pod, chunk, snap, res.statuses))
        self.next_start = (start + evaluated) % n
        res.evaluated = evaluated
        return feasible

    def _filter_chunk(self, states: FilterStates, pod: PodInfo, chunk: list[NodeInfo], snap: Snapshot,
                      statuses: dict[str, Failure]) -> list[NodeInfo]:
        if snap.nominated:
            alive: list[NodeInfo] = []
            for ni in chunk:
                f = self.filter_node(states, pod, ni, snap)
                if f is None:
                    alive.append(ni)
                else:
                    statuses[ni.name] = f
            return alive
        for plugin, st in states:
            many = getattr(plugin, "filter_many", None)
            results = many(st, pod, chunk) if many is not None else [plugin.filter(st, pod, ni) for ni in chunk]
            if results.count(None) != len(results):  # some node failed (counted in C: the hot loop)
                alive = []
                for ni, f in zip(chunk, results, strict=True):
                    if f is None:
                        alive.append(ni)
                    else:
                        statuses[ni.name] = f
                chunk = alive
        return chunk

    def _select(self, pod: PodInfo, snap: Snapshot, feasible: list[NodeInfo]) -> str:
        totals: list[int] | None = None  # none yet: all 0 (the first plugin's weighted scores are the sums)
        for plugin, weight in self.plugins.scores:
            st = plugin.pre_score(pod, snap, feasible)
            if st is None:
                continue
            batch = getattr(plugin, "score_nodes", None)
            scores = batch(st, pod, feasible) if batch is not None else [plugin.score(st, pod, ni) for ni in feasible]
            plugin.normalize(st, scores)
            if totals is None:
                totals = scores if weight == 1 else [s * weight for s in scores]
            elif weight == 1:
                totals = [t + s for t, s in zip(totals, scores, strict=True)]
            else:
                totals = [t + s * weight for t, s in zip(totals, scores, strict=True)]
        if totals is None:
            totals = [0] * len(feasible)
        best = max(totals)
        ties = [i for i, t in enumerate(totals) if t == best]
        return feasible[ties[0] if len(ties) == 1 else self.rng.choice(ties)].name
