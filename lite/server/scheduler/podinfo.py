"""PodInfo: the facts the scheduler reads from a pod, parsed once per pod version.

Role: every plugin reads pods through `PodInfo`, never through the raw dict, so quantities, affinity terms
and tolerations are parsed once (when the pod enters the queue or the cache), not once per node per cycle.

Invariants:
- A PodInfo is immutable and derived only from the pod dict (plus the priority resolved by the caller).
- `name` is `key` after `namespace` (`key` is always "<namespace>/<name>").
- It keeps the pod as `source`: the dict, or its encoding when the caller has one (the scheduler passes the
  compact informer's bytes, shared with the store, and the informer's `decode`, so the queue and the cache do
  not keep a decoded copy of every pod); `obj` decodes it on each use (failures, volume binding: rare).
  `facts` fingerprints the labels and the spec (but `nodeName`), for `same_facts` and the queue's "did it
  change" without decoding.
- Requests follow upstream `resource.PodRequests`: max(sum of containers + restartable init containers,
  each init container + the sidecars started before it), plus `spec.overhead`. `nonzero_cpu`/`nonzero_mem`
  use 100m / 200Mi for a container that does not request them (upstream `GetNonzeroRequests`).
- Requests fall back to limits per resource, as API defaulting would have set them.
- Memory: the scheduler keeps a PodInfo per pending pod (10,000 unschedulable pods: 10,000 of them), so equal
  parsed parts are one object: `key` is interned (the informer's own key string), an absent `nodeSelector` or
  `labels` is the one empty mapping `NO_LABELS`, and with `parts` (a `SharedParts`, the scheduler's) the
  tolerations, requests, images and non-zero memory of pods made from one template are shared, and so are
  (the cache keeps a PodInfo per bound pod: 3,000 Running pods, 3,000 of them) the labels (one dict per equal
  labels: read-only), namespace, node name, nominated node, start time, preemption policy and facts; `reparse`
  keeps the old uid string when equal.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Hashable, Mapping
from sys import intern
from types import MappingProxyType
from typing import Any, TypeVar

import orjson

from lite.client import Obj
from lite.quantity import to_int, to_milli
from lite.records import dataclass
from lite.selectors import DOES_NOT_EXIST, EXISTS, GT, IN, LT, NOT_IN, LabelSelector, Requirement

DEFAULT_MILLI_CPU = 100
DEFAULT_MEMORY = 200 * 1024 * 1024
_NODE_OPS = {"In": IN, "NotIn": NOT_IN, "Exists": EXISTS, "DoesNotExist": DOES_NOT_EXIST, "Gt": GT, "Lt": LT}
CPU, MEMORY, EPHEMERAL, PODS = "cpu", "memory", "ephemeral-storage", "pods"
NO_LABELS: Mapping[str, str] = MappingProxyType({})  # the one empty (read-only) labels / nodeSelector mapping

H = TypeVar("H", bound=Hashable)


class SharedParts:
    """Equal hashable parsed values made one object (`share(v)`): a table of at most `limit` values, emptied
    when full (pods made from one template soon fill it again with the few values they share)."""

    def __init__(self, limit: int = 4096) -> None:
        self.limit = limit
        self._table: dict[Any, Any] = {}

    def __len__(self) -> int:
        return len(self._table)

    def share(self, v: H) -> H:
        got: H | None = self._table.get(v)
        if got is not None:
            return got
        if len(self._table) >= self.limit:
            self._table.clear()
        self._table[v] = v
        return v

    def labels(self, d: Mapping[str, str]) -> Mapping[str, str]:
        """One (read-only by contract) dict for equal label mappings: pods of one template share theirs."""
        if not d:
            return NO_LABELS
        try:
            k = ("labels", *d.items())
            got: Mapping[str, str] | None = self._table.get(k)
        except TypeError:  # unhashable values (never from the API): kept as they are
            return d
        if got is not None:
            return got
        if len(self._table) >= self.limit:
            self._table.clear()
        self._table[k] = out = {self.share(a): self.share(b) for a, b in d.items()}
        return out


@dataclass(frozen=True, slots=True)
class Resources:
    """Requested or allocatable amounts: cpu in millicores, memory/ephemeral in bytes, others as integers."""

    cpu: int = 0
    memory: int = 0
    ephemeral: int = 0
    scalars: tuple[tuple[str, int], ...] = ()

    def plus(self, o: Resources) -> Resources:
        return Resources(self.cpu + o.cpu, self.memory + o.memory, self.ephemeral + o.ephemeral,
                         _merge(self.scalars, o.scalars, 1))

    def minus(self, o: Resources) -> Resources:
        return Resources(self.cpu - o.cpu, self.memory - o.memory, self.ephemeral - o.ephemeral,
                         _merge(self.scalars, o.scalars, -1))

    def scalar(self, name: str) -> int:
        for k, v in self.scalars:
            if k == name:
                return v
        return 0


def _merge(a: tuple[tuple[str, int], ...], b: tuple[tuple[str, int], ...], sign: int) -> tuple[tuple[str, int], ...]:
    if not b:
        return a
    out = dict(a)
    for k, v in b:
        out[k] = out.get(k, 0) + sign * v
    return tuple(sorted((k, v) for k, v in out.items() if v))


def parse_resources(d: Mapping[str, Any] | None) -> Resources:
    """A requests/allocatable dict → Resources (pods are not included; see `allowed_pods`)."""
    if not d:
        return Resources()
    cpu = mem = eph = 0
    scalars: list[tuple[str, int]] = []
    for k, v in d.items():
        try:
            if k == CPU:
                cpu = to_milli(str(v))
            elif k == MEMORY:
                mem = to_int(str(v))
            elif k == EPHEMERAL:
                eph = to_int(str(v))
            elif k != PODS and ("/" in k or k.startswith("hugepages-")):
                scalars.append((k, to_int(str(v))))
        except ValueError:
            continue
    return Resources(cpu, mem, eph, tuple(sorted(scalars)))


def _max(a: Resources, b: Resources) -> Resources:
    sc = dict(a.scalars)
    for k, v in b.scalars:
        sc[k] = max(sc.get(k, 0), v)
    return Resources(max(a.cpu, b.cpu), max(a.memory, b.memory), max(a.ephemeral, b.ephemeral),
                     tuple(sorted(sc.items())))


def _container_requests(c: Obj) -> tuple[Resources, int, int]:
    res = c.get("resources")
    if not res:
        return _requests_of(b"{}")
    try:
        return _requests_of(orjson.dumps(res))
    except TypeError:  # not JSON (never from the API): parsed as it is
        return _parse_requests(res)


# A pure function of the bytes of a container's `resources` to immutable values, and the containers of one
# template have the same few: a bounded memo makes the repeats a dict lookup (parsing quantities is about half
# of `pod_info`). It holds no state anything could observe.
@functools.lru_cache(maxsize=1024)
def _requests_of(resources: bytes) -> tuple[Resources, int, int]:
    return _parse_requests(orjson.loads(resources))


def _parse_requests(res: Obj) -> tuple[Resources, int, int]:
    merged = {**(res.get("limits") or {}), **(res.get("requests") or {})}
    r = parse_resources(merged)
    nz_cpu = r.cpu if CPU in merged else DEFAULT_MILLI_CPU
    nz_mem = r.memory if MEMORY in merged else DEFAULT_MEMORY
    return r, nz_cpu, nz_mem


def pod_requests(spec: Obj) -> tuple[Resources, int, int]:
    """(requests, non-zero cpu, non-zero memory) of a pod spec, upstream's init-container max rule included."""
    containers = spec.get("containers") or []
    if len(containers) == 1 and not spec.get("initContainers") and not spec.get("overhead"):
        one = _container_requests(containers[0])
        if not one[0].scalars:  # what the general rule below gives, without its arithmetic
            return one
    total, nz_cpu, nz_mem = Resources(), 0, 0
    for c in containers:
        r, c_cpu, c_mem = _container_requests(c)
        total, nz_cpu, nz_mem = total.plus(r), nz_cpu + c_cpu, nz_mem + c_mem
    sidecars, sc_cpu, sc_mem = Resources(), 0, 0
    init_max, init_cpu, init_mem = Resources(), 0, 0
    for c in spec.get("initContainers") or []:
        r, c_cpu, c_mem = _container_requests(c)
        if c.get("restartPolicy") == "Always":
            sidecars, sc_cpu, sc_mem = sidecars.plus(r), sc_cpu + c_cpu, sc_mem + c_mem
            r, c_cpu, c_mem = sidecars, sc_cpu, sc_mem
        else:
            r, c_cpu, c_mem = r.plus(sidecars), c_cpu + sc_cpu, c_mem + sc_mem
        init_max, init_cpu, init_mem = _max(init_max, r), max(init_cpu, c_cpu), max(init_mem, c_mem)
    total, nz_cpu, nz_mem = total.plus(sidecars), nz_cpu + sc_cpu, nz_mem + sc_mem
    total, nz_cpu, nz_mem = _max(total, init_max), max(nz_cpu, init_cpu), max(nz_mem, init_mem)
    overhead = parse_resources(spec.get("overhead"))
    return total.plus(overhead), nz_cpu + overhead.cpu, nz_mem + overhead.memory


