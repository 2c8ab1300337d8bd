"""Workload strategies: Deployment, ReplicaSet, StatefulSet, DaemonSet, ReplicationController, Job, CronJob.

Defaults follow upstream SetDefaults_* for apps/v1, core/v1 and batch/v1; validation covers the rules
clients meet in practice (selector required and matching the template labels, immutable selectors, replicas
not negative, the pod template's spec) with upstream field paths and messages.

Invariants: functions mutate only the new object; the status of a new object starts empty.
"""

from __future__ import annotations

from typing import Any

import orjson

from lite.errors import Cause, field_invalid, field_not_supported, field_required
from lite.selectors import LabelSelector
from lite.server.api.strategies import specrules
from lite.server.api.strategies.base import Obj, Strategy
from lite.server.api.strategies.pods import default_pod_spec, validate_pod_spec
from lite.validation import validate_label_selector, validate_labels


def go_selector(sel: Any) -> str:
    """A LabelSelector printed the way upstream error messages show it (Go %#v of v1.LabelSelector)."""
    sel = sel if isinstance(sel, dict) else {}
    labels = sel.get("matchLabels") or {}
    shown = ", ".join(f'"{k}":"{v}"' for k, v in sorted(labels.items()))
    ml = f"map[string]string{{{shown}}}" if labels else "map[string]string(nil)"
    exprs = sel.get("matchExpressions")
    me = "[]v1.LabelSelectorRequirement(nil)"
    if exprs:
        me = f"[]v1.LabelSelectorRequirement{orjson.dumps(exprs).decode()}"
    return f"v1.LabelSelector{{MatchLabels:{ml}, MatchExpressions:{me}}}"


def _go_map(labels: Any) -> str:
    labels = labels if isinstance(labels, dict) else {}
    return "map[string]string{" + ", ".join(f'"{k}":"{v}"' for k, v in sorted(labels.items())) + "}"


def _template(obj: Obj) -> Obj | None:
    spec = obj.get("spec")
    tpl = spec.get("template") if isinstance(spec, dict) else None
    return tpl if isinstance(tpl, dict) else None


def default_template(obj: Obj) -> None:
    tpl = _template(obj)
    if tpl is not None and isinstance(tpl.get("spec"), dict):
        default_pod_spec(tpl["spec"])


def reset_status(obj: Obj) -> None:
    obj["status"] = {}


def _spec(obj: Obj) -> Obj:
    spec = obj.setdefault("spec", {})
    return spec if isinstance(spec, dict) else {}


def _default_labels_from_template(obj: Obj) -> None:
    # Upstream ReplicaSet/RC defaulting: empty object labels copy the template labels.
    tpl = _template(obj)
    tlabels = ((tpl or {}).get("metadata") or {}).get("labels")
    meta = obj.setdefault("metadata", {})
    if tlabels and not meta.get("labels"):
        meta["labels"] = dict(tlabels)


def default_deployment(obj: Obj) -> None:
    spec = _spec(obj)
    spec.setdefault("replicas", 1)
    strategy = spec.setdefault("strategy", {})
    if isinstance(strategy, dict):
        strategy.setdefault("type", "RollingUpdate")
        if strategy["type"] == "RollingUpdate":
            ru = strategy.setdefault("rollingUpdate", {})
            ru.setdefault("maxUnavailable", "25%")
            ru.setdefault("maxSurge", "25%")
    spec.setdefault("revisionHistoryLimit", 10)
    spec.setdefault("progressDeadlineSeconds", 600)
    default_template(obj)


def default_replicaset(obj: Obj) -> None:
    _spec(obj).setdefault("replicas", 1)
    _default_labels_from_template(obj)
    default_template(obj)


def default_rc(obj: Obj) -> None:
    spec = _spec(obj)
    spec.setdefault("replicas", 1)
    tlabels = ((_template(obj) or {}).get("metadata") or {}).get("labels")
    if tlabels and not spec.get("selector"):
        spec["selector"] = dict(tlabels)
    _default_labels_from_template(obj)
    default_template(obj)


def default_statefulset(obj: Obj) -> None:
    spec = _spec(obj)
    spec.setdefault("replicas", 1)
    spec.setdefault("podManagementPolicy", "OrderedReady")
    us = spec.setdefault("updateStrategy", {})
    if isinstance(us, dict):
        us.setdefault("type", "RollingUpdate")
        if us["type"] == "RollingUpdate":
            us.setdefault("rollingUpdate", {}).setdefault("partition", 0)
    spec.setdefault("revisionHistoryLimit", 10)
    spec.setdefault("persistentVolumeClaimRetentionPolicy", {"whenDeleted": "Retain", "whenScaled": "Retain"})
    default_template(obj)


def default_daemonset(obj: Obj) -> None:
    spec = _spec(obj)
    us = spec.setdefault("updateStrategy", {})
    if isinstance(us, dict):
        us.setdefault("type", "RollingUpdate")
        if us["type"] == "RollingUpdate":
            ru = us.setdefault("rollingUpdate", {})
            ru.setdefault("maxUnavailable", 1)
            ru.setdefault("maxSurge", 0)
    spec.setdefault("revisionHistoryLimit", 10)
    default_template(obj)


