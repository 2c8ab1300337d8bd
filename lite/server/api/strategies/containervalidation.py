"""Container validation as upstream `validateContainers`/`validateInitContainers`: names, image, enums, ports,
env/envFrom, volumeMounts, resources, probes, lifecycle handlers and the container securityContext.

Invariants:
- Container names are DNS-1123 labels unique across containers, init and ephemeral containers, so the agent's
  `<pod dir>/containers/<name>` and `<pod dir>/logs/<name>` are always one directory entry.
- subPath is relative and without '..' (it is joined under the volume's directory).
- A resource quantity that does not parse raises ValueError with upstream's decode message (400, as upstream
  fails decoding the body); everything else is a `Cause` (422).
- Pure; reports field paths under the prefix it is given.
"""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction
from typing import Any

from lite.errors import Cause, field_duplicate, field_forbidden, field_invalid, field_not_supported, field_required
from lite.server.api.strategies.volumevalidation import RESOURCE_FIELDS, parse_quantity_or_raise
from lite.validation import is_dns1123_label, is_dns1123_subdomain, is_qualified_name
from lite.valuerules import (
    NEGATIVE_MSG,
    as_dict,
    as_list,
    id_causes,
    is_config_map_key,
    is_env_var_name,
    is_http_header_name,
    is_int,
    is_valid_port_name,
    is_valid_port_num,
    local_descending_path_causes,
    non_negative_causes,
    port_num_or_name_causes,
)

PROTOCOLS = ["SCTP", "TCP", "UDP"]
PULL_POLICIES = ["Always", "IfNotPresent", "Never"]
MOUNT_PROPAGATION = ["Bidirectional", "HostToContainer", "None"]
ENV_FIELD_PATHS = ["metadata.annotations", "metadata.labels", "metadata.name", "metadata.namespace",
                   "metadata.uid", "spec.nodeName", "spec.serviceAccountName", "status.hostIP", "status.hostIPs",
                   "status.podIP", "status.podIPs"]
SCHEMES = ["HTTP", "HTTPS"]
SECCOMP_TYPES = ["Localhost", "RuntimeDefault", "Unconfined"]
_TMP_MSG = "must be 'File' or 'FallbackToLogsOnError'"
_STANDARD_RESOURCES = ("cpu", "memory", "ephemeral-storage")
_ONE_FIELD = "may not have more than one field specified at a time"


def validate_containers(spec: Mapping[str, Any], path: str, volumes: set[str], for_pod: bool) -> list[Cause]:
    """containers, initContainers and ephemeralContainers of one pod spec; names unique across all three."""
    causes: list[Cause] = []
    names: set[str] = set()
    containers = as_list(spec.get("containers"))
    if not containers:
        causes.append(field_required(f"{path}.containers"))
    for key, init in (("initContainers", True), ("containers", False), ("ephemeralContainers", False)):
        for i, c in enumerate(as_list(spec.get(key))):
            p = f"{path}.{key}[{i}]"
            if not isinstance(c, dict):
                causes.append(field_invalid(p, c, "must be an object"))
                continue
            causes += _name(c, p, names)
            causes += _container(c, p, volumes, for_pod)
            causes += _restart_rules(c, p, init, key)
    return causes


def _name(c: Mapping[str, Any], path: str, names: set[str]) -> list[Cause]:
    name = c.get("name")
    if not name:
        return [field_required(f"{path}.name")]
    if not isinstance(name, str):
        return [field_invalid(f"{path}.name", name, "must be a string")]
    errs = is_dns1123_label(name)
    if errs:
        return [field_invalid(f"{path}.name", name, m) for m in errs]
    if name in names:
        return [field_duplicate(f"{path}.name", name)]
    names.add(name)
    return []


def _restart_rules(c: Mapping[str, Any], path: str, init: bool, key: str) -> list[Cause]:
    rp = c.get("restartPolicy")
    causes: list[Cause] = []
    if not init:
        if rp is not None and key == "containers":
            causes.append(field_forbidden(f"{path}.restartPolicy", "may not be set for non-init containers"))
        return causes
    if rp is not None and rp != "Always":
        causes.append(field_not_supported(f"{path}.restartPolicy", rp, ["Always"]))
    if rp != "Always":
        for f in ("lifecycle", "livenessProbe", "readinessProbe", "startupProbe"):
            if c.get(f) is not None:
                causes.append(field_forbidden(f"{path}.{f}", "may not be set for init containers without "
                                              "restartPolicy=Always"))
    elif c.get("readinessProbe") is not None:
        causes.append(field_forbidden(f"{path}.readinessProbe", "may not be set for init containers"))
    return causes


