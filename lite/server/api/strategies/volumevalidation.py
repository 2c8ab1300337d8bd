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
from lite.validation import is_dns1123_label, is_qualified_name
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
# What upstream's ConvertDownwardAPIFieldLabel knows for v1 (anything else fails conversion first).
CONVERTIBLE_FIELD_PATHS = frozenset(("metadata.annotations", "metadata.labels", "metadata.name", "metadata.namespace",
                                     "metadata.uid", "spec.nodeName", "spec.restartPolicy", "spec.serviceAccountName",
                                     "spec.schedulerName", "status.phase", "status.hostIP", "status.hostIPs",
                                     "status.podIP", "status.podIPs", "spec.host"))
RESOURCE_FIELDS = ["limits.cpu", "limits.ephemeral-storage", "limits.memory", "requests.cpu",
                   "requests.ephemeral-storage", "requests.memory"]
# Every volume source of core/v1 Volume: exactly one must be set.
VOLUME_SOURCES = ("hostPath", "emptyDir", "gcePersistentDisk", "awsElasticBlockStore", "gitRepo", "secret", "nfs",
                  "iscsi", "glusterfs", "persistentVolumeClaim", "rbd", "flexVolume", "cinder", "cephfs", "flocker",
                  "downwardAPI", "fc", "azureFile", "configMap", "vsphereVolume", "quobyte", "azureDisk",
                  "photonPersistentDisk", "projected", "portworxVolume", "scaleIO", "storageos", "csi", "ephemeral",
                  "image")
_SOURCE_ORDER = {s: i for i, s in enumerate(VOLUME_SOURCES)}
_MIN_TOKEN_SECONDS = 600


def validate_volumes(volumes: Any, path: str) -> tuple[list[Cause], set[str]]:
    """The causes and the names of the valid volumes (upstream: a mount of an invalid volume is also NotFound)."""
    causes: list[Cause] = []
    names: set[str] = set()
    for i, v in enumerate(as_list(volumes)):
        p = f"{path}[{i}]"
        if not isinstance(v, dict):
            causes.append(field_invalid(p, v, "must be an object"))
            continue
        name = v.get("name")
        own = validate_volume_source(v, p)
        if not name:
            own.append(field_required(f"{p}.name"))
        elif not isinstance(name, str):
            own.append(field_invalid(f"{p}.name", name, "must be a string"))
        else:
            own += [field_invalid(f"{p}.name", name, m) for m in is_dns1123_label(name)]
            if name in names:
                own.append(field_duplicate(f"{p}.name", name))
        if own:
            causes += own
        else:
            names.add(str(name))
    return causes, names


def validate_volume_source(v: dict[str, Any], path: str) -> list[Cause]:
    present = sorted((k for k in v if k in _SOURCE_ORDER and v[k] is not None), key=_SOURCE_ORDER.__getitem__)
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
    """Upstream `validateKeyToPath` for each item (paths `<path>[i].key|path|mode`)."""
    causes: list[Cause] = []
    for i, it in enumerate(as_list(items)):
        p = f"{path}[{i}]"
        it = as_dict(it)
        if not it.get("key"):
            causes.append(field_required(f"{p}.key"))
        if not it.get("path"):
            causes.append(field_required(f"{p}.path"))
        causes += local_path_causes(str(it.get("path") or ""), f"{p}.path")
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


def field_selector_causes(ref: Any, allowed: list[str], path: str) -> list[Cause]:
    """Upstream `validateObjectFieldSelector`: a supported fieldPath, labels/annotations with a subscript."""
    fp = str(as_dict(ref).get("fieldPath") or "")
    if not fp:
        return [field_required(f"{path}.fieldPath")]
    base, subscript = split_subscript(fp)
    if subscript is not None:
        if base not in ("metadata.annotations", "metadata.labels"):
            return [field_invalid(f"{path}.fieldPath", fp, "error converting fieldPath: field label does not "
                                  f"support subscript: {fp}")]
        key = subscript.lower() if base == "metadata.annotations" else subscript
        return [field_invalid(path, key, m) for m in is_qualified_name(key)]
    if fp not in CONVERTIBLE_FIELD_PATHS:
        return [field_invalid(f"{path}.fieldPath", fp, f"error converting fieldPath: field label not supported: {fp}")]
    if fp not in allowed:
        return [field_not_supported(f"{path}.fieldPath", fp, allowed)]
    return []


def split_subscript(fp: str) -> tuple[str, str | None]:
    """Upstream `SplitMaybeSubscriptedPath`: `metadata.labels['app']` -> ("metadata.labels", "app")."""
    if not fp.endswith("']"):
        return fp, None
    head, sep, sub = fp[:-2].partition("['")
    return (head, sub) if sep and head else (fp, None)


