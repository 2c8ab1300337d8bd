"""Table printers of the storage.k8s.io kinds StorageClass, CSIDriver, CSINode and VolumeAttachment, as
upstream's `pkg/printers/internalversion` prints them (the default class named `<name> (default)`). Null-safe.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from lite.kubetables.format import Obj, age, get, lst, s
from lite.kubetables.spec import Printer, age_col, col, name_col
from lite.volumematch import is_default_class


def _bool(v: Any) -> str:
    return "true" if v is True else "false"


def _storageclass(obj: Obj, now: dt.datetime) -> list[Any]:
    name = s(obj, "metadata", "name")
    if is_default_class(obj):
        name += " (default)"
    return [name, s(obj, "provisioner"), s(obj, "reclaimPolicy") or "Delete",
            s(obj, "volumeBindingMode") or "Immediate", _bool(get(obj, "allowVolumeExpansion")), age(obj, now)]


def _csidriver(obj: Obj, now: dt.datetime) -> list[Any]:
    modes = ",".join(str(m) for m in lst(obj, "spec", "volumeLifecycleModes")) or "<none>"
    tokens = ",".join(str(t.get("audience", "")) for t in lst(obj, "spec", "tokenRequests")
                      if isinstance(t, dict)) or "<unset>"
    return [s(obj, "metadata", "name"), _bool(get(obj, "spec", "attachRequired")),
            _bool(get(obj, "spec", "podInfoOnMount")), _bool(get(obj, "spec", "storageCapacity")), tokens,
            _bool(get(obj, "spec", "requiresRepublish")), modes, age(obj, now)]


def _csinode(obj: Obj, now: dt.datetime) -> list[Any]:
    return [s(obj, "metadata", "name"), len(lst(obj, "spec", "drivers")), age(obj, now)]


def _volumeattachment(obj: Obj, now: dt.datetime) -> list[Any]:
    return [s(obj, "metadata", "name"), s(obj, "spec", "attacher"), s(obj, "spec", "source", "persistentVolumeName"),
            s(obj, "spec", "nodeName"), _bool(get(obj, "status", "attached")), age(obj, now)]


PRINTERS: dict[str, Printer] = {
    "StorageClass.storage.k8s.io": (
        (name_col(), col("Provisioner", desc="Indicates the type of the provisioner."),
         col("ReclaimPolicy", desc="Indicates the type of the reclaim policy."),
         col("VolumeBindingMode", desc="Indicates how PersistentVolumeClaims should be bound."),
         col("AllowVolumeExpansion", desc="Indicates whether the storage class allow volume expand."),
         age_col()), _storageclass),
    "CSIDriver.storage.k8s.io": (
        (name_col(), col("AttachRequired", "boolean", desc="Whether attach is required."),
         col("PodInfoOnMount", "boolean", desc="Whether pod info is passed on mount."),
         col("StorageCapacity", "boolean", desc="Whether capacity is tracked."),
         col("TokenRequests", desc="Audiences of requested tokens."),
         col("RequiresRepublish", "boolean", desc="Whether NodePublishVolume is called periodically."),
         col("Modes", desc="Volume lifecycle modes."), age_col()), _csidriver),
    "CSINode.storage.k8s.io": ((name_col(), col("Drivers", "integer", desc="Drivers on the node."), age_col()),
                               _csinode),
    "VolumeAttachment.storage.k8s.io": (
        (name_col(), col("Attacher", desc="Attacher name."), col("PV", desc="Persistent volume attached."),
         col("Node", desc="Node attached to."), col("Attached", "boolean", desc="Whether it is attached."),
         age_col()), _volumeattachment),
}
