"""EndpointSlice controller: discovery.k8s.io/v1 EndpointSlices for every selector Service.

reconcile(namespace/name), as upstream pkg/controller/endpointslice (reconciler.go), simplified:
    desired endpoints: selected pods with a podIP, not terminal (terminating ones included, as upstream),
        grouped by their resolved port list (named targetPorts can differ per pod) ──►
    per port group: keep each desired endpoint in the slice that already holds it (updated in place),
        put the rest into slices with room, then into new slices (`<service>-` generateName),
        at most `max_per_slice` (100) endpoints each ──► slices left empty are deleted; a Service
        with no endpoints keeps exactly one empty placeholder slice ──► writes only where a slice differs

Invariants: only slices labelled `endpointslice.kubernetes.io/managed-by: endpointslice-controller.k8s.io`
and `kubernetes.io/service-name: <service>` (and controlled by the Service) are touched; each endpoint has
conditions ready (pod Ready and not terminating, or publishNotReadyAddresses), serving (pod Ready),
terminating; targetRef, nodeName, hostname as the Endpoints controller.
"""

from __future__ import annotations

from typing import Any, ClassVar

from lite.client import Client
from lite.errors import ApiError
from lite.events import EventRecorder
from lite.informer import SharedInformers
from lite.objects import deep_copy, is_deleting, labels_of, meta, name_of, namespace_of, owner_ref
from lite.server.controllers.endpoints import (
    ServiceIndexedController,
    pod_hostname,
    pod_ip,
    pod_ready,
    resolve_port,
    service_labels,
    service_selector,
    should_include,
    target_ref,
)
from lite.server.controllers.runtime import builtin

Obj = dict[str, Any]
SERVICE_NAME = "kubernetes.io/service-name"
MANAGED_BY = "endpointslice.kubernetes.io/managed-by"
CONTROLLER_NAME = "endpointslice-controller.k8s.io"
MAX_PER_SLICE = 100
PortsKey = tuple[tuple[str, int, str], ...]


def slice_endpoint(pod: Obj, svc: Obj) -> Obj:
    publish = bool((svc.get("spec") or {}).get("publishNotReadyAddresses"))
    terminating = is_deleting(pod)
    ready = pod_ready(pod)
    ep: Obj = {"addresses": [pod_ip(pod)],
               "conditions": {"ready": publish or (ready and not terminating), "serving": ready,
                              "terminating": terminating},
               "targetRef": target_ref(pod)}
    node = (pod.get("spec") or {}).get("nodeName")
    if node:
        ep["nodeName"] = node
    host = pod_hostname(pod, svc)
    if host:
        ep["hostname"] = host
    return ep


def desired(svc: Obj, pods: list[Obj]) -> dict[PortsKey, dict[str, Obj]]:
    """Endpoints by port list, each keyed by address."""
    sports = [p for p in (svc.get("spec") or {}).get("ports") or [] if isinstance(p, dict)]
    out: dict[PortsKey, dict[str, Obj]] = {}
    for pod in pods:
        if not should_include(pod, True):
            continue
        ports = []
        for sp in sports:
            num = resolve_port(pod, sp)
            if num is not None:
                ports.append((str(sp.get("name", "")), num, str(sp.get("protocol", "TCP"))))
        if sports and not ports:
            continue
        out.setdefault(tuple(ports), {})[pod_ip(pod)] = slice_endpoint(pod, svc)
    return out


def ports_of(key: PortsKey) -> list[Obj]:
    return [{"name": n, "port": p, "protocol": pr} for n, p, pr in key]


def ports_key(sl: Obj) -> PortsKey:
    return tuple((str(p.get("name", "")), int(p.get("port") or 0), str(p.get("protocol", "TCP")))
                 for p in sl.get("ports") or [])


