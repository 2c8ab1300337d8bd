"""Endpoints controller: a core/v1 Endpoints per selector Service, listing the pods that back it.

reconcile(namespace/name), as upstream pkg/controller/endpoint `syncService`:
    Service gone ──► delete its Endpoints
    no selector  ──► leave the Endpoints alone (user managed)
    else         ──► pods of the namespace matching the selector, with a podIP, not terminal, not being
                     deleted (unless publishNotReadyAddresses) ──► per Service port resolve targetPort
                     (number, or a container port by name and protocol) ──► ready pods (or all, with
                     publishNotReadyAddresses) in `addresses`, others in `notReadyAddresses`, each with ip,
                     nodeName, targetRef, hostname (when spec.subdomain is the Service) ──► subsets repacked
                     (addresses with the same port set share a subset) ──► write if it differs

Invariants: level-triggered (looks only at the caches); Endpoints carry the Service's labels plus
`service.kubernetes.io/headless` for headless Services. The helpers here are shared with EndpointSlices.
"""

from __future__ import annotations

from typing import Any, ClassVar

from lite.client import Client
from lite.errors import ApiError
from lite.events import EventRecorder
from lite.informer import NAMESPACE_INDEX, SharedInformers
from lite.objects import deep_copy, is_deleting, key_of, labels_of, meta, name_of, namespace_of, uid_of
from lite.selectors import LabelSelector
from lite.server.controllers.runtime import Controller, builtin

Obj = dict[str, Any]
HEADLESS_LABEL = "service.kubernetes.io/headless"


def pod_ready(pod: Obj) -> bool:
    for c in (pod.get("status") or {}).get("conditions") or []:
        if c.get("type") == "Ready":
            return bool(c.get("status") == "True")
    return False


def pod_ip(pod: Obj) -> str:
    return str((pod.get("status") or {}).get("podIP") or "")


def should_include(pod: Obj, include_terminating: bool) -> bool:
    """Upstream ShouldPodBeInEndpoints."""
    if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
        return False
    if not pod_ip(pod):
        return False
    return include_terminating or not is_deleting(pod)


def service_selector(svc: Obj) -> LabelSelector | None:
    """The selector of a Service that the controllers manage; None for selector-less Services."""
    sel = (svc.get("spec") or {}).get("selector")
    if not sel:
        return None
    return LabelSelector.from_dict({"matchLabels": sel})


def resolve_port(pod: Obj, sport: Obj) -> int | None:
    """Upstream FindPort: the Service port's targetPort on this pod (named ports by name and protocol)."""
    target = sport.get("targetPort", sport.get("port"))
    if isinstance(target, int):
        return target
    if isinstance(target, str) and target.isdigit():
        return int(target)
    proto = sport.get("protocol", "TCP")
    for c in (pod.get("spec") or {}).get("containers") or []:
        for cp in c.get("ports") or []:
            if cp.get("name") == target and cp.get("protocol", "TCP") == proto:
                return int(cp["containerPort"])
    return None


def target_ref(pod: Obj) -> Obj:
    return {"kind": "Pod", "namespace": namespace_of(pod), "name": name_of(pod), "uid": uid_of(pod)}


def pod_hostname(pod: Obj, svc: Obj) -> str:
    spec = pod.get("spec") or {}
    if spec.get("hostname") and spec.get("subdomain") == name_of(svc):
        return str(spec["hostname"])
    return ""


def is_headless(svc: Obj) -> bool:
    return (svc.get("spec") or {}).get("clusterIP") == "None"


def service_labels(svc: Obj) -> dict[str, str]:
    labels = dict(labels_of(svc))
    if is_headless(svc):
        labels[HEADLESS_LABEL] = ""
    else:
        labels.pop(HEADLESS_LABEL, None)
    return labels


def _address(pod: Obj, svc: Obj) -> Obj:
    addr: Obj = {"ip": pod_ip(pod), "targetRef": target_ref(pod)}
    node = (pod.get("spec") or {}).get("nodeName")
    if node:
        addr["nodeName"] = node
    host = pod_hostname(pod, svc)
    if host:
        addr["hostname"] = host
    return addr


def _port_key(p: Obj) -> tuple[str, int, str]:
    return (str(p.get("name", "")), int(p["port"]), str(p.get("protocol", "TCP")))


