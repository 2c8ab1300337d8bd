"""Table printers for the remaining built-in kinds (PersistentVolume, PersistentVolumeClaim, Lease,
PriorityClass, ResourceQuota, LimitRange, ControllerRevision) and the fallbacks: `Name, Created At` for
kinds upstream serves through its default table convertor (CustomResourceDefinition, LimitRange) and
`Name, Age` for everything else.

Columns and cells mirror kubectl's upstream printers; cells are in column order. Null-safe.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from lite.kubetables.format import (
    Obj,
    access_modes,
    age,
    dct,
    get,
    i,
    lst,
    s,
    when,
)
from lite.kubetables.spec import Printer, age_col, col, name_col

_CLASS_ANNOTATION = "volume.beta.kubernetes.io/storage-class"


def _storage_class(obj: Obj) -> str:
    ann = get(obj, "metadata", "annotations", _CLASS_ANNOTATION)
    return ann if isinstance(ann, str) else s(obj, "spec", "storageClassName")


def _quantity(value: Any) -> str:
    """A quantity as printed; an unset quantity prints as "0" (Go's zero Quantity)."""
    return str(value) if isinstance(value, str | int | float) and value != "" else "0"


def _phase_or_terminating(obj: Obj) -> str:
    return "Terminating" if get(obj, "metadata", "deletionTimestamp") else s(obj, "status", "phase")


def _unset(value: Any) -> str:
    return value if isinstance(value, str) else "<unset>"


def _pv(obj: Obj, now: dt.datetime) -> list[Any]:
    spec = dct(obj, "spec")
    ref = get(spec, "claimRef")
    claim = f"{s(ref, 'namespace')}/{s(ref, 'name')}" if isinstance(ref, dict) else ""
    return [s(obj, "metadata", "name"), _quantity(get(spec, "capacity", "storage")),
            access_modes(spec.get("accessModes")), s(spec, "persistentVolumeReclaimPolicy"),
            _phase_or_terminating(obj), claim, _storage_class(obj), _unset(spec.get("volumeAttributesClassName")),
            s(obj, "status", "reason"), age(obj, now), _unset(spec.get("volumeMode"))]


def _pvc(obj: Obj, now: dt.datetime) -> list[Any]:
    spec = dct(obj, "spec")
    capacity = modes = ""
    if s(spec, "volumeName"):
        modes = access_modes(get(obj, "status", "accessModes"))
        capacity = _quantity(get(obj, "status", "capacity", "storage"))
    return [s(obj, "metadata", "name"), _phase_or_terminating(obj), s(spec, "volumeName"), capacity, modes,
            _storage_class(obj), _unset(spec.get("volumeAttributesClassName")), age(obj, now),
            _unset(spec.get("volumeMode"))]


def _lease(obj: Obj, now: dt.datetime) -> list[Any]:
    return [s(obj, "metadata", "name"), s(obj, "spec", "holderIdentity"), age(obj, now)]


def _priorityclass(obj: Obj, now: dt.datetime) -> list[Any]:
    return [s(obj, "metadata", "name"), i(obj, "value"), get(obj, "globalDefault") is True, age(obj, now),
            s(obj, "preemptionPolicy")]


def _quota(obj: Obj, now: dt.datetime) -> list[Any]:
    hard, used = dct(obj, "status", "hard"), dct(obj, "status", "used")
    requests: list[str] = []
    limits: list[str] = []
    for name in sorted(hard):
        parts = name.split(".")
        target = limits if len(parts) > 1 and parts[0] == "limits" else requests
        target.append(f"{name}: {_quantity(used.get(name))}/{_quantity(hard[name])}")
    return [s(obj, "metadata", "name"), age(obj, now), ", ".join(requests), ", ".join(limits)]


def _created_at(obj: Obj, now: dt.datetime) -> list[Any]:
    t = when(get(obj, "metadata", "creationTimestamp"))
    return [s(obj, "metadata", "name"), t.strftime("%Y-%m-%dT%H:%M:%SZ") if t else ""]


def _controller_revision(obj: Obj, now: dt.datetime) -> list[Any]:
    owner = "<none>"
    for ref in lst(obj, "metadata", "ownerReferences"):
        if get(ref, "controller") is True:
            group = s(ref, "apiVersion").rpartition("/")[0]
            gk = f"{s(ref, 'kind')}.{group}" if group else s(ref, "kind")
            owner = f"{gk.lower()}/{s(ref, 'name')}" if gk else s(ref, "name")
            break
    return [s(obj, "metadata", "name"), owner, i(obj, "revision"), age(obj, now)]


def _name_age(obj: Obj, now: dt.datetime) -> list[Any]:
    return [s(obj, "metadata", "name"), age(obj, now)]


_CREATED_AT: Printer = ((name_col(), col("Created At", "date", desc="Time the object was created.")),
                        _created_at)
GENERIC: Printer = ((name_col(), age_col()), _name_age)

PRINTERS: dict[str, Printer] = {
    "PersistentVolume": ((name_col(), col("Capacity", desc="Storage capacity."),
                          col("Access Modes", desc="Access modes."),
                          col("Reclaim Policy", desc="What happens when released."),
                          col("Status", desc="Phase of the volume."), col("Claim", desc="Bound claim."),
                          col("StorageClass", desc="Storage class."),
                          col("VolumeAttributesClass", desc="Volume attributes class."),
                          col("Reason", desc="Reason for the phase."), age_col(),
                          col("VolumeMode", wide=True, desc="Filesystem or Block.")), _pv),
    "PersistentVolumeClaim": ((name_col(), col("Status", desc="Phase of the claim."),
                               col("Volume", desc="Bound volume."), col("Capacity", desc="Bound capacity."),
                               col("Access Modes", desc="Access modes."),
                               col("StorageClass", desc="Storage class."),
                               col("VolumeAttributesClass", desc="Volume attributes class."), age_col(),
                               col("VolumeMode", wide=True, desc="Filesystem or Block.")), _pvc),
    "Lease.coordination.k8s.io": ((name_col(), col("Holder", desc="Current holder."), age_col()), _lease),
    "PriorityClass.scheduling.k8s.io": ((name_col(), col("Value", "integer", desc="Priority value."),
                                         col("Global-Default", "boolean", desc="Default for pods without one."),
                                         age_col(), col("PreemptionPolicy", desc="Preemption policy.")),
                                        _priorityclass),
    "ResourceQuota": ((name_col(), age_col(), col("Request", desc="Used/hard of request quotas."),
                       col("Limit", desc="Used/hard of limit quotas.")), _quota),
    "LimitRange": _CREATED_AT,
    "CustomResourceDefinition.apiextensions.k8s.io": _CREATED_AT,
    "ControllerRevision.apps": ((name_col(), col("Controller", desc="Controller of the revision."),
                                 col("Revision", desc="Revision number."), age_col()), _controller_revision),
}
