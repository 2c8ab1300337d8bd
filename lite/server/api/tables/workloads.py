"""Table printers for workload kinds: Deployment, ReplicaSet, DaemonSet, StatefulSet, Job, CronJob,
ReplicationController, HorizontalPodAutoscaler, PodDisruptionBudget, PodTemplate.

Each printer is `(columns, row)`: the column list mirrors kubectl's upstream printer (names, types, wide
columns at priority 1), and `row(obj, now)` returns the cells in the same order. Null-safe on partial objects.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from lite.kubetables.format import (
    Obj,
    age,
    bool_ptr,
    container_cells,
    dct,
    format_labels,
    format_selector,
    get,
    human_duration,
    i,
    int_or_string,
    lst,
    s,
    selector_string,
    since,
    when,
)
from lite.kubetables.spec import Printer, col, name_col

_CONTAINERS = col("Containers", wide=True, desc="Names of each container in the template.")
_IMAGES = col("Images", wide=True, desc="Images referenced by each container in the template.")
_SELECTOR = col("Selector", wide=True, desc="Label selector of the pods this object manages.")
_AGE = col("Age", desc="Time since the object was created.")


def _replicas(obj: Obj) -> int:
    """spec.replicas as printed: an unset pointer prints as 0, as upstream's ptr.Deref does."""
    return i(obj, "spec", "replicas")


def _template_cells(obj: Obj, *template_path: str) -> tuple[str, str]:
    return container_cells(lst(obj, *template_path, "template", "spec", "containers"))


def _deployment(obj: Obj, now: dt.datetime) -> list[Any]:
    names, images = _template_cells(obj, "spec")
    return [s(obj, "metadata", "name"), f"{i(obj, 'status', 'readyReplicas')}/{_replicas(obj)}",
            i(obj, "status", "updatedReplicas"), i(obj, "status", "availableReplicas"), age(obj, now),
            names, images, selector_string(get(obj, "spec", "selector"))]


def _replicaset(obj: Obj, now: dt.datetime) -> list[Any]:
    names, images = _template_cells(obj, "spec")
    return [s(obj, "metadata", "name"), _replicas(obj), i(obj, "status", "replicas"),
            i(obj, "status", "readyReplicas"), age(obj, now), names, images,
            format_selector(get(obj, "spec", "selector"))]


def _replication_controller(obj: Obj, now: dt.datetime) -> list[Any]:
    names, images = _template_cells(obj, "spec")
    return [s(obj, "metadata", "name"), _replicas(obj), i(obj, "status", "replicas"),
            i(obj, "status", "readyReplicas"), age(obj, now), names, images,
            format_labels(get(obj, "spec", "selector"))]


def _daemonset(obj: Obj, now: dt.datetime) -> list[Any]:
    names, images = _template_cells(obj, "spec")
    st = dct(obj, "status")
    return [s(obj, "metadata", "name"), i(st, "desiredNumberScheduled"), i(st, "currentNumberScheduled"),
            i(st, "numberReady"), i(st, "updatedNumberScheduled"), i(st, "numberAvailable"),
            format_labels(get(obj, "spec", "template", "spec", "nodeSelector")), age(obj, now),
            names, images, format_selector(get(obj, "spec", "selector"))]


def _statefulset(obj: Obj, now: dt.datetime) -> list[Any]:
    names, images = _template_cells(obj, "spec")
    return [s(obj, "metadata", "name"), f"{i(obj, 'status', 'readyReplicas')}/{_replicas(obj)}", age(obj, now),
            names, images]


def _job_condition(obj: Obj, ctype: str) -> bool:
    for c in lst(obj, "status", "conditions"):
        if s(c, "type") == ctype:
            return s(c, "status") == "True"
    return False


def _job_status(obj: Obj) -> str:
    if _job_condition(obj, "Complete"):
        return "Complete"
    if _job_condition(obj, "Failed"):
        return "Failed"
    if get(obj, "metadata", "deletionTimestamp"):
        return "Terminating"
    if _job_condition(obj, "Suspended"):
        return "Suspended"
    if _job_condition(obj, "FailureTarget"):
        return "FailureTarget"
    return "Running"


