"""What an object costs against a ResourceQuota, and whether a quota's scopes cover it (pure).

Upstream's quota evaluators (`pkg/quota/v1/evaluator/core`, `generic`) as plain functions over JSON dicts:

- every namespaced object counts `count/<resource>` (core) or `count/<resource>.<group>`;
- pods (not yet Succeeded/Failed): `pods`, `requests.X` / `X` and `limits.X` for cpu, memory,
  ephemeral-storage and extended resources, from the pod's effective requests (containers summed, init
  containers as a floor, sidecars added, overhead added);
- services: `services`, `services.nodeports` (one per port of a NodePort/LoadBalancer Service),
  `services.loadbalancers`;
- PVCs: `persistentvolumeclaims`, `requests.storage`, and the per-StorageClass
  `<class>.storageclass.storage.k8s.io/{requests.storage,persistentvolumeclaims}`;
- configmaps, secrets, replicationcontrollers, resourcequotas: their legacy object-count names.

Scopes (spec.scopes and spec.scopeSelector): Terminating, NotTerminating, BestEffort, NotBestEffort,
PriorityClass; only pods can match a quota that has scopes (upstream: other evaluators match no scope).

Invariants: nothing here does I/O or mutates its arguments; quantities are exact: `Fraction`s, or integers
in nano-units (`*_nano`, what admission's hot path uses; `fractions` converts).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from fractions import Fraction
from typing import Any

import orjson

from lite.kinds import Kind
from lite.quantity import NANO, format_quantity, parse_nano, parse_quantity
from lite.records import dataclass

Obj = dict[str, Any]
Usage = dict[str, Fraction]
NanoUsage = dict[str, int]  # the same, in nano-units (10^-9): exact, as nothing finer is kept

COMPUTE = ("cpu", "memory", "ephemeral-storage")
LEGACY_COUNTS = {"": ("configmaps", "secrets", "replicationcontrollers", "resourcequotas")}
STORAGE_CLASS_SUFFIX = ".storageclass.storage.k8s.io/"
POD_SCOPES = ("Terminating", "NotTerminating", "BestEffort", "NotBestEffort", "PriorityClass")


def count_name(kind: Kind) -> str:
    return f"count/{kind.plural}" if not kind.group else f"count/{kind.plural}.{kind.group}"


def quantity(value: Any) -> Fraction:
    try:
        return parse_quantity(str(value))
    except (ValueError, ZeroDivisionError):
        return Fraction(0)


def nano(value: Any) -> int:
    """`quantity(value)` in nano-units (exact: parsing rounds up to 1n); unparsable values are 0."""
    try:
        return parse_nano(str(value))
    except (ValueError, ZeroDivisionError):
        return 0


def resource_list(raw: Any) -> Usage:
    if not isinstance(raw, dict):
        return {}
    return {str(k): quantity(v) for k, v in raw.items()}


def resource_nano(raw: Any) -> NanoUsage:
    """`resource_list` in nano-units."""
    if not isinstance(raw, dict):
        return {}
    return {str(k): nano(v) for k, v in raw.items()}


def fractions(values: Mapping[str, int]) -> Usage:
    """Nano-unit integers as exact Fractions."""
    return {k: Fraction(v, NANO) for k, v in values.items()}


def _add(into: NanoUsage, more: Mapping[str, int]) -> None:
    for k, v in more.items():
        into[k] = into.get(k, 0) + v


def _max(into: NanoUsage, more: Mapping[str, int]) -> None:
    for k, v in more.items():
        if k not in into or v > into[k]:
            into[k] = v


def _containers(pod: Obj, field: str) -> list[Obj]:
    spec = pod.get("spec") or {}
    return [c for c in spec.get(field) or [] if isinstance(c, dict)]


def _requirements(container: Obj, which: str) -> NanoUsage:
    return resource_nano((container.get("resources") or {}).get(which))


def pod_effective_nano(pod: Obj, which: str) -> NanoUsage:
    """A pod's effective `requests` or `limits` in nano-units: containers and sidecars summed, each regular
    init container (plus the sidecars started before it) a floor, then the pod overhead (upstream
    resourcehelper)."""
    total: NanoUsage = {}
    for c in _containers(pod, "containers"):
        _add(total, _requirements(c, which))
    init = _containers(pod, "initContainers")
    if init:
        sidecars: NanoUsage = {}
        init_floor: NanoUsage = {}
        for c in init:
            own = _requirements(c, which)
            if c.get("restartPolicy") == "Always":
                _add(total, own)
                _add(sidecars, own)
                _max(init_floor, sidecars)
            else:
                step = dict(own)
                _add(step, sidecars)
                _max(init_floor, step)
        _max(total, init_floor)
    overhead = (pod.get("spec") or {}).get("overhead")
    if overhead:
        _add(total, resource_nano(overhead))
    return total


def pod_effective(pod: Obj, which: str) -> Usage:
    """`pod_effective_nano` as Fractions."""
    return fractions(pod_effective_nano(pod, which))


def pod_is_live(pod: Obj, now: dt.datetime) -> bool:
    """Upstream QuotaV1Pod: terminal pods, and pods past their deletion grace, use no compute quota."""
    if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
        return False
    meta = pod.get("metadata") or {}
    deleted = meta.get("deletionTimestamp")
    if deleted:
        try:
            at = dt.datetime.fromisoformat(str(deleted).replace("Z", "+00:00"))
        except ValueError:
            return True
        grace = int(meta.get("deletionGracePeriodSeconds") or 0)
        if now > at + dt.timedelta(seconds=grace):
            return False
    return True


Effective = tuple[NanoUsage, NanoUsage]  # (requests, limits) of `pod_effective_nano`


def pod_usage_nano(pod: Obj, now: dt.datetime, effective: Effective | None = None) -> NanoUsage:
    """What a pod uses, in nano-units; `effective`: its (requests, limits) when the caller already has them."""
    out: NanoUsage = {"count/pods": NANO}
    if not pod_is_live(pod, now):
        return out
    out["pods"] = NANO
    requests, limits = effective or (pod_effective_nano(pod, "requests"), pod_effective_nano(pod, "limits"))
    for name, value in requests.items():
        out[f"requests.{name}"] = value
        if name in COMPUTE:
            out[name] = value
    for name, value in limits.items():
        out[f"limits.{name}"] = value
    return out


def pod_usage(pod: Obj, now: dt.datetime) -> Usage:
    return fractions(pod_usage_nano(pod, now))


def service_usage(svc: Obj) -> Usage:
    spec = svc.get("spec") or {}
    out: Usage = {"count/services": Fraction(1), "services": Fraction(1)}
    stype = spec.get("type") or "ClusterIP"
    if stype in ("NodePort", "LoadBalancer"):
        out["services.nodeports"] = Fraction(len([p for p in spec.get("ports") or [] if isinstance(p, dict)]))
    if stype == "LoadBalancer":
        out["services.loadbalancers"] = Fraction(1)
    return out


def pvc_usage(pvc: Obj) -> Usage:
    spec = pvc.get("spec") or {}
    out: Usage = {"count/persistentvolumeclaims": Fraction(1), "persistentvolumeclaims": Fraction(1)}
    storage = resource_list((spec.get("resources") or {}).get("requests")).get("storage")
    if storage is not None:
        out["requests.storage"] = storage
    cls = spec.get("storageClassName")
    if cls:
        out[f"{cls}{STORAGE_CLASS_SUFFIX}persistentvolumeclaims"] = Fraction(1)
        if storage is not None:
            out[f"{cls}{STORAGE_CLASS_SUFFIX}requests.storage"] = storage
    return out


def object_usage_nano(kind: Kind, obj: Obj, now: dt.datetime, effective: Effective | None = None) -> NanoUsage:
    """`object_usage` in nano-units; `effective` as for `pod_usage_nano`."""
    if kind.group == "" and kind.kind == "Pod":
        return pod_usage_nano(obj, now, effective)
    return {k: v.numerator * (NANO // v.denominator) for k, v in object_usage(kind, obj, now).items()}


def object_usage(kind: Kind, obj: Obj, now: dt.datetime) -> Usage:
    """Everything `obj` (a stored or about-to-be-stored object of `kind`) counts against a quota."""
    if kind.group == "" and kind.kind == "Pod":
        return pod_usage(obj, now)
    if kind.group == "" and kind.kind == "Service":
        return service_usage(obj)
    if kind.group == "" and kind.kind == "PersistentVolumeClaim":
        return pvc_usage(obj)
    out: Usage = {count_name(kind): Fraction(1)}
    if kind.plural in LEGACY_COUNTS.get(kind.group, ()):
        out[kind.plural] = Fraction(1)
    return out


def tracks(kind: Kind, name: str) -> bool:
    """Whether objects of `kind` can use the quota resource `name`."""
    if kind.group == "" and kind.kind == "Pod":
        return name in ("pods", "count/pods", *COMPUTE) or (
            name.startswith(("requests.", "limits.")) and name != "requests.storage")
    if kind.group == "" and kind.kind == "Service":
        return name in ("count/services", "services", "services.nodeports", "services.loadbalancers")
    if kind.group == "" and kind.kind == "PersistentVolumeClaim":
        return name in ("count/persistentvolumeclaims", "persistentvolumeclaims", "requests.storage") \
            or STORAGE_CLASS_SUFFIX in name
    return name == count_name(kind) or (kind.plural in LEGACY_COUNTS.get(kind.group, ()) and name == kind.plural)


def pod_shape(pod: Obj) -> bytes | None:
    """A key for everything LimitRange checks, quota usage and quota scopes read from a pod: pods with equal
    keys (the replicas of one template) get equal results from `pod_effective_nano`, `pod_usage_nano`,
    `pod_facts`, `stated`, `missing_requirements` and LimitRange's `pod_violations`, so those can be kept per
    key. None (keep nothing) for a pod whose usage depends on the time (deletionTimestamp) or that is
    terminal, and for a body of unexpected shape. Key order counts (a cache miss, never a wrong hit). Any of
    those functions that starts reading another pod field (a new scope) must add that field here."""
    meta, status, spec = pod.get("metadata"), pod.get("status"), pod.get("spec")
    if (isinstance(meta, dict) and meta.get("deletionTimestamp")) or not isinstance(spec, dict) or (
            isinstance(status, dict) and status.get("phase") in ("Succeeded", "Failed")):
        return None
    parts: list[Any] = [spec.get("overhead"), spec.get("activeDeadlineSeconds") is not None,
                        spec.get("priorityClassName")]
    for field in ("containers", "initContainers"):
        items = spec.get(field) or []
        if not isinstance(items, list):
            return None
        parts.append([[c.get("name"), c.get("resources"), c.get("restartPolicy")] if isinstance(c, dict) else 0
                      for c in items])
    try:
        return orjson.dumps(parts)
    except (TypeError, orjson.JSONEncodeError):
        return None


# ---- scopes ------------------------------------------------------------------------------------------


def is_best_effort(pod: Obj) -> bool:
    """BestEffort QoS: no container (nor init container) requests or limits cpu or memory."""
    for field in ("containers", "initContainers"):
        for c in _containers(pod, field):
            res = c.get("resources") or {}
            for which in ("requests", "limits"):
                got = res.get(which) or {}
                if isinstance(got, dict) and any(k in got for k in ("cpu", "memory")):
                    return False
    return True


@dataclass(frozen=True)
class PodFacts:
    """What scopes look at in a pod, computed once per pod however many scoped quotas judge it."""

    best_effort: bool
    terminating: bool
    priority_class: str


def pod_facts(pod: Obj) -> PodFacts:
    spec = pod.get("spec") or {}
    return PodFacts(is_best_effort(pod), spec.get("activeDeadlineSeconds") is not None,
                    str(spec.get("priorityClassName") or ""))


Scope = tuple[str, str, list[str]]  # (scopeName, operator, values)


def scope_selects(scope: str, operator: str, values: Iterable[str], facts: PodFacts) -> bool:
    if scope == "Terminating":
        return facts.terminating
    if scope == "NotTerminating":
        return not facts.terminating
    if scope == "BestEffort":
        return facts.best_effort
    if scope == "NotBestEffort":
        return not facts.best_effort
    if scope == "PriorityClass":
        cls = facts.priority_class
        if operator == "Exists":
            return bool(cls)
        if operator == "DoesNotExist":
            return not cls
        if operator == "In":
            return bool(cls) and cls in set(values)
        if operator == "NotIn":
            return not cls or cls not in set(values)
    return False


def quota_scopes(quota: Obj) -> list[Scope]:
    """(scopeName, operator, values) of spec.scopes (operator Exists) and spec.scopeSelector."""
    spec = quota.get("spec") or {}
    out: list[Scope] = [(str(s), "Exists", []) for s in spec.get("scopes") or []]
    for expr in (spec.get("scopeSelector") or {}).get("matchExpressions") or []:
        if isinstance(expr, dict):
            out.append((str(expr.get("scopeName", "")), str(expr.get("operator", "")),
                        [str(v) for v in expr.get("values") or []]))
    return out


def selects(scopes: Iterable[Scope], kind: Kind, obj: Obj, facts: PodFacts | None = None) -> bool:
    """Whether a quota with `scopes` (from `quota_scopes`) selects `obj`; `facts`: `pod_facts(obj)` when
    the caller has them."""
    scopes = list(scopes)
    if not scopes:
        return True
    if not (kind.group == "" and kind.kind == "Pod"):
        return False
    got = facts or pod_facts(obj)
    return all(scope_selects(name, op, values, got) for name, op, values in scopes)


def matches(quota: Obj, kind: Kind, obj: Obj) -> bool:
    """Whether `quota`'s scopes select `obj` (a quota without scopes selects everything)."""
    return selects(quota_scopes(quota), kind, obj)


