"""autoscaling/v1 <-> autoscaling/v2 HorizontalPodAutoscaler, as upstream's `pkg/apis/autoscaling/v1/conversion.go`.

One HPA is stored (in autoscaling/v2); autoscaling/v1 is a view of it. v1 carries only
`spec.targetCPUUtilizationPercentage` and `status.currentCPUUtilizationPercentage`; what else v2 has travels
in annotations, written in v1's own metric shapes (`targetAverageUtilization`, `metricName`, ...) exactly as
upstream writes them, so a v1 client that reads, edits and writes the object back loses nothing:
- `autoscaling.alpha.kubernetes.io/metrics`: the spec metrics other than a CPU utilization target;
- `autoscaling.alpha.kubernetes.io/current-metrics`: every status metric (the CPU one too, for its raw value);
- `autoscaling.alpha.kubernetes.io/conditions`: the status conditions;
- `autoscaling.alpha.kubernetes.io/behavior`: the behavior, as Go marshals its internal type (field names
  without json tags: `ScaleUp`, `StabilizationWindowSeconds`, ...; read back case-insensitively).
A v2 object never shows these annotations (upstream drops them on both v2 conversions).

Invariants: pure functions over JSON dicts; the input is never changed; v2 -> v1 -> v2 gives back the v2
object (metrics order aside: the CPU target goes last, as upstream puts it).
"""

from __future__ import annotations

import json
from typing import Any

Obj = dict[str, Any]

METRICS = "autoscaling.alpha.kubernetes.io/metrics"
CURRENT_METRICS = "autoscaling.alpha.kubernetes.io/current-metrics"
CONDITIONS = "autoscaling.alpha.kubernetes.io/conditions"
BEHAVIOR = "autoscaling.alpha.kubernetes.io/behavior"
ROUND_TRIP = (METRICS, BEHAVIOR, CURRENT_METRICS, CONDITIONS)
DEFAULT_CPU_UTILIZATION = 80


def _d(v: Any) -> Obj:
    return v if isinstance(v, dict) else {}


def _l(v: Any) -> list[Any]:
    return v if isinstance(v, list) else []


def _put(out: Obj, key: str, src: Obj, src_key: str) -> None:
    if src.get(src_key) is not None:
        out[key] = src[src_key]


def _go_json(value: Any) -> str:
    """Compact JSON as Go's encoder writes it (key order as built, no spaces, `<>&` left alone)."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _ref(r: Any) -> Obj:
    r = _d(r)
    out: Obj = {"kind": r.get("kind", ""), "name": r.get("name", "")}
    _put(out, "apiVersion", r, "apiVersion")
    return out


def _is_cpu_utilization(m: Any) -> bool:
    m = _d(m)
    res = _d(m.get("resource"))
    return m.get("type") == "Resource" and res.get("name") == "cpu" and \
        _d(res.get("target")).get("averageUtilization") is not None


def _without_round_trip(obj: Obj) -> Obj:
    meta = dict(_d(obj.get("metadata")))
    ann = _d(meta.get("annotations"))
    if any(k in ann for k in ROUND_TRIP):
        rest = {k: v for k, v in ann.items() if k not in ROUND_TRIP}
        if rest:
            meta["annotations"] = rest
        else:
            meta.pop("annotations", None)
    return meta


# ---- metric specs and statuses: v2 shapes <-> v1 (annotation) shapes ---------------------------------------

def _ident_v1(src: Obj, name_key: str, sel_key: str) -> Obj:
    out: Obj = {"name": src.get(name_key, "")}
    _put(out, "selector", src, sel_key)
    return out


def spec_to_v1(m: Obj) -> Obj:
    """One v2 MetricSpec in v1's MetricSpec shape (upstream Convert_autoscaling_MetricSpec_To_v1_MetricSpec)."""
    out: Obj = {"type": m.get("type", "")}
    if isinstance(m.get("object"), dict):
        o = m["object"]
        metric, target = _d(o.get("metric")), _d(o.get("target"))
        v: Obj = {"target": _ref(o.get("describedObject")), "metricName": metric.get("name", ""),
                  "targetValue": target.get("value") or "0"}
        _put(v, "selector", metric, "selector")
        _put(v, "averageValue", target, "averageValue")
        out["object"] = v
    if isinstance(m.get("pods"), dict):
        metric, target = _d(m["pods"].get("metric")), _d(m["pods"].get("target"))
        v = {"metricName": metric.get("name", ""), "targetAverageValue": target.get("averageValue") or "0"}
        _put(v, "selector", metric, "selector")
        out["pods"] = v
    for key in ("resource", "containerResource"):
        if isinstance(m.get(key), dict):
            target = _d(m[key].get("target"))
            v = {"name": m[key].get("name", "")}
            _put(v, "targetAverageUtilization", target, "averageUtilization")
            _put(v, "targetAverageValue", target, "averageValue")
            if key == "containerResource":
                v["container"] = m[key].get("container", "")
            out[key] = v
    if isinstance(m.get("external"), dict):
        metric, target = _d(m["external"].get("metric")), _d(m["external"].get("target"))
        v = {"metricName": metric.get("name", "")}
        _put(v, "metricSelector", metric, "selector")
        _put(v, "targetValue", target, "value")
        _put(v, "targetAverageValue", target, "averageValue")
        out["external"] = v
    return out