def _job(obj: Obj, now: dt.datetime) -> list[Any]:
    succeeded = i(obj, "status", "succeeded")
    completions = get(obj, "spec", "completions")
    parallelism = i(obj, "spec", "parallelism")
    if isinstance(completions, int):
        done = f"{succeeded}/{completions}"
    else:
        done = f"{succeeded}/1 of {parallelism}" if parallelism > 1 else f"{succeeded}/1"
    start, end = when(get(obj, "status", "startTime")), when(get(obj, "status", "completionTime"))
    took = "" if start is None else human_duration((end or now) - start)
    names, images = _template_cells(obj, "spec")
    return [s(obj, "metadata", "name"), _job_status(obj), done, took, age(obj, now), names, images,
            format_selector(get(obj, "spec", "selector"))]


def _cronjob(obj: Obj, now: dt.datetime) -> list[Any]:
    last = get(obj, "status", "lastScheduleTime")
    tz = get(obj, "spec", "timeZone")
    names, images = _template_cells(obj, "spec", "jobTemplate", "spec")
    return [s(obj, "metadata", "name"), s(obj, "spec", "schedule"), tz if isinstance(tz, str) else "<none>",
            bool_ptr(get(obj, "spec", "suspend")), len(lst(obj, "status", "active")),
            since(last, now) if last else "<none>", age(obj, now), names, images,
            format_selector(get(obj, "spec", "jobTemplate", "spec", "selector"))]


def _pdb(obj: Obj, now: dt.datetime) -> list[Any]:
    spec = dct(obj, "spec")
    min_a = int_or_string(spec.get("minAvailable")) or "N/A"
    max_u = int_or_string(spec.get("maxUnavailable")) or "N/A"
    return [s(obj, "metadata", "name"), min_a, max_u, i(obj, "status", "disruptionsAllowed"), age(obj, now)]


def _metric(spec: Obj, status: Obj | None) -> str:
    """One HPA Targets entry for the metric types lite can serve (Resource, Pods, Object, External)."""
    mtype = s(spec, "type")
    field = {"Resource": "resource", "ContainerResource": "containerResource", "Pods": "pods",
             "Object": "object", "External": "external"}.get(mtype)
    if field is None:
        return "<unknown type>"
    target, current = dct(spec, field, "target"), dct(status, field, "current")
    prefix = f"{s(spec, field, 'name')}: " if mtype in ("Resource", "ContainerResource") else ""
    if mtype in ("Resource", "ContainerResource") and "averageValue" not in target:
        cur = f"{i(current, 'averageUtilization')}%" if "averageUtilization" in current else "<unknown>"
        want = f"{i(target, 'averageUtilization')}%" if "averageUtilization" in target else "<auto>"
        return f"{prefix}{cur}/{want}"
    key = "averageValue" if "averageValue" in target or mtype == "Pods" else "value"
    cur = str(current[key]) if key in current else "<unknown>"
    avg = " (avg)" if key == "averageValue" and mtype in ("Object", "External") else ""
    return f"{prefix}{cur}/{target.get(key, '')}{avg}"


def _hpa(obj: Obj, now: dt.datetime) -> list[Any]:
    if obj.get("apiVersion") == "autoscaling/v1":  # upstream prints every version from the one stored shape
        from lite.server.api.versions import hpa as hpa_versions  # loaded by the first autoscaling/v1 object

        obj = hpa_versions.to_v2(obj)
    specs, statuses = lst(obj, "spec", "metrics"), lst(obj, "status", "currentMetrics")
    parts = [_metric(m, statuses[n] if n < len(statuses) and isinstance(statuses[n], dict) else None)
             for n, m in enumerate(specs)]
    targets = ", ".join(parts[:2]) + (f" + {len(parts) - 2} more..." if len(parts) > 2 else "")
    ref = dct(obj, "spec", "scaleTargetRef")
    min_r = get(obj, "spec", "minReplicas")
    return [s(obj, "metadata", "name"), f"{s(ref, 'kind')}/{s(ref, 'name')}", targets or "<none>",
            str(min_r) if isinstance(min_r, int) else "<unset>", i(obj, "spec", "maxReplicas"),
            i(obj, "status", "currentReplicas"), age(obj, now)]


