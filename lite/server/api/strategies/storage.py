"""Strategies of the storage kinds: core/v1 PersistentVolume and PersistentVolumeClaim (the parts beyond
`core.py`'s), storage.k8s.io/v1 StorageClass, CSIDriver, CSINode and VolumeAttachment (upstream
`pkg/apis/core/validation` `ValidatePersistentVolume*`, `pkg/apis/storage/validation`, their registry strategies
and the `StorageObjectInUseProtection` admission plugin, whose finalizers are added here at create).

lite-specific refusals, each a 422 naming the field: `volumeMode: Block` (lite's agent has no block devices) and
`persistentVolumeReclaimPolicy: Recycle` (deprecated upstream; lite has no recycler).

Pure: no I/O.
"""

from __future__ import annotations

from typing import Any

from lite.errors import Cause, field_forbidden, field_invalid, field_not_supported, field_required
from lite.objects import rfc3339
from lite.server.api.strategies import core
from lite.server.api.strategies.base import Obj, Strategy
from lite.server.api.strategies.specrules import ACCESS_MODES
from lite.server.api.strategies.volumevalidation import quantity_sign
from lite.validation import is_dns1123_subdomain, is_qualified_name
from lite.valuerules import NEGATIVE_MSG, as_dict, as_list
from lite.volumematch import PV_PROTECTION, PVC_PROTECTION

BLOCK_REFUSED = ("Block volumes are not supported by lite: its node agent has no block devices; "
                 "use volumeMode Filesystem")
RECYCLE_REFUSED = "the Recycle reclaim policy is not supported by lite (deprecated upstream); use Delete or Retain"
RECLAIM_POLICIES = ["Delete", "Retain"]
BINDING_MODES = ["Immediate", "WaitForFirstConsumer"]
HOSTPATH_TYPES = ["", "BlockDevice", "CharDevice", "Directory", "DirectoryOrCreate", "File", "FileOrCreate",
                  "Socket"]
# The PersistentVolumeSource members (upstream); lite mounts hostPath and local, stores the others.
PV_SOURCES = ("awsElasticBlockStore", "azureDisk", "azureFile", "cephfs", "cinder", "csi", "fc", "flexVolume",
              "flocker", "gcePersistentDisk", "glusterfs", "hostPath", "iscsi", "local", "nfs",
              "photonPersistentDisk", "portworxVolume", "quobyte", "rbd", "scaleIO", "storageos",
              "vsphereVolume")
_IMMUTABLE = "field is immutable"


def _add_finalizer(obj: Obj, name: str) -> None:
    meta = obj.setdefault("metadata", {})
    finalizers = list(meta.get("finalizers") or [])
    if name not in finalizers:
        finalizers.append(name)
    meta["finalizers"] = finalizers


def _block_causes(spec: Any) -> list[Cause]:
    return [field_forbidden("spec.volumeMode", BLOCK_REFUSED)] if as_dict(spec).get("volumeMode") == "Block" else []


# ---- PersistentVolumeClaim ------------------------------------------------------------------------------------

def prepare_create_pvc(obj: Obj) -> None:
    core.prepare_pending(obj)
    _add_finalizer(obj, PVC_PROTECTION)


def validate_pvc(obj: Obj) -> list[Cause]:
    causes = core.validate_pvc(obj) + _block_causes(obj.get("spec"))
    sc = as_dict(obj.get("spec")).get("storageClassName")
    if isinstance(sc, str) and sc:
        causes += [field_invalid("spec.storageClassName", sc, m) for m in is_dns1123_subdomain(sc)]
    return causes


# ---- PersistentVolume ---------------------------------------------------------------------------------------

def default_pv(obj: Obj) -> None:
    spec = obj.get("spec")
    if isinstance(spec, dict):
        spec.setdefault("persistentVolumeReclaimPolicy", "Retain")
        spec.setdefault("volumeMode", "Filesystem")
        hp = spec.get("hostPath")
        if isinstance(hp, dict):
            hp.setdefault("type", "")


