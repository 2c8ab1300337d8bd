"""The HorizontalPodAutoscaler's replica arithmetic (upstream podautoscaler replica_calculator.go), pure.

For a Resource metric over the target's pods:
- Utilization: ratio = (sum of usage of pods with metrics / sum of their requests * 100) / target %;
  AverageValue: ratio = (sum of usage / pods with metrics) / target value.
- Within the tolerance (|ratio - 1| <= 0.1) nothing changes. Otherwise pods without metrics count as using
  100 % of target when scaling down and 0 when scaling up, and not-ready pods count as 0 when scaling up;
  the ratio is recomputed over all of them, and if it now points the other way (or inside the tolerance)
  nothing changes; else desired = ceil(ratio * number of pods counted).
Pods being deleted or terminal are ignored.

Invariants: no I/O, exact arithmetic (Fractions), results reproducible.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

from lite.quantity import parse_quantity
from lite.records import dataclass

Obj = dict[str, Any]
TOLERANCE = Fraction(1, 10)


class MetricError(Exception):
    """The replica count cannot be computed (missing requests, no metrics); `reason` is the condition's."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True)
class Result:
    replicas: int
    utilization: int | None  # percent of request, for Utilization targets
    average: Fraction  # average usage per pod with metrics


def pod_request(pod: Obj, resource: str) -> Fraction:
    total = Fraction(0)
    for c in (pod.get("spec") or {}).get("containers") or []:
        req = ((c.get("resources") or {}).get("requests") or {}).get(resource)
        if req is None:
            raise MetricError("FailedGetResourceMetric", f"missing request for {resource} in container "
                              f"{c.get('name', '')} of Pod {(pod.get('metadata') or {}).get('name', '')}")
        total += parse_quantity(str(req))
    return total


def _ready(pod: Obj) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (pod.get("status") or {}).get("conditions") or [])


def _counted(pod: Obj) -> bool:
    return not (pod.get("metadata") or {}).get("deletionTimestamp") and \
        (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")


def resource_replicas(pods: list[Obj], usage: dict[str, Fraction], resource: str, current: int, *,
                      target_utilization: int | None = None, target_value: Fraction | None = None,
                      tolerance: Fraction = TOLERANCE) -> Result:
    """Desired replicas for one Resource metric; `usage` maps pod name → usage of `resource`."""
    pods = [p for p in pods if _counted(p)]
    if not pods:
        raise MetricError("FailedGetResourceMetric", "no pods returned by selector while calculating replica "
                          "count")
    names = {(p.get("metadata") or {}).get("name", ""): p for p in pods}
    measured = {n: u for n, u in usage.items() if n in names and _ready(names[n])}
    if not measured:
        raise MetricError("FailedGetResourceMetric", f"unable to get metrics for resource {resource}: no "
                          "metrics returned from resource metrics API")
    requests = {n: pod_request(names[n], resource) for n in names} if target_utilization is not None else {}

    def ratio_of(use: dict[str, Fraction]) -> Fraction:
        if target_utilization is not None:
            req = sum((requests[n] for n in use), Fraction(0))
            if req == 0:
                raise MetricError("FailedGetResourceMetric", f"no requests for {resource}")
            return (sum(use.values(), Fraction(0)) * 100 / req) / target_utilization
        assert target_value is not None and target_value > 0
        return sum(use.values(), Fraction(0)) / len(use) / target_value

    ratio = ratio_of(measured)
    average = sum(measured.values(), Fraction(0)) / len(measured)
    util = None
    if target_utilization is not None:
        req = sum((requests[n] for n in measured), Fraction(0))
        util = int(sum(measured.values(), Fraction(0)) * 100 / req) if req else 0
    missing = [n for n in names if n not in usage]
    unready = [n for n in names if n in usage and not _ready(names[n])]
    if abs(ratio - 1) <= tolerance:
        return Result(current, util, average)
    if not missing and not (ratio > 1 and unready):
        return Result(math.ceil(ratio * len(measured)), util, average)
    full = dict(measured)
    for n in missing:
        full[n] = _fill(ratio, n, requests, target_utilization, target_value)
    if ratio > 1:
        for n in unready:
            full[n] = Fraction(0)
    new_ratio = ratio_of(full)
    if abs(new_ratio - 1) <= tolerance or (ratio > 1) != (new_ratio > 1):
        return Result(current, util, average)
    return Result(math.ceil(new_ratio * len(full)), util, average)


def _fill(ratio: Fraction, name: str, requests: dict[str, Fraction], target_utilization: int | None,
          target_value: Fraction | None) -> Fraction:
    """Usage assumed for a pod without metrics: 0 when scaling up, the target when scaling down."""
    if ratio > 1:
        return Fraction(0)
    if target_utilization is not None:
        return requests[name] * target_utilization / 100
    assert target_value is not None
    return target_value


def stabilize(history: list[tuple[float, int]], now: float, desired: int, current: int, window: float
              ) -> tuple[int, list[tuple[float, int]]]:
    """Scale-down stabilisation: the highest recommendation within `window` seconds (upstream default 300)."""
    kept = [(t, r) for t, r in history if now - t <= window] + [(now, desired)]
    if desired >= current:
        return desired, kept
    return min(current, max(r for _, r in kept)), kept


def scale_up_limit(current: int) -> int:
    """Default scale-up behaviour: at most +100 % or +4 pods per period, whichever is more."""
    return max(2 * current, current + 4)