def plan(existing: list[Obj], want: dict[PortsKey, dict[str, Obj]], limit: int
         ) -> tuple[list[tuple[Obj, PortsKey, list[Obj]]], list[tuple[PortsKey, list[Obj]]], list[Obj]]:
    """(slices to keep with their ports and endpoints, new slices (ports, endpoints), slices to delete).

    A slice about to be deleted is reused for a slice about to be created (upstream does this with the
    placeholder), so a Service's first endpoints do not churn slice names."""
    keep: list[tuple[Obj, PortsKey, list[Obj]]] = []
    create: list[tuple[PortsKey, list[Obj]]] = []
    for pk, eps in want.items():
        pool = dict(eps)
        mine = [s for s in existing if ports_key(s) == pk]
        groups: list[tuple[Obj, list[Obj]]] = []
        for sl in mine:
            held = [pool.pop(a) for e in sl.get("endpoints") or [] for a in (e.get("addresses") or [])[:1]
                    if a in pool]
            groups.append((sl, held))
        rest = [pool[a] for a in sorted(pool)]
        for sl, held in groups:
            room = max(0, limit - len(held))
            held.extend(rest[:room])
            rest = rest[room:]
            if held:
                keep.append((sl, pk, held))
        create += [(pk, rest[i:i + limit]) for i in range(0, len(rest), limit)]
    kept = {id(sl) for sl, _, _ in keep}
    delete = [s for s in existing if id(s) not in kept]
    if not want:  # placeholder: one empty slice stays
        create.append(((), []))
    while delete and create:
        new_pk, new_eps = create.pop(0)
        keep.append((delete.pop(0), new_pk, new_eps))
    return keep, create, delete


class EndpointSliceController(ServiceIndexedController):
    name: ClassVar[str] = "endpointslice"
    workers = 4

    def __init__(self, client: Client, informers: SharedInformers, recorder: EventRecorder | None = None, *,
                 max_per_slice: int = MAX_PER_SLICE) -> None:
        super().__init__(client, informers, recorder or EventRecorder(client, "endpoint-slice-controller"))
        self.max_per_slice = max_per_slice
        self.kind = builtin("discovery.k8s.io", "EndpointSlice")
        self.slices = self.informer(self.kind)
        self.slices.add_index("service", self._slice_service)
        self.slices.add_handlers(on_add=self._slice_changed, on_update=lambda _o, n: self._slice_changed(n),
                                 on_delete=self._slice_changed)

    @staticmethod
    def _slice_service(sl: Obj) -> list[str]:
        labels = labels_of(sl)
        if labels.get(MANAGED_BY) != CONTROLLER_NAME or not labels.get(SERVICE_NAME):
            return []
        return [f"{namespace_of(sl)}/{labels[SERVICE_NAME]}"]

    def _slice_changed(self, sl: Obj) -> None:
        for key in self._slice_service(sl):
            self.queue.add(key)

    async def reconcile(self, key: str) -> float | None:
        svc = self.services.get(key)
        existing = sorted(self.slices.by_index("service", key), key=name_of)
        if svc is None or is_deleting(svc):
            await self._delete(existing)  # the GC would too (ownerReferences); this is quicker
            return None
        sel = service_selector(svc)
        if sel is None:
            await self._delete(existing)
            return None
        keep, create, delete = plan(existing, desired(svc, self.selected_pods(svc, sel)), self.max_per_slice)
        for pk, eps in create:
            await self.client.create(self.kind, namespace_of(svc), self._body(svc, pk, eps))
        for sl, pk, eps in keep:
            await self._update(svc, sl, pk, eps)
        await self._delete(delete)
        return None

    def _labels(self, svc: Obj) -> dict[str, str]:
        return {**service_labels(svc), SERVICE_NAME: name_of(svc), MANAGED_BY: CONTROLLER_NAME}

    def _body(self, svc: Obj, pk: PortsKey, eps: list[Obj]) -> Obj:
        families = (svc.get("spec") or {}).get("ipFamilies") or ["IPv4"]
        return {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                "metadata": {"generateName": f"{name_of(svc)}-", "namespace": namespace_of(svc),
                             "labels": self._labels(svc), "ownerReferences": [owner_ref(svc)]},
                "addressType": families[0], "endpoints": eps, "ports": ports_of(pk)}

    async def _update(self, svc: Obj, sl: Obj, pk: PortsKey, eps: list[Obj]) -> None:
        labels = self._labels(svc)
        if (sl.get("endpoints") or []) == eps and labels_of(sl) == labels and ports_key(sl) == pk:
            return
        new = deep_copy(sl)
        new["endpoints"] = eps
        new["ports"] = ports_of(pk)
        meta(new)["labels"] = labels
        await self.client.update(self.kind, namespace_of(sl), name_of(sl), new)

    async def _delete(self, slices: list[Obj]) -> None:
        for sl in slices:
            try:
                await self.client.delete(self.kind, namespace_of(sl), name_of(sl))
            except ApiError as e:
                if e.code != 404:
                    raise