def resource_field_causes(ref: Any, path: str, volume: bool) -> list[Cause]:
    """Upstream `validateContainerResourceFieldSelector` (containerName is required only in volumes)."""
    ref = as_dict(ref)
    res = ref.get("resource")
    if volume and not ref.get("containerName"):
        return [field_required(f"{path}.containerName")]
    if not res:
        return [field_required(f"{path}.resource")]
    if res not in RESOURCE_FIELDS and not str(res).startswith(("limits.hugepages-", "requests.hugepages-")):
        return [field_not_supported(f"{path}.resource", res, RESOURCE_FIELDS)]
    return []


def _downward_file(it: Any, path: str) -> list[Cause]:
    """Upstream `validateDownwardAPIVolumeFile`, which reports on the source's path, not the item's index."""
    it = as_dict(it)
    causes: list[Cause] = []
    if not it.get("path"):
        causes.append(field_required(f"{path}.path"))
    causes += local_path_causes(str(it.get("path") or ""), f"{path}.path")
    fref, rref = it.get("fieldRef"), it.get("resourceFieldRef")
    if fref is not None:
        causes += field_selector_causes(fref, VOLUME_FIELD_PATHS, f"{path}.fieldRef")
        if rref is not None:
            causes.append(field_invalid(path, "resource", "fieldRef and resourceFieldRef can not be specified "
                                        "simultaneously"))
    elif rref is not None:
        causes += resource_field_causes(rref, f"{path}.resourceFieldRef", volume=True)
    else:
        causes.append(field_required(path, "Required value: one of fieldRef and resourceFieldRef is required"))
    return causes + file_mode_causes(it.get("mode"), f"{path}.mode")


def _downward_api(src: Any, path: str) -> list[Cause]:
    causes = file_mode_causes(src.get("defaultMode"), f"{path}.defaultMode")
    for it in as_list(src.get("items")):
        causes += _downward_file(it, path)
    return causes


def _projected(src: Any, path: str) -> list[Cause]:
    """Upstream `validateProjectionSources` (duplicate paths reported on the projected volume itself)."""
    causes = file_mode_causes(src.get("defaultMode"), f"{path}.defaultMode")
    seen: set[str] = set()

    def claim(file: str, shown: Any) -> None:
        if file in seen:
            causes.append(field_invalid(path, shown, "conflicting duplicate paths"))
        seen.add(file)

    for i, s in enumerate(as_list(src.get("sources"))):
        p = f"{path}.sources[{i}]"
        s = as_dict(s)
        kinds = [k for k in ("secret", "configMap", "downwardAPI", "serviceAccountToken", "clusterTrustBundle")
                 if s.get(k) is not None]
        for k in kinds:
            sub = as_dict(s.get(k))
            if k in ("secret", "configMap"):
                if not sub.get("name"):
                    causes.append(field_required(f"{p}.{k}.name"))
                causes += _key_to_paths(sub.get("items"), f"{p}.{k}.items")
                for it in as_list(sub.get("items")):
                    if as_dict(it).get("path"):
                        claim(str(as_dict(it)["path"]), sub.get("name", ""))
            elif k == "downwardAPI":
                for it in as_list(sub.get("items")):
                    causes += _downward_file(it, f"{p}.downwardAPI")
                    if as_dict(it).get("path"):
                        claim(str(as_dict(it)["path"]), as_dict(it)["path"])
            elif k == "serviceAccountToken":
                causes += _token_source(sub, p, path)
            else:
                if not sub.get("path"):
                    causes.append(field_required(f"{p}.clusterTrustBundlePEM.path"))
                causes += local_path_causes(str(sub.get("path") or ""), f"{p}.clusterTrustBundlePEM.path")
                claim(str(sub.get("path") or ""), sub.get("path", ""))
        if len(kinds) > 1:
            causes.append(field_forbidden(p, "may not specify more than 1 volume type"))
    return causes


def _token_source(src: Any, source_path: str, volume_path: str) -> list[Cause]:
    # Upstream reports the token's path on the projected volume (`projected.path`), not on the source.
    causes: list[Cause] = []
    exp = src.get("expirationSeconds")
    tp = f"{source_path}.serviceAccountToken.expirationSeconds"
    if exp is not None:
        if not is_int(exp) or exp < _MIN_TOKEN_SECONDS:
            causes.append(field_invalid(tp, exp, "may not specify a duration less than 10 minutes"))
        elif exp > 1 << 32:
            causes.append(field_invalid(tp, exp, "may not specify a duration larger than 2^32 seconds"))
    if not src.get("path"):
        causes.append(field_required(f"{volume_path}.path"))
    else:
        causes += local_path_causes(str(src["path"]), f"{volume_path}.path")
    return causes


def _pvc(src: Any, path: str) -> list[Cause]:
    if not src.get("claimName"):
        return [field_required(f"{path}.claimName")]
    return []


def _nfs(src: Any, path: str) -> list[Cause]:
    causes: list[Cause] = []
    if not src.get("server"):
        causes.append(field_required(f"{path}.server"))
    np = str(src.get("path") or "")
    if not np:
        causes.append(field_required(f"{path}.path"))
    if not np.startswith("/"):
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