def prepare_create_pv(obj: Obj) -> None:
    obj["status"] = {"phase": "Pending", "lastPhaseTransitionTime": rfc3339()}
    _add_finalizer(obj, PV_PROTECTION)


def _pv_source_causes(spec: dict[str, Any]) -> list[Cause]:
    present = [s for s in PV_SOURCES if spec.get(s) is not None]
    if not present:
        return [field_required("spec", "Required value: must specify a volume type")]
    if len(present) > 1:
        return [field_forbidden(f"spec.{present[1]}", "may not specify more than 1 volume type")]
    causes: list[Cause] = []
    if present[0] == "hostPath":
        hp = as_dict(spec.get("hostPath"))
        if not hp.get("path"):
            causes.append(field_required("spec.hostPath.path"))
        if hp.get("type") not in HOSTPATH_TYPES:
            causes.append(field_not_supported("spec.hostPath.type", hp.get("type"), HOSTPATH_TYPES[1:]))
    elif present[0] == "local":
        path = str(as_dict(spec.get("local")).get("path") or "")
        if not path:
            causes.append(field_required("spec.local.path"))
        elif ".." in path.split("/"):
            causes.append(field_invalid("spec.local.path", path, "must not contain '..'"))
    return causes


def _node_affinity_causes(spec: dict[str, Any]) -> list[Cause]:
    na = spec.get("nodeAffinity")
    if na is None:
        return []
    required = as_dict(na).get("required")
    if required is None:
        return []
    terms = as_list(as_dict(required).get("nodeSelectorTerms"))
    if not terms:
        return [field_required("spec.nodeAffinity.required.nodeSelectorTerms",
                               "Required value: must have at least one node selector term")]
    return []


def validate_pv(obj: Obj) -> list[Cause]:
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return [field_required("spec")]
    causes: list[Cause] = []
    modes = as_list(spec.get("accessModes"))
    if not modes:
        causes.append(field_required("spec.accessModes"))
    for mode in modes:
        if mode not in ACCESS_MODES:
            causes.append(field_not_supported("spec.accessModes", mode, ACCESS_MODES))
    cap = spec.get("capacity")
    if not cap:
        causes.append(field_required("spec.capacity"))
    elif not isinstance(cap, dict) or set(cap) != {"storage"}:
        causes.append(field_not_supported("spec.capacity", cap, ["storage"]))
    elif quantity_sign(cap["storage"]) < 0:
        causes.append(field_invalid("spec.capacity[storage]", str(cap["storage"]), NEGATIVE_MSG))
    policy = spec.get("persistentVolumeReclaimPolicy")
    if policy == "Recycle":
        causes.append(field_forbidden("spec.persistentVolumeReclaimPolicy", RECYCLE_REFUSED))
    elif policy not in RECLAIM_POLICIES:
        causes.append(field_not_supported("spec.persistentVolumeReclaimPolicy", policy, RECLAIM_POLICIES))
    vm = spec.get("volumeMode")
    if vm not in (None, "Block", "Filesystem"):
        causes.append(field_not_supported("spec.volumeMode", vm, ["Block", "Filesystem"]))
    causes += _block_causes(spec)
    sc = spec.get("storageClassName")
    if isinstance(sc, str) and sc:
        causes += [field_invalid("spec.storageClassName", sc, m) for m in is_dns1123_subdomain(sc)]
    ref = spec.get("claimRef")
    if ref is not None:
        for key in ("name", "namespace"):
            if not as_dict(ref).get(key):
                causes.append(field_required(f"spec.claimRef.{key}"))
    causes += _pv_source_causes(spec)
    if spec.get("local") is not None and not as_dict(as_dict(spec.get("nodeAffinity")).get("required")):
        causes.append(field_required("metadata.annotations", "Required value: Local volume requires node affinity"))
    return causes + _node_affinity_causes(spec)


