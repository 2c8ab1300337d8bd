"""Pure Deployment arithmetic (upstream `pkg/controller/deployment/util`): fenceposts, proportions, hashes,
revisions, conditions and status. No I/O; the controller modules call these.

Invariants:
- Integer-or-percent values round as upstream: maxSurge up, maxUnavailable down; both resolving to 0 makes
  maxUnavailable 1. Go's math.Round (half away from zero) is used where upstream rounds.
- `pod_template_hash` is fnv-1a 32 over the canonical JSON of the template (plus the collision count, as
  upstream adds it), printed in decimal and then "safe encoded" into consonants and digits like
  `rand.SafeEncodeString`, so names look like upstream's (`web-7d9c8b5f6d`).
"""

from __future__ import annotations

import datetime as dt
import math
import re
import struct
from typing import Any

import orjson

from lite.objects import meta, parse_time, rfc3339

Obj = dict[str, Any]

REVISION = "deployment.kubernetes.io/revision"
REVISION_HISTORY = "deployment.kubernetes.io/revision-history"
DESIRED_REPLICAS = "deployment.kubernetes.io/desired-replicas"
MAX_REPLICAS = "deployment.kubernetes.io/max-replicas"
HASH_LABEL = "pod-template-hash"
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
_SKIP_COPY = frozenset({LAST_APPLIED, REVISION, REVISION_HISTORY, DESIRED_REPLICAS, MAX_REPLICAS,
                        "deployment.kubernetes.io/error-selector-overlapping-with",
                        "deployment.kubernetes.io/selector-updated-at"})
_SAFE = "bcdfghjklmnpqrstvwxz2456789"
_PERCENT = re.compile(r"^(\d+)%$")

# Condition reasons
NEW_RS_CREATED = "NewReplicaSetCreated"
FOUND_NEW_RS = "FoundNewReplicaSet"
RS_UPDATED = "ReplicaSetUpdated"
NEW_RS_AVAILABLE = "NewReplicaSetAvailable"
TIMED_OUT = "ProgressDeadlineExceeded"
FAILED_RS_CREATE = "ReplicaSetCreateError"
PAUSED = "DeploymentPaused"
RESUMED = "DeploymentResumed"
MIN_AVAILABLE = "MinimumReplicasAvailable"
MIN_UNAVAILABLE = "MinimumReplicasUnavailable"


# ---- hashing -------------------------------------------------------------------------------------------

def fnv32a(data: bytes) -> int:
    h = 0x811C9DC5
    for b in data:
        h = ((h ^ b) * 0x01000193) & 0xFFFFFFFF
    return h


def safe_encode(s: str) -> str:
    return "".join(_SAFE[b % len(_SAFE)] for b in s.encode())


def pod_template_hash(template: Obj, collision_count: int | None = None) -> str:
    data = orjson.dumps(template, option=orjson.OPT_SORT_KEYS)
    if collision_count is not None:
        data += struct.pack("<I", collision_count & 0xFFFFFFFF)
    return safe_encode(str(fnv32a(data)))


def _without_hash(template: Obj) -> Obj:
    t = dict(template)
    m = dict(t.get("metadata") or {})
    labels = {k: v for k, v in (m.get("labels") or {}).items() if k != HASH_LABEL}
    m["labels"] = labels
    t["metadata"] = m
    return t


def equal_ignore_hash(a: Obj, b: Obj) -> bool:
    """Templates equal apart from the pod-template-hash label (upstream EqualIgnoreHash)."""
    def canon(t: Obj) -> bytes:
        t = _without_hash(t)
        m = {k: v for k, v in t["metadata"].items() if v not in ({}, None, [])}
        return orjson.dumps({**{k: v for k, v in t.items() if k != "metadata"}, "metadata": m},
                            option=orjson.OPT_SORT_KEYS)
    return canon(a) == canon(b)


# ---- int or percent --------------------------------------------------------------------------------------

def scaled_value(value: Any, total: int, round_up: bool) -> int:
    """Upstream intstr.GetScaledValueFromIntOrPercent."""
    if value is None:
        return 0
    if isinstance(value, int):
        return value
    m = _PERCENT.match(str(value))
    if m is None:
        try:
            return int(str(value))
        except ValueError:
            raise ValueError(f"invalid value for IntOrString: {value!r}") from None
    frac = int(m.group(1)) * total / 100
    return math.ceil(frac) if round_up else math.floor(frac)


