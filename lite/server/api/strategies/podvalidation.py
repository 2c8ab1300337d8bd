"""Pod spec validation as upstream `ValidatePodSpec`: volumes and containers (delegated to their modules), the
pod-level enums, hostname/subdomain, nodeSelector, tolerations, affinity, topology spread constraints, DNS
config, host aliases and the pod securityContext.

Invariants:
- Used unchanged for pods and for every workload's pod template (`path` is `spec` or `spec.template.spec`).
- Never raises on a well-formed JSON body of the wrong shape except ValueError for a quantity that does not
  parse (upstream fails decoding it: 400); every other problem is a `Cause` naming its field (422).
- Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lite.errors import Cause, field_duplicate, field_forbidden, field_invalid, field_not_supported, field_required
from lite.server.api.strategies.containervalidation import validate_containers
from lite.server.api.strategies.securityvalidation import pod_security_causes, proc_mount_causes
from lite.server.api.strategies.volumevalidation import validate_volumes
from lite.validation import (
    is_dns1123_label,
    is_dns1123_subdomain,
    is_qualified_name,
    is_valid_label_value,
    validate_label_selector,
    validate_labels,
)
from lite.valuerules import (
    NOT_POSITIVE_MSG,
    as_dict,
    as_list,
    in_range,
    is_int,
    is_valid_ip,
    positive_causes,
)

RESTART_POLICIES = ["Always", "OnFailure", "Never"]
DNS_POLICIES = ["ClusterFirstWithHostNet", "ClusterFirst", "Default", "None"]
TAINT_EFFECTS = ["NoSchedule", "PreferNoSchedule", "NoExecute"]
UNSATISFIABLE = ["DoNotSchedule", "ScheduleAnyway"]
NODE_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")
MAX_DNS_NAMESERVERS = 3
MAX_DNS_SEARCHES = 32
MAX_DNS_SEARCH_CHARS = 2048
MAX_INT32 = 2147483647
PREEMPTION_POLICIES = ["PreemptLowerPriority", "Never"]
OS_NAMES = ["linux", "windows"]
NODE_INCLUSION = ["Honor", "Ignore"]


def validate_pod_spec(spec: Any, path: str = "spec", restart_policies: list[str] | None = None,
                      for_pod: bool = True) -> list[Cause]:
    if not isinstance(spec, Mapping):
        return [field_required(path)]
    vol_causes, volumes = validate_volumes(spec.get("volumes"), f"{path}.volumes")
    causes = vol_causes + validate_containers(spec, path, volumes, for_pod)
    allowed = restart_policies or RESTART_POLICIES
    rp = spec.get("restartPolicy")
    if rp is not None and rp not in allowed:
        causes.append(field_not_supported(f"{path}.restartPolicy", rp, allowed))
    dp = spec.get("dnsPolicy")
    if dp is not None and dp not in DNS_POLICIES:
        causes.append(field_not_supported(f"{path}.dnsPolicy", dp, DNS_POLICIES))
    causes += _dns_config(spec.get("dnsConfig"), dp, f"{path}.dnsConfig")
    for f in ("hostname", "subdomain"):
        v = spec.get(f)
        if v:
            causes += [field_invalid(f"{path}.{f}", v, m) for m in is_dns1123_label(str(v))]
    for f in ("serviceAccountName", "nodeName", "priorityClassName", "runtimeClassName"):
        v = spec.get(f)
        if v:
            causes += [field_invalid(f"{path}.{f}", v, m) for m in is_dns1123_subdomain(str(v))]
    ads = spec.get("activeDeadlineSeconds")
    if ads is not None and (not is_int(ads) or not 1 <= ads <= MAX_INT32):
        causes.append(field_invalid(f"{path}.activeDeadlineSeconds", ads, in_range(1, MAX_INT32)))
    pp = spec.get("preemptionPolicy")
    if pp is not None and pp not in PREEMPTION_POLICIES:
        causes.append(field_not_supported(f"{path}.preemptionPolicy", pp, PREEMPTION_POLICIES))
    os_name = as_dict(spec.get("os")).get("name") if spec.get("os") is not None else None
    if spec.get("os") is not None and os_name not in OS_NAMES:
        causes.append(field_not_supported(f"{path}.os.name", os_name or "", OS_NAMES))
    tgps = spec.get("terminationGracePeriodSeconds")
    if tgps is not None and not is_int(tgps):
        causes.append(field_invalid(f"{path}.terminationGracePeriodSeconds", tgps, "must be an integer"))
    causes += validate_labels(spec.get("nodeSelector"), f"{path}.nodeSelector")
    causes += validate_tolerations(spec.get("tolerations"), f"{path}.tolerations")
    causes += _affinity(as_dict(spec.get("affinity")), f"{path}.affinity")
    causes += _spread(spec.get("topologySpreadConstraints"), f"{path}.topologySpreadConstraints")
    causes += _host_aliases(spec.get("hostAliases"), f"{path}.hostAliases")
    causes += pod_security_causes(spec.get("securityContext"), f"{path}.securityContext")
    causes += proc_mount_causes(spec, path)
    for i, g in enumerate(as_list(spec.get("readinessGates"))):
        ct = str(as_dict(g).get("conditionType") or "")
        causes += [field_invalid(f"{path}.readinessGates[{i}].conditionType", ct, m) for m in is_qualified_name(ct)]
    gates: set[str] = set()
    for i, g in enumerate(as_list(spec.get("schedulingGates"))):
        n = str(as_dict(g).get("name") or "")
        causes += [field_invalid(f"{path}.schedulingGates[{i}]", n, m) for m in is_qualified_name(n)]
        if n in gates:
            causes.append(field_duplicate(f"{path}.schedulingGates[{i}]", n))
        gates.add(n)
    return causes


def validate_tolerations(tols: Any, path: str) -> list[Cause]:
    causes: list[Cause] = []
    for i, t in enumerate(as_list(tols)):
        p = f"{path}[{i}]"
        t = as_dict(t)
        key, op, value = str(t.get("key") or ""), t.get("operator") or "", str(t.get("value") or "")
        if key:
            causes += [field_invalid(f"{p}.key", key, m) for m in is_qualified_name(key)]
        if not key and op != "Exists":
            causes.append(field_invalid(f"{p}.operator", op, "operator must be Exists when `key` is empty, which "
                                        'means "match all values and all keys"'))
        effect = t.get("effect") or ""
        if t.get("tolerationSeconds") is not None and effect != "NoExecute":
            causes.append(field_invalid(f"{p}.effect", effect, "effect must be 'NoExecute' when "
                                        "`tolerationSeconds` is set"))
        if op in ("Equal", ""):
            errs = is_valid_label_value(value)
            if errs:
                causes.append(field_invalid(f"{p}.operator", value, ";".join(errs)))
        elif op == "Exists":
            if value:
                causes.append(field_invalid(f"{p}.operator", value, "value must be empty when `operator` is "
                                            "'Exists'"))
        else:
            causes.append(field_not_supported(f"{p}.operator", op, ["Equal", "Exists"]))
        if effect and effect not in TAINT_EFFECTS:
            causes.append(field_not_supported(f"{p}.effect", effect, TAINT_EFFECTS))
    return causes


def _node_selector_requirement(r: Any, path: str) -> list[Cause]:
    r = as_dict(r)
    op, values = r.get("operator"), as_list(r.get("values"))
    causes: list[Cause] = []
    if op in ("In", "NotIn"):
        if not values:
            causes.append(field_required(f"{path}.values", "Required value: must be specified when `operator` "
                                         "is 'In' or 'NotIn'"))
    elif op in ("Exists", "DoesNotExist"):
        if values:
            causes.append(field_forbidden(f"{path}.values", "may not be specified when `operator` is 'Exists' "
                                          "or 'DoesNotExist'"))
    elif op in ("Gt", "Lt"):
        if len(values) != 1:
            causes.append(field_required(f"{path}.values", "Required value: must be specified single value when "
                                         "`operator` is 'Lt' or 'Gt'"))
    else:
        causes.append(field_invalid(f"{path}.operator", op, "not a valid selector operator"))
    key = str(r.get("key") or "")
    return causes + [field_invalid(f"{path}.key", key, m) for m in is_qualified_name(key)]


def _node_field_requirement(r: Any, path: str) -> list[Cause]:
    """Upstream `ValidateNodeFieldSelectorRequirement`: only `metadata.name`, In/NotIn with one value."""
    r = as_dict(r)
    op, values = r.get("operator"), as_list(r.get("values"))
    causes: list[Cause] = []
    if op in ("In", "NotIn"):
        if len(values) != 1:
            causes.append(field_required(f"{path}.values", "Required value: must be only one value when "
                                         "`operator` is 'In' or 'NotIn' for node field selector"))
    else:
        causes.append(field_invalid(f"{path}.operator", op, "not a valid selector operator"))
    if r.get("key") != "metadata.name":
        causes.append(field_invalid(f"{path}.key", r.get("key", ""), "not a valid field selector key"))
    else:
        for i, v in enumerate(values):
            causes += [field_invalid(f"{path}.values[{i}]", v, m) for m in is_dns1123_subdomain(str(v))]
    return causes


def _node_selector_term(term: Any, path: str) -> list[Cause]:
    term = as_dict(term)
    causes: list[Cause] = []
    for i, r in enumerate(as_list(term.get("matchExpressions"))):
        causes += _node_selector_requirement(r, f"{path}.matchExpressions[{i}]")
    for i, r in enumerate(as_list(term.get("matchFields"))):
        causes += _node_field_requirement(r, f"{path}.matchFields[{i}]")
    return causes


def _weight(w: Any, path: str) -> list[Cause]:
    if not is_int(w) or not 1 <= w <= 100:
        return [field_invalid(path, w, "must be in the range 1-100")]
    return []


def _affinity(aff: Mapping[str, Any], path: str) -> list[Cause]:
    causes: list[Cause] = []
    na = as_dict(aff.get("nodeAffinity"))
    req = na.get("requiredDuringSchedulingIgnoredDuringExecution")
    if req is not None:
        rp = f"{path}.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
        terms = as_list(as_dict(req).get("nodeSelectorTerms"))
        if not terms:
            causes.append(field_required(f"{rp}.nodeSelectorTerms", "Required value: must have at least one node "
                                         "selector term"))
        for i, t in enumerate(terms):
            causes += _node_selector_term(t, f"{rp}.nodeSelectorTerms[{i}]")
    pp = f"{path}.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution"
    for i, t in enumerate(as_list(na.get("preferredDuringSchedulingIgnoredDuringExecution"))):
        t = as_dict(t)
        causes += _weight(t.get("weight"), f"{pp}[{i}].weight")
        causes += _node_selector_term(t.get("preference"), f"{pp}[{i}].preference")
    for kind in ("podAffinity", "podAntiAffinity"):
        pa = as_dict(aff.get(kind))
        rp = f"{path}.{kind}.requiredDuringSchedulingIgnoredDuringExecution"
        for i, t in enumerate(as_list(pa.get("requiredDuringSchedulingIgnoredDuringExecution"))):
            causes += _pod_affinity_term(t, f"{rp}[{i}]")
        pp = f"{path}.{kind}.preferredDuringSchedulingIgnoredDuringExecution"
        for i, t in enumerate(as_list(pa.get("preferredDuringSchedulingIgnoredDuringExecution"))):
            t = as_dict(t)
            causes += _weight(t.get("weight"), f"{pp}[{i}].weight")
            causes += _pod_affinity_term(t.get("podAffinityTerm"), f"{pp}[{i}].podAffinityTerm")
    return causes


def _pod_affinity_term(term: Any, path: str) -> list[Cause]:
    term = as_dict(term)
    causes = validate_label_selector(term.get("labelSelector"), f"{path}.labelSelector")
    causes += validate_label_selector(term.get("namespaceSelector"), f"{path}.namespaceSelector")
    for ns in as_list(term.get("namespaces")):  # upstream reports these on `namespace`, without an index
        causes += [field_invalid(f"{path}.namespace", ns, m) for m in is_dns1123_label(str(ns))]
    tk = str(term.get("topologyKey") or "")
    if not tk:
        causes.append(field_required(f"{path}.topologyKey", "Required value: can not be empty"))
    return causes + [field_invalid(f"{path}.topologyKey", tk, m) for m in is_qualified_name(tk)]


def _spread(constraints: Any, path: str) -> list[Cause]:
    """Upstream `validateTopologySpreadConstraints`."""
    causes: list[Cause] = []
    items = [as_dict(c) for c in as_list(constraints)]
    for i, c in enumerate(items):
        p = f"{path}[{i}]"
        skew = c.get("maxSkew", 0)
        if not is_int(skew) or skew <= 0:
            causes.append(field_invalid(f"{p}.maxSkew", skew, NOT_POSITIVE_MSG))
        tk = c.get("topologyKey") or ""
        if not tk:
            causes.append(field_required(f"{p}.topologyKey", "Required value: can not be empty"))
        wu = c.get("whenUnsatisfiable") or ""
        if wu not in UNSATISFIABLE:
            causes.append(field_not_supported(f"{p}.whenUnsatisfiable", wu, UNSATISFIABLE))
        if any(o.get("topologyKey") == c.get("topologyKey") and o.get("whenUnsatisfiable") == c.get(
                "whenUnsatisfiable") for o in items[i + 1:]):
            causes.append(field_duplicate(f"{p}.{{topologyKey, whenUnsatisfiable}}", f"{{{tk}, {wu}}}"))
        md = c.get("minDomains")
        if md is not None:
            causes += positive_causes(md, f"{p}.minDomains")
            if wu != "DoNotSchedule":
                causes.append(field_invalid(f"{p}.minDomains", md, "can only use minDomains if "
                                            f"whenUnsatisfiable=DoNotSchedule, not {wu}"))
        for f in ("nodeAffinityPolicy", "nodeTaintsPolicy"):
            pol = c.get(f)
            if pol is not None and pol not in NODE_INCLUSION:
                causes.append(field_not_supported(f"{p}.{f}", pol, NODE_INCLUSION))
        causes += validate_label_selector(c.get("labelSelector"), f"{p}.labelSelector")
    return causes


def _dns_config(cfg: Any, policy: Any, path: str) -> list[Cause]:
    if policy == "None" and cfg is None:
        return [field_required(path, "Required value: must provide `dnsConfig` when `dnsPolicy` is None")]
    if cfg is None:
        return []
    cfg = as_dict(cfg)
    causes: list[Cause] = []
    servers = as_list(cfg.get("nameservers"))
    if policy == "None" and not servers:
        return [field_required(f"{path}.nameservers", "Required value: must provide at least one DNS "
                               "nameserver when `dnsPolicy` is None")]
    if len(servers) > MAX_DNS_NAMESERVERS:
        causes.append(field_invalid(f"{path}.nameservers", servers, f"must not have more than "
                                    f"{MAX_DNS_NAMESERVERS} nameservers"))
    for i, ns in enumerate(servers):
        causes += [field_invalid(f"{path}.nameservers[{i}]", ns, m) for m in is_valid_ip(str(ns))]
    searches = as_list(cfg.get("searches"))
    if len(searches) > MAX_DNS_SEARCHES:
        causes.append(field_invalid(f"{path}.searches", searches, f"must not have more than {MAX_DNS_SEARCHES} "
                                    "search paths"))
    if len(" ".join(str(x) for x in searches)) > MAX_DNS_SEARCH_CHARS:
        causes.append(field_invalid(f"{path}.searches", searches, f"must not have more than "
                                    f"{MAX_DNS_SEARCH_CHARS} characters (including spaces) in the search list"))
    for i, s in enumerate(searches):
        name = str(s)
        if name != ".":
            causes += [field_invalid(f"{path}.searches[{i}]", s, m)
                       for m in is_dns1123_subdomain(name[:-1] if name.endswith(".") else name)]
    for i, o in enumerate(as_list(cfg.get("options"))):
        if not as_dict(o).get("name"):
            causes.append(field_required(f"{path}.options[{i}]", "Required value: must not be empty"))
    return causes


def _host_aliases(aliases: Any, path: str) -> list[Cause]:
    causes: list[Cause] = []
    for i, a in enumerate(as_list(aliases)):
        a = as_dict(a)
        ip = str(a.get("ip") or "")
        causes += [field_invalid(f"{path}[{i}].ip", ip, m) for m in is_valid_ip(ip)]
        for j, h in enumerate(as_list(a.get("hostnames"))):
            causes += [field_invalid(f"{path}[{i}].hostnames[{j}]", h, m) for m in is_dns1123_subdomain(str(h))]
    return causes
