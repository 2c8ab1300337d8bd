"""Value rules of built-in kinds other than the pod spec, as upstream's `ValidateService`, `ValidateNamespace`,
`ValidatePersistentVolumeClaim`, apps `ValidateDeployment`/`StatefulSet`/`DaemonSet` and batch `ValidateJob`/
`ValidateCronJob` hold them: enums, non-negative counts, intOrPercent fields, names and selectors that would
otherwise be stored and then break a controller, the scheduler or a client.

Invariants: pure; each function adds to the causes its kind's strategy already reports (it does not repeat
them); a quantity that does not parse raises ValueError (a 400 decode error upstream).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from typing import Any

from lite import cron
from lite.errors import Cause, field_invalid, field_not_supported, field_required
from lite.server.api.strategies.volumevalidation import quantity_sign
from lite.validation import is_dns1123_subdomain, is_qualified_name, validate_label_selector, validate_labels
from lite.valuerules import (
    NEGATIVE_MSG,
    NOT_POSITIVE_MSG,
    as_dict,
    as_list,
    is_int,
    is_valid_ip,
    is_valid_port_num,
    non_negative_causes,
    port_num_or_name_causes,
    positive_causes,
)

TRAFFIC_POLICIES = ["Cluster", "Local"]
IP_FAMILY_POLICIES = ["PreferDualStack", "RequireDualStack", "SingleStack"]
ACCESS_MODES = ["ReadOnlyMany", "ReadWriteMany", "ReadWriteOnce", "ReadWriteOncePod"]
VOLUME_MODES = ["Block", "Filesystem"]
POD_MANAGEMENT = ["OrderedReady", "Parallel"]
STS_UPDATE = ["OnDelete", "RollingUpdate"]
DS_UPDATE = ["OnDelete", "RollingUpdate"]
COMPLETION_MODES = ["NonIndexed", "Indexed"]
EVICTION_POLICIES = ["AlwaysAllow", "IfHealthyBudget"]
_PERCENT = re.compile(r"[0-9]+%")
_STANDARD_FINALIZERS = ("kubernetes",)


def namespace_causes(obj: Mapping[str, Any]) -> list[Cause]:
    """spec.finalizers: qualified names; an unqualified one must be a standard finalizer ("kubernetes")."""
    causes: list[Cause] = []
    for f in as_list(as_dict(obj.get("spec")).get("finalizers")):
        name = str(f)
        errs = is_qualified_name(name)
        if errs:
            causes += [field_invalid("spec.finalizers", name, m) for m in errs]
        elif "/" not in name and name not in _STANDARD_FINALIZERS:
            causes.append(field_invalid("spec.finalizers", name, "name is neither a standard finalizer name nor "
                                        "is it fully qualified"))
    return causes


def service_causes(obj: Mapping[str, Any]) -> list[Cause]:
    spec = as_dict(obj.get("spec"))
    stype = spec.get("type", "ClusterIP")
    causes = validate_labels(spec.get("selector"), "spec.selector")
    seen: set[tuple[Any, Any]] = set()
    for i, p in enumerate(as_list(spec.get("ports"))):
        p = as_dict(p)
        key = (p.get("protocol", "TCP"), p.get("port"))
        if key in seen:  # upstream shows the (protocol, port) key as the Go struct it compares
            shown = (f'core.ServicePort{{Name:"", Protocol:"{key[0]}", AppProtocol:(*string)(nil), Port:{key[1]}, '
                     'TargetPort:intstr.IntOrString{Type:0, IntVal:0, StrVal:""}, NodePort:0}')
            causes.append(Cause("FieldValueDuplicate", f"Duplicate value: {shown}", f"spec.ports[{i}]"))
        seen.add(key)
        if "targetPort" in p and not is_int(p["targetPort"]):
            causes += port_num_or_name_causes(p["targetPort"], f"spec.ports[{i}].targetPort")
        np = p.get("nodePort")
        if np:
            causes += [field_invalid(f"spec.ports[{i}].nodePort", np, m) for m in is_valid_port_num(np)]
    etp = spec.get("externalTrafficPolicy")
    if etp:
        if stype not in ("NodePort", "LoadBalancer"):
            causes.append(field_invalid("spec.externalTrafficPolicy", etp, "may only be set for "
                                        "externally-accessible services"))
        elif etp not in TRAFFIC_POLICIES:
            causes.append(field_not_supported("spec.externalTrafficPolicy", etp, TRAFFIC_POLICIES))
    itp = spec.get("internalTrafficPolicy")
    if itp and itp not in TRAFFIC_POLICIES:
        causes.append(field_not_supported("spec.internalTrafficPolicy", itp, TRAFFIC_POLICIES))
    ifp = spec.get("ipFamilyPolicy")
    if ifp and ifp not in IP_FAMILY_POLICIES:
        causes.append(field_not_supported("spec.ipFamilyPolicy", ifp, IP_FAMILY_POLICIES))
    en = spec.get("externalName")
    if stype == "ExternalName" and isinstance(en, str) and en:
        name = en[:-1] if en.endswith(".") else en
        causes += [field_invalid("spec.externalName", en, m) for m in is_dns1123_subdomain(name)]
    for i, ip in enumerate(as_list(spec.get("externalIPs"))):
        causes += [field_invalid(f"spec.externalIPs[{i}]", ip, m) for m in is_valid_ip(str(ip))]
    return causes


def pvc_causes(obj: Mapping[str, Any]) -> list[Cause]:
    spec = as_dict(obj.get("spec"))
    causes: list[Cause] = []
    for mode in as_list(spec.get("accessModes")):
        if mode not in ACCESS_MODES:
            causes.append(field_not_supported("spec.accessModes", mode, ACCESS_MODES))
    vm = spec.get("volumeMode")
    if vm is not None and vm not in VOLUME_MODES:
        causes.append(field_not_supported("spec.volumeMode", vm, VOLUME_MODES))
    res = as_dict(spec.get("resources"))
    for which in ("requests", "limits"):
        for name, q in as_dict(res.get(which)).items():
            sign = quantity_sign(q)
            if sign < 0:
                causes.append(field_invalid(f"spec.resources.{which}[{name}]", str(q), NEGATIVE_MSG))
            elif sign == 0 and which == "requests" and name == "storage":
                causes.append(field_invalid("spec.resources[storage]", str(q), NOT_POSITIVE_MSG))
    return causes


def _int_or_percent(v: Any, path: str, capped: bool = True) -> list[Cause]:
    """Upstream `ValidatePositiveIntOrPercent`, and `IsNotMoreThan100Percent` when `capped`."""
    if v is None:
        return []
    if is_int(v):
        return non_negative_causes(v, path)
    if isinstance(v, str) and _PERCENT.fullmatch(v):
        if capped and int(v[:-1]) > 100:
            return [field_invalid(path, v, "must not be greater than 100%")]
        return []
    return [field_invalid(path, v, "a valid percent string must be a numeric string followed by an ending '%' "
                          "(e.g. '1%',  or '93%', regex used for validation is '[0-9]+%')")]


def _is_zero(v: Any) -> bool:
    return bool(v == 0 or v == "0%")


def deployment_causes(obj: Mapping[str, Any]) -> list[Cause]:
    spec = as_dict(obj.get("spec"))
    causes = non_negative_causes(spec.get("minReadySeconds"), "spec.minReadySeconds")
    pds = spec.get("progressDeadlineSeconds")
    if pds is not None:
        causes += non_negative_causes(pds, "spec.progressDeadlineSeconds")
        mrs = spec.get("minReadySeconds") or 0
        if is_int(pds) and is_int(mrs) and pds <= mrs:
            causes.append(field_invalid("spec.progressDeadlineSeconds", pds, "must be greater than "
                                        "minReadySeconds"))
    strategy = as_dict(spec.get("strategy"))
    ru = as_dict(strategy.get("rollingUpdate"))
    base = "spec.strategy.rollingUpdate"
    if strategy.get("type") == "Recreate" and strategy.get("rollingUpdate") is not None:
        causes.append(Cause("FieldValueForbidden", "Forbidden: may not be specified when strategy `type` is "
                            "'Recreate'", base))
    if ru:
        causes += _int_or_percent(ru.get("maxUnavailable"), f"{base}.maxUnavailable")
        causes += _int_or_percent(ru.get("maxSurge"), f"{base}.maxSurge", capped=False)  # a surge may exceed 100%
        if _is_zero(ru.get("maxUnavailable")) and _is_zero(ru.get("maxSurge")):
            causes.append(field_invalid(f"{base}.maxUnavailable", ru.get("maxUnavailable"),
                                        "may not be 0 when `maxSurge` is 0"))
    return causes


def statefulset_causes(obj: Mapping[str, Any]) -> list[Cause]:
    spec = as_dict(obj.get("spec"))
    causes = non_negative_causes(spec.get("minReadySeconds"), "spec.minReadySeconds")
    pmp = spec.get("podManagementPolicy")
    if pmp is not None and pmp not in POD_MANAGEMENT:
        causes.append(field_not_supported("spec.podManagementPolicy", pmp, POD_MANAGEMENT))
    us = as_dict(spec.get("updateStrategy"))
    ut = us.get("type")
    if ut is not None and ut not in STS_UPDATE:
        causes.append(field_not_supported("spec.updateStrategy.type", ut, STS_UPDATE))
    ru = as_dict(us.get("rollingUpdate"))
    causes += non_negative_causes(ru.get("partition"), "spec.updateStrategy.rollingUpdate.partition")
    sn = spec.get("serviceName")
    if sn:
        causes += [field_invalid("spec.serviceName", sn, m) for m in is_dns1123_subdomain(str(sn))]
    return causes


def daemonset_causes(obj: Mapping[str, Any]) -> list[Cause]:
    spec = as_dict(obj.get("spec"))
    causes = non_negative_causes(spec.get("minReadySeconds"), "spec.minReadySeconds")
    causes += non_negative_causes(spec.get("revisionHistoryLimit"), "spec.revisionHistoryLimit")
    us = as_dict(spec.get("updateStrategy"))
    ut = us.get("type")
    if ut is not None and ut not in DS_UPDATE:
        causes.append(field_not_supported("spec.updateStrategy.type", ut, DS_UPDATE))
    ru = as_dict(us.get("rollingUpdate"))
    base = "spec.updateStrategy.rollingUpdate"
    causes += _int_or_percent(ru.get("maxUnavailable"), f"{base}.maxUnavailable")
    causes += _int_or_percent(ru.get("maxSurge"), f"{base}.maxSurge")
    if ru and _is_zero(ru.get("maxUnavailable", 1)) and _is_zero(ru.get("maxSurge", 0)):
        causes.append(field_invalid(f"{base}.maxUnavailable", ru.get("maxUnavailable"),
                                    "may not be 0 when `maxSurge` is 0"))
    return causes


def job_spec_causes(spec: Mapping[str, Any], path: str = "spec") -> list[Cause]:
    causes: list[Cause] = []
    for f in ("parallelism", "completions", "backoffLimit"):
        causes += non_negative_causes(spec.get(f), f"{path}.{f}")
    causes += positive_causes(spec.get("activeDeadlineSeconds"), f"{path}.activeDeadlineSeconds")
    causes += non_negative_causes(spec.get("ttlSecondsAfterFinished"), f"{path}.ttlSecondsAfterFinished")
    mode = spec.get("completionMode")
    if mode is not None and mode not in COMPLETION_MODES:
        causes.append(field_not_supported(f"{path}.completionMode", mode, COMPLETION_MODES))
    if mode == "Indexed" and spec.get("completions") is None:
        causes.append(field_required(f"{path}.completions", "Required value: when completion mode is Indexed"))
    return causes


def job_causes(obj: Mapping[str, Any]) -> list[Cause]:
    return job_spec_causes(as_dict(obj.get("spec")))


def cronjob_causes(obj: Mapping[str, Any]) -> list[Cause]:
    spec = as_dict(obj.get("spec"))
    causes: list[Cause] = []
    schedule, tz = spec.get("schedule"), spec.get("timeZone")
    if isinstance(tz, str):
        try:
            cron.load_zone(tz)
        except (ValueError, OSError) as e:  # a directory name (`America`) fails with an OSError
            e = ValueError(f"unknown time zone {tz}") if isinstance(e, OSError) else e
            causes.append(field_invalid("spec.timeZone", tz, str(e)))
    if isinstance(schedule, str) and "TZ" in schedule:
        # Upstream refuses a zone inside the schedule on create (an older object keeps it: see ratcheted_causes).
        causes.append(field_invalid("spec.schedule", schedule, "cannot use TZ or CRON_TZ in schedule, use timeZone "
                                    "field instead"))
        if tz is not None:
            causes.append(field_invalid("spec.schedule", schedule, "cannot use both timeZone field and TZ or "
                                        "CRON_TZ in schedule"))
    if isinstance(schedule, str) and schedule:
        try:
            cron.parse(schedule, None)
        except ValueError as e:
            causes.append(field_invalid("spec.schedule", schedule, str(e)))
    for f in ("startingDeadlineSeconds", "successfulJobsHistoryLimit", "failedJobsHistoryLimit"):
        causes += non_negative_causes(spec.get(f), f"spec.{f}")
    jt = as_dict(as_dict(spec.get("jobTemplate")).get("spec"))
    return causes + job_spec_causes(jt, "spec.jobTemplate.spec")


def pdb_causes(obj: Mapping[str, Any]) -> list[Cause]:
    """policy/v1 PodDisruptionBudget (the disruption controller computes with these values)."""
    spec = as_dict(obj.get("spec"))
    causes: list[Cause] = []
    if spec.get("minAvailable") is not None and spec.get("maxUnavailable") is not None:
        causes.append(field_invalid("spec", "", "minAvailable and maxUnavailable cannot be both set"))
    for f in ("minAvailable", "maxUnavailable"):
        causes += _int_or_percent(spec.get(f), f"spec.{f}")
    causes += validate_label_selector(spec.get("selector"), "spec.selector")
    policy = spec.get("unhealthyPodEvictionPolicy")
    if policy is not None and policy not in EVICTION_POLICIES:
        causes.append(field_not_supported("spec.unhealthyPodEvictionPolicy", policy, EVICTION_POLICIES))
    return causes


def hpa_causes(obj: Mapping[str, Any]) -> list[Cause]:
    """autoscaling/v2 HorizontalPodAutoscaler replica bounds and target (the HPA controller reads them)."""
    spec = as_dict(obj.get("spec"))
    causes: list[Cause] = []
    ref = as_dict(spec.get("scaleTargetRef"))
    for f in ("kind", "name"):
        if not ref.get(f):
            causes.append(field_required(f"spec.scaleTargetRef.{f}"))
    lo, hi = spec.get("minReplicas"), spec.get("maxReplicas")
    if lo is not None and (not is_int(lo) or lo < 1):
        causes.append(field_invalid("spec.minReplicas", lo, "must be greater than or equal to 1"))
    if not is_int(hi) or hi < 1:
        causes.append(field_invalid("spec.maxReplicas", hi if hi is not None else 0, "must be greater than 0"))
    elif is_int(lo) and hi < lo:
        causes.append(field_invalid("spec.maxReplicas", hi, "must be greater than or equal to `minReplicas`"))
    return causes


def node_causes(obj: Mapping[str, Any]) -> list[Cause]:
    """spec.podCIDRs are CIDRs (agents build the pod network from them); podCIDR is podCIDRs[0] in v1."""
    spec = as_dict(obj.get("spec"))
    cidrs = as_list(spec.get("podCIDRs")) or ([spec["podCIDR"]] if spec.get("podCIDR") else [])
    shown = "[]string{" + ", ".join(f'"{c}"' for c in cidrs) + "}"
    causes: list[Cause] = []
    for i, cidr in enumerate(cidrs):
        try:
            ipaddress.ip_network(str(cidr), strict=False)
        except ValueError:
            causes.append(Cause("FieldValueInvalid", f"Invalid value: {shown}: must be valid CIDR",
                                f"spec.podCIDRs[{i}]"))
    return causes


# Upstream's fixed system classes (scheduling.SystemPriorityClasses) and the highest user-definable value.
_SYSTEM_PRIORITY = {"system-node-critical": 2000001000, "system-cluster-critical": 2000000000}
HIGHEST_USER_PRIORITY = 1000000000


def priorityclass_causes(obj: Mapping[str, Any]) -> list[Cause]:
    """scheduling.k8s.io PriorityClass: the value every pod's priority admission copies."""
    name = str(as_dict(obj.get("metadata")).get("name") or "")
    value = obj.get("value")
    causes: list[Cause] = []
    if name.startswith("system-"):
        err = ""
        if name not in _SYSTEM_PRIORITY:
            err = f"{name} is not a known system priority class"
        elif value != _SYSTEM_PRIORITY[name]:
            err = f"value of {name} PriorityClass must be {_SYSTEM_PRIORITY[name]}"
        elif obj.get("globalDefault"):
            err = f"globalDefault of {name} PriorityClass must be false"
        if err:
            causes.append(Cause("FieldValueForbidden", "Forbidden: priority class names with 'system-' prefix are "
                                f"reserved for system use only. error: {err}", "metadata.name"))
    elif is_int(value) and value > HIGHEST_USER_PRIORITY:
        causes.append(Cause("FieldValueForbidden", "Forbidden: maximum allowed value of a user defined priority "
                            f"is {HIGHEST_USER_PRIORITY}", "value"))
    policy = obj.get("preemptionPolicy")
    if policy is not None and policy not in ("PreemptLowerPriority", "Never"):
        causes.append(field_not_supported("preemptionPolicy", policy, ["PreemptLowerPriority", "Never"]))
    return causes
