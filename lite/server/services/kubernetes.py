"""The `default/kubernetes` Service and its Endpoints/EndpointSlices: how pods (and agents) find the API servers.

Upstream's apiserver "master endpoint reconciler": the Service has the first address of the service CIDR
(10.43.0.1) and port 443 named https; its Endpoints and EndpointSlice (both named `kubernetes`, no selector,
so the endpoints controllers leave them alone) point at the advertised address and secure port of every live
API server (`lite.server.services.apiservers` says which are live; one server alone lists itself).

`kubernetes_objects(endpoints)` (pure, table-tested) is the decision: given the live servers' (address, port)
pairs it returns the Endpoints object (one subset per port, addresses sorted) and the EndpointSlices (one per
address family and port, endpoints sorted; the first, by family then port, is named `kubernetes`, any other
`kubernetes-<family>-<port>`, so servers on different ports are all listed). Every server computing it from the
same set writes the same objects, byte for byte.

Invariants: idempotent (create when missing, rewrite only what drifted, delete only extra slices of the
`kubernetes-<family>-<port>` shape); safe to run every few seconds; an empty endpoint set writes nothing.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import re
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from lite.client import Client
from lite.errors import ApiError
from lite.kinds import BUILTIN_KINDS, Kind
from lite.objects import deep_copy

Obj = dict[str, Any]
Endpoint = tuple[str, int]  # (advertised address, secure port) of one API server
log = logging.getLogger("lite.services")

NAME = "kubernetes"
SERVICE_NAME_LABEL = "kubernetes.io/service-name"
_EXTRA_SLICE = re.compile(r"^kubernetes-ipv[46]-[0-9]+$")


def _kind(group: str, kind: str) -> Kind:
    return next(k for k in BUILTIN_KINDS if k.group == group and k.kind == kind)


def kubernetes_service(cluster_ip: str) -> Obj:
    return {"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": NAME, "namespace": "default",
                         "labels": {"component": "apiserver", "provider": "kubernetes"}},
            "spec": {"type": "ClusterIP", "clusterIP": cluster_ip, "sessionAffinity": "None",
                     "ports": [{"name": "https", "port": 443, "protocol": "TCP", "targetPort": 6443}]}}


def _family(address: str) -> str:
    return "IPv6" if ":" in address else "IPv4"


def _address_key(address: str) -> tuple[int, int | str]:
    try:
        ip = ipaddress.ip_address(address)
        return (ip.version, int(ip))
    except ValueError:
        return (9, address)


def _port(port: int) -> list[Obj]:
    return [{"name": "https", "port": port, "protocol": "TCP"}]


def kubernetes_objects(endpoints: Iterable[Endpoint]) -> tuple[Obj, list[Obj]]:
    """The `default/kubernetes` Endpoints and EndpointSlices listing `endpoints` (see the module doc)."""
    by_port: dict[int, set[str]] = {}
    by_group: dict[tuple[str, int], set[str]] = {}
    for address, port in endpoints:
        by_port.setdefault(port, set()).add(address)
        by_group.setdefault((_family(address), port), set()).add(address)
    subsets = [{"addresses": [{"ip": a} for a in sorted(by_port[p], key=_address_key)], "ports": _port(p)}
               for p in sorted(by_port)]
    eps = {"apiVersion": "v1", "kind": "Endpoints",
           "metadata": {"name": NAME, "namespace": "default",
                        "labels": {"endpointslice.kubernetes.io/skip-mirror": "true"}},
           "subsets": subsets}
    slices = []
    for i, (family, port) in enumerate(sorted(by_group)):
        name = NAME if i == 0 else f"{NAME}-{family.lower()}-{port}"
        slices.append({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                       "metadata": {"name": name, "namespace": "default", "labels": {SERVICE_NAME_LABEL: NAME}},
                       "addressType": family,
                       "endpoints": [{"addresses": [a], "conditions": {"ready": True}}
                                     for a in sorted(by_group[(family, port)], key=_address_key)],
                       "ports": _port(port)})
    return eps, slices


def server_urls(slices: Iterable[Obj]) -> list[str]:
    """The API servers' URLs (`https://ADDRESS:PORT`, IPv6 bracketed) that the `default/kubernetes` slices
    among `slices` list as ready, sorted, each once (pure; what agents are told, `join.hub`)."""
    urls: set[str] = set()
    for s in slices:
        meta = s.get("metadata") or {}
        if meta.get("namespace") != "default" or (meta.get("labels") or {}).get(SERVICE_NAME_LABEL) != NAME:
            continue
        ports = [p.get("port") for p in s.get("ports") or [] if p.get("name") == "https"]
        if len(ports) != 1 or not isinstance(ports[0], int):
            continue
        for ep in s.get("endpoints") or []:
            if (ep.get("conditions") or {}).get("ready") is False:
                continue
            for a in ep.get("addresses") or []:
                host = f"[{a}]" if ":" in str(a) else str(a)
                urls.add(f"https://{host}:{ports[0]}")
    return sorted(urls)


async def _ensure(client: Client, kind: Kind, want: Obj, fields: tuple[str, ...]) -> None:
    name = want["metadata"]["name"]
    try:
        have = await client.get(kind, "default", name)
    except ApiError as e:
        if e.code != 404:
            raise
        try:
            await client.create(kind, "default", want)
        except ApiError as e2:
            if e2.code != 409:
                raise
        return
    labels = (have.get("metadata") or {}).get("labels") or {}
    want_labels = want["metadata"]["labels"]
    if all(have.get(f) == want.get(f) for f in fields) and all(labels.get(k) == v for k, v in want_labels.items()):
        return
    new = deep_copy(have)
    for f in fields:
        new[f] = want[f]
    new.setdefault("metadata", {})["labels"] = {**labels, **want_labels}
    try:
        await client.update(kind, "default", name, new)  # under the resourceVersion read: 409 if it moved
    except ApiError as e:
        if e.code not in (404, 409):  # someone else wrote meanwhile: the next pass looks again
            raise


async def ensure_service(client: Client, cluster_ip: str, port: int) -> None:
    """Create the Service `default/kubernetes` when it is missing (an existing one is left as it is)."""
    svc_kind = _kind("", "Service")
    try:
        await client.get(svc_kind, "default", NAME)
    except ApiError as e:
        if e.code != 404:
            raise
        svc = kubernetes_service(cluster_ip)
        svc["spec"]["ports"][0]["targetPort"] = port
        try:
            await client.create(svc_kind, "default", svc)
        except ApiError as e2:
            if e2.code != 409:
                raise


async def ensure_endpoints(client: Client, endpoints: Iterable[Endpoint]) -> None:
    """Make the Endpoints and EndpointSlices `default/kubernetes` list exactly `endpoints` (none: no write)."""
    endpoints = list(endpoints)
    if not endpoints:
        return
    eps, slices = kubernetes_objects(endpoints)
    await _ensure(client, _kind("", "Endpoints"), eps, ("subsets",))
    slice_kind = _kind("discovery.k8s.io", "EndpointSlice")
    for s in slices:
        await _ensure(client, slice_kind, s, ("addressType", "endpoints", "ports"))
    wanted = {s["metadata"]["name"] for s in slices}
    have = await client.list(slice_kind, "default", label_selector=f"{SERVICE_NAME_LABEL}={NAME}")
    for item in have.get("items") or []:
        meta = item.get("metadata") or {}
        name = str(meta.get("name") or "")
        if name not in wanted and _EXTRA_SLICE.match(name):
            try:
                await client.delete(slice_kind, "default", name,
                                    preconditions={"resourceVersion": meta.get("resourceVersion")})
            except ApiError as e:
                if e.code not in (404, 409):
                    raise


async def ensure_kubernetes_service(client: Client, cluster_ip: str, address: str, port: int) -> None:
    """Create or repair the Service, Endpoints and EndpointSlice `default/kubernetes` for one server."""
    await ensure_service(client, cluster_ip, port)
    await ensure_endpoints(client, [(address, port)])


async def keep_kubernetes_service(client: Client, cluster_ip: str, port: int,
                                  live: Callable[[], Awaitable[list[Endpoint]]], *, every: float = 10.0) -> None:
    """Re-check every `every` seconds (someone may delete or edit them; servers come and go) that the objects
    list the endpoints `live()` answers. Never returns."""
    while True:
        try:
            await ensure_service(client, cluster_ip, port)
            await ensure_endpoints(client, await live())
        except ApiError as e:
            log.warning("kubernetes service: %s", e)
        await asyncio.sleep(every)
