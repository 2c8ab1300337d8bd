"""Strategies of networking.k8s.io/v1 NetworkPolicy, Ingress and IngressClass (upstream
`pkg/apis/networking/validation`, `pkg/apis/networking/v1/defaults.go` and the registry strategies).

- NetworkPolicy: ports default to TCP; `policyTypes` defaults to [Ingress] (+ Egress when egress rules exist);
  selectors are label selectors; a peer names at least one of podSelector/namespaceSelector/ipBlock and an
  ipBlock stands alone; ipBlock `except` entries are strict subsets of `cidr`; ports are numbers (1-65535) or
  IANA names, `endPort` only after a numeric port and not below it; at most two policy types, each Ingress or
  Egress.
- Ingress: rules or a defaultBackend; hosts DNS names (wildcards allowed), not IPs; every HTTP path has a
  pathType (Exact, Prefix, ImplementationSpecific) and an absolute path; a backend is a service (name and
  exactly one of port name/number) or a resource, not both; TLS hosts and secret names; `ingressClassName` a
  DNS subdomain and equal to the `kubernetes.io/ingress.class` annotation when both are given (create only).
  Status (load balancer ingress IPs/hostnames) is written through `/status`.
- IngressClass: `controller` a domain-prefixed path (at most 250 characters) and immutable; `parameters` a
  typed reference whose scope defaults to Cluster (Namespace scope needs a namespace, Cluster forbids one).

Pure: no I/O; functions mutate only the new object.
"""

from __future__ import annotations

import ipaddress
from typing import Any

from lite.errors import Cause, field_forbidden, field_invalid, field_not_supported, field_required, field_too_long
from lite.server.api.strategies.base import Obj, Strategy
from lite.validation import is_dns1123_label, is_dns1123_subdomain, validate_label_selector
from lite.valuerules import is_int, is_valid_ip, is_valid_port_name, is_valid_port_num

PROTOCOLS = ["SCTP", "TCP", "UDP"]
POLICY_TYPES = ["Egress", "Ingress"]
PATH_TYPES = ["Exact", "ImplementationSpecific", "Prefix"]
CIDR_MSG = "must be a valid CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)"
CLASS_ANNOTATION = "kubernetes.io/ingress.class"


def _d(obj: Any, key: str) -> dict[str, Any]:
    v = obj.get(key) if isinstance(obj, dict) else None
    return v if isinstance(v, dict) else {}


def _as(v: Any) -> dict[str, Any]:
    return v if isinstance(v, dict) else {}


def _l(obj: Any, key: str) -> list[Any]:
    v = obj.get(key) if isinstance(obj, dict) else None
    return v if isinstance(v, list) else []


# ---- NetworkPolicy ------------------------------------------------------------------------------------

def default_networkpolicy(obj: Obj) -> None:
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return
    for direction in ("ingress", "egress"):
        for rule in _l(spec, direction):
            for port in _l(rule, "ports"):
                if isinstance(port, dict) and port.get("protocol") is None:
                    port["protocol"] = "TCP"
    if not spec.get("policyTypes"):
        spec["policyTypes"] = ["Ingress", "Egress"] if spec.get("egress") else ["Ingress"]


def parse_cidr(text: Any) -> ipaddress.IPv4Network | ipaddress.IPv6Network | None:
    """A CIDR as Go's ParseCIDR reads it (host bits may be set); None when it is not one."""
    if not isinstance(text, str) or "/" not in text:
        return None
    try:
        return ipaddress.ip_network(text, strict=False)
    except ValueError:
        return None


def validate_ip_block(block: Any, path: str) -> list[Cause]:
    cidr = block.get("cidr") if isinstance(block, dict) else None
    if not cidr:
        return [field_required(f"{path}.cidr")]
    net = parse_cidr(cidr)
    if net is None:
        return [field_invalid(f"{path}.cidr", cidr, CIDR_MSG)]
    causes: list[Cause] = []
    for i, text in enumerate(_l(block, "except")):
        sub = parse_cidr(text)
        if sub is None:
            causes.append(field_invalid(f"{path}.except[{i}]", text, CIDR_MSG))
        elif sub.version != net.version or sub.network_address not in net or sub.prefixlen <= net.prefixlen:
            causes.append(field_invalid(f"{path}.except[{i}]", text, "must be a strict subset of `cidr`"))
    return causes


