"""The `default/kubernetes` Service and its Endpoints/EndpointSlice: how pods find the API server.

Upstream's apiserver "master endpoint reconciler": the Service has the first address of the service CIDR
(10.43.0.1) and port 443 named https; its Endpoints and EndpointSlice (both named `kubernetes`, no selector,
so the endpoints controllers leave them alone) point at the server's advertised address and secure port.

Invariants: idempotent (create when missing, rewrite only what drifted); safe to run every few seconds.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from lite.client import Client
from lite.errors import ApiError
from lite.kinds import BUILTIN_KINDS, Kind
from lite.objects import deep_copy

Obj = dict[str, Any]
log = logging.getLogger("lite.services")


def _kind(group: str, kind: str) -> Kind:
    return next(k for k in BUILTIN_KINDS if k.group == group and k.kind == kind)


def kubernetes_service(cluster_ip: str) -> Obj:
    return {"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "kubernetes", "namespace": "default",
                         "labels": {"component": "apiserver", "provider": "kubernetes"}},
            "spec": {"type": "ClusterIP", "clusterIP": cluster_ip, "sessionAffinity": "None",
                     "ports": [{"name": "https", "port": 443, "protocol": "TCP", "targetPort": 6443}]}}


def _endpoints(address: str, port: int) -> Obj:
    return {"apiVersion": "v1", "kind": "Endpoints",
            "metadata": {"name": "kubernetes", "namespace": "default",
                         "labels": {"endpointslice.kubernetes.io/skip-mirror": "true"}},
            "subsets": [{"addresses": [{"ip": address}],
                         "ports": [{"name": "https", "port": port, "protocol": "TCP"}]}]}


def _slice(address: str, port: int) -> Obj:
    family = "IPv6" if ":" in address else "IPv4"
    return {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": "kubernetes", "namespace": "default",
                         "labels": {"kubernetes.io/service-name": "kubernetes"}},
            "addressType": family,
            "endpoints": [{"addresses": [address], "conditions": {"ready": True}}],
            "ports": [{"name": "https", "port": port, "protocol": "TCP"}]}


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
    if all(have.get(f) == want.get(f) for f in fields):
        return
    new = deep_copy(have)
    for f in fields:
        new[f] = want[f]
    await client.update(kind, "default", name, new)


async def ensure_kubernetes_service(client: Client, cluster_ip: str, address: str, port: int) -> None:
    """Create or repair the Service, Endpoints and EndpointSlice `default/kubernetes`."""
    svc_kind = _kind("", "Service")
    try:
        await client.get(svc_kind, "default", "kubernetes")
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
    await _ensure(client, _kind("", "Endpoints"), _endpoints(address, port), ("subsets",))
    await _ensure(client, _kind("discovery.k8s.io", "EndpointSlice"), _slice(address, port),
                  ("addressType", "endpoints", "ports"))


async def keep_kubernetes_service(client: Client, cluster_ip: str, address: str, port: int, *,
                                  every: float = 10.0) -> None:
    """Re-check every `every` seconds (someone may delete or edit them). Never returns."""
    while True:
        try:
            await ensure_kubernetes_service(client, cluster_ip, address, port)
        except ApiError as e:
            log.warning("kubernetes service: %s", e)
        await asyncio.sleep(every)