@dataclass(frozen=True, slots=True)
class Toleration:
    key: str
    operator: str
    value: str
    effect: str

    def tolerates(self, taint: Obj) -> bool:
        """Upstream `Toleration.ToleratesTaint`."""
        if self.effect and self.effect != taint.get("effect", ""):
            return False
        if self.key and self.key != taint.get("key", ""):
            return False
        if self.operator == "Exists":
            return True
        return self.operator in ("", "Equal") and self.value == str(taint.get("value", ""))


def tolerations_of(spec: Obj) -> tuple[Toleration, ...]:
    """The pod's tolerations; equal lists (every pod gets admission's two defaults) give one shared tuple."""
    tolerations = spec.get("tolerations")
    if not tolerations:
        return ()
    try:
        return _tolerations_of(orjson.dumps(tolerations))
    except TypeError:  # not JSON (never from the API): parsed as it is
        return _parse_tolerations(tolerations)


# A pure function of the bytes of a `tolerations` list to an immutable tuple, memoised as `_requests_of` (the
# same few lists on every pod, so the memo also makes their PodInfos share one tuple).
@functools.lru_cache(maxsize=1024)
def _tolerations_of(tolerations: bytes) -> tuple[Toleration, ...]:
    return _parse_tolerations(orjson.loads(tolerations))