def validate_selected_template(obj: Obj, *, selector_required: bool = True,
                               restart_policies: list[str] | None = None) -> list[Cause]:
    """Selector present, non-empty, valid and matching the template labels; template spec valid."""
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return [field_required("spec")]
    causes: list[Cause] = []
    sel = spec.get("selector")
    tpl = _template(obj)
    tlabels = ((tpl or {}).get("metadata") or {}).get("labels") or {}
    if sel is None:
        if selector_required:
            causes.append(field_required("spec.selector"))
    else:
        causes += validate_label_selector(sel, "spec.selector")
        if not causes and not (sel.get("matchLabels") or sel.get("matchExpressions")):
            causes.append(field_invalid("spec.selector", go_selector(sel), "empty selector is invalid for deployment"))
        elif not causes and not LabelSelector.from_dict(sel).matches(tlabels):
            causes.append(Cause("FieldValueInvalid", f"Invalid value: {_go_map(tlabels)}: `selector` does not "
                                "match template `labels`", "spec.template.metadata.labels"))
    if tpl is None:
        causes.append(field_required("spec.template"))
    else:
        causes += validate_labels((tpl.get("metadata") or {}).get("labels"), "spec.template.metadata.labels")
        causes += validate_pod_spec(tpl.get("spec"), "spec.template.spec", restart_policies)
    causes += _non_negative(spec, "replicas")
    return causes


def _non_negative(spec: Obj, key: str, path: str = "spec") -> list[Cause]:
    v = spec.get(key)
    if v is not None and (not isinstance(v, int) or v < 0):
        return [field_invalid(f"{path}.{key}", v, "must be greater than or equal to 0")]
    return []


def validate_rc(obj: Obj) -> list[Cause]:
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return [field_required("spec")]
    causes = _non_negative(spec, "replicas")
    sel = spec.get("selector") or {}
    tpl = _template(obj)
    tlabels = ((tpl or {}).get("metadata") or {}).get("labels") or {}
    if not sel:
        causes.append(field_required("spec.selector"))
    elif any(tlabels.get(k) != v for k, v in sel.items()):
        causes.append(Cause("FieldValueInvalid", f"Invalid value: {_go_map(tlabels)}: `selector` does not "
                            "match template `labels`", "spec.template.metadata.labels"))
    if tpl is not None:
        causes += validate_labels((tpl.get("metadata") or {}).get("labels"), "spec.template.metadata.labels")
        causes += validate_pod_spec(tpl.get("spec"), "spec.template.spec", ["Always"])
    causes += validate_labels(sel if isinstance(sel, dict) else None, "spec.selector")
    return causes


def immutable_selector(new: Obj, old: Obj) -> list[Cause]:
    nsel, osel = (new.get("spec") or {}).get("selector"), (old.get("spec") or {}).get("selector")
    if orjson.dumps(nsel, option=orjson.OPT_SORT_KEYS) != orjson.dumps(osel, option=orjson.OPT_SORT_KEYS):
        return [Cause("FieldValueInvalid", f"Invalid value: {go_selector(nsel)}: field is immutable", "spec.selector")]
    return []


def _validate_deployment(obj: Obj) -> list[Cause]:
    causes = validate_selected_template(obj, restart_policies=["Always"])
    spec = obj.get("spec") or {}
    causes += _non_negative(spec, "revisionHistoryLimit")
    strategy = (spec.get("strategy") or {}).get("type")
    if strategy not in (None, "RollingUpdate", "Recreate"):
        causes.append(field_not_supported("spec.strategy.type", strategy, ["Recreate", "RollingUpdate"]))
    return causes + specrules.deployment_causes(obj)


def _validate_apps(obj: Obj) -> list[Cause]:
    return validate_selected_template(obj, restart_policies=["Always"])


def _with_claim_volumes(obj: Obj) -> Obj:
    """The set with each volumeClaimTemplate as a pod volume: containers mount claims by template name (the
    controller adds those volumes to every pod), so the template's mounts are checked against both."""
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return obj
    templates, tpl = spec.get("volumeClaimTemplates"), spec.get("template")
    if not isinstance(templates, list) or not templates or not isinstance(tpl, dict) \
            or not isinstance(tpl.get("spec"), dict):
        return obj
    pod_spec = tpl["spec"]
    volumes = pod_spec.get("volumes") if isinstance(pod_spec.get("volumes"), list) else []
    have = {v.get("name") for v in volumes if isinstance(v, dict)}
    extra = [{"name": n, "persistentVolumeClaim": {"claimName": n}} for t in templates if isinstance(t, dict)
             and isinstance(n := (t.get("metadata") or {}).get("name"), str) and n and n not in have]
    if not extra:
        return obj
    return {**obj, "spec": {**spec, "template": {**tpl, "spec": {**pod_spec, "volumes": [*volumes, *extra]}}}}


def _validate_statefulset(obj: Obj) -> list[Cause]:
    return _validate_apps(_with_claim_volumes(obj)) + specrules.statefulset_causes(obj)


def _validate_daemonset(obj: Obj) -> list[Cause]:
    return _validate_apps(obj) + specrules.daemonset_causes(obj)


# spec_validation: their validate reads obj["spec"] alone, so a status write (the controllers write one per
# sync) skips the template's pod spec walk, and equal specs share their create results (SpecMemo).
DEPLOYMENT = Strategy(default=default_deployment, prepare_create=reset_status, validate=_validate_deployment,
                      validate_update=immutable_selector, gc_policy="background", spec_validation=True,
                      generation_on_annotations=True,
                      status_metadata=("annotations", "finalizers", "ownerReferences"))
REPLICASET = Strategy(default=default_replicaset, prepare_create=reset_status, validate=_validate_apps,
                      validate_update=immutable_selector, gc_policy="background", spec_validation=True)
STATEFULSET = Strategy(default=default_statefulset, prepare_create=reset_status, validate=_validate_statefulset,
                       validate_update=immutable_selector, gc_policy="background")
DAEMONSET = Strategy(default=default_daemonset, prepare_create=reset_status, validate=_validate_daemonset,
                     validate_update=immutable_selector, gc_policy="background")
REPLICATIONCONTROLLER = Strategy(default=default_rc, prepare_create=reset_status, validate=validate_rc,
                                 gc_policy="background")
