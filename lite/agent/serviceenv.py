"""Service environment variables of containers, as the kubelet sets them (`getServiceEnvVarMap` and
`envvars.FromServices`).

Role: `ServiceCatalog` is a sink of the proxy feed (`lite.agent.proxy.feed`) that keeps the Services the server
relays; `env_for(namespace, enable_links)` gives the variables of a pod in `namespace`: always the
`kubernetes` Service of the `default` namespace (KUBERNETES_SERVICE_HOST, KUBERNETES_SERVICE_PORT,
KUBERNETES_SERVICE_PORT_HTTPS, KUBERNETES_PORT, KUBERNETES_PORT_443_TCP*), and with `enableServiceLinks`
(default true) one docker-link-style set per Service of the pod's own namespace. `service_vars` is the pure
translation of one Service.

Invariants: Services without a cluster IP (headless, or "None") give nothing; names are upper-cased with '-'
turned into '_'; only the first port gets the unnumbered `<NAME>_SERVICE_PORT` and `<NAME>_PORT`; with
links on, a Service of the pod's namespace named `kubernetes` replaces the default namespace's one (kubelet's
map does the same). The
container's own env wins over these (the caller layers them first).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

Obj = dict[str, Any]
MASTER_SERVICES = ("kubernetes",)


def var_name(name: str) -> str:
    return name.upper().replace("-", "_")


def _ip_set(svc: Obj) -> str:
    ip = str((svc.get("spec") or {}).get("clusterIP") or "")
    return "" if ip in ("", "None") else ip


def _host_port(ip: str, port: int) -> str:
    return f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}"


def service_vars(svc: Obj) -> dict[str, str]:
    """The variables of one Service (empty without a cluster IP or ports)."""
    ip = _ip_set(svc)
    ports = [p for p in (svc.get("spec") or {}).get("ports") or [] if isinstance(p, dict)]
    if not ip or not ports:
        return {}
    prefix = var_name(str((svc.get("metadata") or {}).get("name", "")))
    out = {f"{prefix}_SERVICE_HOST": ip, f"{prefix}_SERVICE_PORT": str(int(ports[0].get("port", 0)))}
    for p in ports:
        if p.get("name"):
            out[f"{prefix}_SERVICE_PORT_{var_name(str(p['name']))}"] = str(int(p.get("port", 0)))
    for i, p in enumerate(ports):
        port = int(p.get("port", 0))
        proto = str(p.get("protocol") or "TCP")
        url = f"{proto.lower()}://{_host_port(ip, port)}"
        if i == 0:
            out[f"{prefix}_PORT"] = url
        pp = f"{prefix}_PORT_{port}_{proto.upper()}"
        out.update({pp: url, f"{pp}_PROTO": proto.lower(), f"{pp}_PORT": str(port), f"{pp}_ADDR": ip})
    return out


def pod_service_env(services: Iterable[Obj], namespace: str, enable_links: bool) -> dict[str, str]:
    """The service variables of a pod in `namespace` (see the module doc)."""
    chosen: dict[str, Obj] = {}
    for svc in services:
        meta = svc.get("metadata") or {}
        name, ns = str(meta.get("name", "")), str(meta.get("namespace", ""))
        if not _ip_set(svc):
            continue
        if ns == "default" and name in MASTER_SERVICES:
            chosen.setdefault(name, svc)
        elif ns == namespace and enable_links:
            chosen[name] = svc
    out: dict[str, str] = {}
    for name in sorted(chosen):
        out.update(service_vars(chosen[name]))
    return out


def _key(obj: Obj) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace", "")), str(meta.get("name", ""))


class ServiceCatalog:
    """The Services and EndpointSlices the server relays, by (namespace, name); a `feed.Sink`. Services make the
    pods' environment; both are what the node-local API (`lite.agent.localapi`) lists. Holds the relayed
    objects themselves (shared with the proxier's feed, never changed)."""

    def __init__(self) -> None:
        self.services: dict[tuple[str, str], Obj] = {}
        self.slices: dict[tuple[str, str], Obj] = {}

    def set_service(self, obj: Obj) -> None:
        self.services[_key(obj)] = obj

    def delete_service(self, namespace: str, name: str) -> None:
        self.services.pop((namespace, name), None)

    def set_slice(self, obj: Obj) -> None:
        self.slices[_key(obj)] = obj

    def delete_slice(self, namespace: str, name: str) -> None:
        self.slices.pop((namespace, name), None)

    def replace(self, services: Iterable[Obj], slices: Iterable[Obj]) -> None:
        self.services, self.slices = {}, {}
        for s in services:
            self.set_service(s)
        for s in slices:
            self.set_slice(s)

    def env_for(self, namespace: str, enable_links: bool) -> dict[str, str]:
        return pod_service_env(self.services.values(), namespace, enable_links)