def _parse_tolerations(tolerations: Any) -> tuple[Toleration, ...]:
    if not isinstance(tolerations, list):
        return ()
    return tuple(Toleration(str(t.get("key", "")), str(t.get("operator", "")), str(t.get("value", "")),
                            str(t.get("effect", ""))) for t in tolerations if isinstance(t, dict))


def tolerated(taint: Obj, tolerations: tuple[Toleration, ...]) -> bool:
    return any(t.tolerates(taint) for t in tolerations)


@dataclass(frozen=True, slots=True)
class NodeSelectorTerm:
    """One nodeSelectorTerm: all label expressions and all field expressions must match."""

    labels: tuple[Requirement, ...]
    fields: tuple[Requirement, ...]
    valid: bool

    def matches(self, node_labels: Mapping[str, str], node_name: str) -> bool:
        if not self.valid or (not self.labels and not self.fields):
            return False
        if not all(r.matches(node_labels) for r in self.labels):
            return False
        return all(r.matches({"metadata.name": node_name}) for r in self.fields)


def node_selector_term(d: Obj) -> NodeSelectorTerm:
    labels: list[Requirement] = []
    fields: list[Requirement] = []
    valid = True
    for out, exprs in ((labels, d.get("matchExpressions")), (fields, d.get("matchFields"))):
        for e in exprs or []:
            op = _NODE_OPS.get(str(e.get("operator", "")))
            values = tuple(str(v) for v in e.get("values") or [])
            if op is None or (op in (GT, LT) and len(values) != 1):
                valid = False
                continue
            out.append(Requirement(str(e.get("key", "")), op, values))
    return NodeSelectorTerm(tuple(labels), tuple(fields), valid)