def validate_pv_update(new: Obj, old: Obj) -> list[Cause]:
    nspec, ospec = as_dict(new.get("spec")), as_dict(old.get("spec"))
    causes: list[Cause] = []
    for s in PV_SOURCES:
        if nspec.get(s) != ospec.get(s):
            causes.append(field_forbidden("spec.persistentvolumesource", "spec.persistentvolumesource is "
                                          "immutable after creation"))
            break
    if nspec.get("volumeMode") != ospec.get("volumeMode"):
        causes.append(field_invalid("spec.volumeMode", nspec.get("volumeMode"), _IMMUTABLE))
    if ospec.get("nodeAffinity") is not None and nspec.get("nodeAffinity") != ospec.get("nodeAffinity"):
        causes.append(field_invalid("spec.nodeAffinity", nspec.get("nodeAffinity"), _IMMUTABLE))
    return causes


def prepare_pv_status(sub: str, new: Obj, old: Obj) -> None:
    """Upstream's PV status strategy stamps `lastPhaseTransitionTime` when the phase moves."""
    nst, ost = as_dict(new.get("status")), as_dict(old.get("status"))
    if nst.get("phase") != ost.get("phase") and isinstance(new.get("status"), dict):
        new["status"]["lastPhaseTransitionTime"] = rfc3339()


# ---- StorageClass -------------------------------------------------------------------------------------------

def default_storageclass(obj: Obj) -> None:
    obj.setdefault("reclaimPolicy", "Delete")
    obj.setdefault("volumeBindingMode", "Immediate")


def validate_storageclass(obj: Obj) -> list[Cause]:
    causes: list[Cause] = []
    prov = obj.get("provisioner")
    if not prov or not isinstance(prov, str):
        causes.append(field_required("provisioner"))
    else:
        causes += [field_invalid("provisioner", prov, m) for m in is_qualified_name(prov.lower())]
    params = obj.get("parameters")
    if params is not None and not isinstance(params, dict):
        causes.append(field_invalid("parameters", params, "must be a map of strings"))
    for key in as_dict(params):
        if not key:
            causes.append(field_required("parameters", "Required value: key must not be empty"))
    if obj.get("reclaimPolicy") not in RECLAIM_POLICIES:
        causes.append(field_not_supported("reclaimPolicy", obj.get("reclaimPolicy"), RECLAIM_POLICIES))
    if obj.get("volumeBindingMode") not in BINDING_MODES:
        causes.append(field_not_supported("volumeBindingMode", obj.get("volumeBindingMode"), BINDING_MODES))
    return causes


def validate_storageclass_update(new: Obj, old: Obj) -> list[Cause]:
    causes = [field_forbidden(f, f"updates to {f} are forbidden.")
              for f in ("parameters", "provisioner", "reclaimPolicy") if new.get(f) != old.get(f)]
    if new.get("volumeBindingMode") != old.get("volumeBindingMode"):
        causes.append(field_invalid("volumeBindingMode", new.get("volumeBindingMode"), _IMMUTABLE))
    return causes


# ---- CSIDriver, CSINode, VolumeAttachment ------------------------------------------------------------------

def _csi_driver_name(name: Any, path: str) -> list[Cause]:
    if not name:
        return [field_required(path)]
    text = str(name)
    if len(text) > 63:
        return [Cause("FieldValueTooLong", "Too long: may not be more than 63 bytes", path)]
    return [field_invalid(path, text, m) for m in is_dns1123_subdomain(text.lower())]


def default_csidriver(obj: Obj) -> None:
    spec = obj.setdefault("spec", {})
    if isinstance(spec, dict):
        for key, value in (("attachRequired", True), ("podInfoOnMount", False), ("requiresRepublish", False),
                           ("storageCapacity", False), ("seLinuxMount", False),
                           ("fsGroupPolicy", "ReadWriteOnceWithFSType")):
            spec.setdefault(key, value)
        spec.setdefault("volumeLifecycleModes", ["Persistent"])


