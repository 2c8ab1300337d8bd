"""Status integers that upstream always serialises: the non-`omitempty` int fields of a kind's status.

Role: upstream's Go structs print `replicas: 0` and the like even when nothing set them, and official
clients treat those fields as required (the Python client refuses a DaemonSet whose status lacks
`numberReady`). lite keeps objects as JSON, so these fields are filled in on every write: a create resets
the status to exactly these zeros (upstream's PrepareForCreate clears the status), any other write fills
in whichever of them is missing or null.

Invariants: pure; touches only `status` of the object it is given; kinds not in `REQUIRED` are unchanged.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from lite.server.api.strategies.base import Strategy

Obj = dict[str, Any]

# Group-kind -> the status fields declared `json:"name"` (no omitempty) in k8s.io/api of the served version.
REQUIRED: dict[str, tuple[str, ...]] = {
    "DaemonSet.apps": ("currentNumberScheduled", "numberMisscheduled", "desiredNumberScheduled", "numberReady"),
    "ReplicaSet.apps": ("replicas",),
    "StatefulSet.apps": ("replicas", "availableReplicas"),
    "ReplicationController": ("replicas",),
    "HorizontalPodAutoscaler.autoscaling": ("desiredReplicas",),  # autoscaling/v2: currentReplicas omitempty
    "PodDisruptionBudget.policy": ("disruptionsAllowed", "currentHealthy", "desiredHealthy", "expectedPods"),
}


def fill(obj: Obj, fields: tuple[str, ...]) -> None:
    """Add each of `fields` that is missing or null to `obj["status"]` as 0 (a non-object status is left to
    validation)."""
    status = obj.get("status")
    if status is None:
        status = obj["status"] = {}
    if not isinstance(status, dict):
        return
    for name in fields:
        if status.get(name) is None:
            status[name] = 0


def with_status_ints(gk: str, strategy: Strategy) -> Strategy:
    """`strategy` whose defaulting also fills the kind's status integers and whose create starts from a
    status of exactly those zeros."""
    fields = REQUIRED.get(gk)
    if not fields:
        return strategy
    default, prepare_create = strategy.default, strategy.prepare_create

    def default_with_ints(obj: Obj) -> None:
        default(obj)
        fill(obj, fields)

    def prepare_create_with_ints(obj: Obj) -> None:
        prepare_create(obj)
        obj["status"] = {}
        fill(obj, fields)

    return dataclasses.replace(strategy, default=default_with_ints, prepare_create=prepare_create_with_ints)
