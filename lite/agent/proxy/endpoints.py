"""Which endpoints of a Service port receive traffic: EndpointSlices folded per service port (pure).

Role: read Services and EndpointSlices (plain dicts, as the API returns them) into `ServicePort` records with
their cluster-wide and node-local endpoint lists, as kube-proxy's endpoints tracker and topology code do.

Invariants (upstream's behaviour):
- A slice belongs to the Service named by its `kubernetes.io/service-name` label in the same namespace; only
  IPv4 slices (`addressType: IPv4`) count; an endpoint's first address is used; the same ip:port listed by two
  slices (a slice being replaced) counts once, ready if either copy is ready.
- Conditions: `ready` unset means ready; `serving` unset means the value of `ready`; `terminating` unset means
  not terminating.
- Cluster endpoints are the ready ones; when none is ready, the serving-and-terminating ones instead (so
  connections drain during a rollout that leaves nothing ready). Local endpoints (on this node) follow the same
  rule among themselves.
- A slice port matches a service port by name and protocol (both unnamed: ""). Headless (`clusterIP: None`),
  ExternalName and services without a ClusterIP are not proxied and yield no `ServicePort`.
Output is sorted (services by namespace/name, ports as declared, endpoints by address), so translation is
deterministic.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from ipaddress import IPv4Address
from typing import Any

from lite.records import dataclass

Obj = Mapping[str, Any]
SERVICE_NAME_LABEL = "kubernetes.io/service-name"
DEFAULT_AFFINITY_TIMEOUT = 10800


@dataclass(frozen=True, order=True)
class Endpoint:
    ip: str
    port: int
    node: str = ""
    ready: bool = True
    serving: bool = True
    terminating: bool = False


@dataclass(frozen=True)
class ServicePort:
    namespace: str
    name: str
    port_name: str
    protocol: str  # "tcp" | "udp" | "sctp"
    port: int
    cluster_ip: str
    node_port: int = 0
    external_ips: tuple[str, ...] = ()  # spec.externalIPs and status.loadBalancer.ingress[].ip
    affinity_timeout: int = 0  # seconds; 0 = no ClientIP affinity
    internal_local: bool = False  # internalTrafficPolicy: Local
    external_local: bool = False  # externalTrafficPolicy: Local (NodePort/LoadBalancer)
    health_check_node_port: int = 0  # answered by the agent when external_local (see healthcheck)
    endpoints: tuple[Endpoint, ...] = ()

    @property
    def id(self) -> str:
        """`ns/name/proto/port-name` (the port number when unnamed): unique per service port."""
        return f"{self.namespace}/{self.name}/{self.protocol}/{self.port_name or self.port}"

    def cluster_endpoints(self) -> tuple[Endpoint, ...]:
        return _usable(self.endpoints)

    def local_endpoints(self, node: str) -> tuple[Endpoint, ...]:
        return _usable(tuple(e for e in self.endpoints if e.node == node))


def _usable(endpoints: tuple[Endpoint, ...]) -> tuple[Endpoint, ...]:
    ready = tuple(e for e in endpoints if e.ready)
    return ready or tuple(e for e in endpoints if e.serving and e.terminating)


def service_ports(services: Iterable[Obj], slices: Iterable[Obj]) -> list[ServicePort]:
    """Every proxied service port, with its endpoints from `slices`."""
    by_service: dict[tuple[str, str], list[Obj]] = {}
    for s in slices:
        owner = slice_owner(s)
        if owner is not None:
            by_service.setdefault(owner, []).append(s)
    out: list[ServicePort] = []
    for svc in sorted(services, key=lambda o: (o["metadata"].get("namespace", ""), o["metadata"]["name"])):
        out += ports_of(svc, by_service.get(object_key(svc), []))
    return out


def object_key(obj: Obj) -> tuple[str, str]:
    meta = obj["metadata"]
    return (meta.get("namespace") or "default", meta["name"])


def slice_owner(s: Obj) -> tuple[str, str] | None:
    """(namespace, service name) of the Service an IPv4 EndpointSlice belongs to, or None."""
    meta = s.get("metadata") or {}
    owner = (meta.get("labels") or {}).get(SERVICE_NAME_LABEL)
    if not owner or s.get("addressType", "IPv4") != "IPv4":
        return None
    return (meta.get("namespace") or "default", str(owner))


def ports_of(svc: Obj, slices: Iterable[Obj]) -> list[ServicePort]:
    """The proxied ports of one Service, given the slices that belong to it (none if it is not proxied)."""
    spec = svc.get("spec") or {}
    if spec.get("type") == "ExternalName" or not _is_ipv4(spec.get("clusterIP") or ""):
        return []
    own = list(slices)
    return [_service_port(object_key(svc), svc, port, own) for port in spec.get("ports") or []]


def _service_port(key: tuple[str, str], svc: Obj, port: Obj, slices: list[Obj]) -> ServicePort:
    spec = svc.get("spec") or {}
    protocol = str(port.get("protocol") or "TCP").lower()
    port_name = str(port.get("name") or "")
    external = [ip for ip in spec.get("externalIPs") or [] if _is_ipv4(ip)]
    if spec.get("type") == "LoadBalancer":
        ingress = ((svc.get("status") or {}).get("loadBalancer") or {}).get("ingress") or []
        external += [i["ip"] for i in ingress if _is_ipv4(i.get("ip") or "")]
    affinity = 0
    if spec.get("sessionAffinity") == "ClientIP":
        config = (spec.get("sessionAffinityConfig") or {}).get("clientIP") or {}
        affinity = int(config.get("timeoutSeconds") or DEFAULT_AFFINITY_TIMEOUT)
    has_external = spec.get("type") in ("NodePort", "LoadBalancer") or bool(external)
    return ServicePort(
        namespace=key[0],
        name=key[1],
        port_name=port_name,
        protocol=protocol,
        port=int(port["port"]),
        cluster_ip=spec["clusterIP"],
        node_port=int(port.get("nodePort") or 0) if spec.get("type") in ("NodePort", "LoadBalancer") else 0,
        external_ips=tuple(dict.fromkeys(external)),
        affinity_timeout=affinity,
        internal_local=spec.get("internalTrafficPolicy") == "Local",
        external_local=has_external and spec.get("externalTrafficPolicy") == "Local",
        health_check_node_port=int(spec.get("healthCheckNodePort") or 0) if spec.get("type") == "LoadBalancer" else 0,
        endpoints=_endpoints(slices, port_name, protocol),
    )


def _endpoints(slices: list[Obj], port_name: str, protocol: str) -> tuple[Endpoint, ...]:
    found: dict[tuple[str, int], Endpoint] = {}
    for s in slices:
        numbers = [
            int(p["port"])
            for p in s.get("ports") or []
            if (p.get("name") or "") == port_name
            and str(p.get("protocol") or "TCP").lower() == protocol
            and p.get("port") is not None
        ]
        for number in numbers[:1]:
            for e in s.get("endpoints") or []:
                addresses = e.get("addresses") or []
                if not addresses or not _is_ipv4(addresses[0]):
                    continue
                endpoint = _endpoint(e, addresses[0], number)
                prior = found.get((endpoint.ip, number))
                if prior is None or (endpoint.ready and not prior.ready):
                    found[(endpoint.ip, number)] = endpoint
    return tuple(sorted(found.values(), key=lambda e: (IPv4Address(e.ip), e.port)))


def _endpoint(e: Obj, address: str, port: int) -> Endpoint:
    conditions = e.get("conditions") or {}
    ready = conditions.get("ready") is not False
    serving = conditions.get("serving")
    return Endpoint(
        ip=address,
        port=port,
        node=str(e.get("nodeName") or ""),
        ready=ready,
        serving=ready if serving is None else bool(serving),
        terminating=bool(conditions.get("terminating")),
    )


def _is_ipv4(value: str) -> bool:
    try:
        IPv4Address(value)
    except ValueError:
        return False
    return True


def stale_udp(
    old: Iterable[ServicePort], new: Iterable[ServicePort], node: str, node_ips: Iterable[str] = ()
) -> tuple[set[tuple[str, int]], set[tuple[str, int]]]:
    """UDP conntrack entries to delete after moving from `old` to `new` service ports.

    Returns (endpoints, service addresses): endpoints (ip, port) that received traffic before and no longer do;
    service addresses (ip, port: ClusterIP, external IPs, node IP:nodePort) of UDP ports that had no endpoint
    before and have one now, whose rejected flows would otherwise keep bypassing the new DNAT.
    """
    before = {sp.id: sp for sp in old if sp.protocol == "udp"}
    endpoints: set[tuple[str, int]] = set()
    services: set[tuple[str, int]] = set()
    now = {sp.id: sp for sp in new if sp.protocol == "udp"}
    for sid, sp in before.items():
        gone = _targets(sp, node) - (_targets(now[sid], node) if sid in now else set())
        endpoints.update(gone)
    for sid, sp in now.items():
        if sp.cluster_endpoints() and (sid not in before or not before[sid].cluster_endpoints()):
            services.add((sp.cluster_ip, sp.port))
            services.update((ip, sp.port) for ip in sp.external_ips)
            if sp.node_port:
                services.update((ip, sp.node_port) for ip in node_ips)
    return endpoints, services


def _targets(sp: ServicePort, node: str) -> set[tuple[str, int]]:
    return {(e.ip, e.port) for e in sp.cluster_endpoints() + sp.local_endpoints(node)}