@dataclass(frozen=True, slots=True)
class AffinityTerm:
    """A PodAffinityTerm with its namespaces resolved: `all_namespaces` for an empty namespaceSelector."""

    selector: LabelSelector
    namespaces: frozenset[str]
    ns_selector: LabelSelector | None
    topology_key: str
    weight: int = 0

    def matches(self, pod: PodInfo, ns_labels: Mapping[str, Mapping[str, str]]) -> bool:
        if pod.namespace not in self.namespaces:
            sel = self.ns_selector
            if sel is None or not sel.matches(ns_labels.get(pod.namespace)):
                return False
        return self.selector.matches(pod.labels)


def _affinity_term(d: Obj, namespace: str, labels: Mapping[str, str], weight: int = 0) -> AffinityTerm | None:
    try:
        selector = LabelSelector.from_dict(d.get("labelSelector"))
        for key in d.get("matchLabelKeys") or []:
            if key in labels:
                selector = LabelSelector((*selector.requirements, Requirement(key, IN, (labels[key],))))
        nsd = d.get("namespaceSelector")
        ns_sel = LabelSelector.from_dict(nsd) if nsd is not None else None
    except Exception:
        return None
    namespaces = frozenset(str(n) for n in d.get("namespaces") or [])
    if not namespaces and ns_sel is None:
        namespaces = frozenset((namespace,))
    return AffinityTerm(selector, namespaces, ns_sel, str(d.get("topologyKey", "")), weight)


def _terms(aff: Obj, field_name: str, ns: str, labels: Mapping[str, str], weighted: bool) -> tuple[AffinityTerm, ...]:
    out: list[AffinityTerm] = []
    for t in aff.get(field_name) or []:
        term = _affinity_term(t.get("podAffinityTerm") or {}, ns, labels, int(t.get("weight") or 0)) if weighted \
            else _affinity_term(t, ns, labels)
        if term is not None:
            out.append(term)
    return tuple(out)


@dataclass(frozen=True, slots=True)
class SpreadConstraint:
    max_skew: int
    topology_key: str
    hard: bool
    selector: LabelSelector
    min_domains: int
    honor_affinity: bool
    honor_taints: bool


def _spread_constraints(spec: Obj, labels: Mapping[str, str]) -> tuple[SpreadConstraint, ...]:
    out: list[SpreadConstraint] = []
    for c in spec.get("topologySpreadConstraints") or []:
        try:
            selector = LabelSelector.from_dict(c.get("labelSelector"))
        except Exception:
            continue
        for key in c.get("matchLabelKeys") or []:
            if key in labels:
                selector = LabelSelector((*selector.requirements, Requirement(key, IN, (labels[key],))))
        out.append(SpreadConstraint(int(c.get("maxSkew") or 1), str(c.get("topologyKey", "")),
                                    c.get("whenUnsatisfiable", "DoNotSchedule") == "DoNotSchedule", selector,
                                    int(c.get("minDomains") or 1), c.get("nodeAffinityPolicy", "Honor") == "Honor",
                                    c.get("nodeTaintsPolicy", "Ignore") == "Honor"))
    return tuple(out)


def normalized_image(name: str) -> str:
    """Upstream ImageLocality's name normalisation: a name without tag or digest means `:latest`."""
    last = name.rsplit("/", 1)[-1]
    if "@" in name or ":" in last:
        return name
    return name + ":latest"


def _host_ports(spec: Obj) -> tuple[tuple[str, str, int], ...]:
    out: list[tuple[str, str, int]] = []
    for c in list(spec.get("containers") or []) + list(spec.get("initContainers") or []):
        for p in c.get("ports") or []:
            hp = int(p.get("hostPort") or 0)
            if hp > 0:
                out.append((str(p.get("hostIP") or "0.0.0.0"), str(p.get("protocol") or "TCP"), hp))
    return tuple(out)