def validate_policy_port(port: Any, path: str) -> list[Cause]:
    if not isinstance(port, dict):
        return [field_invalid(path, port, "must be an object")]
    causes: list[Cause] = []
    proto = port.get("protocol")
    if proto is not None and proto not in PROTOCOLS:
        causes.append(field_not_supported(f"{path}.protocol", proto, PROTOCOLS))
    number, end = port.get("port"), port.get("endPort")
    if number is None:
        if end is not None:
            causes.append(field_invalid(f"{path}.endPort", end, "may not be specified when `port` is not specified"))
    elif is_int(number):
        causes += [field_invalid(f"{path}.port", number, m) for m in is_valid_port_num(number)]
        if end is not None:
            if is_int(end) and end < number:
                causes.append(field_invalid(f"{path}.endPort", number, "must be greater than or equal to `port`"))
            causes += [field_invalid(f"{path}.endPort", end, m) for m in is_valid_port_num(end)]
    else:
        if end is not None:
            causes.append(field_invalid(f"{path}.endPort", end, "may not be specified when `port` is non-numeric"))
        causes += [field_invalid(f"{path}.port", number, m) for m in is_valid_port_name(str(number))]
    return causes


def validate_peer(peer: Any, path: str) -> list[Cause]:
    if not isinstance(peer, dict):
        return [field_invalid(path, peer, "must be an object")]
    causes: list[Cause] = []
    count = 0
    for key in ("podSelector", "namespaceSelector"):
        if peer.get(key) is not None:
            count += 1
            causes += validate_label_selector(peer[key], f"{path}.{key}")
    if peer.get("ipBlock") is not None:
        count += 1
        causes += validate_ip_block(peer["ipBlock"], f"{path}.ipBlock")
    if count == 0:
        causes.append(field_required(path, "must specify a peer"))
    elif count > 1 and peer.get("ipBlock") is not None:
        causes.append(field_forbidden(path, "may not specify both ipBlock and another peer"))
    return causes


def validate_networkpolicy(obj: Obj) -> list[Cause]:
    spec = _d(obj, "spec")
    causes = validate_label_selector(spec.get("podSelector"), "spec.podSelector")
    for direction, peers in (("ingress", "from"), ("egress", "to")):
        for i, rule in enumerate(_l(spec, direction)):
            at = f"spec.{direction}[{i}]"
            causes += [c for j, p in enumerate(_l(rule, "ports")) for c in validate_policy_port(p, f"{at}.ports[{j}]")]
            causes += [c for j, p in enumerate(_l(rule, peers)) for c in validate_peer(p, f"{at}.{peers}[{j}]")]
    types = _l(spec, "policyTypes")
    if len(types) > 2:
        return [*causes, field_invalid("spec.policyTypes", types, "may not specify more than two policyTypes")]
    for i, t in enumerate(types):
        if t not in POLICY_TYPES:
            causes.append(field_not_supported(f"spec.policyTypes[{i}]", t, ["Ingress", "Egress"]))
    return causes


# ---- Ingress --------------------------------------------------------------------------------------------

def is_wildcard_subdomain(host: str) -> list[str]:
    """Upstream IsWildcardDNS1123Subdomain: `*.` followed by a DNS-1123 subdomain."""
    if not host.startswith("*.") or is_dns1123_subdomain(host[2:]):
        return ["a wildcard DNS-1123 subdomain must start with '*.', followed by a valid DNS subdomain, which must "
                "consist of lower case alphanumeric characters, '-' or '.' and end with an alphanumeric character "
                "(e.g. '*.example.com', regex used for validation is "
                "'\\*\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"]
    return []


def _host_causes(host: str, path: str) -> list[Cause]:
    msgs = is_wildcard_subdomain(host) if "*" in host else is_dns1123_subdomain(host)
    return [field_invalid(path, host, m) for m in msgs]


