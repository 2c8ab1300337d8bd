"""The `kube-system/kube-dns` Service: the cluster DNS IP as a real Service, as on k3s (CoreDNS's Service).

lite's cluster DNS is node-local: every agent with a service proxy answers on the cluster DNS IP itself (a /32 on
`lo` of its node netns, `lite.netns.dnsaddr`). The Service makes that IP what Kubernetes users expect to find
(`kubectl -n kube-system get svc kube-dns`, ClusterIP = `--cluster-dns`, ports 53/UDP `dns` and 53/TCP
`dns-tcp`). It has no selector; its EndpointSlice (also `kube-dns`, managed by lite) names the cluster DNS IP as
its one endpoint, so the service proxy DNATs a query to the very address it was sent to and the node that
received it answers locally: no cross-node hop, and never "a service without endpoints" to reject.

Invariants: idempotent (create when missing, rewrite only what drifted); the ClusterIP is only ever set at
create (a Service's clusterIP is immutable).
"""

from __future__ import annotations

import logging
from typing import Any

from lite.client import Client
from lite.errors import ApiError
from lite.kinds import BUILTIN_KINDS, Kind
from lite.objects import deep_copy

Obj = dict[str, Any]
log = logging.getLogger("lite.services")
NAMESPACE = "kube-system"
NAME = "kube-dns"
LABELS = {"k8s-app": "kube-dns", "kubernetes.io/cluster-service": "true", "kubernetes.io/name": "CoreDNS"}
PORTS = (("dns", 53, "UDP"), ("dns-tcp", 53, "TCP"))


def _kind(group: str, kind: str) -> Kind:
    return next(k for k in BUILTIN_KINDS if k.group == group and k.kind == kind)


def kube_dns_service(cluster_ip: str) -> Obj:
    return {"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": NAME, "namespace": NAMESPACE, "labels": dict(LABELS)},
            "spec": {"type": "ClusterIP", "clusterIP": cluster_ip, "clusterIPs": [cluster_ip],
                     "ports": [{"name": n, "port": p, "protocol": proto, "targetPort": p} for n, p, proto in PORTS]}}


def kube_dns_slice(cluster_ip: str) -> Obj:
    return {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": NAME, "namespace": NAMESPACE,
                         "labels": {"kubernetes.io/service-name": NAME,
                                    "endpointslice.kubernetes.io/managed-by": "node-local-dns.lite.dev"}},
            "addressType": "IPv4",
            "endpoints": [{"addresses": [cluster_ip], "conditions": {"ready": True, "serving": True}}],
            "ports": [{"name": n, "port": p, "protocol": proto} for n, p, proto in PORTS]}


async def ensure_kube_dns_service(client: Client, cluster_ip: str) -> None:
    """Create or repair the Service and EndpointSlice `kube-system/kube-dns`."""
    await _ensure(client, _kind("", "Service"), kube_dns_service(cluster_ip), ())
    await _ensure(client, _kind("discovery.k8s.io", "EndpointSlice"), kube_dns_slice(cluster_ip),
                  ("addressType", "endpoints", "ports"))


async def _ensure(client: Client, kind: Kind, want: Obj, fields: tuple[str, ...]) -> None:
    try:
        have = await client.get(kind, NAMESPACE, NAME)
    except ApiError as e:
        if e.code != 404:
            raise
        try:
            await client.create(kind, NAMESPACE, want)
        except ApiError as e2:
            if e2.code != 409:
                raise
        return
    if all(have.get(f) == want.get(f) for f in fields):
        return
    new = deep_copy(have)
    for f in fields:
        new[f] = want[f]
    await client.update(kind, NAMESPACE, NAME, new)