@dataclass(frozen=True, slots=True)
class PodInfo:
    source: Obj | bytes                # the pod, or its encoding (see the module doc)
    facts: int                         # `facts_of(spec, labels)`
    key: str
    uid: str
    namespace: str
    labels: Mapping[str, str]
    priority: int
    requests: Resources
    nonzero_cpu: int
    nonzero_mem: int
    host_ports: tuple[tuple[str, str, int], ...]
    tolerations: tuple[Toleration, ...]
    node_selector: Mapping[str, str]
    required_node_terms: tuple[NodeSelectorTerm, ...] | None
    preferred_node_terms: tuple[tuple[int, NodeSelectorTerm], ...]
    affinity: tuple[AffinityTerm, ...]
    anti_affinity: tuple[AffinityTerm, ...]
    preferred_affinity: tuple[AffinityTerm, ...]
    preferred_anti_affinity: tuple[AffinityTerm, ...]
    spread: tuple[SpreadConstraint, ...]
    images: tuple[str, ...]
    node_name: str
    nominated_node: str
    preemption_policy: str
    start_time: str
    deleting: bool
    spread_defaulted: bool = False     # `spread` holds the system default constraints
    claims: tuple[str, ...] = ()       # the PersistentVolumeClaims its volumes name (VolumeBinding's input)
    decoder: Callable[[bytes], Obj] | None = None  # decodes an encoded `source` (None: it is JSON)

    @property
    def name(self) -> str:
        """The pod's name: `key` after its namespace (not kept apart: one string less per pod)."""
        return self.key[len(self.namespace) + 1:]

    @property
    def obj(self) -> Obj:
        """The pod (decoded anew from `source` when that is its JSON: do not keep it)."""
        src = self.source
        if isinstance(src, dict):
            return src
        out: Obj = (self.decoder or orjson.loads)(src)
        return out

    @property
    def has_affinity(self) -> bool:
        return bool(self.affinity or self.anti_affinity or self.preferred_affinity or self.preferred_anti_affinity)


# (field name, slot descriptor) of every PodInfo field, in order: `_replaced`
_MEMBERS: tuple[tuple[str, Any], ...] = tuple((name, PodInfo.__dict__[name]) for name in PodInfo.__slots__)


def _replaced(old: PodInfo, changes: dict[str, Any]) -> PodInfo:
    """`dataclasses.replace(old, **changes)` (PodInfo has no `__post_init__` and no init=False field: the same
    object), slot by slot instead of through a keyword call of 30 arguments: `reparse` runs for each bound
    pod's binding and status updates, two or more per pod placed."""
    new: PodInfo = object.__new__(PodInfo)
    for name, member in _MEMBERS:
        member.__set__(new, changes[name] if name in changes else member.__get__(old, PodInfo))
    return new


def facts_of(spec: Obj, labels: Mapping[str, str]) -> int:
    """A fingerprint of what a PodInfo is parsed from: the labels and the spec but `nodeName` (the binding
    changes nothing else the plugins read). Equal fingerprints stand for equal facts (a 64-bit hash of their
    JSON); unequal ones may come from equal facts written in another key order (then they are parsed again)."""
    if "nodeName" in spec:
        spec = {k: v for k, v in spec.items() if k != "nodeName"}
    return hash((orjson.dumps(spec), orjson.dumps(labels)))


def _same(v: H) -> H:
    return v