def validate_backend(backend: Any, path: str) -> list[Cause]:
    resource, service = _d(backend, "resource"), _d(backend, "service")
    if resource and service:
        return [field_invalid(path, "", "cannot set both resource and service backends")]
    if resource:
        return validate_typed_ref(resource, f"{path}.resource")
    if not service:
        return [field_invalid(path, "", "resource or service backend is required")]
    causes: list[Cause] = []
    name = service.get("name")
    if not name:
        causes.append(field_required(f"{path}.service.name"))
    else:
        causes += [field_invalid(f"{path}.service.name", name, m) for m in is_dns1123_label(str(name))]
    port = _d(service, "port")
    pname, pnum = port.get("name") or "", port.get("number") or 0
    if pname and pnum:
        causes.append(field_invalid(path, "", "cannot set both port name & port number"))
    elif pname:
        causes += [field_invalid(f"{path}.service.port.name", pname, m) for m in is_valid_port_name(str(pname))]
    elif pnum:
        causes += [field_invalid(f"{path}.service.port.number", pnum, m) for m in is_valid_port_num(pnum)]
    else:
        causes.append(field_required(path, "port name or number is required"))
    return causes


def validate_typed_ref(ref: dict[str, Any], path: str) -> list[Cause]:
    causes: list[Cause] = []
    group = ref.get("apiGroup")
    if group is not None:
        causes += [field_invalid(f"{path}.apiGroup", group, m) for m in is_dns1123_subdomain(str(group))]
    for key in ("kind", "name"):
        value = ref.get(key)
        if not value:
            causes.append(field_required(f"{path}.{key}", f"{key} is required"))
        elif not isinstance(value, str) or value in (".", "..") or "/" in value or "%" in value:
            causes.append(field_invalid(f"{path}.{key}", value, "may not be '.', '..', or contain '/' or '%'"))
    return causes


def _path_causes(item: Any, path: str) -> list[Cause]:
    ptype, value = _as(item).get("pathType"), _as(item).get("path") or ""
    if ptype is None:
        return [field_required(f"{path}.pathType", "pathType must be specified")]
    causes: list[Cause] = []
    if ptype in ("Exact", "Prefix"):
        if not str(value).startswith("/"):
            causes.append(field_invalid(f"{path}.path", value, "must be an absolute path"))
        for seq in ("//", "/./", "/../", "%2f", "%2F"):
            if seq in str(value):
                causes.append(field_invalid(f"{path}.path", value, f"must not contain '{seq}'"))
        for suffix in ("/..", "/."):
            if str(value).endswith(suffix):
                causes.append(field_invalid(f"{path}.path", value, f"cannot end with '{suffix}'"))
    elif ptype == "ImplementationSpecific":
        if value and not str(value).startswith("/"):
            causes.append(field_invalid(f"{path}.path", value, "must be an absolute path"))
    else:
        causes.append(field_not_supported(f"{path}.pathType", ptype, PATH_TYPES))
    return causes + validate_backend(_d(item, "backend"), f"{path}.backend")


def _rule_causes(rules: list[Any]) -> list[Cause]:
    causes: list[Cause] = []
    for i, rule in enumerate(rules):
        at = f"spec.rules[{i}]"
        host = _as(rule).get("host") or ""
        if host:
            if not is_valid_ip(str(host)):
                causes.append(field_invalid(f"{at}.host", host, "must be a DNS name, not an IP address"))
            causes += _host_causes(str(host), f"{at}.host")
        http = _d(rule, "http")
        if isinstance(rule, dict) and rule.get("http") is not None:
            paths = _l(http, "paths")
            if not paths:
                causes.append(field_required(f"{at}.http.paths"))
            for j, item in enumerate(paths):
                causes += _path_causes(item, f"{at}.http.paths[{j}]")
    return causes


def validate_ingress(obj: Obj) -> list[Cause]:
    spec = _d(obj, "spec")
    rules = _l(spec, "rules")
    causes: list[Cause] = []
    if not rules and spec.get("defaultBackend") is None:
        causes.append(field_invalid("spec", rules, "either `defaultBackend` or `rules` must be specified"))
    if spec.get("defaultBackend") is not None:
        causes += validate_backend(spec["defaultBackend"], "spec.defaultBackend")
    causes += _rule_causes(rules)
    for i, tls in enumerate(_l(spec, "tls")):
        for j, host in enumerate(_l(tls, "hosts")):
            causes += _host_causes(str(host), f"spec.tls[{i}].hosts[{j}]")
        secret = _as(tls).get("secretName")
        if secret:
            causes += [field_invalid(f"spec.tls[{i}].secretName", secret, m)
                       for m in is_dns1123_subdomain(str(secret))]
    cls = spec.get("ingressClassName")
    if cls is not None:
        causes += [field_invalid("spec.ingressClassName", cls, m) for m in is_dns1123_subdomain(str(cls))]
    return causes