# ---- arithmetic and printing -------------------------------------------------------------------------


def hard_of(quota: Obj) -> Usage:
    return resource_list((quota.get("spec") or {}).get("hard"))


def charge(usage: Mapping[str, Fraction], hard: Mapping[str, Any]) -> Usage:
    """The part of `usage` a quota with `hard` tracks."""
    return {k: v for k, v in usage.items() if k in hard}


def exceeded(used: Mapping[str, Fraction], delta: Mapping[str, Fraction], hard: Mapping[str, Fraction]) -> list[str]:
    """Resource names for which used + delta would go over hard (only names in delta are judged)."""
    return sorted(k for k, v in delta.items() if k in hard and used.get(k, Fraction(0)) + v > hard[k])


def format_usage(usage: Mapping[str, Fraction], like: Mapping[str, Any] | None = None) -> dict[str, str]:
    """Quantities as strings; binary (Mi, Gi) where the matching `like` string (spec.hard) is binary."""
    out: dict[str, str] = {}
    for k, v in usage.items():
        ref = str((like or {}).get(k, ""))
        out[k] = format_quantity(v, binary=ref.endswith("i") or (ref == "" and "memory" in k and v >= 1024))
    return out


def pretty(usage: Mapping[str, Fraction], like: Mapping[str, Any] | None = None) -> str:
    """Upstream prettyPrint: `name=value` sorted by name, comma-separated."""
    shown = format_usage(usage, like)
    return ",".join(f"{k}={shown[k]}" for k in sorted(shown))