def _container(c: Mapping[str, Any], path: str, volumes: set[str], for_pod: bool) -> list[Cause]:
    causes: list[Cause] = []
    image = c.get("image")
    if not image:
        causes.append(field_required(f"{path}.image"))
    elif for_pod and isinstance(image, str) and image != image.strip():
        causes.append(field_invalid(f"{path}.image", image, "must not have leading or trailing whitespace"))
    pp = c.get("imagePullPolicy")
    if pp is not None and pp not in PULL_POLICIES:
        causes.append(field_not_supported(f"{path}.imagePullPolicy", pp, PULL_POLICIES))
    tmp = c.get("terminationMessagePolicy")
    if tmp is not None and tmp not in ("File", "FallbackToLogsOnError"):
        causes.append(field_invalid(f"{path}.terminationMessagePolicy", tmp, _TMP_MSG))
    causes += _ports(c.get("ports"), f"{path}.ports")
    causes += _env(c.get("env"), f"{path}.env")
    causes += _env_from(c.get("envFrom"), f"{path}.envFrom")
    causes += _mounts(c.get("volumeMounts"), f"{path}.volumeMounts", volumes)
    causes += validate_resources(c.get("resources"), f"{path}.resources")
    for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
        if c.get(probe) is not None:
            causes += _probe(as_dict(c.get(probe)), f"{path}.{probe}", probe != "readinessProbe")
    lifecycle = as_dict(c.get("lifecycle"))
    for hook in ("postStart", "preStop"):
        if lifecycle.get(hook) is not None:
            causes += _handler(as_dict(lifecycle[hook]), f"{path}.lifecycle.{hook}", lifecycle_hook=True)
    return causes + _security_context(c.get("securityContext"), f"{path}.securityContext")


def _ports(ports: Any, path: str) -> list[Cause]:
    causes: list[Cause] = []
    names: set[str] = set()
    for i, p in enumerate(as_list(ports)):
        pp = f"{path}[{i}]"
        p = as_dict(p)
        name = p.get("name")
        if name:
            errs = is_valid_port_name(str(name))
            if errs:
                causes += [field_invalid(f"{pp}.name", name, m) for m in errs]
            elif name in names:
                causes.append(field_duplicate(f"{pp}.name", name))
            names.add(str(name))
        cp = p.get("containerPort")
        if not cp:
            causes.append(field_required(f"{pp}.containerPort"))
        else:
            causes += [field_invalid(f"{pp}.containerPort", cp, m) for m in is_valid_port_num(cp)]
        hp = p.get("hostPort")
        if hp:
            causes += [field_invalid(f"{pp}.hostPort", hp, m) for m in is_valid_port_num(hp)]
        proto = p.get("protocol", "TCP")
        if not proto:
            causes.append(field_required(f"{pp}.protocol"))
        elif proto not in PROTOCOLS:
            causes.append(field_not_supported(f"{pp}.protocol", proto, PROTOCOLS))
    return causes


def _env(env: Any, path: str) -> list[Cause]:
    causes: list[Cause] = []
    for i, e in enumerate(as_list(env)):
        p = f"{path}[{i}]"
        e = as_dict(e)
        name = e.get("name")
        if not name:
            causes.append(field_required(f"{p}.name"))
        else:
            causes += [field_invalid(f"{p}.name", name, m) for m in is_env_var_name(str(name))]
        if e.get("valueFrom") is not None:
            causes += _env_source(e, f"{p}.valueFrom")
    return causes


def _env_source(e: Mapping[str, Any], path: str) -> list[Cause]:
    vf = as_dict(e.get("valueFrom"))
    kinds = [k for k in ("fieldRef", "resourceFieldRef", "configMapKeyRef", "secretKeyRef") if vf.get(k) is not None]
    causes: list[Cause] = []
    if not kinds:
        causes.append(field_invalid(path, "", "must specify one of: `fieldRef`, `resourceFieldRef`, "
                                    "`configMapKeyRef` or `secretKeyRef`"))
    elif len(kinds) > 1:
        causes.append(field_invalid(path, "", _ONE_FIELD))
    if e.get("value"):
        causes.append(field_invalid(path, "", "may not be specified when `value` is not empty"))
    if len(kinds) != 1:
        return causes
    k, ref = kinds[0], as_dict(vf.get(kinds[0]))
    if k == "fieldRef":
        fp = str(ref.get("fieldPath") or "")
        base = fp.split("[", 1)[0] if fp.startswith(("metadata.labels[", "metadata.annotations[")) else fp
        if not fp:
            causes.append(field_required(f"{path}.fieldRef.fieldPath"))
        elif base not in ENV_FIELD_PATHS or fp in ("metadata.labels", "metadata.annotations"):
            causes.append(field_not_supported(f"{path}.fieldRef.fieldPath", fp, ENV_FIELD_PATHS))
    elif k == "resourceFieldRef":
        res = ref.get("resource")
        if not res:
            causes.append(field_required(f"{path}.resourceFieldRef.resource"))
        elif res not in RESOURCE_FIELDS and not str(res).startswith(("limits.hugepages-", "requests.hugepages-")):
            causes.append(field_not_supported(f"{path}.resourceFieldRef.resource", res, RESOURCE_FIELDS))
    else:
        sp = f"{path}.{k}"
        if not ref.get("name"):
            causes.append(field_required(f"{sp}.name"))
        key = ref.get("key")
        if not key:
            causes.append(field_required(f"{sp}.key"))
        else:
            causes += [field_invalid(f"{sp}.key", key, m) for m in is_config_map_key(str(key))]
    return causes


