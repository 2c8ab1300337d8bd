"""Pod facts the ReplicaSet and Deployment controllers share: readiness, availability, the deletion order.

Pure functions over pod dicts (upstream `podutil.IsPodReady`, `IsPodAvailable`, `FilterActivePods`,
`controller.ActivePodsWithRanks`).

Invariants: nothing here does I/O or mutates a pod; `now` is passed in so results are reproducible.
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from collections.abc import Iterable
from sys import intern
from typing import Any

from lite.objects import is_deleting, meta, parse_time

Obj = dict[str, Any]
DELETION_COST = "controller.kubernetes.io/pod-deletion-cost"
_PHASE_ORDER = {"Pending": 0, "Unknown": 1, "Running": 2}
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
# Pod informer indices shared by the ReplicaSet and ReplicationController controllers: a sync reads only
# its own pods (by controller uid) and the namespace's orphans, not every pod of the namespace.
CONTROLLER_UID_INDEX = "lite.controllers/controller-uid"
ORPHAN_INDEX = "lite.controllers/orphans-by-namespace"


def controller_uid_index(pod: Obj) -> list[str]:
    for ref in meta(pod).get("ownerReferences") or []:
        if ref.get("controller"):
            return [str(ref.get("uid", ""))]
    return []


def orphan_index(pod: Obj) -> list[str]:
    m = meta(pod)
    if any(ref.get("controller") for ref in m.get("ownerReferences") or []):
        return []
    return [str(m.get("namespace", ""))]


# What a ReplicaSet sync reads of one active pod, kept per pod by its controller's event handlers so that a
# sync never decodes the pods it only counts: (controller reference uid or None; labels: the decoded pod's own
# dict, shared by the pods of one template, None when it has none; Ready: None when not Ready=True, else the
# condition's lastTransitionTime, "" when it has none).
PodFacts = tuple[str | None, dict[str, str] | None, str | None]


def pod_facts(pod: Obj) -> PodFacts | None:
    """The `PodFacts` of `pod`, or None when it is not active (terminal or being deleted): syncs skip those."""
    m = meta(pod)
    status = pod.get("status") or {}
    if m.get("deletionTimestamp") or status.get("phase") in ("Succeeded", "Failed"):
        return None
    uid = None
    for ref in m.get("ownerReferences") or ():
        if ref.get("controller"):
            uid = intern(str(ref.get("uid", "")))
            break
    ready = None
    for c in status.get("conditions") or ():
        if c.get("type") == "Ready":
            if c.get("status") == "True":
                ready = str(c.get("lastTransitionTime") or "")
            break
    return (uid, m.get("labels") or None, ready)


def facts_available(ready: str | None, min_ready_seconds: int, now: dt.datetime) -> bool:
    """`is_pod_available` from a pod's `PodFacts` Ready entry."""
    if ready is None:
        return False
    if min_ready_seconds <= 0:
        return True
    return bool(ready) and parse_time(ready) + dt.timedelta(seconds=min_ready_seconds) <= now


def _ready_condition(pod: Obj) -> Obj | None:
    c: Obj
    for c in (pod.get("status") or {}).get("conditions") or []:
        if c.get("type") == "Ready":
            return c  # read-only: callers never change it (pods are shared informer objects)
    return None


def is_pod_ready(pod: Obj) -> bool:
    c = _ready_condition(pod)
    return c is not None and c.get("status") == "True"


def ready_since(pod: Obj) -> dt.datetime | None:
    c = _ready_condition(pod)
    if c is None or c.get("status") != "True" or not c.get("lastTransitionTime"):
        return None
    return parse_time(str(c["lastTransitionTime"]))


def is_pod_available(pod: Obj, min_ready_seconds: int, now: dt.datetime) -> bool:
    """Ready for at least `min_ready_seconds` (upstream IsPodAvailable)."""
    if not is_pod_ready(pod):
        return False
    if min_ready_seconds <= 0:
        return True
    since = ready_since(pod)
    return since is not None and since + dt.timedelta(seconds=min_ready_seconds) <= now


def is_active(pod: Obj) -> bool:
    """Neither terminal nor being deleted (upstream IsPodActive)."""
    phase = (pod.get("status") or {}).get("phase")
    return phase not in ("Succeeded", "Failed") and not is_deleting(pod)


def counts_only_change(old: Obj, new: Obj) -> bool:
    """Whether a pod update can change only its owner's status counts (ready, available), nothing its owner
    acts on: same labels, same controller reference, the same activeness and neither being deleted."""
    if old is new:
        return True
    if is_deleting(old) or is_deleting(new) or is_active(old) != is_active(new):
        return False
    mo, mn = meta(old), meta(new)
    return bool(mo.get("labels") == mn.get("labels") and mo.get("ownerReferences") == mn.get("ownerReferences"))


def _created(pod: Obj) -> dt.datetime:
    ts = meta(pod).get("creationTimestamp")
    return parse_time(str(ts)) if ts else _EPOCH


def _restarts(pod: Obj) -> int:
    return max((int(s.get("restartCount") or 0) for s in (pod.get("status") or {}).get("containerStatuses") or []),
               default=0)


def _cost(pod: Obj) -> int:
    try:
        return int((meta(pod).get("annotations") or {}).get(DELETION_COST, "0"))
    except ValueError:
        return 0


def deletion_order_key(pod: Obj, rank: int) -> tuple[Any, ...]:
    """Sort key: pods to delete first sort first (upstream ActivePodsWithRanks.Less, linear time scale).

    unassigned < assigned; Pending < Unknown < Running; not ready < ready; lower deletion cost first;
    more pods of the same owner on its node first; ready for less time first; more restarts first;
    newer first.
    """
    node = (pod.get("spec") or {}).get("nodeName") or ""
    phase = _PHASE_ORDER.get(str((pod.get("status") or {}).get("phase") or "Pending"), 0)
    ready = is_pod_ready(pod)
    since = ready_since(pod) if ready else None
    return (
        bool(node), phase, ready, _cost(pod), -rank,
        -(since or _EPOCH).timestamp() if ready else 0.0,
        -_restarts(pod), -_created(pod).timestamp(),
    )


def pods_to_delete(pods: list[Obj], related: Iterable[Obj], n: int) -> list[Obj]:
    """The `n` pods to delete first; ranks count `related` active pods (same owner family) per node."""
    if n >= len(pods):
        return list(pods)
    per_node = Counter((p.get("spec") or {}).get("nodeName") or "" for p in related if is_active(p))
    ranked = sorted(pods, key=lambda p: deletion_order_key(p, per_node[(p.get("spec") or {}).get("nodeName") or ""]
                                                           if (p.get("spec") or {}).get("nodeName") else 0))
    return ranked[:n]
