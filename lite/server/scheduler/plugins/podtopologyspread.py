"""PodTopologySpread: `whenUnsatisfiable: DoNotSchedule` constraints filter (skew = matching pods in the
node's domain + 1 if the pod matches itself - the global minimum, must be ≤ maxSkew); `ScheduleAnyway`
constraints score (fewer matching pods in the node's domain is better).

Eligible domains come from nodes carrying every constraint's topology key and, with nodeAffinityPolicy Honor
(the default), matching the pod's nodeSelector/required affinity; nodeTaintsPolicy Honor also drops nodes
with untolerated taints. With fewer domains than minDomains the global minimum is 0. Pods without
constraints that belong to a Service/ReplicaSet/ReplicationController/StatefulSet get upstream's system
default (soft) constraints: the scheduler builds them with `system_default_constraints`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import field

from lite.records import dataclass
from lite.selectors import DOUBLE_EQUALS, EQUALS, IN, LabelSelector
from lite.server.scheduler.framework import MAX_SCORE, Failure
from lite.server.scheduler.plugins.nodeaffinity import required_matches
from lite.server.scheduler.podinfo import PodInfo, SpreadConstraint, tolerated
from lite.server.scheduler.snapshot import NodeInfo, Snapshot
from lite.server.scheduler.spreadcount import SpreadIndex

NAME = "PodTopologySpread"
ERR_CONSTRAINTS = "node(s) didn't match pod topology spread constraints"
ERR_NODE_LABEL = ERR_CONSTRAINTS + " (missing required label)"
HOSTNAME = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"


@dataclass(frozen=True)
class _Counted:
    constraint: SpreadConstraint
    counts: Mapping[str, int]      # topology value → matching pods
    min_match: int
    self_match: int


@dataclass(frozen=True)
class _ScoreState:
    require_all: bool
    constraints: tuple[tuple[SpreadConstraint, dict[str, int], float], ...]
    # `score_nodes` of exactly the list `pre_score` was given (`of`, by identity), computed there from the
    # nodes' topology values it had read anyway; not part of the state's value (`score` reads `constraints`)
    of: list[NodeInfo] | None = field(default=None, compare=False, repr=False)
    raw: list[int] | None = field(default=None, compare=False, repr=False)


def system_default_constraints(selector: LabelSelector) -> tuple[SpreadConstraint, ...]:
    """Upstream's `systemDefaulting` for pods without constraints that belong to a Service, ReplicaSet,
    ReplicationController or StatefulSet: spread softly per host (maxSkew 3) and per zone (maxSkew 5)."""
    return (SpreadConstraint(3, HOSTNAME, False, selector, 1, True, False),
            SpreadConstraint(5, ZONE, False, selector, 1, True, False))


def _has_keys(node: NodeInfo, constraints: tuple[SpreadConstraint, ...]) -> bool:
    return all(c.topology_key in node.node.labels for c in constraints)


def _eligible(pod: PodInfo, node: NodeInfo, c: SpreadConstraint) -> bool:
    if c.honor_affinity and (pod.node_selector or pod.required_node_terms is not None) \
            and not required_matches(pod, node):
        return False
    return not (c.honor_taints and any(not tolerated(t, pod.tolerations) for t in node.node.hard_taints))


def _memo_key(pod: PodInfo, c: SpreadConstraint) -> str:
    # A string: its hash is cached, so the per-node memo lookup in the hot loop stays cheap.
    return f"{NAME}|{pod.namespace}|{int(c.selector.nothing)}|{c.selector}"


def _matching(pod: PodInfo, node: NodeInfo, c: SpreadConstraint, key: str = "") -> int:
    """Pods on `node` counted by `c` (same namespace, not terminating, selected); memoised on the NodeInfo
    (immutable) under `key` when given."""
    if key:
        v = node.memo.get(key)
        if v is not None:
            return v
    n = sum(1 for p in node.pods if p.namespace == pod.namespace and not p.deleting and c.selector.matches(p.labels))
    if key:
        node.memo[key] = n
    return n


def _hint(pod: PodInfo, c: SpreadConstraint, snap: Snapshot) -> list[NodeInfo] | None:
    """The nodes that can hold pods `c` counts, from the snapshot's label index (its most selective
    equality requirement), or None when the selector has none."""
    best: list[NodeInfo] | None = None
    for r in c.selector.requirements:
        if r.op in (EQUALS, DOUBLE_EQUALS, IN) and len(r.values) == 1:
            got = snap.nodes_with_label(pod.namespace, r.key, r.values[0])
            if got is not None and (best is None or len(got) < len(best)):
                best = got
    return best


def count_domains(pod: PodInfo, nodes: list[NodeInfo] | tuple[NodeInfo, ...],
                  constraints: tuple[SpreadConstraint, ...]) -> list[dict[str, int]]:
    """Per constraint: topology value → matching pods, over nodes that have every key and are eligible."""
    out: list[dict[str, int]] = [{} for _ in constraints]
    keys = [_memo_key(pod, c) for c in constraints]
    for ni in nodes:
        if not _has_keys(ni, constraints):
            continue
        for i, c in enumerate(constraints):
            if not _eligible(pod, ni, c):
                continue
            value = ni.node.labels[c.topology_key]
            out[i][value] = out[i].get(value, 0) + _matching(pod, ni, c, keys[i])
    return out


def _tallied(pod: PodInfo, c: SpreadConstraint, spread: SpreadIndex, nodes: list[NodeInfo],
             dom: set[str], values: list[str] | None = None) -> dict[str, int]:
    """pre_score's counts for a constraint without eligibility checks, from the cache's tallies: the same
    numbers as visiting the nodes (hostname: the feasible nodes; other keys: every node in `dom`). `values`:
    each node's value of the key ("" when missing), when the caller has them."""
    t = spread.tally(pod.namespace, c.selector)
    topo = c.topology_key
    counts: dict[str, int] = {}
    if topo == HOSTNAME:
        per_node = t.per_node
        if len(dom) == len(nodes):  # one feasible node per hostname value: no sums needed
            if values is not None:
                return {v: n for v, ni in zip(values, nodes, strict=True) if (n := per_node.get(ni.name))}
            return {ni.node.labels.get(topo, ""): n for ni in nodes if (n := per_node.get(ni.name))}
        for ni in nodes:
            n = per_node.get(ni.name)
            if n:
                value = ni.node.labels.get(topo, "")
                counts[value] = counts.get(value, 0) + n
        return counts
    totals = spread.domain(t, topo)
    return {v: n for v in dom if (n := totals.get(v))}