def spec_to_v2(m: Obj) -> Obj:
    """One v1 MetricSpec (from the annotation) in v2's shape (Convert_v1_MetricSpec_To_autoscaling_MetricSpec)."""
    out: Obj = {"type": m.get("type", "")}
    if isinstance(m.get("object"), dict):
        o = m["object"]
        target: Obj = {"type": "Value" if o.get("averageValue") is None else "AverageValue",
                       "value": o.get("targetValue") or "0"}
        _put(target, "averageValue", o, "averageValue")
        out["object"] = {"describedObject": _ref(o.get("target")),
                         "metric": _ident_v1(o, "metricName", "selector"), "target": target}
    if isinstance(m.get("pods"), dict):
        p = m["pods"]
        out["pods"] = {"metric": _ident_v1(p, "metricName", "selector"),
                       "target": {"type": "AverageValue", "averageValue": p.get("targetAverageValue") or "0"}}
    for key in ("resource", "containerResource"):
        if isinstance(m.get(key), dict):
            r = m[key]
            target = {"type": "AverageValue" if r.get("targetAverageUtilization") is None else "Utilization"}
            _put(target, "averageUtilization", r, "targetAverageUtilization")
            _put(target, "averageValue", r, "targetAverageValue")
            v: Obj = {"name": r.get("name", "")}
            if key == "containerResource":
                v["container"] = r.get("container", "")
            v["target"] = target
            out[key] = v
    if isinstance(m.get("external"), dict):
        e = m["external"]
        target = {"type": "AverageValue" if e.get("targetValue") is None else "Value"}
        _put(target, "value", e, "targetValue")
        _put(target, "averageValue", e, "targetAverageValue")
        out["external"] = {"metric": _ident_v1(e, "metricName", "metricSelector"), "target": target}
    return out


def status_to_v1(m: Obj) -> Obj:
    """One v2 MetricStatus in v1's shape (Convert_autoscaling_MetricStatus_To_v1_MetricStatus)."""
    out: Obj = {"type": m.get("type", "")}
    if isinstance(m.get("object"), dict):
        o = m["object"]
        metric, cur = _d(o.get("metric")), _d(o.get("current"))
        v: Obj = {"target": _ref(o.get("describedObject")), "metricName": metric.get("name", ""),
                  "currentValue": cur.get("value") or "0"}
        _put(v, "selector", metric, "selector")
        _put(v, "averageValue", cur, "averageValue")
        out["object"] = v
    if isinstance(m.get("pods"), dict):
        metric, cur = _d(m["pods"].get("metric")), _d(m["pods"].get("current"))
        v = {"metricName": metric.get("name", ""), "currentAverageValue": cur.get("averageValue") or "0"}
        _put(v, "selector", metric, "selector")
        out["pods"] = v
    for key in ("resource", "containerResource"):
        if isinstance(m.get(key), dict):
            cur = _d(m[key].get("current"))
            v = {"name": m[key].get("name", "")}
            _put(v, "currentAverageUtilization", cur, "averageUtilization")
            v["currentAverageValue"] = cur.get("averageValue") or "0"
            if key == "containerResource":
                v["container"] = m[key].get("container", "")
            out[key] = v
    if isinstance(m.get("external"), dict):
        metric, cur = _d(m["external"].get("metric")), _d(m["external"].get("current"))
        v = {"metricName": metric.get("name", "")}
        _put(v, "metricSelector", metric, "selector")
        v["currentValue"] = cur.get("value") or "0"
        _put(v, "currentAverageValue", cur, "averageValue")
        out["external"] = v
    return out


