"""Strategies of the small cluster-facing kinds: node.k8s.io RuntimeClass, storage.k8s.io CSIStorageCapacity,
apiregistration.k8s.io APIService (upstream `pkg/apis/node/validation`, `pkg/apis/storage/validation`,
kube-aggregator `pkg/apis/apiregistration/validation` and their registry strategies).

- RuntimeClass: `handler` a DNS-1123 label and immutable; overhead quantities non-negative; scheduling
  nodeSelector labels and tolerations well formed.
- CSIStorageCapacity: storageClassName a DNS subdomain, nodeTopology a label selector, quantities
  non-negative; storageClassName and nodeTopology immutable.
- APIService: named `<version>.<group>`; priorities in range; a local one (`service: null`) has no caBundle or
  insecureSkipTLSVerify; a remote one names namespace, name and a valid port (defaulted to 443). Create
  clears status; status changes only through `/status`.

Pure: no I/O.
"""

from __future__ import annotations

from typing import Any

from lite.errors import Cause, field_invalid, field_not_supported, field_required
from lite.quantity import parse_quantity
from lite.server.api.strategies.base import Obj, Strategy
from lite.validation import (
    is_dns1035_label,
    is_dns1123_label,
    is_dns1123_subdomain,
    validate_label_selector,
    validate_labels,
)

_IMMUTABLE = "field is immutable"
_TOLERATION_OPS = ["Equal", "Exists"]
_TAINT_EFFECTS = ["NoExecute", "NoSchedule", "PreferNoSchedule"]


def _quantity_causes(values: Any, path: str) -> list[Cause]:
    if values is None:
        return []
    if not isinstance(values, dict):
        return [field_invalid(path, values, "must be a map of resource names to quantities")]
    causes: list[Cause] = []
    for name, q in values.items():
        causes += _one_quantity(q, f"{path}[{name}]")
    return causes


def _one_quantity(q: Any, path: str) -> list[Cause]:
    if q is None:
        return []
    try:
        value = parse_quantity(str(q)) if isinstance(q, str | int | float) and not isinstance(q, bool) else None
    except (ValueError, ArithmeticError):
        value = None
    if value is None:
        return [field_invalid(path, q, "quantities must match the regular expression "
                                       "'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'")]
    if value < 0:
        return [field_invalid(path, q, "must be greater than or equal to 0")]
    return []


def _dict(obj: Any, key: str) -> dict[str, Any]:
    v = obj.get(key) if isinstance(obj, dict) else None
    return v if isinstance(v, dict) else {}


# ---- RuntimeClass -----------------------------------------------------------------------------------

def validate_tolerations(tols: Any, path: str) -> list[Cause]:
    if tols is None:
        return []
    if not isinstance(tols, list):
        return [field_invalid(path, tols, "must be a list")]
    causes: list[Cause] = []
    for i, t in enumerate(tols):
        p = f"{path}[{i}]"
        if not isinstance(t, dict):
            causes.append(field_invalid(p, t, "must be an object"))
            continue
        op = t.get("operator") or "Equal"
        if op not in _TOLERATION_OPS:
            causes.append(field_not_supported(f"{p}.operator", op, _TOLERATION_OPS))
        if op == "Exists" and t.get("value"):
            causes.append(field_invalid(f"{p}.operator", t.get("value"),
                                        "value must be empty when `operator` is 'Exists'"))
        if not t.get("key") and op != "Exists":
            causes.append(field_invalid(f"{p}.operator", op, "operator must be Exists when `key` is empty, "
                                                             "which means \"match all values and all keys\""))
        effect = t.get("effect") or ""
        if effect and effect not in _TAINT_EFFECTS:
            causes.append(field_not_supported(f"{p}.effect", effect, _TAINT_EFFECTS))
    return causes


def validate_runtimeclass(obj: Obj) -> list[Cause]:
    handler = obj.get("handler")
    causes: list[Cause] = []
    if not isinstance(handler, str):
        causes.append(field_required("handler") if handler is None else field_invalid("handler", handler,
                                                                                      "must be a string"))
    else:
        causes += [field_invalid("handler", handler, msg) for msg in is_dns1123_label(handler)]
    causes += _quantity_causes(_dict(obj, "overhead").get("podFixed"), "overhead.podFixed")
    scheduling = _dict(obj, "scheduling")
    if scheduling.get("nodeSelector") is not None:
        causes += validate_labels(scheduling.get("nodeSelector"), "scheduling.nodeSelector")
    causes += validate_tolerations(scheduling.get("tolerations"), "scheduling.tolerations")
    return causes


def validate_runtimeclass_update(new: Obj, old: Obj) -> list[Cause]:
    if new.get("handler") != old.get("handler"):
        return [field_invalid("handler", new.get("handler"), _IMMUTABLE)]
    return []