def validate_csidriver(obj: Obj) -> list[Cause]:
    causes = _csi_driver_name(as_dict(obj.get("metadata")).get("name"), "metadata.name")
    spec = as_dict(obj.get("spec"))
    fsg = spec.get("fsGroupPolicy")
    allowed = ["File", "None", "ReadWriteOnceWithFSType"]
    if fsg not in allowed:
        causes.append(field_not_supported("spec.fsGroupPolicy", fsg, allowed))
    for i, mode in enumerate(as_list(spec.get("volumeLifecycleModes"))):
        if mode not in ("Ephemeral", "Persistent"):
            causes.append(field_not_supported(f"spec.volumeLifecycleModes[{i}]", mode, ["Ephemeral", "Persistent"]))
    return causes


def validate_csidriver_update(new: Obj, old: Obj) -> list[Cause]:
    nspec, ospec = as_dict(new.get("spec")), as_dict(old.get("spec"))
    return [field_invalid(f"spec.{f}", nspec.get(f), _IMMUTABLE) for f in ("attachRequired", "volumeLifecycleModes")
            if nspec.get(f) != ospec.get(f)]


def validate_csinode(obj: Obj) -> list[Cause]:
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return [field_required("spec")]
    causes: list[Cause] = []
    seen: set[str] = set()
    for i, d in enumerate(as_list(spec.get("drivers"))):
        d, path = as_dict(d), f"spec.drivers[{i}]"
        causes += _csi_driver_name(d.get("name"), f"{path}.name")
        if not d.get("nodeID"):
            causes.append(field_required(f"{path}.nodeID"))
        if d.get("name") in seen:
            causes.append(Cause("FieldValueDuplicate", f'Duplicate value: "{d.get("name")}"', f"{path}.name"))
        seen.add(str(d.get("name")))
    return causes


def validate_volumeattachment(obj: Obj) -> list[Cause]:
    spec = as_dict(obj.get("spec"))
    causes = _csi_driver_name(spec.get("attacher"), "spec.attacher")
    if not spec.get("nodeName"):
        causes.append(field_required("spec.nodeName"))
    source = as_dict(spec.get("source"))
    given = [k for k in ("persistentVolumeName", "inlineVolumeSpec") if source.get(k)]
    if len(given) != 1:
        causes.append(field_required("spec.source", "Required value: must specify exactly one of "
                                     "persistentVolumeName and inlineVolumeSpec"))
    return causes


def validate_volumeattachment_update(new: Obj, old: Obj) -> list[Cause]:
    if new.get("spec") != old.get("spec"):
        return [field_invalid("spec", new.get("spec"), _IMMUTABLE)]
    return []


def _clear_status(obj: Obj) -> None:
    obj.pop("status", None)


def _keep_status(new: Obj, old: Obj) -> None:
    if "status" in old:
        new["status"] = old["status"]
    else:
        new.pop("status", None)


PVC = Strategy(default=core.default_pvc, prepare_create=prepare_create_pvc, validate=validate_pvc,
               validate_update=core.validate_pvc_update, return_deleted_object=True)
PV = Strategy(default=default_pv, prepare_create=prepare_create_pv, validate=validate_pv,
              validate_update=validate_pv_update, prepare_subresource=prepare_pv_status, return_deleted_object=True)
STORAGECLASS = Strategy(default=default_storageclass, validate=validate_storageclass,
                        validate_update=validate_storageclass_update)
CSIDRIVER = Strategy(default=default_csidriver, validate=validate_csidriver, validate_update=validate_csidriver_update)
CSINODE = Strategy(validate=validate_csinode)
VOLUMEATTACHMENT = Strategy(prepare_create=_clear_status, prepare_update=_keep_status,
                            validate=validate_volumeattachment, validate_update=validate_volumeattachment_update)
