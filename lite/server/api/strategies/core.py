"""core/v1 strategies other than pods: Service, Secret, ConfigMap, Namespace, PVC, PV, Node.

Invariants: the values a Service got from allocators (clusterIP(s), nodePorts) survive an update that
omits them (upstream `patchAllocatedValues`), so `kubectl replace`/`apply` keep them.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

import orjson

from lite.errors import (
    Cause,
    bad_request,
    field_duplicate,
    field_forbidden,
    field_invalid,
    field_not_supported,
    field_required,
)
from lite.server.api.strategies import specrules
from lite.server.api.strategies.base import Obj, Strategy
from lite.server.api.strategies.volumevalidation import config_key_causes
from lite.server.api.versions import events as event_rules
from lite.validation import is_dns1123_label, name_is_dns1035_label, name_is_dns_label

SERVICE_TYPES = ["ClusterIP", "ExternalName", "LoadBalancer", "NodePort"]
_IMMUTABLE_SET = "field is immutable when `immutable` is set"


def _canon(v: Any) -> bytes:
    return orjson.dumps(v, option=orjson.OPT_SORT_KEYS)


# ---- Service -----------------------------------------------------------------------------------------


DEFAULT_CLIENT_IP_TIMEOUT = 10800  # v1.DefaultClientIPServiceAffinitySeconds


def default_service(obj: Obj) -> None:
    spec = obj.setdefault("spec", {})
    if not isinstance(spec, dict):
        return
    # upstream SetDefaults_Service (pkg/apis/core/v1/defaults.go)
    affinity = spec.setdefault("sessionAffinity", "None") or "None"
    spec["sessionAffinity"] = affinity
    if affinity == "None":
        spec.pop("sessionAffinityConfig", None)
    elif affinity == "ClientIP":
        config = spec.get("sessionAffinityConfig")
        client_ip = config.get("clientIP") if isinstance(config, dict) else None
        if not isinstance(client_ip, dict) or client_ip.get("timeoutSeconds") is None:
            spec["sessionAffinityConfig"] = {"clientIP": {"timeoutSeconds": DEFAULT_CLIENT_IP_TIMEOUT}}
    stype = spec.setdefault("type", "ClusterIP") or "ClusterIP"
    spec["type"] = stype
    for p in spec.get("ports") or []:
        if isinstance(p, dict):
            if not p.get("protocol"):
                p["protocol"] = "TCP"
            # an unset IntOrString arrives as 0 from Go clients (client-go sends `targetPort: 0`)
            if "port" in p and p.get("targetPort") in (None, 0, ""):
                p["targetPort"] = p["port"]
    if stype in ("NodePort", "LoadBalancer") or (stype == "ClusterIP" and spec.get("externalIPs")):
        spec.setdefault("externalTrafficPolicy", "Cluster")  # upstream: for every externally accessible service
    if stype in ("ClusterIP", "NodePort", "LoadBalancer"):
        spec.setdefault("internalTrafficPolicy", "Cluster")
    if stype == "LoadBalancer":
        spec.setdefault("allocateLoadBalancerNodePorts", True)


def default_endpoints(obj: Obj) -> None:
    """upstream SetDefaults_Endpoints: every subset port's protocol is TCP unless given."""
    for subset in obj.get("subsets") or []:
        for port in (subset.get("ports") or []) if isinstance(subset, dict) else []:
            if isinstance(port, dict) and not port.get("protocol"):
                port["protocol"] = "TCP"


def prepare_create_service(obj: Obj) -> None:
    obj["status"] = {"loadBalancer": {}}