def build_subsets(svc: Obj, pods: list[Obj]) -> list[Obj]:
    """The repacked subsets of `svc` over the candidate `pods` (already selector-matched)."""
    spec = svc.get("spec") or {}
    publish = bool(spec.get("publishNotReadyAddresses"))
    sports = [p for p in spec.get("ports") or [] if isinstance(p, dict)]
    # (ready, ports) per address ip; a pod whose named port does not resolve is left out of that port.
    entries: dict[tuple[tuple[str, int, str], ...], tuple[list[Obj], list[Obj]]] = {}
    for pod in sorted(pods, key=pod_ip):
        if not should_include(pod, publish):
            continue
        ports: list[tuple[str, int, str]] = []
        for sp in sports:
            num = resolve_port(pod, sp)
            if num is not None:
                ports.append((str(sp.get("name", "")), num, str(sp.get("protocol", "TCP"))))
        if sports and not ports:
            continue
        ready, not_ready = entries.setdefault(tuple(sorted(ports)), ([], []))
        (ready if publish or pod_ready(pod) else not_ready).append(_address(pod, svc))
    subsets: list[Obj] = []
    for ports_key, (ready, not_ready) in sorted(entries.items()):
        subset: Obj = {}
        if ready:
            subset["addresses"] = ready
        if not_ready:
            subset["notReadyAddresses"] = not_ready
        if ports_key:
            subset["ports"] = [{"name": n, "port": p, "protocol": pr} if n else {"port": p, "protocol": pr}
                               for n, p, pr in ports_key]
        subsets.append(subset)
    return subsets


class ServiceIndexedController(Controller):
    """Shared wiring: Services primary, pods mapped to the Services that select them."""

    def __init__(self, client: Client, informers: SharedInformers, recorder: EventRecorder | None = None) -> None:
        super().__init__(client, informers, recorder)
        self.services = self.informer(builtin("", "Service"), primary=True)
        self.pods = self.informer(builtin("", "Pod"))
        self.watch_primary(self.services)
        self.pods.add_handlers(on_add=self._pod_changed, on_update=self._pod_updated, on_delete=self._pod_changed)

    def _pod_changed(self, pod: Obj) -> None:
        # A pod without a podIP is in no Endpoints or EndpointSlice (`should_include`): its add or delete
        # changes none (every pod while it waits for a node: the Services are not even looked at).
        if pod_ip(pod):
            self._enqueue_selecting(pod)

    def _pod_updated(self, old: Obj, new: Obj) -> None:
        if old is new or not (pod_ip(new) or pod_ip(old)):
            return  # without a podIP before and after, the pod was and stays in no Endpoints (status writes)
        self._enqueue_selecting(new)
        if labels_of(old) != labels_of(new):
            self._enqueue_selecting(old)

    def _enqueue_selecting(self, pod: Obj) -> None:
        labels = labels_of(pod)
        for svc in self.services.by_index(NAMESPACE_INDEX, namespace_of(pod)):
            sel = service_selector(svc)
            if sel is not None and sel.matches(labels):
                self.enqueue(svc)

    def selected_pods(self, svc: Obj, sel: LabelSelector) -> list[Obj]:
        return [p for p in self.pods.by_index(NAMESPACE_INDEX, namespace_of(svc)) if sel.matches(labels_of(p))]


class EndpointsController(ServiceIndexedController):
    name: ClassVar[str] = "endpoints"
    workers = 4

    def __init__(self, client: Client, informers: SharedInformers, recorder: EventRecorder | None = None) -> None:
        super().__init__(client, informers, recorder or EventRecorder(client, "endpoint-controller"))
        self.ep_kind = builtin("", "Endpoints")
        self.endpoints = self.informer(self.ep_kind)
        self.endpoints.add_handlers(on_delete=self._endpoints_changed,
                                    on_update=lambda _o, n: self._endpoints_changed(n))

    def _endpoints_changed(self, ep: Obj) -> None:
        if self.services.get(key_of(ep)) is not None:
            self.enqueue(ep)

    async def reconcile(self, key: str) -> float | None:
        ns, name = key.split("/", 1)
        svc = self.services.get(key)
        if svc is None:
            if self.endpoints.get(key) is not None:
                try:
                    await self.client.delete(self.ep_kind, ns, name)
                except ApiError as e:
                    if e.code != 404:
                        raise
            return None
        sel = service_selector(svc)
        if sel is None:
            return None
        subsets = build_subsets(svc, self.selected_pods(svc, sel))
        await self._write(svc, subsets)
        return None

    async def _write(self, svc: Obj, subsets: list[Obj]) -> None:
        ns, name = namespace_of(svc), name_of(svc)
        labels = service_labels(svc)
        have = self.endpoints.get(key_of(svc))
        if have is None:
            body: Obj = {"apiVersion": "v1", "kind": "Endpoints",
                         "metadata": {"name": name, "namespace": ns, "labels": labels}, "subsets": subsets}
            try:
                await self.client.create(self.ep_kind, ns, body)
            except ApiError as e:
                if e.code != 409:
                    raise
                have = await self.client.get(self.ep_kind, ns, name)
            else:
                return
        if (have.get("subsets") or []) == subsets and labels_of(have) == labels:
            return
        new = deep_copy(have)
        new["subsets"] = subsets
        meta(new)["labels"] = labels
        await self.client.update(self.ep_kind, ns, name, new)