def pod_info(pod: Obj, priority: int | None = None,
             default_spread: tuple[SpreadConstraint, ...] = (), encoded: bytes | None = None,
             decoder: Callable[[bytes], Obj] | None = None, parts: SharedParts | None = None) -> PodInfo:
    """Parse `pod`; `priority` overrides spec.priority (resolved from its PriorityClass by the caller);
    `default_spread` applies when the pod has no topologySpreadConstraints of its own; `encoded` is the pod's
    encoding, kept instead of the dict when given, which `decoder` decodes (default: it is JSON); `parts`
    shares equal parsed values with other pods' (see the module doc)."""
    m = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    ns, name = str(m.get("namespace", "")), str(m.get("name", ""))
    labels: Mapping[str, str] = m.get("labels") or NO_LABELS
    share: Callable[[Any], Any] = _same
    if parts is not None:
        share, labels, ns = parts.share, parts.labels(labels), parts.share(ns)
    req, nz_cpu, nz_mem = pod_requests(spec)
    aff = spec.get("affinity") or {}
    node_aff = aff.get("nodeAffinity") or {}
    required = node_aff.get("requiredDuringSchedulingIgnoredDuringExecution")
    req_terms = None if required is None else tuple(
        node_selector_term(t) for t in required.get("nodeSelectorTerms") or [])
    preferred = tuple((int(p.get("weight") or 0), node_selector_term(p.get("preference") or {}))
                      for p in node_aff.get("preferredDuringSchedulingIgnoredDuringExecution") or [])
    pa, paa = aff.get("podAffinity") or {}, aff.get("podAntiAffinity") or {}
    spread = _spread_constraints(spec, labels)
    defaulted = not spread and bool(default_spread)
    req_key = "requiredDuringSchedulingIgnoredDuringExecution"
    pref_key = "preferredDuringSchedulingIgnoredDuringExecution"
    return PodInfo(
        source=pod if encoded is None else encoded, facts=share(facts_of(spec, m.get("labels") or {})),
        key=intern(f"{ns}/{name}"), uid=str(m.get("uid", "")), namespace=ns, labels=labels,
        priority=int(spec.get("priority") or 0) if priority is None else priority,
        requests=share(req), nonzero_cpu=nz_cpu, nonzero_mem=share(nz_mem), host_ports=share(_host_ports(spec)),
        tolerations=share(tolerations_of(spec)), node_selector=spec.get("nodeSelector") or NO_LABELS,
        required_node_terms=req_terms, preferred_node_terms=preferred,
        affinity=_terms(pa, req_key, ns, labels, False), anti_affinity=_terms(paa, req_key, ns, labels, False),
        preferred_affinity=_terms(pa, pref_key, ns, labels, True),
        preferred_anti_affinity=_terms(paa, pref_key, ns, labels, True),
        spread=default_spread if defaulted else spread, spread_defaulted=defaulted,
        images=share(tuple(normalized_image(str(c.get("image", ""))) for c in spec.get("containers") or []
                           if c.get("image"))),
        node_name=share(str(spec.get("nodeName") or "")),
        nominated_node=share(str(status.get("nominatedNodeName") or "")),
        preemption_policy=share(str(spec.get("preemptionPolicy") or "PreemptLowerPriority")),
        start_time=share(str(status.get("startTime") or m.get("creationTimestamp") or "")),
        deleting=bool(m.get("deletionTimestamp")), decoder=decoder if encoded is not None else None,
        claims=tuple(str(v["persistentVolumeClaim"].get("claimName", "")) for v in spec.get("volumes") or []
                     if isinstance(v, dict) and isinstance(v.get("persistentVolumeClaim"), dict)),
    )


def same_facts(old: PodInfo, pod: Obj, priority: int | None = None) -> bool:
    """Whether `pod` has the labels, priority and spec (but nodeName) `old`'s parsed facts come from."""
    return facts_of(pod.get("spec") or {}, (pod.get("metadata") or {}).get("labels") or {}) == old.facts \
        and (priority is None or priority == old.priority)


def reparse(old: PodInfo | None, pod: Obj, priority: int | None = None, encoded: bytes | None = None,
            decoder: Callable[[bytes], Obj] | None = None, parts: SharedParts | None = None) -> PodInfo:
    """`pod_info(pod, priority, encoded=encoded, decoder=decoder, parts=parts)`, reusing `old`'s parsed facts
    (its default spreading too) when the fields they come from are unchanged (status updates and the binding
    itself change nothing the plugins read but node and deletion)."""
    if old is None or not same_facts(old, pod, priority):
        return pod_info(pod, priority, encoded=encoded, decoder=decoder, parts=parts)
    spec = pod.get("spec") or {}
    m = pod.get("metadata") or {}
    status = pod.get("status") or {}
    share = _same if parts is None else parts.share
    uid = str(m.get("uid", ""))
    return _replaced(old, {"source": pod if encoded is None else encoded,
                           "decoder": decoder if encoded is not None else None,
                           "uid": old.uid if uid == old.uid else uid,
                           "node_name": share(str(spec.get("nodeName") or "")),
                           "nominated_node": share(str(status.get("nominatedNodeName") or "")),
                           "start_time": share(str(status.get("startTime") or m.get("creationTimestamp") or "")),
                           "deleting": bool(m.get("deletionTimestamp"))})