def prepare_update_service(new: Obj, old: Obj) -> None:
    nspec, ospec = new.get("spec"), old.get("spec") or {}
    if not isinstance(nspec, dict):
        return
    drop_type_dependent_fields(nspec, ospec)
    if nspec.get("type", "ClusterIP") != "ExternalName" and ospec.get("type", "ClusterIP") != "ExternalName":
        for key in ("clusterIP", "clusterIPs", "ipFamilies", "ipFamilyPolicy"):
            if not nspec.get(key) and ospec.get(key):
                nspec[key] = ospec[key]
    if nspec.get("type") in _NODE_PORT_TYPES:
        old_ports = {(p.get("port"), p.get("protocol")): p.get("nodePort") for p in ospec.get("ports") or []}
        for p in nspec.get("ports") or []:
            if isinstance(p, dict) and not p.get("nodePort"):
                np = old_ports.get((p.get("port"), p.get("protocol")))
                if np:
                    p["nodePort"] = np


_NODE_PORT_TYPES = ("NodePort", "LoadBalancer")


def drop_type_dependent_fields(nspec: Obj, ospec: Obj) -> None:
    """Upstream's dropTypeDependentFields: a Service whose `type` changes loses the fields the new type has no
    use for (its allocated clusterIPs, nodePorts, healthCheckNodePort, and the defaults that came with the old
    type), but only those the update carries unchanged from the stored object; a field the user also changed
    is left for validation to judge. The allocators release what the stored Service no longer holds."""
    otype, ntype = ospec.get("type", "ClusterIP"), nspec.get("type", "ClusterIP")
    if otype != "ExternalName" and ntype == "ExternalName":  # needsClusterIP: every type but ExternalName
        if nspec.get("clusterIP") == ospec.get("clusterIP") and \
                (nspec.get("clusterIPs") or []) == (ospec.get("clusterIPs") or []):
            nspec.pop("clusterIP", None)
            nspec.pop("clusterIPs", None)
        for key in ("ipFamilies", "ipFamilyPolicy"):
            if nspec.get(key) == ospec.get(key):
                nspec.pop(key, None)
        if nspec.get("internalTrafficPolicy") == ospec.get("internalTrafficPolicy"):
            nspec.pop("internalTrafficPolicy", None)
    if otype in _NODE_PORT_TYPES and ntype not in _NODE_PORT_TYPES:
        held = {p.get("nodePort") for p in ospec.get("ports") or [] if isinstance(p, dict) and p.get("nodePort")}
        ports = [p for p in nspec.get("ports") or [] if isinstance(p, dict)]
        if all(p.get("nodePort") in held for p in ports if p.get("nodePort")):  # no net-new nodePort
            for p in ports:
                p.pop("nodePort", None)
    old_hc = otype == "LoadBalancer" and ospec.get("externalTrafficPolicy") == "Local"
    new_hc = ntype == "LoadBalancer" and nspec.get("externalTrafficPolicy") == "Local"
    if old_hc and not new_hc and nspec.get("healthCheckNodePort") == ospec.get("healthCheckNodePort"):
        nspec.pop("healthCheckNodePort", None)
    if otype == "LoadBalancer" and ntype != "LoadBalancer":
        for key in ("allocateLoadBalancerNodePorts", "loadBalancerClass"):
            if nspec.get(key) == ospec.get(key):
                nspec.pop(key, None)
    # leaving NodePort/LoadBalancer drops an unchanged externalTrafficPolicy (its default), which validation
    # refuses on services that are not externally accessible
    if otype in _NODE_PORT_TYPES and ntype not in _NODE_PORT_TYPES and \
            nspec.get("externalTrafficPolicy") == ospec.get("externalTrafficPolicy"):
        nspec.pop("externalTrafficPolicy", None)


