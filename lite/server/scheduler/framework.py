"""The plugin contract (a small subset of upstream's scheduling framework).

A cycle for one pod runs, for each enabled plugin:
- filter plugins: `pre_filter(pod, snap)` once → a state, or `None` to skip the plugin for this pod
  (upstream's PreFilter `Skip`); then `filter(state, pod, node)` per node → `None` (fits) or a `Failure`.
- score plugins: `pre_score(pod, snap, feasible)` once → a state or `None` (skip); `score(state, pod, node)`
  per feasible node; `normalize(state, scores)` rescales the list in place to 0-100 (MAX_SCORE). The
  scheduler multiplies by the plugin's weight (see `registry.py`) and sums.

Invariants: plugins are pure over their arguments (no I/O, no clock, no mutation of the snapshot or pods);
a plugin object holds only its configuration.
"""

from __future__ import annotations

from typing import Any, Protocol

from lite.records import dataclass
from lite.server.scheduler.podinfo import PodInfo
from lite.server.scheduler.snapshot import NodeInfo, Snapshot

MAX_SCORE = 100


@dataclass(frozen=True, slots=True)
class Failure:
    """Why a node does not fit. `unresolvable` (upstream UnschedulableAndUnresolvable): preempting pods
    on that node would not help, so preemption skips it."""

    reasons: tuple[str, ...]
    unresolvable: bool = False
    plugin: str = ""
    # Upstream's PreFilter rejection: the pod fits no node for one reason, reported once, not per node.
    pre_filter: bool = False


class FilterPlugin(Protocol):
    name: str

    def pre_filter(self, pod: PodInfo, snap: Snapshot) -> Any:
        """State for `filter`, or None when this plugin has nothing to check for this pod."""
        ...

    def filter(self, state: Any, pod: PodInfo, node: NodeInfo) -> Failure | None:
        ...


class ScorePlugin(Protocol):
    name: str

    def pre_score(self, pod: PodInfo, snap: Snapshot, nodes: list[NodeInfo]) -> Any:
        """State for `score`, or None when this plugin would score every node the same."""
        ...

    def score(self, state: Any, pod: PodInfo, node: NodeInfo) -> int:
        ...

    def normalize(self, state: Any, scores: list[int]) -> None:
        """Rescale `scores` (same order as the nodes) to 0..MAX_SCORE in place."""
        ...


def default_normalize(scores: list[int], *, reverse: bool) -> None:
    """Upstream `helper.DefaultNormalizeScore`: scale to the maximum; `reverse` flips (fewer is better)."""
    top = max(scores, default=0)
    if top == 0:
        if reverse:
            scores[:] = [MAX_SCORE] * len(scores)
        return
    for i, s in enumerate(scores):
        v = MAX_SCORE * s // top
        scores[i] = MAX_SCORE - v if reverse else v


def no_normalize(state: Any, scores: list[int]) -> None:
    """For plugins whose raw scores are already 0..MAX_SCORE."""
