"""The scheduler's cluster view: NodeInfo per node, a Cache kept current by informer events, and the
immutable Snapshot a scheduling cycle reads.

Role: plugins read nodes only through `NodeInfo` and the `Snapshot`; nothing here talks to the API.

Invariants:
- A `NodeInfo` never changes after construction: adding or removing a pod builds a new one (copy-on-write,
  O(pods on that node)), so a `Snapshot` handed to a cycle stays consistent while the cache moves on.
- The `Cache` is updated incrementally (node add/update/delete, assigned pod add/update/delete, assume/forget);
  `snapshot()` costs O(nodes) pointer copies, and returns the same object while nothing changed.
- An assumed pod counts on its node from `assume` until the informer reports it bound (then the real pod
  replaces it) or `forget` removes it after a failed bind.
- Pods bound to a node the cache does not know yet are kept aside and join the node when it appears.
- Single event loop, no locking: every method is synchronous.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping
from types import MappingProxyType
from typing import Any

from lite.client import Obj
from lite.records import dataclass
from lite.server.scheduler.podinfo import PodInfo, Resources, parse_resources
from lite.server.scheduler.spreadcount import SpreadIndex

NO_RESOURCES = Resources()
NO_SCHEDULE, NO_EXECUTE, PREFER_NO_SCHEDULE = "NoSchedule", "NoExecute", "PreferNoSchedule"
_EMPTY: Mapping[str, Any] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class NodeData:
    """What the scheduler reads from a Node object (shared by every NodeInfo of that node version)."""

    obj: Obj
    name: str
    labels: Mapping[str, str]
    unschedulable: bool
    hard_taints: tuple[Obj, ...]      # NoSchedule and NoExecute
    soft_taints: tuple[Obj, ...]      # PreferNoSchedule
    allocatable: Resources
    allowed_pods: int
    images: Mapping[str, int]         # every name of every image → size in bytes


def node_data(node: Obj) -> NodeData:
    m = node.get("metadata") or {}
    spec = node.get("spec") or {}
    status = node.get("status") or {}
    taints = [t for t in spec.get("taints") or [] if isinstance(t, dict)]
    alloc = status.get("allocatable") or status.get("capacity") or {}
    try:
        pods = int(str(alloc.get("pods", "0")))
    except ValueError:
        pods = 0
    images: dict[str, int] = {}
    for img in status.get("images") or []:
        size = int(img.get("sizeBytes") or 0)
        for n in img.get("names") or []:
            images[str(n)] = size
    return NodeData(obj=node, name=str(m.get("name", "")), labels=m.get("labels") or {},
                    unschedulable=bool(spec.get("unschedulable")),
                    hard_taints=tuple(t for t in taints if t.get("effect") in (NO_SCHEDULE, NO_EXECUTE)),
                    soft_taints=tuple(t for t in taints if t.get("effect") == PREFER_NO_SCHEDULE),
                    allocatable=parse_resources(alloc), allowed_pods=pods, images=images)


class NodeInfo:
    """One node and the pods on it. Never mutated after construction (plain slots for speed: it is built
    once per pod placed and read ~10^5 times a second). `free_*` are allocatable minus requested."""

    __slots__ = ("affinity_pods", "alloc_cpu", "alloc_mem", "anti_affinity_pods", "free_cpu", "free_eph", "free_mem",
                 "free_pods", "memo",
                 "name", "node", "nonzero_cpu", "nonzero_mem", "pods", "requested", "used_ports")

    def __init__(self, node: NodeData, pods: tuple[PodInfo, ...] = (), requested: Resources = NO_RESOURCES,
                 nonzero_cpu: int = 0, nonzero_mem: int = 0,
                 used_ports: frozenset[tuple[str, str, int]] = frozenset(),
                 affinity_pods: tuple[PodInfo, ...] = (), anti_affinity_pods: tuple[PodInfo, ...] = ()) -> None:
        self.node = node
        self.name = node.name
        self.pods = pods
        self.requested = requested
        self.nonzero_cpu = nonzero_cpu
        self.nonzero_mem = nonzero_mem
        self.used_ports = used_ports
        self.affinity_pods = affinity_pods            # pods with any pod (anti-)affinity term
        self.anti_affinity_pods = anti_affinity_pods  # pods with required anti-affinity terms
        alloc = node.allocatable
        self.alloc_cpu = alloc.cpu
        self.alloc_mem = alloc.memory
        self.free_cpu = alloc.cpu - requested.cpu
        self.free_mem = alloc.memory - requested.memory
        self.free_eph = alloc.ephemeral - requested.ephemeral
        self.free_pods = node.allowed_pods - len(pods)
        # Score plugins may cache results here keyed by everything the result depends on besides this
        # (immutable) NodeInfo: most nodes do not change between two cycles, so their scores do not either.
        self.memo: dict[Hashable, int] = {}

    def __repr__(self) -> str:
        return f"NodeInfo({self.name}, pods={len(self.pods)}, requested={self.requested})"

    def with_pod(self, p: PodInfo) -> NodeInfo:
        return NodeInfo(self.node, (*self.pods, p), self.requested.plus(p.requests),
                        self.nonzero_cpu + p.nonzero_cpu, self.nonzero_mem + p.nonzero_mem,
                        self.used_ports | frozenset(p.host_ports) if p.host_ports else self.used_ports,
                        (*self.affinity_pods, p) if p.has_affinity else self.affinity_pods,
                        (*self.anti_affinity_pods, p) if p.anti_affinity else self.anti_affinity_pods)

    def without_pod(self, key: str) -> NodeInfo:
        gone = next((p for p in self.pods if p.key == key), None)
        if gone is None:
            return self
        ports = self.used_ports
        if gone.host_ports:
            ports = frozenset(hp for p in self.pods if p is not gone for hp in p.host_ports)
        return NodeInfo(self.node, tuple(p for p in self.pods if p is not gone), self.requested.minus(gone.requests),
                        self.nonzero_cpu - gone.nonzero_cpu, self.nonzero_mem - gone.nonzero_mem, ports,
                        tuple(p for p in self.affinity_pods if p is not gone),
                        tuple(p for p in self.anti_affinity_pods if p is not gone))

    def replacing(self, old: PodInfo, new: PodInfo) -> NodeInfo:
        """This node with `old` swapped for `new`, which must count the same (`counts_same`): sums kept."""
        def swap(pods: tuple[PodInfo, ...]) -> tuple[PodInfo, ...]:
            return tuple(new if p is old else p for p in pods)

        return NodeInfo(self.node, swap(self.pods), self.requested, self.nonzero_cpu, self.nonzero_mem,
                        self.used_ports, swap(self.affinity_pods) if old.has_affinity else self.affinity_pods,
                        swap(self.anti_affinity_pods) if old.anti_affinity else self.anti_affinity_pods)

    def with_node(self, node: NodeData) -> NodeInfo:
        return NodeInfo(node, self.pods, self.requested, self.nonzero_cpu, self.nonzero_mem, self.used_ports,
                        self.affinity_pods, self.anti_affinity_pods)


def counts_same(a: PodInfo, b: PodInfo) -> bool:
    """Whether `b` adds to a node, its label index and its spread tallies exactly what `a` adds (same namespace,
    labels, deletion state, requests, host ports and (anti-)affinity membership)."""
    return a.namespace == b.namespace and a.deleting == b.deleting and a.labels == b.labels \
        and a.requests == b.requests and a.nonzero_cpu == b.nonzero_cpu and a.nonzero_mem == b.nonzero_mem \
        and a.host_ports == b.host_ports and a.has_affinity == b.has_affinity \
        and bool(a.anti_affinity) == bool(b.anti_affinity)


def build_node_info(node: NodeData, pods: Iterable[PodInfo]) -> NodeInfo:
    ni = NodeInfo(node)
    for p in pods:
        ni = ni.with_pod(p)
    return ni


@dataclass(frozen=True, slots=True)
class Snapshot:
    """One cycle's view. `nodes` keeps a stable order (upstream iterates from a rotating start index)."""

    nodes: tuple[NodeInfo, ...]
    by_name: Mapping[str, NodeInfo]
    image_nodes: Mapping[str, int]                 # image name → number of nodes holding it
    namespace_labels: Mapping[str, Mapping[str, str]]
    nominated: Mapping[str, tuple[PodInfo, ...]]   # node name → pods nominated to it
    affinity_pod_count: int                        # pods (anywhere) with pod (anti-)affinity terms
    anti_affinity_pod_count: int
    tainted_nodes: int = 0                         # nodes with NoSchedule/NoExecute taints
    unschedulable_nodes: int = 0
    generation: int = 0
    # (namespace, label key, value) → nodes running such pods (with counts). A live index, not a copy: valid
    # for the synchronous cycle that took the snapshot, and a superset after `replace` (hints, not counts).
    label_nodes: Mapping[tuple[str, str, str], Mapping[str, int]] | None = None
    # The cache's live topology-spread tallies: valid only while `spread.current() == generation`.
    spread: SpreadIndex | None = None
    # Claims, volumes and classes for VolumeBinding (`plugins.volumebinding.VolumeView`): live and read-only.
    volumes: Any = None

    def nodes_with_label(self, namespace: str, key: str, value: str) -> list[NodeInfo] | None:
        """NodeInfos that may run a pod of `namespace` labelled key=value (None: no index, scan all)."""
        if self.label_nodes is None:
            return None
        names = self.label_nodes.get((namespace, key, value)) or {}
        return [ni for name in names if (ni := self.by_name.get(name)) is not None]

    def replace(self, ni: NodeInfo) -> Snapshot:
        """This snapshot with one node's info swapped (preemption dry runs)."""
        by_name = dict(self.by_name)
        by_name[ni.name] = ni
        nodes = tuple(ni if n.name == ni.name else n for n in self.nodes)
        aff = self.affinity_pod_count - len(self.by_name[ni.name].affinity_pods) + len(ni.affinity_pods)
        anti = self.anti_affinity_pod_count - len(self.by_name[ni.name].anti_affinity_pods) \
            + len(ni.anti_affinity_pods)
        return Snapshot(nodes, by_name, self.image_nodes, self.namespace_labels, self.nominated, aff, anti,
                        self.tainted_nodes, self.unschedulable_nodes, -1, self.label_nodes, None, self.volumes)