def _validate_service_port(p: Any, path: str, stype: str, multi: bool, names: set[str]) -> list[Cause]:
    if not isinstance(p, dict):
        return [field_invalid(path, p, "must be an object")]
    causes: list[Cause] = []
    name = p.get("name") or ""
    if multi and not name:
        causes.append(field_required(f"{path}.name"))
    elif name:
        causes += [field_invalid(f"{path}.name", name, m) for m in is_dns1123_label(name)]
        if name in names:
            causes.append(field_duplicate(f"{path}.name", name))
        names.add(name)
    port = p.get("port")
    if port is None:
        causes.append(field_required(f"{path}.port"))
    elif not isinstance(port, int) or not 1 <= port <= 65535:
        causes.append(field_invalid(f"{path}.port", port, "must be between 1 and 65535, inclusive"))
    proto = p.get("protocol", "TCP")
    if proto not in ("SCTP", "TCP", "UDP"):
        causes.append(field_not_supported(f"{path}.protocol", proto, ["SCTP", "TCP", "UDP"]))
    tp = p.get("targetPort")
    if isinstance(tp, int) and not 1 <= tp <= 65535:
        causes.append(field_invalid(f"{path}.targetPort", tp, "must be between 1 and 65535, inclusive"))
    if p.get("nodePort") and stype not in ("NodePort", "LoadBalancer"):
        causes.append(field_forbidden(f"{path}.nodePort", f"may not be used when `type` is '{stype}'"))
    return causes


def validate_service(obj: Obj) -> list[Cause]:
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return [field_required("spec")]
    causes: list[Cause] = []
    stype = spec.get("type", "ClusterIP")
    if stype not in SERVICE_TYPES:
        causes.append(field_not_supported("spec.type", stype, SERVICE_TYPES))
    ports = spec.get("ports") or []
    if stype == "ExternalName":
        if not spec.get("externalName"):
            causes.append(field_required("spec.externalName"))
    elif not ports and spec.get("clusterIP") != "None":
        causes.append(field_required("spec.ports"))
    names: set[str] = set()
    for i, p in enumerate(ports):
        causes += _validate_service_port(p, f"spec.ports[{i}]", stype, len(ports) > 1, names)
    aff = spec.get("sessionAffinity", "None")
    if aff not in ("ClientIP", "None"):
        causes.append(field_not_supported("spec.sessionAffinity", aff, ["ClientIP", "None"]))
    return causes + specrules.service_causes(obj)


def validate_service_update(new: Obj, old: Obj) -> list[Cause]:
    nspec, ospec = new.get("spec") or {}, old.get("spec") or {}
    old_ip = ospec.get("clusterIP")
    if old_ip and nspec.get("type") != "ExternalName" and ospec.get("type") != "ExternalName" \
            and nspec.get("clusterIP") != old_ip:
        return [field_invalid("spec.clusterIPs[0]", nspec.get("clusterIP", ""), "may not change once set")]
    return []


# ---- Secret and ConfigMap ----------------------------------------------------------------------------


def default_secret(obj: Obj) -> None:
    obj.setdefault("type", "Opaque")
    _canonical_base64(obj, "data", "Secret")
    string_data = obj.pop("stringData", None)
    if isinstance(string_data, dict):
        data = obj.setdefault("data", {})
        for k, v in string_data.items():
            data[k] = base64.b64encode(str(v).encode()).decode()


def default_configmap(obj: Obj) -> None:
    _canonical_base64(obj, "binaryData", "ConfigMap")


_B64_ALPHABET = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/")


def go_base64(text: str) -> str | None:
    """The canonical base64 of what Go's `base64.StdEncoding` decodes from `text` (it skips CR and LF), or
    None when Go would refuse it. Upstream stores the bytes, so its answers carry this canonical form."""
    try:
        return base64.b64encode(base64.b64decode(text.replace("\r", "").replace("\n", ""), validate=True)).decode()
    except (binascii.Error, ValueError):
        return None


def _bad_byte(text: str) -> int:
    """Where Go reports a base64 error: the first character outside the alphabet, else the end."""
    return next((i for i, ch in enumerate(text) if ch not in _B64_ALPHABET and ch not in "\r\n="), len(text))


def _canonical_base64(obj: Obj, key: str, kind: str) -> None:
    """Byte fields ([]byte in Go) arrive as base64: decode them as Go does, 400 BadRequest when that fails
    (upstream's decoding error), and keep the canonical encoding."""
    data = obj.get(key)
    if not isinstance(data, dict):
        return
    for k, v in data.items():
        if not isinstance(v, str):
            continue
        canonical = go_base64(v)
        if canonical is None:
            raise bad_request(f'{kind} in version "v1" cannot be handled as a {kind}: illegal base64 data at '
                              f"input byte {_bad_byte(v)}")
        if canonical != v:
            data[k] = canonical


