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
from lite.server.api.strategies.securityvalidation import container_security_causes
from lite.server.api.strategies.volumevalidation import (
    field_selector_causes,
    parse_quantity_or_raise,
    resource_field_causes,
)
from lite.validation import is_dns1123_label, is_dns1123_subdomain, is_qualified_name, name_is_dns_subdomain
from lite.valuerules import (
    NEGATIVE_MSG,
    as_dict,
    as_list,
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
ENV_FIELD_PATHS = ["metadata.name", "metadata.namespace", "metadata.uid", "spec.nodeName", "spec.serviceAccountName",
                   "status.hostIP", "status.hostIPs", "status.podIP", "status.podIPs"]
SCHEMES = ["HTTP", "HTTPS"]
_TMP = ["File", "FallbackToLogsOnError"]
_STANDARD_RESOURCES = ("cpu", "memory", "ephemeral-storage")
_ONE_FIELD = "may not have more than one field specified at a time"


def validate_containers(spec: Mapping[str, Any], path: str, volumes: set[str], for_pod: bool) -> list[Cause]:
    """containers, initContainers and ephemeralContainers of one pod spec; names unique across all three."""
    causes: list[Cause] = []
    names: set[str] = set()
    containers = as_list(spec.get("containers"))
    if not containers:
        causes.append(field_required(f"{path}.containers"))
    grace = spec.get("terminationGracePeriodSeconds")
    grace = grace if is_int(grace) else 30
    for key, init in (("initContainers", True), ("containers", False), ("ephemeralContainers", False)):
        for i, c in enumerate(as_list(spec.get(key))):
            p = f"{path}.{key}[{i}]"
            if not isinstance(c, dict):
                causes.append(field_invalid(p, c, "must be an object"))
                continue
            causes += _name(c, p, names)
            restartable = not init or c.get("restartPolicy") == "Always"
            causes += _container(c, p, volumes, for_pod, grace, probes=restartable)
            causes += _restart_rules(c, p, init, key)
    # Upstream checks host port conflicts across app containers, and per init container (they run one by one).
    causes += _host_port_conflicts(as_list(spec.get("containers")), f"{path}.containers")
    for i, c in enumerate(as_list(spec.get("initContainers"))):
        causes += _host_port_conflicts([c], f"{path}.initContainers", offset=i)
    return causes


def _host_port_conflicts(containers: list[Any], path: str, offset: int = 0) -> list[Cause]:
    seen: set[str] = set()
    causes: list[Cause] = []
    for ci, c in enumerate(containers, start=offset):
        for pi, port in enumerate(as_list(as_dict(c).get("ports"))):
            port = as_dict(port)
            hp = port.get("hostPort")
            if not hp:
                continue
            key = f"{port.get('protocol', 'TCP')}/{port.get('hostIP', '')}/{hp}"
            if key in seen:
                causes.append(field_duplicate(f"{path}[{ci}].ports[{pi}].hostPort", key))
            seen.add(key)
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
    return causes


def _container(c: Mapping[str, Any], path: str, volumes: set[str], for_pod: bool, grace: int,
               probes: bool) -> list[Cause]:
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
    if tmp is not None and tmp not in _TMP:
        causes.append(field_not_supported(f"{path}.terminationMessagePolicy", tmp, _TMP))
    causes += _ports(c.get("ports"), f"{path}.ports")
    causes += _env(c.get("env"), f"{path}.env")
    causes += _env_from(c.get("envFrom"), f"{path}.envFrom")
    privileged = as_dict(c.get("securityContext")).get("privileged") is True
    causes += _mounts(c.get("volumeMounts"), f"{path}.volumeMounts", volumes, privileged)
    causes += validate_resources(c.get("resources"), f"{path}.resources")
    causes += container_security_causes(c.get("securityContext"), f"{path}.securityContext")
    if not probes:
        return causes
    for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
        if c.get(probe) is not None:
            causes += _probe(as_dict(c.get(probe)), f"{path}.{probe}", probe, grace)
    lifecycle = as_dict(c.get("lifecycle"))
    for hook in ("postStart", "preStop"):
        if lifecycle.get(hook) is not None:
            causes += _handler(as_dict(lifecycle[hook]), f"{path}.lifecycle.{hook}", grace, lifecycle_hook=True)
    return causes


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
    for i, e in enumerate(as_list(env)):  # paths are built only for what is reported (pods carry many vars)
        e = as_dict(e)
        name = e.get("name")
        if not name:
            causes.append(field_required(f"{path}[{i}].name"))
        else:
            errs = is_env_var_name(str(name))
            if errs:
                causes += [field_invalid(f"{path}[{i}].name", name, m) for m in errs]
        if e.get("valueFrom") is not None:
            causes += _env_source(e, f"{path}[{i}].valueFrom")
    return causes


def _env_source(e: Mapping[str, Any], path: str) -> list[Cause]:
    """Upstream `validateEnvVarValueFrom`: every given source is checked, then exactly one must be given."""
    vf = as_dict(e.get("valueFrom"))
    kinds = [k for k in ("fieldRef", "resourceFieldRef", "configMapKeyRef", "secretKeyRef") if vf.get(k) is not None]
    causes: list[Cause] = []
    for k in kinds:
        ref = vf.get(k)
        if k == "fieldRef":
            causes += field_selector_causes(ref, ENV_FIELD_PATHS, f"{path}.fieldRef")
        elif k == "resourceFieldRef":
            causes += resource_field_causes(ref, f"{path}.resourceFieldRef", volume=False)
        else:
            causes += _key_selector(as_dict(ref), f"{path}.{k}")
    if not kinds:
        causes.append(field_invalid(path, "", "must specify one of: `fieldRef`, `resourceFieldRef`, "
                                    "`configMapKeyRef` or `secretKeyRef`"))
    elif e.get("value"):
        causes.append(field_invalid(path, "", "may not be specified when `value` is not empty"))
    elif len(kinds) > 1:
        causes.append(field_invalid(path, "", _ONE_FIELD))
    return causes


def _key_selector(ref: Mapping[str, Any], path: str) -> list[Cause]:
    name = str(ref.get("name") or "")
    causes = [field_invalid(f"{path}.name", name, m) for m in is_dns1123_subdomain(name)]
    key = ref.get("key")
    if not key:
        causes.append(field_required(f"{path}.key"))
    else:
        causes += [field_invalid(f"{path}.key", key, m) for m in is_config_map_key(str(key))]
    return causes


def _env_from(env_from: Any, path: str) -> list[Cause]:
    # Upstream reports a missing or doubled source on `envFrom` itself, not on the item's index.
    causes: list[Cause] = []
    for i, e in enumerate(as_list(env_from)):
        p = f"{path}[{i}]"
        e = as_dict(e)
        prefix = e.get("prefix")
        if prefix:
            causes += [field_invalid(f"{p}.prefix", prefix, m) for m in is_env_var_name(str(prefix))]
        kinds = [k for k in ("configMapRef", "secretRef") if e.get(k) is not None]
        for k in kinds:
            name = as_dict(e.get(k)).get("name")
            if not name:
                causes.append(field_required(f"{p}.{k}.name"))
            else:
                causes += [field_invalid(f"{p}.{k}.name", name, m) for m in name_is_dns_subdomain(str(name), True)]
        if not kinds:
            causes.append(field_invalid(path, "", "must specify one of: `configMapRef` or `secretRef`"))
        elif len(kinds) > 1:
            causes.append(field_invalid(path, "", _ONE_FIELD))
    return causes


def _mounts(mounts: Any, path: str, volumes: set[str], privileged: bool) -> list[Cause]:
    # Upstream reports subPath, subPathExpr and mountPropagation on `volumeMounts.<field>` (no index).
    causes: list[Cause] = []
    seen: set[str] = set()
    for i, m in enumerate(as_list(mounts)):
        p = f"{path}[{i}]"
        m = as_dict(m)
        name = m.get("name")
        if not name:
            causes.append(field_required(f"{p}.name"))
        if name not in volumes:
            causes.append(Cause("FieldValueNotFound", f'Not found: "{name or ""}"', f"{p}.name"))
        mp = m.get("mountPath")
        if not mp:
            causes.append(field_required(f"{p}.mountPath"))
        if mp in seen:
            causes.append(field_invalid(f"{p}.mountPath", mp, "must be unique"))
        seen.add(str(mp))
        sub, expr = m.get("subPath"), m.get("subPathExpr")
        if sub:
            causes += local_descending_path_causes(str(sub), f"{path}.subPath")
        if expr:
            if sub:
                causes.append(field_invalid(f"{p}.subPathExpr", expr, "subPathExpr and subPath are mutually "
                                            "exclusive"))
            causes += local_descending_path_causes(str(expr), f"{path}.subPathExpr")
        prop = m.get("mountPropagation")
        if prop is not None:
            if prop not in MOUNT_PROPAGATION:
                causes.append(field_not_supported(f"{path}.mountPropagation", prop, MOUNT_PROPAGATION))
            elif prop == "Bidirectional" and not privileged:
                causes.append(field_forbidden(f"{path}.mountPropagation", "Bidirectional mount propagation is "
                                              "available only to privileged containers"))
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
    if name in _STANDARD_RESOURCES:
        return []
    errs = is_qualified_name(name)
    if errs:
        return [field_invalid(path, name, m) for m in errs]
    if "/" not in name and name not in _STANDARD_RESOURCES and not name.startswith("hugepages-"):
        return [field_invalid(path, name, "must be a standard resource for containers")]
    return []


def _probe(probe: Mapping[str, Any], path: str, kind: str, grace: int) -> list[Cause]:
    causes = _handler(probe, path, grace, lifecycle_hook=False)
    for f in ("initialDelaySeconds", "timeoutSeconds", "periodSeconds", "successThreshold", "failureThreshold"):
        causes += non_negative_causes(probe.get(f), f"{path}.{f}")
    tgps = probe.get("terminationGracePeriodSeconds")
    if tgps is not None and (not is_int(tgps) or tgps <= 0):
        causes.append(field_invalid(f"{path}.terminationGracePeriodSeconds", tgps, "must be greater than 0"))
    st = probe.get("successThreshold")
    if kind != "readinessProbe" and is_int(st) and st != 1:
        causes.append(field_invalid(f"{path}.successThreshold", st, "must be 1"))
    if kind == "readinessProbe" and tgps is not None:
        causes.append(field_invalid(f"{path}.terminationGracePeriodSeconds", tgps,
                                    "must not be set for readinessProbes"))
    return causes


def _handler(h: Mapping[str, Any], path: str, grace: int, *, lifecycle_hook: bool) -> list[Cause]:
    kinds = ["exec", "httpGet", "tcpSocket", "grpc"] if not lifecycle_hook else ["exec", "httpGet", "tcpSocket",
                                                                                  "sleep"]
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
        for hdr in as_list(body.get("httpHeaders")):
            hn = str(as_dict(hdr).get("name") or "")
            causes += [field_invalid(f"{p}.httpHeaders", hn, m) for m in is_http_header_name(hn)]
    elif k == "tcpSocket":
        causes += port_num_or_name_causes(body.get("port"), f"{p}.port")
    elif k == "grpc":
        port = body.get("port")
        causes += [field_invalid(f"{p}.port", port, m) for m in is_valid_port_num(port)]
    else:
        secs = body.get("seconds")
        if not is_int(secs) or secs <= 0 or secs > grace:
            causes.append(field_invalid(p, secs, "must be greater than 0 and less than "
                                        f"terminationGracePeriodSeconds ({grace})"))
    return causes