def _podtemplate(obj: Obj, now: dt.datetime) -> list[Any]:
    names, images = container_cells(lst(obj, "template", "spec", "containers"))
    return [s(obj, "metadata", "name"), names, images, format_labels(get(obj, "template", "metadata", "labels"))]


PRINTERS: dict[str, Printer] = {
    "Deployment.apps": ((name_col(), col("Ready", desc="Ready pods out of desired replicas."),
                         col("Up-to-date", desc="Replicas updated to the current template."),
                         col("Available", desc="Replicas available to users."), _AGE,
                         _CONTAINERS, _IMAGES, _SELECTOR), _deployment),
    "ReplicaSet.apps": ((name_col(), col("Desired", "integer", desc="Desired replicas."),
                         col("Current", "integer", desc="Observed replicas."),
                         col("Ready", "integer", desc="Ready replicas."), _AGE,
                         _CONTAINERS, _IMAGES, _SELECTOR), _replicaset),
    "ReplicationController": ((name_col(), col("Desired", "integer", desc="Desired replicas."),
                               col("Current", "integer", desc="Observed replicas."),
                               col("Ready", "integer", desc="Ready replicas."), _AGE,
                               _CONTAINERS, _IMAGES, _SELECTOR), _replication_controller),
    # upstream prints a PodTemplate's containers and images as default (not wide) columns, and no age
    "PodTemplate": ((name_col(), col("Containers", desc="Names of each container in the template."),
                     col("Images", desc="Images referenced by each container in the template."),
                     col("Pod Labels", desc="The labels for the pod template.")), _podtemplate),
    "DaemonSet.apps": ((name_col(), col("Desired", "integer", desc="Nodes that should run the pod."),
                        col("Current", "integer", desc="Nodes running at least one pod."),
                        col("Ready", "integer", desc="Nodes with a ready pod."),
                        col("Up-to-date", "integer", desc="Nodes running the updated pod."),
                        col("Available", "integer", desc="Nodes with an available pod."),
                        col("Node Selector", desc="Node selector of the pod template."), _AGE,
                        _CONTAINERS, _IMAGES, _SELECTOR), _daemonset),
    "StatefulSet.apps": ((name_col(), col("Ready", desc="Ready pods out of desired replicas."), _AGE,
                          _CONTAINERS, _IMAGES), _statefulset),
    "Job.batch": ((name_col(), col("Status", desc="Status of the job."),
                   col("Completions", desc="Succeeded pods out of the completions wanted."),
                   col("Duration", desc="Time the job took (or has taken so far)."), _AGE,
                   _CONTAINERS, _IMAGES, _SELECTOR), _job),
    "CronJob.batch": ((name_col(), col("Schedule", desc="Cron schedule."),
                       col("Timezone", desc="Time zone of the schedule."),
                       col("Suspend", "boolean", desc="Whether new runs are suspended."),
                       col("Active", "integer", desc="Running jobs."),
                       col("Last Schedule", desc="Time since the last scheduled run."), _AGE,
                       _CONTAINERS, _IMAGES, _SELECTOR), _cronjob),
    "PodDisruptionBudget.policy": ((name_col(), col("Min Available", desc="Pods that must stay available."),
                                    col("Max Unavailable", desc="Pods that may be unavailable."),
                                    col("Allowed Disruptions", "integer", desc="Pods that may be evicted now."),
                                    _AGE), _pdb),
    "HorizontalPodAutoscaler.autoscaling": ((name_col(), col("Reference", desc="The scaled target."),
                                             col("Targets", desc="Current and target metric values."),
                                             col("MinPods", desc="Lower replica bound."),
                                             col("MaxPods", desc="Upper replica bound."),
                                             col("Replicas", desc="Current replicas."), _AGE), _hpa),
}
