"""Preemption, pure part (upstream `framework/preemption` + `defaultpreemption`): which node to free up for a
pod that fits nowhere, and which pods to evict there.

Invariants:
- Only pods of strictly lower priority are victims; pods with `preemptionPolicy: Never` preempt nothing.
- Nodes whose failure is unresolvable are skipped ("Preemption is not helpful for scheduling").
- Per node: remove every lower-priority pod; if the pod still does not fit, the node is no candidate (its
  filter failure is its status). Otherwise add victims back, most important first (higher priority, then
  older), PodDisruptionBudget-violating ones before the others, keeping each one that still leaves room.
- The node is chosen by upstream's order: fewest PDB violations, lowest highest-victim priority, lowest
  priority sum, fewest victims, latest start of the highest-priority victims, then the first found.
- Dry runs stop after max(100, 10% of nodes) candidates, starting at a random node.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import field

from lite.records import dataclass
from lite.selectors import LabelSelector
from lite.server.scheduler.cycle import Algorithm, fit_error_message
from lite.server.scheduler.framework import Failure
from lite.server.scheduler.podinfo import PodInfo
from lite.server.scheduler.snapshot import NodeInfo, Snapshot

NOT_HELPFUL = "Preemption is not helpful for scheduling"
NO_VICTIMS = "No preemption victims found for incoming pod"
NOT_ELIGIBLE_POLICY = "not eligible due to preemptionPolicy=Never."
NOT_ELIGIBLE_TERMINATING = "not eligible due to a terminating pod on the nominated node."
MIN_CANDIDATES_PERCENTAGE, MIN_CANDIDATES_ABSOLUTE = 10, 100
_INT32_OFFSET = 2**31


@dataclass(frozen=True)
class Budget:
    """What preemption needs from a PodDisruptionBudget."""

    namespace: str
    selector: LabelSelector
    disruptions_allowed: int


@dataclass
class Candidate:
    node: str
    victims: list[PodInfo]
    pdb_violations: int


@dataclass
class Outcome:
    node: str = ""
    victims: list[PodInfo] = field(default_factory=list)
    message: str = ""     # for the FailedScheduling message, after "preemption: " (empty on success)


def _more_important(p: PodInfo) -> tuple[int, str]:
    # Sort key: higher priority first, then older (earlier start) first.
    return (-p.priority, p.start_time)


def split_by_pdb(pods: list[PodInfo], budgets: Sequence[Budget]) -> tuple[list[PodInfo], list[PodInfo]]:
    """(violating, non-violating): a pod violates when a matching budget has no disruption left."""
    allowed = [b.disruptions_allowed for b in budgets]
    violating: list[PodInfo] = []
    ok: list[PodInfo] = []
    for p in pods:
        bad = False
        for i, b in enumerate(budgets):
            if b.namespace != p.namespace or b.selector.empty or not b.selector.matches(p.labels):
                continue
            allowed[i] -= 1
            if allowed[i] < 0:
                bad = True
        (violating if bad else ok).append(p)
    return violating, ok


def eligible(pod: PodInfo, snap: Snapshot, statuses: dict[str, Failure]) -> str:
    """'' when the pod may preempt, else the upstream reason."""
    if pod.preemption_policy == "Never":
        return NOT_ELIGIBLE_POLICY
    node = snap.by_name.get(pod.nominated_node) if pod.nominated_node else None
    status = statuses.get(pod.nominated_node) if pod.nominated_node else None
    if node is not None and (status is None or not status.unresolvable) \
            and any(p.deleting and p.priority < pod.priority for p in node.pods):
        return NOT_ELIGIBLE_TERMINATING
    return ""


def _fits(algo: Algorithm, pod: PodInfo, snap: Snapshot, ni: NodeInfo) -> Failure | None:
    view = snap.replace(ni)
    return algo.run_filters(algo.pre_filter(pod, view), pod, ni)


def select_victims(algo: Algorithm, pod: PodInfo, snap: Snapshot, ni: NodeInfo,
                   budgets: Sequence[Budget]) -> Candidate | Failure:
    lower = [p for p in ni.pods if p.priority < pod.priority]
    if not lower:
        return Failure((NO_VICTIMS,), unresolvable=True)
    keys = {p.key for p in lower}
    base = ni
    for k in keys:
        base = base.without_pod(k)
    failure = _fits(algo, pod, snap, base)
    if failure is not None:
        return failure
    lower.sort(key=_more_important)
    violating, ok = split_by_pdb(lower, budgets)
    victims: list[PodInfo] = []
    violations = 0
    for group, is_violating in ((violating, True), (ok, False)):
        for p in group:
            trial = base.with_pod(p)
            if _fits(algo, pod, snap, trial) is None:
                base = trial
            else:
                victims.append(p)
                violations += is_violating
    if not victims:
        return Failure((f'expected at least one victim pod on node "{ni.name}"',))
    return Candidate(ni.name, victims, violations)


def pick(candidates: list[Candidate]) -> Candidate:
    def key(c: Candidate) -> tuple[int, int, int, int, str]:
        top = max(v.priority for v in c.victims)
        total = sum(v.priority + _INT32_OFFSET for v in c.victims)
        top_start = min(v.start_time for v in c.victims if v.priority == top)
        # Later start of the most important victims is better: invert the string order.
        return (c.pdb_violations, top, total, len(c.victims), "".join(chr(0x10FFFF - ord(ch)) for ch in top_start))
    return min(candidates, key=key)


def preempt(algo: Algorithm, pod: PodInfo, snap: Snapshot, statuses: dict[str, Failure],
            budgets: Sequence[Budget], rng: random.Random | None = None) -> Outcome:
    why = eligible(pod, snap, statuses)
    if why:
        return Outcome(message=why)
    node_status: dict[str, Failure] = {}
    potential: list[NodeInfo] = []
    for ni in snap.nodes:
        f = statuses.get(ni.name)
        if f is not None and f.unresolvable:
            node_status[ni.name] = Failure((NOT_HELPFUL,), unresolvable=True)
        else:
            potential.append(ni)
    candidates: list[Candidate] = []
    if potential:
        want = max(len(snap.nodes) * MIN_CANDIDATES_PERCENTAGE // 100, MIN_CANDIDATES_ABSOLUTE)
        start = (rng or random.Random()).randrange(len(potential))
        for i in range(len(potential)):
            ni = potential[(start + i) % len(potential)]
            got = select_victims(algo, pod, snap, ni, budgets)
            if isinstance(got, Candidate):
                candidates.append(got)
                if len(candidates) >= want:
                    break
            else:
                node_status[ni.name] = got
    if not candidates:
        return Outcome(message=fit_error_message(len(snap.nodes), node_status))
    best = pick(candidates)
    return Outcome(node=best.node, victims=best.victims)