# ---- CSIStorageCapacity -----------------------------------------------------------------------------

def validate_capacity(obj: Obj) -> list[Cause]:
    causes: list[Cause] = []
    sc = obj.get("storageClassName")
    if not sc:
        causes.append(field_required("storageClassName"))
    elif not isinstance(sc, str):
        causes.append(field_invalid("storageClassName", sc, "must be a string"))
    else:
        causes += [field_invalid("storageClassName", sc, m) for m in is_dns1123_subdomain(sc)]
    if obj.get("nodeTopology") is not None:
        causes += validate_label_selector(obj.get("nodeTopology"), "nodeTopology")
    causes += _one_quantity(obj.get("capacity"), "capacity")
    causes += _one_quantity(obj.get("maximumVolumeSize"), "maximumVolumeSize")
    return causes


def validate_capacity_update(new: Obj, old: Obj) -> list[Cause]:
    causes: list[Cause] = []
    for f in ("storageClassName", "nodeTopology"):
        if new.get(f) != old.get(f):
            causes.append(field_invalid(f, new.get(f), _IMMUTABLE))
    return causes


# ---- APIService -------------------------------------------------------------------------------------

def default_apiservice(obj: Obj) -> None:
    spec = obj.get("spec")
    service = spec.get("service") if isinstance(spec, dict) else None
    if isinstance(service, dict) and service.get("port") is None:
        service["port"] = 443


def prepare_create_apiservice(obj: Obj) -> None:
    obj["status"] = {}


def apiservice_name(name: str, prefix: bool) -> list[str]:
    """Upstream ValidateAPIServiceName: `<version>.<group>`, the group empty only for core (`v1.`)."""
    version, dot, group = name.partition(".")
    if not dot:
        return ["must be of the form version.group"]
    errs = is_dns1035_label(version)
    if group:
        errs += is_dns1123_subdomain(group)
    return errs


def _priority(spec: dict[str, Any], field: str, top: int) -> list[Cause]:
    v = spec.get(field)
    if not isinstance(v, int) or isinstance(v, bool) or v <= 0 or v > top:
        return [field_invalid(f"spec.{field}", v, f"must be positive and less than {top}")]
    return []


def validate_apiservice(obj: Obj) -> list[Cause]:
    spec = _dict(obj, "spec")
    name = str(_dict(obj, "metadata").get("name") or "")
    version, group = spec.get("version") or "", spec.get("group") or ""
    causes: list[Cause] = []
    if name != f"{version}.{group}":
        causes.append(field_invalid("metadata.name", name, 'must be `spec.version+"."+spec.group`'))
    if not version:
        causes.append(field_required("spec.version"))
    elif not isinstance(version, str):
        causes.append(field_invalid("spec.version", version, "must be a string"))
    else:
        causes += [field_invalid("spec.version", version, m) for m in is_dns1035_label(version)]
    if not group and version != "v1":
        causes.append(field_required("spec.group", "only v1 may have an empty group and it better be legacy kube"))
    elif group and isinstance(group, str):
        causes += [field_invalid("spec.group", group, m) for m in is_dns1123_subdomain(group)]
    causes += _priority(spec, "groupPriorityMinimum", 20000) + _priority(spec, "versionPriority", 1000)
    service = spec.get("service")
    if service is None:
        if spec.get("caBundle"):
            causes.append(field_invalid("spec.caBundle", f"{len(str(spec['caBundle']))} bytes",
                                        "local APIServices may not have a caBundle"))
        if spec.get("insecureSkipTLSVerify"):
            causes.append(field_invalid("spec.insecureSkipTLSVerify", True,
                                        "local APIServices may not have insecureSkipTLSVerify"))
        return causes
    if not isinstance(service, dict):
        return [*causes, field_invalid("spec.service", service, "must be an object")]
    if not service.get("namespace"):
        causes.append(field_required("spec.service.namespace"))
    if not service.get("name"):
        causes.append(field_required("spec.service.name"))
    port = service.get("port")
    if not isinstance(port, int) or isinstance(port, bool) or not 1 <= port <= 65535:
        causes.append(field_invalid("spec.service.port", port, "must be between 1 and 65535, inclusive"))
    if spec.get("insecureSkipTLSVerify") and spec.get("caBundle"):
        causes.append(field_invalid("spec.insecureSkipTLSVerify", True, "may not be true if caBundle is present"))
    return causes


RUNTIMECLASS = Strategy(validate=validate_runtimeclass, validate_update=validate_runtimeclass_update)
CSISTORAGECAPACITY = Strategy(validate=validate_capacity, validate_update=validate_capacity_update)
APISERVICE = Strategy(default=default_apiservice, prepare_create=prepare_create_apiservice,
                      validate=validate_apiservice, name_fn=apiservice_name, status_metadata=())