def status_to_v2(m: Obj) -> Obj:
    """One v1 MetricStatus (from the annotation) in v2's shape."""
    out: Obj = {"type": m.get("type", "")}
    if isinstance(m.get("object"), dict):
        o = m["object"]
        cur: Obj = {"value": o.get("currentValue") or "0"}
        _put(cur, "averageValue", o, "averageValue")
        out["object"] = {"metric": _ident_v1(o, "metricName", "selector"), "current": cur,
                         "describedObject": _ref(o.get("target"))}
    if isinstance(m.get("pods"), dict):
        p = m["pods"]
        out["pods"] = {"metric": _ident_v1(p, "metricName", "selector"),
                       "current": {"averageValue": p.get("currentAverageValue") or "0"}}
    for key in ("resource", "containerResource"):
        if isinstance(m.get(key), dict):
            r = m[key]
            cur = {"averageValue": r.get("currentAverageValue") or "0"}
            _put(cur, "averageUtilization", r, "currentAverageUtilization")
            v: Obj = {"name": r.get("name", "")}
            if key == "containerResource":
                v["container"] = r.get("container", "")
            v["current"] = cur
            out[key] = v
    if isinstance(m.get("external"), dict):
        e = m["external"]
        cur = {"value": e.get("currentValue") or "0"}
        _put(cur, "averageValue", e, "currentAverageValue")
        out["external"] = {"metric": _ident_v1(e, "metricName", "metricSelector"), "current": cur}
    return out


# ---- behavior: Go's internal type without json tags ---------------------------------------------------------

_RULE_FIELDS = (("StabilizationWindowSeconds", "stabilizationWindowSeconds"), ("SelectPolicy", "selectPolicy"))
_POLICY_FIELDS = (("Type", "type", ""), ("Value", "value", 0), ("PeriodSeconds", "periodSeconds", 0))


def behavior_to_annotation(behavior: Obj) -> str:
    def rules(r: Any) -> Any:
        if not isinstance(r, dict):
            return None
        out: Obj = {go: r.get(js) for go, js in _RULE_FIELDS}
        pols = r.get("policies")
        out["Policies"] = [{go: _d(p).get(js, dflt) for go, js, dflt in _POLICY_FIELDS} for p in pols] \
            if isinstance(pols, list) else None
        return out
    return _go_json({"ScaleUp": rules(behavior.get("scaleUp")), "ScaleDown": rules(behavior.get("scaleDown"))})


def _ci(obj: Any, name: str) -> Any:
    """A key looked up as Go's decoder matches it: exactly, else ignoring case."""
    if not isinstance(obj, dict):
        return None
    if name in obj:
        return obj[name]
    low = name.lower()
    return next((v for k, v in obj.items() if k.lower() == low), None)


def behavior_from_annotation(raw: str) -> Obj | None:
    try:
        doc = json.loads(raw)
    except ValueError:
        return None
    out: Obj = {}
    for go, js in (("ScaleUp", "scaleUp"), ("ScaleDown", "scaleDown")):
        r = _ci(doc, go)
        if not isinstance(r, dict):
            continue
        rule: Obj = {}
        for gof, jsf in _RULE_FIELDS:
            if _ci(r, gof) is not None:
                rule[jsf] = _ci(r, gof)
        pols = _ci(r, "Policies")
        if isinstance(pols, list):
            rule["policies"] = [{jsf: _ci(p, gof) if _ci(p, gof) is not None else dflt
                                 for gof, jsf, dflt in _POLICY_FIELDS} for p in pols]
        out[js] = rule
    return out or None


def _annotation_list(ann: Obj, key: str) -> list[Any] | None:
    raw = ann.get(key)
    if not isinstance(raw, str):
        return None
    try:
        val = json.loads(raw)
    except ValueError:
        return None
    return [x for x in val if isinstance(x, dict)] if isinstance(val, list) else None


# ---- whole objects ------------------------------------------------------------------------------------------

