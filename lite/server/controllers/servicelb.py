"""The built-in service load balancer: `type: LoadBalancer` Services answered on the nodes' own addresses.

Like k3s's ServiceLB: a LoadBalancer Service without `spec.loadBalancerClass` gets
`status.loadBalancer.ingress` = one `{ip}` per Ready node of its pool (its ExternalIP, else its InternalIP).
Every node's service proxy (`lite.agent.proxy`) treats ingress IPs like externalIPs, so `<node ip>:<port>` reaches the
Service from outside, next to its NodePort.

Pools (k3s's `svccontroller.k3s.cattle.io/enablelb` and `lbpool` labels, under one name): while no node carries
the `lite.dev/lb-pool` label every Ready node serves; once any does, only labelled nodes serve, and a Service
labelled `lite.dev/lb-pool: <pool>` is served only by the nodes whose label has that value (none: no ingress).

reconcile(service key):
    gone, or a LoadBalancer with a loadBalancerClass  ──► nothing (another implementation owns it)
    LoadBalancer                                        ──► ingress = its pool's Ready nodes' addresses (sorted)
    any other type still carrying ingress               ──► ingress cleared (as upstream's service controller)
Node changes requeue every LoadBalancer Service. The status is written only when it differs, so a resync or a
node heartbeat costs no write.
"""

from __future__ import annotations

from typing import Any, ClassVar

from lite.client import Client
from lite.events import EventRecorder
from lite.informer import SharedInformers
from lite.objects import deep_copy, key_of
from lite.server.controllers.runtime import Controller, builtin

Obj = dict[str, Any]
LB_POOL = "lite.dev/lb-pool"


def node_address(node: Obj) -> str:
    """The address a Ready node answers LoadBalancer traffic on ("" if it is not Ready or has none)."""
    status = node.get("status") or {}
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])
    if not ready:
        return ""
    by_type = {a.get("type"): a.get("address") for a in status.get("addresses") or []}
    return str(by_type.get("ExternalIP") or by_type.get("InternalIP") or "")


def pool_nodes(service: Obj, nodes: list[Obj]) -> list[Obj]:
    """The nodes that may serve `service` under the `lite.dev/lb-pool` labels (see the module docstring)."""
    def pool(obj: Obj) -> str | None:
        value = ((obj.get("metadata") or {}).get("labels") or {}).get(LB_POOL)
        return None if value is None else str(value)

    wanted = pool(service)
    if wanted is not None:
        return [n for n in nodes if pool(n) == wanted]
    if any(pool(n) is not None for n in nodes):
        return [n for n in nodes if pool(n) is not None]
    return nodes


def desired_ingress(service: Obj, nodes: list[Obj]) -> list[Obj] | None:
    """The ingress list this controller wants for `service`, or None if it is not ours to manage."""
    spec = service.get("spec") or {}
    if spec.get("type") != "LoadBalancer":
        return []
    if spec.get("loadBalancerClass"):
        return None
    return [{"ip": ip} for ip in sorted({a for a in map(node_address, pool_nodes(service, nodes)) if a})]


class ServiceLBController(Controller):
    name: ClassVar[str] = "servicelb"

    def __init__(self, client: Client, informers: SharedInformers, recorder: EventRecorder | None = None) -> None:
        super().__init__(client, informers, recorder or EventRecorder(client, "service-lb-controller"))
        self.kind = builtin("", "Service")
        self.services = self.informer(self.kind, primary=True)
        self.nodes = self.informer(builtin("", "Node"))
        self.watch_primary(self.services)
        self.nodes.add_handlers(on_add=self._nodes_changed, on_update=lambda _o, n: self._nodes_changed(n),
                                on_delete=self._nodes_changed)

    def _nodes_changed(self, _node: Obj) -> None:
        for svc in self.services.list():
            if (svc.get("spec") or {}).get("type") == "LoadBalancer":
                self.queue.add(key_of(svc))

    async def reconcile(self, key: str) -> float | None:
        svc = self.services.get(key)
        if svc is None:
            return None
        want = desired_ingress(svc, self.nodes.list())
        status = svc.get("status") or {}
        have = (status.get("loadBalancer") or {}).get("ingress") or []
        if want is None or want == have:
            return None
        body = deep_copy(svc)
        body["status"] = {**status, "loadBalancer": {"ingress": want} if want else {}}
        namespace, _, name = key.partition("/")
        await self.client.update(self.kind, namespace, name, body, subresource="status")
        return None