def _env_from(env_from: Any, path: str) -> list[Cause]:
    causes: list[Cause] = []
    for i, e in enumerate(as_list(env_from)):
        p = f"{path}[{i}]"
        e = as_dict(e)
        prefix = e.get("prefix")
        if prefix:
            causes += [field_invalid(f"{p}.prefix", prefix, m) for m in is_env_var_name(str(prefix))]
        kinds = [k for k in ("configMapRef", "secretRef") if e.get(k) is not None]
        if not kinds:
            causes.append(field_invalid(p, "", "must specify one of: `configMapRef` or `secretRef`"))
        elif len(kinds) > 1:
            causes.append(field_invalid(p, "", _ONE_FIELD))
        for k in kinds:
            name = as_dict(e.get(k)).get("name")
            if not name:
                causes.append(field_required(f"{p}.{k}.name"))
            else:
                causes += [field_invalid(f"{p}.{k}.name", name, m) for m in is_dns1123_subdomain(str(name))]
    return causes


def _mounts(mounts: Any, path: str, volumes: set[str]) -> list[Cause]:
    causes: list[Cause] = []
    seen: set[str] = set()
    for i, m in enumerate(as_list(mounts)):
        p = f"{path}[{i}]"
        m = as_dict(m)
        name = m.get("name")
        if not name:
            causes.append(field_required(f"{p}.name"))
        elif name not in volumes:
            causes.append(Cause("FieldValueNotFound", f'Not found: "{name}"', f"{p}.name"))
        mp = m.get("mountPath")
        if not mp:
            causes.append(field_required(f"{p}.mountPath"))
        elif mp in seen:
            causes.append(field_invalid(f"{p}.mountPath", mp, "must be unique"))
        else:
            seen.add(str(mp))
        sub, expr = m.get("subPath"), m.get("subPathExpr")
        if sub:
            causes += local_descending_path_causes(str(sub), f"{p}.subPath")
        if expr:
            if sub:
                causes.append(field_invalid(f"{p}.subPathExpr", expr, "subPathExpr and subPath are mutually "
                                            "exclusive"))
            causes += local_descending_path_causes(str(expr), f"{p}.subPathExpr")
        prop = m.get("mountPropagation")
        if prop is not None and prop not in MOUNT_PROPAGATION:
            causes.append(field_not_supported(f"{p}.mountPropagation", prop, MOUNT_PROPAGATION))
    return causes


def validate_resources(res: Any, path: str) -> list[Cause]:
    """Upstream `ValidateResourceRequirements`: names, non-negative quantities, requests <= limits."""
    res = as_dict(res)
    causes: list[Cause] = []
    parsed: dict[str, dict[str, Fraction]] = {}
    for which in ("limits", "requests"):
        parsed[which] = {}
        for name, q in as_dict(res.get(which)).items():
            fp = f"{path}.{which}[{name}]"
            causes += _resource_name(str(name), fp)
            value = parse_quantity_or_raise(q)
            parsed[which][name] = value
            if value < 0:
                causes.append(field_invalid(fp, _qstr(q), NEGATIVE_MSG))
            elif str(name).startswith("hugepages-") and value.denominator != 1:
                causes.append(field_invalid(fp, _qstr(q), "must be an integer"))
    for name, req in parsed["requests"].items():
        lim = parsed["limits"].get(name)
        if lim is not None and req > lim:
            causes.append(field_invalid(f"{path}.requests", _qstr(res["requests"][name]),
                                        f"must be less than or equal to {name} limit of "
                                        f"{_qstr(res['limits'][name])}"))
    return causes


def _qstr(q: Any) -> str:
    return str(q)


def _resource_name(name: str, path: str) -> list[Cause]:
    errs = is_qualified_name(name)
    if errs:
        return [field_invalid(path, name, m) for m in errs]
    if "/" not in name and name not in _STANDARD_RESOURCES and not name.startswith("hugepages-"):
        return [field_invalid(path, name, "must be a standard resource for containers")]
    return []