def to_v1(obj: Obj) -> Obj:
    """The stored (autoscaling/v2) HPA as autoscaling/v1 presents it."""
    spec, status = _d(obj.get("spec")), _d(obj.get("status"))
    metrics = [m for m in _l(spec.get("metrics")) if isinstance(m, dict)]
    meta = _without_round_trip(obj)
    v1spec: Obj = {"scaleTargetRef": _ref(spec.get("scaleTargetRef"))}
    _put(v1spec, "minReplicas", spec, "minReplicas")
    v1spec["maxReplicas"] = spec.get("maxReplicas", 0)
    cpu = next((m for m in metrics if _is_cpu_utilization(m)), None)
    if cpu is not None:
        v1spec["targetCPUUtilizationPercentage"] = cpu["resource"]["target"]["averageUtilization"]
    v1status: Obj = {}
    _put(v1status, "observedGeneration", status, "observedGeneration")
    _put(v1status, "lastScaleTime", status, "lastScaleTime")
    v1status["currentReplicas"] = status.get("currentReplicas", 0)
    v1status["desiredReplicas"] = status.get("desiredReplicas", 0)
    current = [m for m in _l(status.get("currentMetrics")) if isinstance(m, dict)]
    for m in current:  # upstream's loop has no break: the last CPU utilization wins
        res = _d(m.get("resource"))
        if m.get("type") == "Resource" and res.get("name") == "cpu" and \
                _d(res.get("current")).get("averageUtilization") is not None:
            v1status["currentCPUUtilizationPercentage"] = res["current"]["averageUtilization"]
    ann: Obj = {}
    others = [spec_to_v1(m) for m in metrics if not _is_cpu_utilization(m)]
    if others:
        ann[METRICS] = _go_json(others)
    if current:
        ann[CURRENT_METRICS] = _go_json([status_to_v1(m) for m in current])
    if isinstance(spec.get("behavior"), dict):
        ann[BEHAVIOR] = behavior_to_annotation(spec["behavior"])
    conditions = [c for c in _l(status.get("conditions")) if isinstance(c, dict)]
    if conditions:
        ann[CONDITIONS] = _go_json([{k: c[k] for k in ("type", "status", "lastTransitionTime", "reason", "message")
                                     if c.get(k) is not None} for c in conditions])
    if ann:
        meta["annotations"] = {**_d(meta.get("annotations")), **ann}
    out = {k: v for k, v in obj.items() if k not in ("metadata", "spec", "status")}
    out.update(apiVersion="autoscaling/v1", kind=obj.get("kind", "HorizontalPodAutoscaler"), metadata=meta,
               spec=v1spec, status=v1status)
    return out


def to_v2(obj: Obj) -> Obj:
    """An autoscaling/v1 HPA as the stored autoscaling/v2 object (annotations read back and dropped)."""
    spec, status = _d(obj.get("spec")), _d(obj.get("status"))
    ann = _d(_d(obj.get("metadata")).get("annotations"))
    v2spec: Obj = {"scaleTargetRef": _ref(spec.get("scaleTargetRef"))}
    _put(v2spec, "minReplicas", spec, "minReplicas")
    v2spec["maxReplicas"] = spec.get("maxReplicas", 0)
    metrics: list[Obj] = [spec_to_v2(m) for m in _annotation_list(ann, METRICS) or []]
    if spec.get("targetCPUUtilizationPercentage") is not None:
        metrics.append({"type": "Resource", "resource": {"name": "cpu", "target": {
            "type": "Utilization", "averageUtilization": spec["targetCPUUtilizationPercentage"]}}})
    if not metrics:  # v1's implicit default, made explicit (upstream does it here, where all metrics are known)
        metrics = [{"type": "Resource", "resource": {"name": "cpu", "target": {
            "type": "Utilization", "averageUtilization": DEFAULT_CPU_UTILIZATION}}}]
    v2spec["metrics"] = metrics
    behavior = behavior_from_annotation(ann[BEHAVIOR]) if isinstance(ann.get(BEHAVIOR), str) else None
    if behavior is not None:
        v2spec["behavior"] = behavior
    v2status: Obj = {}
    _put(v2status, "observedGeneration", status, "observedGeneration")
    _put(v2status, "lastScaleTime", status, "lastScaleTime")
    v2status["currentReplicas"] = status.get("currentReplicas", 0)
    v2status["desiredReplicas"] = status.get("desiredReplicas", 0)
    current = _annotation_list(ann, CURRENT_METRICS)
    if current is not None:  # "the ones here have more information"
        v2status["currentMetrics"] = [status_to_v2(m) for m in current]
    elif status.get("currentCPUUtilizationPercentage") is not None:
        v2status["currentMetrics"] = [{"type": "Resource", "resource": {"name": "cpu", "current": {
            "averageUtilization": status["currentCPUUtilizationPercentage"]}}}]
    conditions = _annotation_list(ann, CONDITIONS)
    if conditions:
        v2status["conditions"] = conditions
    out = {k: v for k, v in obj.items() if k not in ("metadata", "spec", "status")}
    out.update(apiVersion="autoscaling/v2", kind=obj.get("kind", "HorizontalPodAutoscaler"),
               metadata=_without_round_trip(obj), spec=v2spec, status=v2status)
    return out