def replicas(obj: Obj) -> int:
    v = (obj.get("spec") or {}).get("replicas")
    return 1 if v is None and obj.get("kind") == "Deployment" else int(v or 0)


def is_rolling(d: Obj) -> bool:
    strategy = ((d.get("spec") or {}).get("strategy") or {}).get("type", "RollingUpdate")
    return bool(strategy == "RollingUpdate")


def fenceposts(d: Obj) -> tuple[int, int]:
    """(maxSurge, maxUnavailable) resolved against spec.replicas (upstream ResolveFenceposts)."""
    ru = ((d.get("spec") or {}).get("strategy") or {}).get("rollingUpdate") or {}
    want = replicas(d)
    surge = scaled_value(ru.get("maxSurge", "25%"), want, True)
    unavailable = scaled_value(ru.get("maxUnavailable", "25%"), want, False)
    if surge == 0 and unavailable == 0:
        unavailable = 1
    return surge, unavailable


def max_surge(d: Obj) -> int:
    return fenceposts(d)[0] if is_rolling(d) else 0


def max_unavailable(d: Obj) -> int:
    if not is_rolling(d) or replicas(d) == 0:
        return 0
    return min(fenceposts(d)[1], replicas(d))


def go_round(x: float) -> int:
    return int(math.copysign(math.floor(abs(x) + 0.5), x))


# ---- replica sets ----------------------------------------------------------------------------------------

def annotations_of(obj: Obj) -> dict[str, str]:
    a: dict[str, str] = meta(obj).get("annotations") or {}
    return a


def revision(rs: Obj) -> int:
    try:
        return int(annotations_of(rs).get(REVISION, "0"))
    except ValueError:
        return 0


def int_annotation(rs: Obj, key: str) -> int | None:
    try:
        return int(annotations_of(rs)[key])
    except (KeyError, ValueError):
        return None


def created(obj: Obj) -> float:
    ts = meta(obj).get("creationTimestamp")
    return parse_time(str(ts)).timestamp() if ts else 0.0


def by_creation(rss: list[Obj]) -> list[Obj]:
    return sorted(rss, key=lambda r: (created(r), meta(r).get("name", "")))


def status_int(obj: Obj, field: str) -> int:
    return int((obj.get("status") or {}).get(field) or 0)


def total_spec(rss: list[Obj]) -> int:
    return sum(replicas(r) for r in rss)


def active(rss: list[Obj]) -> list[Obj]:
    return [r for r in rss if replicas(r) > 0]


def new_rs_replicas(d: Obj, all_rss: list[Obj], new_rs: Obj) -> int:
    """How big the new RS may be now (upstream NewRSNewReplicas)."""
    if not is_rolling(d):
        return replicas(d)
    max_total = replicas(d) + max_surge(d)
    current = total_spec(all_rss)
    if current >= max_total:
        return replicas(new_rs)
    return replicas(new_rs) + min(max_total - current, replicas(d) - replicas(new_rs))


def is_saturated(d: Obj, rs: Obj | None) -> bool:
    if rs is None:
        return False
    return replicas(rs) == replicas(d) and int_annotation(rs, DESIRED_REPLICAS) == replicas(d)


def find_active_or_latest(new_rs: Obj | None, old_rss: list[Obj]) -> Obj | None:
    if new_rs is None and not old_rss:
        return None
    newest_first = sorted(old_rss, key=created, reverse=True)
    live = active([*newest_first, *([new_rs] if new_rs else [])])
    if not live:
        return new_rs if new_rs is not None else newest_first[0]
    return live[0] if len(live) == 1 else None


def proportion(d: Obj, rs: Obj, to_add: int, added: int) -> int:
    """Upstream GetReplicaSetProportion: this RS's share of a scaling event during a rollout."""
    if replicas(rs) == 0 or to_add == 0 or to_add == added:
        return 0
    if replicas(d) == 0:
        fraction = -replicas(rs)
    else:
        max_total = replicas(d) + max_surge(d)
        annotated = int_annotation(rs, MAX_REPLICAS)
        if annotated is None or annotated == 0:
            annotated = status_int(d, "replicas") or max_total
        fraction = go_round(replicas(rs) * max_total / annotated) - replicas(rs)
    allowed = to_add - added
    return min(fraction, allowed) if to_add > 0 else max(fraction, allowed)