def _validate_keys(data: Any, path: str) -> list[Cause]:
    # Keys become file names in configMap/secret volumes: upstream IsConfigMapKey, field `data[<key>]`.
    return config_key_causes(data, path)


def validate_secret(obj: Obj) -> list[Cause]:
    data = obj.get("data") or {}
    causes = _validate_keys(data, "data")
    for k, v in data.items() if isinstance(data, dict) else []:
        try:
            base64.b64decode(str(v), validate=True)
        except (binascii.Error, ValueError):
            causes.append(field_invalid(f"data[{k}]", "<secret contents redacted>", "illegal base64 data"))
    stype = obj.get("type")
    required = {"kubernetes.io/tls": ("tls.crt", "tls.key"),
                "kubernetes.io/dockerconfigjson": (".dockerconfigjson",),
                "kubernetes.io/dockercfg": (".dockercfg",)}.get(str(stype), ())
    for key in required:
        if key not in data:
            causes.append(field_required(f"data[{key}]"))
    return causes


def _immutable_data(new: Obj, old: Obj, keys: tuple[str, ...]) -> list[Cause]:
    if not old.get("immutable"):
        return []
    causes = []
    if not new.get("immutable"):
        causes.append(field_forbidden("immutable", _IMMUTABLE_SET))
    for key in keys:
        if _canon(new.get(key) or {}) != _canon(old.get(key) or {}):
            causes.append(field_forbidden(key, _IMMUTABLE_SET))
    return causes


def validate_secret_update(new: Obj, old: Obj) -> list[Cause]:
    causes = _immutable_data(new, old, ("data",))
    if new.get("type") != old.get("type"):
        causes.append(field_invalid("type", new.get("type", ""), "field is immutable"))
    return causes


def validate_configmap(obj: Obj) -> list[Cause]:
    causes = _validate_keys(obj.get("data"), "data") + _validate_keys(obj.get("binaryData"), "binaryData")
    both = set(obj.get("data") or {}) & set(obj.get("binaryData") or {})
    causes += [field_invalid(f"data[{k}]", k, "duplicate of key present in binaryData") for k in sorted(both)]
    return causes


def validate_configmap_update(new: Obj, old: Obj) -> list[Cause]:
    return _immutable_data(new, old, ("data", "binaryData"))


# ---- Namespace ---------------------------------------------------------------------------------------


def default_namespace(obj: Obj) -> None:
    # Upstream sets this label on every namespace (kubernetes.io/metadata.name = name).
    meta = obj.setdefault("metadata", {})
    if meta.get("name"):
        meta.setdefault("labels", {})["kubernetes.io/metadata.name"] = meta["name"]


def prepare_create_namespace(obj: Obj) -> None:
    spec = obj.setdefault("spec", {})
    finalizers = spec.setdefault("finalizers", [])
    if "kubernetes" not in finalizers:
        finalizers.append("kubernetes")
    obj["status"] = {"phase": "Active"}


def prepare_update_namespace(new: Obj, old: Obj) -> None:
    # spec.finalizers change only through namespaces/finalize.
    new.setdefault("spec", {})["finalizers"] = list((old.get("spec") or {}).get("finalizers") or [])


# ---- Volumes -----------------------------------------------------------------------------------------


def default_pvc(obj: Obj) -> None:
    spec = obj.get("spec")
    if isinstance(spec, dict):
        spec.setdefault("volumeMode", "Filesystem")


def prepare_pending(obj: Obj) -> None:
    obj["status"] = {"phase": "Pending"}


