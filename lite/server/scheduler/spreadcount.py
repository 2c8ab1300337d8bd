"""Topology-spread counts kept incrementally by the scheduler's Cache: per (namespace, selector), how many
assigned pods match on each node and in each topology domain.

Role: PodTopologySpread's scoring reads these instead of visiting every node's pods per cycle (upstream
recounts per cycle in Go; in Python that is the dominant cost with 1,000 nodes). A tally counts exactly what
`podtopologyspread._matching` counts: pods of the namespace, not terminating, whose labels the selector
matches, assumed pods included.

Invariants:
- `per_node` covers every assigned pod, also those on nodes the cache does not know yet; domain totals
  (`domain(key)`) cover only known nodes, under the node's value of `key` ("" when it lacks the label), and
  follow node label changes, additions and removals.
- A tally is created on first use from the cache's pods (O(pods)) and then updated per pod event
  (O(tallies that may select the pod): a tally is filed under one of its selector's `key=value`
  requirements, so only those under one of the pod's labels are checked, plus the few without one);
  at most `limit` tallies are kept, the least recently used dropped.
- Live objects: valid for the synchronous cycle of the snapshot whose generation equals `current()`
  (a preemption dry-run snapshot has another generation and must count the slow way).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from lite.selectors import DOUBLE_EQUALS, EQUALS, IN, LabelSelector
from lite.server.scheduler.podinfo import PodInfo

Labels = Mapping[str, str]


class Tally:
    """Matching pods of one (namespace, selector): per node name, and per domain of each tracked key."""

    __slots__ = ("domains", "namespace", "per_node", "selector")

    def __init__(self, namespace: str, selector: LabelSelector) -> None:
        self.namespace = namespace
        self.selector = selector
        self.per_node: dict[str, int] = {}
        self.domains: dict[str, dict[str, int]] = {}   # topology key → value → pods on known nodes

    def counts(self, p: PodInfo) -> bool:
        return p.namespace == self.namespace and not p.deleting and self.selector.matches(p.labels)

    def add(self, node: str, labels: Labels | None, sign: int) -> None:
        n = self.per_node.get(node, 0) + sign
        if n > 0:
            self.per_node[node] = n
        else:
            self.per_node.pop(node, None)
        if labels is not None:
            self._add_domains(labels, sign)

    def _add_domains(self, labels: Labels, delta: int) -> None:
        for key, values in self.domains.items():
            v = labels.get(key, "")
            n = values.get(v, 0) + delta
            if n > 0:
                values[v] = n
            else:
                values.pop(v, None)


class SpreadIndex:
    """The Cache's tallies. `node_labels(name)` gives a known node's labels (None when unknown)."""

    def __init__(self, node_labels: Callable[[str], Labels | None], pods: Callable[[], Iterable[tuple[PodInfo, str]]],
                 current: Callable[[], int], *, limit: int = 64) -> None:
        self._node_labels = node_labels
        self._pods = pods
        self.current = current
        self.limit = limit
        self._tallies: dict[tuple[str, LabelSelector], Tally] = {}
        # (namespace, label key, value) → tallies whose selector requires that pair; ("", "", "") → others
        self._anchored: dict[tuple[str, str, str], list[Tally]] = {}

    def __len__(self) -> int:
        return len(self._tallies)

    def tally(self, namespace: str, selector: LabelSelector) -> Tally:
        key = (namespace, selector)
        t = self._tallies.pop(key, None)
        if t is None:
            t = Tally(namespace, selector)
            for p, node in self._pods():
                if t.counts(p):
                    t.add(node, None, 1)
            while len(self._tallies) >= self.limit:
                self._forget(self._tallies.pop(next(iter(self._tallies))))
            self._anchored.setdefault(_anchor(t), []).append(t)
        self._tallies[key] = t  # most recently used last
        return t

    def _forget(self, t: Tally) -> None:
        anchor = _anchor(t)
        group = self._anchored.get(anchor, [])
        group.remove(t)
        if not group:
            del self._anchored[anchor]

    def domain(self, t: Tally, key: str) -> Mapping[str, int]:
        """Matching pods per value of `key` over the known nodes (tracked from now on)."""
        values = t.domains.get(key)
        if values is None:
            values = t.domains[key] = {}
            for node, n in t.per_node.items():
                labels = self._node_labels(node)
                if labels is not None:
                    v = labels.get(key, "")
                    values[v] = values.get(v, 0) + n
        return values

    # -- events from the Cache --

    def pod_changed(self, p: PodInfo, node: str, sign: int) -> None:
        if not self._anchored:
            return
        labels: Labels | None = None
        looked = False
        anchored = self._anchored
        groups = [g for k, v in p.labels.items() if (g := anchored.get((p.namespace, k, v)))]
        if (loose := anchored.get(_LOOSE)) is not None:
            groups.append(loose)
        for group in groups:
            for t in group:
                if t.counts(p):
                    if not looked:
                        labels, looked = self._node_labels(node), True
                    t.add(node, labels, sign)

    def node_changed(self, node: str, old: Labels | None, new: Labels | None) -> None:
        """A node appeared (old None), left (new None) or changed labels."""
        if old is new:
            return
        for t in self._tallies.values():
            n = t.per_node.get(node, 0)
            if n:
                if old is not None:
                    t._add_domains(old, -n)
                if new is not None:
                    t._add_domains(new, n)


_LOOSE = ("", "", "")


def _anchor(t: Tally) -> tuple[str, str, str]:
    """Where a tally is filed: one `key=value` pair its selector requires (every pod it counts has it)."""
    if t.selector.nothing:
        return _LOOSE
    for r in t.selector.requirements:
        if r.op in (EQUALS, DOUBLE_EQUALS, IN) and len(r.values) == 1:
            return (t.namespace, r.key, r.values[0])
    return _LOOSE