VALIDATED = ("cpu", "memory", "requests.cpu", "requests.memory", "limits.cpu", "limits.memory")


def stated(pod: Obj) -> list[tuple[str, frozenset[str]]]:
    """(container name, the VALIDATED names it states) for every container and init container."""
    out: list[tuple[str, frozenset[str]]] = []
    for field in ("containers", "initContainers"):
        for c in _containers(pod, field):
            res = c.get("resources") or {}
            have: set[str] = set()
            for name in res.get("requests") or {}:
                have |= {str(name), f"requests.{name}"}
            for name in res.get("limits") or {}:
                have.add(f"limits.{name}")
            out.append((str(c.get("name", "")), frozenset(have)))
    return out


def missing_requirements(hard: Mapping[str, Any], pod: Obj,
                         have: list[tuple[str, frozenset[str]]] | None = None) -> str:
    """Upstream's pod Constraints: when a quota tracks cpu or memory, every container must state them.
    Returns '' or the `must specify ...` text. `have` is `stated(pod)` when the caller already has it."""
    required = {k for k in VALIDATED if k in hard}
    if not required:
        return ""
    missing: dict[str, set[str]] = {}
    for name, got in have if have is not None else stated(pod):
        for res in required - got:
            missing.setdefault(res, set()).add(name)
    if not missing:
        return ""
    return "must specify " + "; ".join(f"{r} for: {','.join(sorted(missing[r]))}" for r in sorted(missing))