def validate_ingress_checked(obj: Obj) -> list[Cause]:
    """`validate_ingress` plus the class annotation agreeing with `ingressClassName` (upstream checks that on
    create only; here updates are held to it as well, which no object created here can fail)."""
    causes = validate_ingress(obj)
    annotation = _d(_d(obj, "metadata"), "annotations").get(CLASS_ANNOTATION)
    cls = _d(obj, "spec").get("ingressClassName")
    if annotation is not None and cls is not None and annotation != cls:
        causes.append(field_invalid(f"annotations.{CLASS_ANNOTATION}", annotation,
                                    "must match `ingressClassName` when both are specified"))
    return causes


def validate_ingress_status(subresource: str, new: Obj, old: Obj) -> list[Cause]:
    causes: list[Cause] = []
    for i, ing in enumerate(_l(_d(_d(new, "status"), "loadBalancer"), "ingress")):
        at = f"status.loadBalancer.ingress[{i}]"
        ip, hostname = _as(ing).get("ip"), _as(ing).get("hostname")
        if ip:
            causes += [field_invalid(f"{at}.ip", ip, m) for m in is_valid_ip(str(ip))]
        if hostname:
            causes += [field_invalid(f"{at}.hostname", hostname, m) for m in is_dns1123_subdomain(str(hostname))]
            if not is_valid_ip(str(hostname)):
                causes.append(field_invalid(f"{at}.hostname", hostname, "must be a DNS name, not an IP address"))
    return causes


def clear_status(obj: Obj) -> None:
    obj["status"] = {}


# ---- IngressClass -------------------------------------------------------------------------------------

def default_ingressclass(obj: Obj) -> None:
    params = _d(obj.get("spec"), "parameters")
    if params and params.get("scope") is None:
        params["scope"] = "Cluster"


def validate_ingressclass(obj: Obj) -> list[Cause]:
    spec = _d(obj, "spec")
    controller = spec.get("controller") or ""
    causes: list[Cause] = []
    if len(str(controller)) > 250:
        causes.append(field_too_long("spec.controller", "", 250))
    causes += _domain_prefixed_path(str(controller), "spec.controller")
    params = spec.get("parameters")
    if not isinstance(params, dict):
        return causes
    causes += validate_typed_ref(params, "spec.parameters")
    scope = params.get("scope")
    if scope is None:
        return [*causes, field_required("spec.parameters.scope")]
    if scope not in ("Cluster", "Namespace"):
        causes.append(field_not_supported("spec.parameters.scope", scope, ["Cluster", "Namespace"]))
    elif scope == "Namespace" and params.get("namespace") is None:
        causes.append(field_required("spec.parameters.namespace", "`parameters.scope` is set to 'Namespace'"))
    elif scope == "Namespace":
        causes += [field_invalid("spec.parameters.namespace", params["namespace"], m)
                   for m in is_dns1123_label(str(params["namespace"]))]
    elif params.get("namespace") is not None:
        causes.append(field_forbidden("spec.parameters.namespace", "`parameters.scope` is set to 'Cluster'"))
    return causes


def _domain_prefixed_path(value: str, path: str) -> list[Cause]:
    """Upstream IsDomainPrefixedPath: `example.com/path`, the domain a DNS subdomain."""
    if not value:
        return [field_required(path)]
    domain, slash, rest = value.partition("/")
    if not slash or not domain:
        return [field_invalid(path, value, "must be a domain-prefixed path (such as \"acme.io/foo\")")]
    causes = [field_invalid(path, domain, m) for m in is_dns1123_subdomain(domain)]
    if any(not (ch.isalnum() and ch.isascii()) and ch not in "/-._~%!$&'()*+,;=:" for ch in rest):
        causes.append(field_invalid(path, rest, "Invalid path"))
    return causes


def validate_ingressclass_update(new: Obj, old: Obj) -> list[Cause]:
    if _d(new, "spec").get("controller") != _d(old, "spec").get("controller"):
        return [field_invalid("spec.controller", _d(new, "spec").get("controller"), "field is immutable")]
    return []


NETWORKPOLICY = Strategy(default=default_networkpolicy, validate=validate_networkpolicy)
INGRESS = Strategy(prepare_create=clear_status, validate=validate_ingress_checked,
                   validate_subresource=validate_ingress_status)
INGRESSCLASS = Strategy(default=default_ingressclass, validate=validate_ingressclass,
                        validate_update=validate_ingressclass_update)
