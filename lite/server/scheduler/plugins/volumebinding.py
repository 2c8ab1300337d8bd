"""VolumeBinding: the pod's PersistentVolumeClaims decide which nodes fit (upstream
`pkg/scheduler/framework/plugins/volumebinding`, reasons and messages as upstream's).

pre_filter: a claim that is missing, being deleted, bound to a volume that does not exist, or unbound with
  Immediate binding fails the pod on every node (UnschedulableAndUnresolvable); a pod without claims skips.
filter (per node): every bound volume's node affinity must match the node; each unbound WaitForFirstConsumer
  claim needs an Available volume that fits it on that node (`lite.volumematch.find_matching_volume`, no
  volume chosen twice), or a class whose provisioner can make one there (not `kubernetes.io/no-provisioner`,
  `allowedTopologies` matching the node).
`plan(state, node)` is the Reserve decision the scheduler then carries out before binding the pod (PreBind):
  pre-bind the chosen volumes (`claimRef`) and set `volume.kubernetes.io/selected-node` on claims to provision,
  then wait until every claim is Bound.

Pure over the pod and `Snapshot.volumes` (a read-only `VolumeView`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import field
from typing import Any, Protocol

from lite.records import dataclass
from lite.server.scheduler.framework import Failure
from lite.server.scheduler.podinfo import PodInfo
from lite.server.scheduler.snapshot import NodeInfo, Snapshot
from lite.volumematch import (
    NO_PROVISIONER,
    WAIT_FOR_FIRST_CONSUMER,
    find_matching_volume,
    node_affinity_matches,
    volume_class,
)

Obj = dict[str, Any]
NAME = "VolumeBinding"
ERR_UNBOUND_IMMEDIATE = "pod has unbound immediate PersistentVolumeClaims"
ERR_NODE_CONFLICT = "node(s) had volume node affinity conflict"
ERR_BIND_CONFLICT = "node(s) didn't find available persistent volumes to bind"
ERR_PV_NOT_EXIST = "node(s) unavailable due to one or more pvc(s) bound to non-existent pv(s)"


class VolumeView(Protocol):
    """What the plugin reads: claims, volumes and classes (the scheduler's informers, or a table in tests)."""

    def claim(self, namespace: str, name: str) -> Obj | None: ...

    def volume(self, name: str) -> Obj | None: ...

    def storage_class(self, name: str) -> Obj | None: ...

    def volumes(self) -> Iterable[Obj]: ...


@dataclass(frozen=True)
class TableVolumes:
    """A `VolumeView` over plain mappings (tests, small callers)."""

    claims: Mapping[str, Obj] = field(default_factory=dict)  # "ns/name" -> claim
    pvs: Mapping[str, Obj] = field(default_factory=dict)
    classes: Mapping[str, Obj] = field(default_factory=dict)

    def claim(self, namespace: str, name: str) -> Obj | None:
        return self.claims.get(f"{namespace}/{name}")

    def volume(self, name: str) -> Obj | None:
        return self.pvs.get(name)

    def storage_class(self, name: str) -> Obj | None:
        return self.classes.get(name)

    def volumes(self) -> Iterable[Obj]:
        return self.pvs.values()


@dataclass(frozen=True)
class State:
    error: Failure | None = None
    bound: tuple[Obj, ...] = ()                          # volumes of bound claims
    delayed: tuple[tuple[Obj, Obj | None], ...] = ()     # (unbound WaitForFirstConsumer claim, its class)
    view: VolumeView | None = None


@dataclass(frozen=True)
class Plan:
    """What PreBind writes for one node: volumes to pre-bind to claims, claims to provision there."""

    binds: tuple[tuple[Obj, Obj], ...] = ()   # (claim, volume)
    provisions: tuple[Obj, ...] = ()


def claim_names(pod: Obj) -> list[str]:
    return [str(v["persistentVolumeClaim"].get("claimName", "")) for v in (pod.get("spec") or {}).get("volumes") or []
            if isinstance(v, dict) and isinstance(v.get("persistentVolumeClaim"), dict)]


def _fail(reason: str) -> State:
    return State(error=Failure((reason,), unresolvable=True, plugin=NAME, pre_filter=True))


def _topology_allows(cls: Obj | None, labels: Mapping[str, str]) -> bool:
    terms = (cls or {}).get("allowedTopologies") or []
    if not terms:
        return True
    for term in terms:
        exprs = term.get("matchLabelExpressions") or []
        if all(labels.get(str(e.get("key"))) in (e.get("values") or []) for e in exprs):
            return True
    return False


def pre_filter_state(pod: Obj, view: VolumeView | None) -> State | None:
    names = claim_names(pod)
    if not names:
        return None
    if view is None:
        return _fail(ERR_UNBOUND_IMMEDIATE)
    ns = str((pod.get("metadata") or {}).get("namespace", ""))
    bound: list[Obj] = []
    delayed: list[tuple[Obj, Obj | None]] = []
    for name in names:
        claim = view.claim(ns, name)
        if claim is None:
            return _fail(f'persistentvolumeclaim "{name}" not found')
        if (claim.get("metadata") or {}).get("deletionTimestamp"):
            return _fail(f'persistentvolumeclaim "{name}" is being deleted')
        volume_name = (claim.get("spec") or {}).get("volumeName")
        if volume_name:
            pv = view.volume(str(volume_name))
            if pv is None:
                return _fail(ERR_PV_NOT_EXIST)
            bound.append(pv)
            continue
        cls_name = volume_class(claim)
        cls = view.storage_class(cls_name) if cls_name else None
        if cls is None or cls.get("volumeBindingMode") != WAIT_FOR_FIRST_CONSUMER:
            return _fail(ERR_UNBOUND_IMMEDIATE)
        delayed.append((claim, cls))
    return State(bound=tuple(bound), delayed=tuple(delayed), view=view)


def plan(state: State, node: NodeInfo) -> Plan | Failure:
    """Reserve's decision for `node`, or why the node does not fit."""
    labels, name = node.node.labels, node.name
    for pv in state.bound:
        if not node_affinity_matches(pv, labels, name):
            return Failure((ERR_NODE_CONFLICT,), unresolvable=True, plugin=NAME)
    binds: list[tuple[Obj, Obj]] = []
    provisions: list[Obj] = []
    taken: set[str] = set()
    assert state.view is not None or not state.delayed
    for claim, cls in state.delayed:
        assert state.view is not None
        free = [pv for pv in state.view.volumes() if (pv.get("metadata") or {}).get("name") not in taken]
        match = find_matching_volume(claim, free, node=(labels, name), delay_binding=True)
        if match is not None:
            taken.add(str(match["metadata"]["name"]))
            binds.append((claim, match))
        elif cls is not None and cls.get("provisioner") != NO_PROVISIONER and _topology_allows(cls, labels):
            provisions.append(claim)
        else:
            return Failure((ERR_BIND_CONFLICT,), unresolvable=True, plugin=NAME)
    return Plan(tuple(binds), tuple(provisions))


class VolumeBinding:
    name = NAME

    def pre_filter(self, pod: PodInfo, snap: Snapshot) -> State | None:
        return pre_filter_state(pod.obj, snap.volumes) if pod.claims else None  # `obj` may decode: only if needed

    def filter(self, state: State, pod: PodInfo, node: NodeInfo) -> Failure | None:
        if state.error is not None:
            return state.error
        result = plan(state, node)
        return result if isinstance(result, Failure) else None