def replica_annotations(d: Obj) -> dict[str, str]:
    return {DESIRED_REPLICAS: str(replicas(d)), MAX_REPLICAS: str(replicas(d) + max_surge(d))}


def copied_annotations(d: Obj) -> dict[str, str]:
    """The deployment's annotations a new RS carries (upstream copyDeploymentAnnotationsToReplicaSet)."""
    return {k: v for k, v in annotations_of(d).items() if k not in _SKIP_COPY}


# ---- conditions and status -------------------------------------------------------------------------------

def get_condition(status: Obj, ctype: str) -> Obj | None:
    for c in status.get("conditions") or []:
        if c.get("type") == ctype:
            return dict(c)
    return None


def new_condition(ctype: str, status: str, reason: str, message: str, now: dt.datetime) -> Obj:
    t = rfc3339(now)
    return {"type": ctype, "status": status, "lastUpdateTime": t, "lastTransitionTime": t, "reason": reason,
            "message": message}


def remove_condition(status: Obj, ctype: str) -> None:
    status["conditions"] = [c for c in status.get("conditions") or [] if c.get("type") != ctype]


def set_condition(status: Obj, cond: Obj) -> None:
    """Upstream SetDeploymentCondition: same status and reason is a no-op; same status keeps the
    transition time."""
    current = get_condition(status, cond["type"])
    if current is not None and current.get("status") == cond["status"] and current.get("reason") == cond["reason"]:
        return
    if current is not None and current.get("status") == cond["status"]:
        cond = {**cond, "lastTransitionTime": current.get("lastTransitionTime")}
    remove_condition(status, cond["type"])
    status["conditions"].append(cond)


def complete(d: Obj, status: Obj) -> bool:
    want = replicas(d)
    return (int(status.get("updatedReplicas") or 0) == want and int(status.get("replicas") or 0) == want
            and int(status.get("availableReplicas") or 0) >= want - max_unavailable(d)
            and int(status.get("observedGeneration") or 0) >= int(meta(d).get("generation") or 0))


def progressing(d: Obj, status: Obj) -> bool:
    old = d.get("status") or {}
    old_old = int(old.get("replicas") or 0) - int(old.get("updatedReplicas") or 0)
    new_old = int(status.get("replicas") or 0) - int(status.get("updatedReplicas") or 0)
    return (int(status.get("updatedReplicas") or 0) > int(old.get("updatedReplicas") or 0) or new_old < old_old
            or int(status.get("availableReplicas") or 0) > int(old.get("availableReplicas") or 0))


def progress_deadline(d: Obj) -> int | None:
    v = (d.get("spec") or {}).get("progressDeadlineSeconds")
    return None if v is None or v >= 2**31 - 1 else int(v)


def timed_out(d: Obj, status: Obj, now: dt.datetime) -> bool:
    deadline = progress_deadline(d)
    cond = get_condition(status, "Progressing")
    if deadline is None or cond is None:
        return False
    if cond.get("reason") == TIMED_OUT:
        return True
    since = cond.get("lastUpdateTime")
    return bool(since) and parse_time(str(since)) + dt.timedelta(seconds=deadline) < now


def calculate_status(d: Obj, all_rss: list[Obj], new_rs: Obj | None, now: dt.datetime) -> Obj:
    """Upstream calculateStatus: counts from the RSes, plus the Available condition."""
    available = sum(status_int(r, "availableReplicas") for r in all_rss)
    total = total_spec(all_rss)
    old = d.get("status") or {}
    status: Obj = {
        "observedGeneration": int(meta(d).get("generation") or 0),
        "replicas": sum(status_int(r, "replicas") for r in all_rss),
        "updatedReplicas": status_int(new_rs, "replicas") if new_rs is not None else 0,
        "readyReplicas": sum(status_int(r, "readyReplicas") for r in all_rss),
        "availableReplicas": available,
        "unavailableReplicas": max(0, total - available),
        "conditions": [dict(c) for c in old.get("conditions") or []],
    }
    if old.get("collisionCount") is not None:
        status["collisionCount"] = old["collisionCount"]
    if available >= replicas(d) - max_unavailable(d):
        set_condition(status, new_condition("Available", "True", MIN_AVAILABLE,
                                            "Deployment has minimum availability.", now))
    else:
        set_condition(status, new_condition("Available", "False", MIN_UNAVAILABLE,
                                            "Deployment does not have minimum availability.", now))
    return status