def _probe(probe: Mapping[str, Any], path: str, success_must_be_one: bool) -> list[Cause]:
    causes = _handler(probe, path, lifecycle_hook=False)
    for f in ("initialDelaySeconds", "timeoutSeconds", "periodSeconds", "successThreshold", "failureThreshold"):
        causes += non_negative_causes(probe.get(f), f"{path}.{f}")
    st = probe.get("successThreshold")
    if success_must_be_one and is_int(st) and st != 1:
        causes.append(field_invalid(f"{path}.successThreshold", st, "must be 1"))
    tgps = probe.get("terminationGracePeriodSeconds")
    if tgps is not None and (not is_int(tgps) or tgps <= 0):
        causes.append(field_invalid(f"{path}.terminationGracePeriodSeconds", tgps, "must be greater than 0"))
    return causes


def _handler(h: Mapping[str, Any], path: str, *, lifecycle_hook: bool) -> list[Cause]:
    kinds = ["exec", "httpGet", "tcpSocket"] + (["sleep"] if lifecycle_hook else ["grpc"])
    present = [k for k in kinds if h.get(k) is not None]
    if not present:
        return [field_required(path, "Required value: must specify a handler type")]
    causes = [field_forbidden(f"{path}.{k}", "may not specify more than 1 handler type") for k in present[1:]]
    k, body = present[0], as_dict(h.get(present[0]))
    p = f"{path}.{k}"
    if k == "exec":
        if not as_list(body.get("command")):
            causes.append(field_required(f"{p}.command"))
    elif k == "httpGet":
        causes += port_num_or_name_causes(body.get("port"), f"{p}.port")
        scheme = body.get("scheme")
        if scheme is not None and scheme not in SCHEMES:
            causes.append(field_not_supported(f"{p}.scheme", scheme, SCHEMES))
        for i, hdr in enumerate(as_list(body.get("httpHeaders"))):
            hn = str(as_dict(hdr).get("name") or "")
            causes += [field_invalid(f"{p}.httpHeaders[{i}].name", hn, m) for m in is_http_header_name(hn)]
    elif k == "tcpSocket":
        causes += port_num_or_name_causes(body.get("port"), f"{p}.port")
    elif k == "grpc":
        port = body.get("port")
        causes += [field_invalid(f"{p}.port", port, m) for m in is_valid_port_num(port)]
    elif k == "sleep":
        secs = body.get("seconds")
        if not is_int(secs) or secs <= 0:
            causes.append(field_invalid(f"{p}.seconds", secs, "must be greater than 0"))
    return causes


def _security_context(sc: Any, path: str) -> list[Cause]:
    if sc is None:
        return []
    sc = as_dict(sc)
    causes = id_causes(sc.get("runAsUser"), f"{path}.runAsUser") + id_causes(sc.get("runAsGroup"),
                                                                              f"{path}.runAsGroup")
    if sc.get("privileged") is True and sc.get("allowPrivilegeEscalation") is False:
        causes.append(field_invalid(path, "", "cannot set `allowPrivilegeEscalation` to false and `privileged` "
                                    "to true"))
    adds = as_list(as_dict(sc.get("capabilities")).get("add"))
    if sc.get("allowPrivilegeEscalation") is False and "CAP_SYS_ADMIN" in adds:
        causes.append(field_invalid(path, "", "cannot set `allowPrivilegeEscalation` to false and "
                                    "`capabilities.Add` CAP_SYS_ADMIN"))
    pm = sc.get("procMount")
    if pm is not None and pm not in ("Default", "Unmasked"):
        causes.append(field_not_supported(f"{path}.procMount", pm, ["Default", "Unmasked"]))
    return causes + seccomp_causes(sc.get("seccompProfile"), f"{path}.seccompProfile")


def seccomp_causes(profile: Any, path: str) -> list[Cause]:
    if profile is None:
        return []
    profile = as_dict(profile)
    ptype = profile.get("type")
    if not ptype:
        return [field_required(f"{path}.type")]
    if ptype not in SECCOMP_TYPES:
        return [field_not_supported(f"{path}.type", ptype, SECCOMP_TYPES)]
    if ptype == "Localhost" and not profile.get("localhostProfile"):
        return [field_required(f"{path}.localhostProfile", "Required value: must be set when seccomp type is "
                               "Localhost")]
    if ptype != "Localhost" and profile.get("localhostProfile"):
        return [field_invalid(f"{path}.localhostProfile", profile["localhostProfile"],
                              "can only be set when seccomp type is Localhost")]
    return []