def make_snapshot(nodes: Iterable[NodeInfo], namespace_labels: Mapping[str, Mapping[str, str]] | None = None,
                  nominated: Mapping[str, tuple[PodInfo, ...]] | None = None) -> Snapshot:
    """A snapshot built from scratch (tests, small clusters)."""
    infos = tuple(nodes)
    images: dict[str, int] = {}
    for ni in infos:
        for name in ni.node.images:
            images[name] = images.get(name, 0) + 1
    return Snapshot(infos, {n.name: n for n in infos}, images, namespace_labels or {}, nominated or {},
                    sum(len(n.affinity_pods) for n in infos), sum(len(n.anti_affinity_pods) for n in infos),
                    sum(1 for n in infos if n.node.hard_taints), sum(1 for n in infos if n.node.unschedulable))


class Cache:
    """NodeInfos kept current by events; see the module docstring."""

    def __init__(self) -> None:
        self._nodes: dict[str, NodeInfo] = {}
        self._pod_node: dict[str, str] = {}
        self._infos: dict[str, PodInfo] = {}
        self._label_nodes: dict[tuple[str, str, str], dict[str, int]] = {}
        self._orphans: dict[str, dict[str, PodInfo]] = {}
        self._assumed: set[str] = set()
        self._images: dict[str, int] = {}
        self._ns_labels: dict[str, Mapping[str, str]] = {}
        self._nominated: dict[str, dict[str, PodInfo]] = {}
        self.volumes: Any = None  # the VolumeView every snapshot carries (set once by the scheduler)
        self._aff = 0
        self._anti = 0
        self._tainted = 0
        self._cordoned = 0
        self._gen = 0
        self._snap: Snapshot | None = None
        self.spread = SpreadIndex(self._labels_of, self._assigned, lambda: self._gen)

    def _labels_of(self, node: str) -> Mapping[str, str] | None:
        ni = self._nodes.get(node)
        return ni.node.labels if ni is not None else None

    def _assigned(self) -> Iterable[tuple[PodInfo, str]]:
        return ((p, self._pod_node[k]) for k, p in self._infos.items())

    # -- nodes --

    def set_node(self, node: Obj) -> None:
        nd = node_data(node)
        old = self._nodes.get(nd.name)
        if old is not None:
            self._count_images(old.node, -1)
            self._set(nd.name, old.with_node(nd))
        else:
            pods = self._orphans.pop(nd.name, {})
            self._set(nd.name, build_node_info(nd, pods.values()))
        self._count_images(nd, 1)
        self.spread.node_changed(nd.name, old.node.labels if old is not None else None, nd.labels)

    def remove_node(self, name: str) -> None:
        old = self._nodes.get(name)
        if old is None:
            return
        self._count_images(old.node, -1)
        self._set(name, None)
        self.spread.node_changed(name, old.node.labels, None)
        if old.pods:
            self._orphans[name] = {p.key: p for p in old.pods}

    def _count_images(self, nd: NodeData, sign: int) -> None:
        for name in nd.images:
            n = self._images.get(name, 0) + sign
            if n > 0:
                self._images[name] = n
            else:
                self._images.pop(name, None)

    def _set(self, name: str, ni: NodeInfo | None) -> None:
        old = self._nodes.get(name)
        if old is not None:
            self._aff -= len(old.affinity_pods)
            self._anti -= len(old.anti_affinity_pods)
            self._tainted -= bool(old.node.hard_taints)
            self._cordoned -= old.node.unschedulable
        if ni is None:
            self._nodes.pop(name, None)
        else:
            self._nodes[name] = ni
            self._aff += len(ni.affinity_pods)
            self._anti += len(ni.anti_affinity_pods)
            self._tainted += bool(ni.node.hard_taints)
            self._cordoned += ni.node.unschedulable
        self._gen += 1

    # -- pods --

    def add_pod(self, p: PodInfo, node: str) -> None:
        """Add or replace an assigned pod (also confirms an assumed one)."""
        self._assumed.discard(p.key)
        old = self._infos.get(p.key)
        if old is not None and self._pod_node.get(p.key) == node and counts_same(old, p):
            # The same pod on the same node, counted alike (the binding confirming an assumed pod, status
            # writes): swap it in; the label index and the spread tallies already hold what it adds.
            self._infos[p.key] = p
            ni = self._nodes.get(node)
            if ni is None:
                self._orphans.setdefault(node, {})[p.key] = p
            else:
                self._set(node, ni.replacing(old, p))
            return
        self._remove(p.key)
        self._pod_node[p.key] = node
        self._infos[p.key] = p
        self._index_labels(p, node, 1)
        self.spread.pod_changed(p, node, 1)
        ni = self._nodes.get(node)
        if ni is None:
            self._orphans.setdefault(node, {})[p.key] = p
        else:
            self._set(node, ni.with_pod(p))

    def remove_pod(self, key: str) -> None:
        self._assumed.discard(key)
        self._remove(key)

    def _remove(self, key: str) -> None:
        node = self._pod_node.pop(key, None)
        if node is None:
            return
        gone = self._infos.pop(key, None)
        if gone is not None:
            self._index_labels(gone, node, -1)
            self.spread.pod_changed(gone, node, -1)
        ni = self._nodes.get(node)
        if ni is not None:
            self._set(node, ni.without_pod(key))
        elif node in self._orphans:
            self._orphans[node].pop(key, None)

    def _index_labels(self, p: PodInfo, node: str, sign: int) -> None:
        for k, v in p.labels.items():
            nodes = self._label_nodes.setdefault((p.namespace, k, v), {})
            n = nodes.get(node, 0) + sign
            if n > 0:
                nodes[node] = n
            else:
                nodes.pop(node, None)
                if not nodes:
                    del self._label_nodes[(p.namespace, k, v)]

    def assume(self, p: PodInfo, node: str) -> None:
        self.add_pod(p, node)
        self._assumed.add(p.key)

    def forget(self, key: str) -> None:
        """Drop an assumed pod whose binding failed (no-op if it was confirmed meanwhile)."""
        if key in self._assumed:
            self.remove_pod(key)

    def assumed(self) -> list[str]:
        """The keys of the pods assumed and not yet confirmed or forgotten."""
        return list(self._assumed)

    def is_assumed(self, key: str) -> bool:
        return key in self._assumed

    def node_of(self, key: str) -> str | None:
        return self._pod_node.get(key)

    def info_of(self, key: str) -> PodInfo | None:
        """The PodInfo of an assigned or assumed pod."""
        return self._infos.get(key)

    # -- namespaces and nominations --

    def set_namespace(self, name: str, labels: Mapping[str, str] | None) -> None:
        if labels is None:
            self._ns_labels.pop(name, None)
        else:
            self._ns_labels[name] = labels
        self._gen += 1

    def nominate(self, p: PodInfo, node: str) -> None:
        """Record that `p` waits for room on `node` (freed by preemption): others must not take it."""
        self.clear_nomination(p.key)
        self._nominated.setdefault(node, {})[p.key] = p
        self._gen += 1

    def clear_nomination(self, key: str) -> None:
        for node, pods in list(self._nominated.items()):
            if pods.pop(key, None) is not None:
                self._gen += 1
                if not pods:
                    del self._nominated[node]

    # -- the view --

    def snapshot(self) -> Snapshot:
        if self._snap is None or self._snap.generation != self._gen:
            self._snap = Snapshot(tuple(self._nodes.values()), MappingProxyType(dict(self._nodes)),
                                  MappingProxyType(dict(self._images)), MappingProxyType(dict(self._ns_labels)),
                                  MappingProxyType({k: tuple(v.values()) for k, v in self._nominated.items() if v}),
                                  self._aff, self._anti, self._tainted, self._cordoned, self._gen,
                                  MappingProxyType(self._label_nodes), self.spread, self.volumes)
        return self._snap

    def __len__(self) -> int:
        return len(self._nodes)