def validate_pvc(obj: Obj) -> list[Cause]:
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return [field_required("spec")]
    causes: list[Cause] = []
    if not spec.get("accessModes"):
        causes.append(field_required("spec.accessModes", "Required value: at least 1 access mode is required"))
    if not ((spec.get("resources") or {}).get("requests") or {}).get("storage"):
        causes.append(field_required("spec.resources[storage]"))
    return causes + specrules.pvc_causes(obj)


def validate_pvc_update(new: Obj, old: Obj) -> list[Cause]:
    nspec, ospec = dict(new.get("spec") or {}), dict(old.get("spec") or {})
    for key in ("resources", "volumeAttributesClassName"):
        nspec.pop(key, None)
        ospec.pop(key, None)
    if not ospec.get("volumeName"):
        nspec.pop("volumeName", None)
        ospec.pop("volumeName", None)
    if _canon(nspec) != _canon(ospec):
        return [field_forbidden("spec", "spec is immutable after creation except resources.requests and "
                                "volumeAttributesClassName for bound claims")]
    return []


# ---- Node and Event ----------------------------------------------------------------------------------

_NODE_INFO = ("machineID", "systemUUID", "bootID", "kernelVersion", "osImage", "containerRuntimeVersion",
              "kubeletVersion", "kubeProxyVersion", "operatingSystem", "architecture")
TAINT_EFFECTS = ["NoExecute", "NoSchedule", "PreferNoSchedule"]


def default_node(obj: Obj) -> None:
    # V1NodeSystemInfo fields are all required by the Python client once nodeInfo is present.
    info = (obj.get("status") or {}).get("nodeInfo")
    if isinstance(info, dict):
        for field in _NODE_INFO:
            info.setdefault(field, "")


def validate_node(obj: Obj) -> list[Cause]:
    causes: list[Cause] = []
    for i, t in enumerate((obj.get("spec") or {}).get("taints") or []):
        if not isinstance(t, dict) or not t.get("key"):
            causes.append(field_required(f"spec.taints[{i}].key"))
        effect = t.get("effect") if isinstance(t, dict) else None
        if not effect:
            causes.append(field_required(f"spec.taints[{i}].effect"))
        elif effect not in TAINT_EFFECTS:
            causes.append(field_not_supported(f"spec.taints[{i}].effect", effect, TAINT_EFFECTS))
    for i, c in enumerate((obj.get("status") or {}).get("conditions") or []):
        for field in ("type", "status"):
            if not isinstance(c, dict) or not c.get(field):
                causes.append(field_required(f"status.conditions[{i}].{field}"))
    return causes + specrules.node_causes(obj)


def default_event(obj: Obj) -> None:
    obj.setdefault("involvedObject", {})


SERVICE = Strategy(default=default_service, prepare_create=prepare_create_service,
                   prepare_update=prepare_update_service, validate=validate_service,
                   validate_update=validate_service_update, name_fn=name_is_dns1035_label,
                   gc_policy="background", return_deleted_object=True)
SECRET = Strategy(default=default_secret, validate=validate_secret, validate_update=validate_secret_update)
CONFIGMAP = Strategy(default=default_configmap, validate=validate_configmap, validate_update=validate_configmap_update)
NAMESPACE = Strategy(default=default_namespace, prepare_create=prepare_create_namespace,
                     prepare_update=prepare_update_namespace, name_fn=name_is_dns_label,
                     validate=specrules.namespace_causes)
PVC = Strategy(default=default_pvc, prepare_create=prepare_pending, validate=validate_pvc,
               validate_update=validate_pvc_update, return_deleted_object=True)
PV = Strategy(prepare_create=prepare_pending, return_deleted_object=True)
NODE = Strategy(default=default_node, validate=validate_node, gc_policy="background")
def validate_event(obj: Obj) -> list[Cause]:
    """upstream's legacy event rules, which every Event write passes (events.k8s.io writes also pass the strict
    ones: `lite.server.api.viewing`)."""
    return event_rules.legacy_causes(obj, via_core=True)


EVENT = Strategy(default=default_event, validate=validate_event)
