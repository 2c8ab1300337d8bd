"""Pod volume validation as upstream `validateVolumes`/`validateVolumeSource`: names, exactly one source,
and the rules of each source lite can meet (hostPath, emptyDir, configMap, secret, downwardAPI, projected,
persistentVolumeClaim, nfs, ephemeral).

Invariants:
- A volume name is a DNS-1123 label, so `<pod dir>/volumes/<name>` is always one directory entry.
- Every item `path` is relative, without '..' elements and not starting with '..'; every file mode is in
  0..0777. Together these keep every file the agent writes inside the volume's directory.
- Pure; reports field paths under the prefix it is given.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

from lite.errors import Cause, field_duplicate, field_forbidden, field_invalid, field_not_supported, field_required
from lite.quantity import parse_quantity
from lite.validation import is_dns1123_label
from lite.valuerules import (
    as_dict,
    as_list,
    file_mode_causes,
    is_config_map_key,
    is_int,
    local_path_causes,
    no_backsteps_causes,
)

HOST_PATH_TYPES = ["", "BlockDevice", "CharDevice", "Directory", "DirectoryOrCreate", "File", "FileOrCreate",
                   "Socket"]
VOLUME_FIELD_PATHS = ["metadata.annotations", "metadata.labels", "metadata.name", "metadata.namespace",
                      "metadata.uid"]
RESOURCE_FIELDS = ["limits.cpu", "limits.ephemeral-storage", "limits.memory", "requests.cpu",
                   "requests.ephemeral-storage", "requests.memory"]
# Every volume source of core/v1 Volume: exactly one must be set.
VOLUME_SOURCES = ("hostPath", "emptyDir", "gcePersistentDisk", "awsElasticBlockStore", "gitRepo", "secret", "nfs",
                  "iscsi", "glusterfs", "persistentVolumeClaim", "rbd", "flexVolume", "cinder", "cephfs", "flocker",
                  "downwardAPI", "fc", "azureFile", "configMap", "vsphereVolume", "quobyte", "azureDisk",
                  "photonPersistentDisk", "projected", "portworxVolume", "scaleIO", "storageos", "csi", "ephemeral",
                  "image")
_MIN_TOKEN_SECONDS = 600


def validate_volumes(volumes: Any, path: str) -> tuple[list[Cause], set[str]]:
    """The causes and the set of valid volume names (for volumeMounts)."""
    causes: list[Cause] = []
    names: set[str] = set()
    for i, v in enumerate(as_list(volumes)):
        p = f"{path}[{i}]"
        if not isinstance(v, dict):
            causes.append(field_invalid(p, v, "must be an object"))
            continue
        name = v.get("name")
        if not name:
            causes.append(field_required(f"{p}.name"))
        elif not isinstance(name, str) or (errs := is_dns1123_label(name)):
            msgs = errs if isinstance(name, str) else ["must be a string"]
            causes += [field_invalid(f"{p}.name", name, m) for m in msgs]
        elif name in names:
            causes.append(field_duplicate(f"{p}.name", name))
        else:
            names.add(name)
        causes += validate_volume_source(v, p)
    return causes, names


def validate_volume_source(v: dict[str, Any], path: str) -> list[Cause]:
    present = [s for s in VOLUME_SOURCES if v.get(s) is not None]
    if not present:
        return [field_required(path, "Required value: must specify a volume type")]
    causes = [field_forbidden(f"{path}.{s}", "may not specify more than 1 volume type") for s in present[1:]]
    src = present[0]
    check = _SOURCE_CHECKS.get(src)
    if check is not None:
        causes += check(as_dict(v.get(src)), f"{path}.{src}")
    return causes


def _host_path(src: Any, path: str) -> list[Cause]:
    hp = src.get("path")
    if not hp:
        return [field_required(f"{path}.path")]
    causes = no_backsteps_causes(str(hp), f"{path}.path")
    htype = src.get("type")
    if htype is not None and htype not in HOST_PATH_TYPES:
        causes.append(field_not_supported(f"{path}.type", htype, HOST_PATH_TYPES))
    return causes


def _empty_dir(src: Any, path: str) -> list[Cause]:
    limit = src.get("sizeLimit")
    if limit is not None and quantity_sign(limit) < 0:
        return [field_forbidden(f"{path}.sizeLimit", "SizeLimit field must be a valid resource quantity")]
    return []


def quantity_sign(q: Any) -> int:
    """-1, 0 or 1; a quantity that does not parse is a decode error upstream, raised as ValueError (400)."""
    value = parse_quantity_or_raise(q)
    return (value > 0) - (value < 0)


def parse_quantity_or_raise(q: Any) -> Fraction:
    try:
        return parse_quantity(str(q) if is_int(q) or isinstance(q, float) else q)
    except ValueError:
        # Upstream fails decoding the body with exactly this text (400 "cannot be handled as a <Kind>").
        raise ValueError("quantities must match the regular expression "
                         "'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'") from None


def _key_to_paths(items: Any, path: str) -> list[Cause]:
    causes: list[Cause] = []
    for i, it in enumerate(as_list(items)):
        p = f"{path}[{i}]"
        it = as_dict(it)
        if not it.get("key"):
            causes.append(field_required(f"{p}.key"))
        if not it.get("path"):
            causes.append(field_required(f"{p}.path"))
        else:
            causes += local_path_causes(str(it["path"]), f"{p}.path")
        causes += file_mode_causes(it.get("mode"), f"{p}.mode")
    return causes


def _named_source(name_key: str) -> Any:
    def check(src: Any, path: str) -> list[Cause]:
        causes: list[Cause] = []
        if not src.get(name_key):
            causes.append(field_required(f"{path}.{name_key}"))
        causes += file_mode_causes(src.get("defaultMode"), f"{path}.defaultMode")
        return causes + _key_to_paths(src.get("items"), f"{path}.items")
    return check


def _downward_items(items: Any, path: str, in_projection: bool = False) -> list[Cause]:
    causes: list[Cause] = []
    for i, it in enumerate(as_list(items)):
        p = f"{path}[{i}]"
        it = as_dict(it)
        if not it.get("path"):
            causes.append(field_required(f"{p}.path"))
        else:
            causes += local_path_causes(str(it["path"]), f"{p}.path")
        causes += file_mode_causes(it.get("mode"), f"{p}.mode")
        fref, rref = it.get("fieldRef"), it.get("resourceFieldRef")
        if fref is not None and rref is not None:
            causes.append(field_invalid(p, "resource", "fieldRef and resourceFieldRef can not be specified "
                                        "simultaneously"))
        elif fref is not None:
            fp = str(as_dict(fref).get("fieldPath") or "")
            base = fp.split("[", 1)[0] if fp.startswith(("metadata.labels[", "metadata.annotations[")) else fp
            if not fp:
                causes.append(field_required(f"{p}.fieldRef.fieldPath"))
            elif base not in VOLUME_FIELD_PATHS:
                causes.append(field_not_supported(f"{p}.fieldRef.fieldPath", fp, VOLUME_FIELD_PATHS))
        elif rref is not None:
            rref = as_dict(rref)
            if not rref.get("containerName"):
                causes.append(field_required(f"{p}.resourceFieldRef.containerName"))
            res = rref.get("resource")
            if not res:
                causes.append(field_required(f"{p}.resourceFieldRef.resource"))
            elif res not in RESOURCE_FIELDS and not str(res).startswith(("limits.hugepages-",
                                                                          "requests.hugepages-")):
                causes.append(field_not_supported(f"{p}.resourceFieldRef.resource", res, RESOURCE_FIELDS))
        else:
            causes.append(field_required(p, "Required value: one of fieldRef and resourceFieldRef is required"))
    return causes


def _downward_api(src: Any, path: str) -> list[Cause]:
    causes = file_mode_causes(src.get("defaultMode"), f"{path}.defaultMode")
    return causes + _downward_items(src.get("items"), f"{path}.items")


def _projected(src: Any, path: str) -> list[Cause]:
    causes = file_mode_causes(src.get("defaultMode"), f"{path}.defaultMode")
    seen: set[str] = set()
    for i, s in enumerate(as_list(src.get("sources"))):
        p = f"{path}.sources[{i}]"
        s = as_dict(s)
        kinds = [k for k in ("secret", "configMap", "downwardAPI", "serviceAccountToken", "clusterTrustBundle")
                 if s.get(k) is not None]
        if not kinds:
            causes.append(field_required(p, "Required value: must specify exactly 1 of secret, configMap, "
                                         "downwardAPI, serviceAccountToken or clusterTrustBundle"))
            continue
        causes += [field_forbidden(f"{p}.{k}", "may not specify more than 1 volume type") for k in kinds[1:]]
        k = kinds[0]
        sub = as_dict(s.get(k))
        if k in ("secret", "configMap"):
            sp = f"{p}.{k}"
            if not sub.get("name"):
                causes.append(field_required(f"{sp}.name"))
            causes += _key_to_paths(sub.get("items"), f"{sp}.items")
            files = [str(as_dict(it).get("path") or "") for it in as_list(sub.get("items"))]
        elif k == "downwardAPI":
            causes += _downward_items(sub.get("items"), f"{p}.downwardAPI.items", True)
            files = [str(as_dict(it).get("path") or "") for it in as_list(sub.get("items"))]
        else:
            causes += _token_source(sub, f"{p}.{k}")
            files = [str(sub.get("path") or "")]
        for j, f in enumerate(files):
            if f and f in seen:
                where = f"{p}.{k}.path" if k in ("serviceAccountToken", "clusterTrustBundle") \
                    else f"{p}.{k}.items[{j}].path"
                causes.append(field_invalid(where, f, "conflicting duplicate paths"))
            seen.add(f)
    return causes


def _token_source(src: Any, path: str) -> list[Cause]:
    causes: list[Cause] = []
    if not src.get("path"):
        causes.append(field_required(f"{path}.path"))
    else:
        causes += local_path_causes(str(src["path"]), f"{path}.path")
    exp = src.get("expirationSeconds")
    if exp is not None:
        if not is_int(exp) or exp < _MIN_TOKEN_SECONDS:
            causes.append(field_invalid(f"{path}.expirationSeconds", exp,
                                        "may not specify a duration less than 10 minutes"))
        elif exp > 1 << 32:
            causes.append(field_invalid(f"{path}.expirationSeconds", exp,
                                        "may not specify a duration larger than 2^32 seconds"))
    return causes


def _pvc(src: Any, path: str) -> list[Cause]:
    if not src.get("claimName"):
        return [field_required(f"{path}.claimName")]
    return []


def _nfs(src: Any, path: str) -> list[Cause]:
    causes: list[Cause] = []
    if not src.get("server"):
        causes.append(field_required(f"{path}.server"))
    np = src.get("path")
    if not np:
        causes.append(field_required(f"{path}.path"))
    elif not str(np).startswith("/"):
        causes.append(field_invalid(f"{path}.path", np, "must be an absolute path"))
    return causes


def _ephemeral(src: Any, path: str) -> list[Cause]:
    if src.get("volumeClaimTemplate") is None:
        return [field_required(f"{path}.volumeClaimTemplate")]
    return []


_SOURCE_CHECKS: dict[str, Any] = {
    "hostPath": _host_path,
    "emptyDir": _empty_dir,
    "secret": _named_source("secretName"),
    "configMap": _named_source("name"),
    "downwardAPI": _downward_api,
    "projected": _projected,
    "persistentVolumeClaim": _pvc,
    "nfs": _nfs,
    "ephemeral": _ephemeral,
}


def config_key_causes(data: Any, path: str) -> list[Cause]:
    """ConfigMap/Secret keys (`data[<key>]`), which volumes turn into file names."""
    causes: list[Cause] = []
    for k in as_dict(data):
        causes += [field_invalid(f"{path}[{k}]", k, m) for m in is_config_map_key(str(k))]
    return causes
