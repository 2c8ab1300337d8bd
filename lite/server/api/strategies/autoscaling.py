"""autoscaling/v2 HorizontalPodAutoscaler defaulting, as upstream's SetDefaults_HorizontalPodAutoscaler.

Invariants: pure, idempotent; only absent fields are filled. `behavior` is filled in only when the object has
one (upstream leaves an absent behavior absent; the controller then applies the same rules itself).
"""

from __future__ import annotations

from typing import Any

Obj = dict[str, Any]

DEFAULT_CPU_UTILIZATION = 80


def scale_up_rules() -> Obj:
    return {"stabilizationWindowSeconds": 0, "selectPolicy": "Max",
            "policies": [{"type": "Pods", "value": 4, "periodSeconds": 15},
                         {"type": "Percent", "value": 100, "periodSeconds": 15}]}


def scale_down_rules() -> Obj:
    return {"selectPolicy": "Max", "policies": [{"type": "Percent", "value": 100, "periodSeconds": 15}]}


def _merged(given: Any, defaults: Obj) -> Obj:
    """upstream copyHPAScalingRules: the given rules' set fields over the defaults."""
    if not isinstance(given, dict):
        return defaults
    out = dict(defaults)
    for key, value in given.items():
        if value is not None:
            out[key] = value
    return out


def default_hpa(obj: Obj) -> None:
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return
    if spec.get("minReplicas") is None:
        spec["minReplicas"] = 1
    if not spec.get("metrics"):
        spec["metrics"] = [{"type": "Resource", "resource": {"name": "cpu", "target": {
            "type": "Utilization", "averageUtilization": DEFAULT_CPU_UTILIZATION}}}]
    behavior = spec.get("behavior")
    if isinstance(behavior, dict):
        behavior["scaleUp"] = _merged(behavior.get("scaleUp"), scale_up_rules())
        behavior["scaleDown"] = _merged(behavior.get("scaleDown"), scale_down_rules())