class PodTopologySpread:
    name = NAME

    def pre_filter(self, pod: PodInfo, snap: Snapshot) -> tuple[_Counted, ...] | None:
        hard = tuple(c for c in pod.spread if c.hard)
        if not hard:
            return None
        counted = []
        for c, counts in zip(hard, count_domains(pod, snap.nodes, hard), strict=True):
            least = min(counts.values()) if counts and len(counts) >= c.min_domains else 0
            counted.append(_Counted(c, counts, least, 1 if c.selector.matches(pod.labels) else 0))
        return tuple(counted)

    def filter(self, state: tuple[_Counted, ...], pod: PodInfo, node: NodeInfo) -> Failure | None:
        labels = node.node.labels
        for st in state:
            value = labels.get(st.constraint.topology_key)
            if value is None:
                return Failure((ERR_NODE_LABEL,), unresolvable=True, plugin=NAME)
            skew = st.counts.get(value, 0) + st.self_match - st.min_match
            if skew > st.constraint.max_skew:
                return Failure((ERR_CONSTRAINTS,), plugin=NAME)
        return None

    def pre_score(self, pod: PodInfo, snap: Snapshot, nodes: list[NodeInfo]) -> _ScoreState | None:
        soft = tuple(c for c in pod.spread if not c.hard)
        if not soft:
            return None
        # Upstream: with the system default constraints a node need not carry every key (a missing label
        # is the empty value); with the pod's own constraints such nodes are ignored.
        require_all = not pod.spread_defaulted
        values: list[list[str]] = []  # per constraint, each node's value of its key (not `require_all`)
        if require_all:
            domains: list[set[str]] = [set() for _ in soft]
            for ni in nodes:
                if _has_keys(ni, soft):
                    for i, c in enumerate(soft):
                        domains[i].add(ni.node.labels.get(c.topology_key, ""))
        else:
            values = [[ni.node.labels.get(c.topology_key, "") for ni in nodes] for c in soft]
            domains = [set(v) for v in values]
        out = []
        for i, c in enumerate(soft):
            counts: dict[str, int] = {}
            topo, dom = c.topology_key, domains[i]
            check = require_all or (c.honor_affinity and (pod.node_selector or pod.required_node_terms is not None)) \
                or c.honor_taints
            if not check and snap.spread is not None and snap.spread.current() == snap.generation:
                out.append((c, _tallied(pod, c, snap.spread, nodes, dom, values[i] if values else None),
                            math.log(len(dom) + 2)))
                continue
            # A hostname domain is one node: counting the feasible nodes is enough (upstream does the same).
            # Nodes running no pod with one of the selector's label pairs count 0 and are not visited.
            key = _memo_key(pod, c)  # (a selector's text: built only here, the tallies need none)
            hint = _hint(pod, c, snap)
            source = nodes if topo == HOSTNAME else snap.nodes
            if hint is not None and len(hint) < len(source):
                if topo == HOSTNAME:
                    feasible = {n.name for n in nodes}
                    hint = [ni for ni in hint if ni.name in feasible]
                source = hint
            for ni in source:
                value = ni.node.labels.get(topo, "")
                if value not in dom or (check and ((require_all and not _has_keys(ni, soft))
                                                   or not _eligible(pod, ni, c))):
                    continue
                n = ni.memo.get(key)
                if n is None:
                    n = _matching(pod, ni, c, key)
                if n:
                    counts[value] = counts.get(value, 0) + n
            out.append((c, counts, math.log(len(dom) + 2)))
        if require_all:
            return _ScoreState(require_all, tuple(out))
        # every node scores: `score_nodes`' sums, in the same order, from the values read above
        varying = [i for i, dom in enumerate(domains) if len(dom) > 1 and out[i][1]]
        if len(varying) == 1:
            # One constraint whose term differs between nodes (the others' are constants): a node's score
            # depends only on its count there, so each distinct count's sum is computed once, in order
            v_i = varying[0]
            v_counts = out[v_i][1]

            def summed(n: int) -> int:
                total = 0.0
                for j, (c, counts, weight) in enumerate(out):
                    if j == v_i:
                        total = total + (n * weight + (c.max_skew - 1))
                    else:
                        total = total + ((counts.get(next(iter(domains[j])), 0) if domains[j] else 0) * weight
                                         + (c.max_skew - 1))
                return round(total)

            of_count = {n: summed(n) for n in {0, *v_counts.values()}}
            by_value = {v: of_count[n] for v, n in v_counts.items()}
            zero = of_count[0]
            get = by_value.get
            return _ScoreState(require_all, tuple(out), nodes, [get(v, zero) for v in values[v_i]])
        # (a first term is its own sum, 0.0 + x being x; a constraint whose nodes share one value adds a constant)
        totals: list[float] | None = None
        for (c, counts, weight), vals, dom in zip(out, values, domains, strict=True):
            extra = c.max_skew - 1
            if len(dom) == 1 or not counts:
                term = counts.get(next(iter(dom)), 0) * weight + extra if counts else 0 * weight + extra
                totals = [term + 0.0] * len(nodes) if totals is None else [t + term for t in totals]
            else:
                get = counts.get
                totals = [get(v, 0) * weight + extra + 0.0 for v in vals] if totals is None else \
                    [t + (get(v, 0) * weight + extra) for t, v in zip(totals, vals, strict=True)]
        return _ScoreState(require_all, tuple(out), nodes, [round(t) for t in totals or ()])

    def score(self, state: _ScoreState, pod: PodInfo, node: NodeInfo) -> int:
        labels = node.node.labels
        total = 0.0
        for c, counts, weight in state.constraints:
            value = labels.get(c.topology_key)
            if value is None:
                if state.require_all:
                    return -1  # ignored node: normalised to 0
                value = ""
            total += counts.get(value, 0) * weight + (c.max_skew - 1)
        return round(total)

    def score_nodes(self, state: _ScoreState, pod: PodInfo, nodes: list[NodeInfo]) -> list[int]:
        """`score` over many nodes, same results (loop-invariant lookups hoisted; computed by `pre_score` when
        these are the nodes it was given)."""
        if state.of is nodes and state.raw is not None:
            return list(state.raw)
        parts = [(c.topology_key, counts, weight, c.max_skew - 1) for c, counts, weight in state.constraints]
        ignore = state.require_all
        if not ignore:  # every node scores: one pass per constraint, summed in the same order as `score`
            totals = [0.0] * len(nodes)
            for key, counts, weight, extra in parts:
                if counts:
                    totals = [t + (counts.get(n.node.labels.get(key, ""), 0) * weight + extra)
                              for t, n in zip(totals, nodes, strict=True)]
                else:
                    totals = [t + (0 * weight + extra) for t in totals]
            return [round(t) for t in totals]
        out: list[int] = []
        for n in nodes:
            labels = n.node.labels
            total = 0.0
            for key, counts, weight, extra in parts:
                value = labels.get(key)
                if value is None:
                    if ignore:
                        total = -1.0
                        break
                    value = ""
                total += counts.get(value, 0) * weight + extra
            out.append(-1 if total < 0 else round(total))
        return out

    def normalize(self, state: object, scores: list[int]) -> None:
        lo = min(scores, default=0)
        if lo >= 0:  # every node valid (no -1): the common case, without filtering
            hi = max(scores, default=0)
            if hi:
                scores[:] = [MAX_SCORE * (hi + lo - s) // hi for s in scores]
                return
        else:
            valid = [s for s in scores if s >= 0]
            lo, hi = min(valid, default=0), max(valid, default=0)
        for i, s in enumerate(scores):
            if s < 0:
                scores[i] = 0
            elif hi == 0:
                scores[i] = MAX_SCORE
            else:
                scores[i] = MAX_SCORE * (hi + lo - s) // hi
