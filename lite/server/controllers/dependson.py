"""Declared dependencies: `lite.dev/depends-on: "db, cache.other-ns"` on a pod template becomes an egress
NetworkPolicy that lets the workload's pods reach exactly those Services' endpoints (plus the cluster DNS, and
the API server when `kubernetes` is listed). Every other connection they open is refused by the agents'
policy enforcement (`lite.agent.netpol`), which counts the refusals and reports them as Warning events.

reconcile(workload key `Kind|namespace/name`), for Deployments, StatefulSets, DaemonSets, Jobs and
ReplicaSets no other controller owns:
    gone                          ──► nothing (the policy's ownerReference lets the GC remove it)
    no annotation                 ──► the policy this controller made for it, if any, is deleted
    annotation                    ──► `<name>-depends-on` = desired_policy(...), created or updated when it
                                      differs (owned by the workload, controller=true)

`desired_policy` (pure) maps each entry to one egress rule:
    "db" / "db.ns"   the Service's pods: its selector as podSelector in its namespace (namespaceSelector on
                     `kubernetes.io/metadata.name`), ports = its targetPorts (names stay names: resolved on
                     each destination pod, as upstream's named ports are); a Service without a selector: its
                     EndpointSlices' addresses as /32 ipBlocks with the slices' ports
    "kubernetes"     default/kubernetes (the API server's endpoints, selector-less, as above)
    unknown Service  no rule (nothing allowed until it exists; the workload gets a `DependencyNotFound` event)
plus DNS (UDP and TCP 53 to the cluster DNS address) whenever the address is known. Service and
EndpointSlice changes requeue every annotated workload; the spec is written only when it differs.
"""

from __future__ import annotations

from typing import Any, ClassVar

from lite.client import Client
from lite.errors import ApiError
from lite.events import EventRecorder
from lite.informer import Informer, SharedInformers
from lite.objects import controller_of, deep_copy, owner_ref
from lite.server.controllers.runtime import Controller, builtin

Obj = dict[str, Any]
ANNOTATION = "lite.dev/depends-on"
SUFFIX = "-depends-on"
WORKLOADS = (("apps", "Deployment"), ("apps", "StatefulSet"), ("apps", "DaemonSet"), ("batch", "Job"),
             ("apps", "ReplicaSet"))
NS_LABEL = "kubernetes.io/metadata.name"


def dependencies(annotation: str, namespace: str) -> list[tuple[str, str]]:
    """(namespace, service) pairs of a depends-on annotation: `name`, `name.namespace`, `kubernetes`."""
    out: list[tuple[str, str]] = []
    for item in annotation.split(","):
        item = item.strip()
        if not item:
            continue
        if item == "kubernetes":
            pair = ("default", "kubernetes")
        else:
            name, _, ns = item.partition(".")
            pair = (ns or namespace, name)
        if pair not in out:
            out.append(pair)
    return out


def template_annotation(workload: Obj) -> str | None:
    spec = workload.get("spec") or {}
    template = (spec.get("template") or {}) if workload.get("kind") != "CronJob" else {}
    value = ((template.get("metadata") or {}).get("annotations") or {}).get(ANNOTATION)
    return value if isinstance(value, str) else None


def _service_rule(service: Obj, slices: list[Obj]) -> Obj | None:
    meta, spec = service.get("metadata") or {}, service.get("spec") or {}
    ns = str(meta.get("namespace") or "default")
    selector = spec.get("selector")
    if selector:
        ports = [{"protocol": p.get("protocol") or "TCP", "port": p.get("targetPort") or p.get("port")}
                 for p in spec.get("ports") or []]
        peer = {"podSelector": {"matchLabels": dict(selector)}, "namespaceSelector": {"matchLabels": {NS_LABEL: ns}}}
        return {"to": [peer], "ports": ports}
    addresses = sorted({a for s in slices for e in s.get("endpoints") or [] for a in e.get("addresses") or []})
    if not addresses:
        return None
    pairs = sorted({(str(p.get("protocol") or "TCP"), int(p["port"])) for s in slices for p in s.get("ports") or []
                    if isinstance(p.get("port"), int)})
    return {"to": [{"ipBlock": {"cidr": f"{a}/32"}} for a in addresses],
            "ports": [{"protocol": proto, "port": port} for proto, port in pairs]}


def desired_policy(workload: Obj, annotation: str, services: dict[tuple[str, str], Obj],
                   slices: dict[tuple[str, str], list[Obj]], cluster_dns: str) -> tuple[Obj, list[str]]:
    """The NetworkPolicy for `workload` and the dependencies not found (pure)."""
    meta = workload.get("metadata") or {}
    ns, name = str(meta.get("namespace") or "default"), str(meta.get("name") or "")
    rules: list[Obj] = []
    missing: list[str] = []
    if cluster_dns:
        rules.append({"to": [{"ipBlock": {"cidr": f"{cluster_dns}/32"}}],
                      "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]})
    for dep in dependencies(annotation, ns):
        service = services.get(dep)
        rule = _service_rule(service, slices.get(dep, [])) if service is not None else None
        if service is None:
            missing.append(f"{dep[1]}.{dep[0]}")
        if rule is not None:
            rules.append(rule)
    selector = (workload.get("spec") or {}).get("selector") or {}
    policy = {
        "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
        "metadata": {"name": (name + SUFFIX)[:253], "namespace": ns, "ownerReferences": [owner_ref(workload)],
                     "annotations": {ANNOTATION: annotation}},
        "spec": {"podSelector": deep_copy(selector), "policyTypes": ["Egress"], "egress": rules},
    }
    return policy, missing


class DependsOnController(Controller):
    name: ClassVar[str] = "depends-on"

    def __init__(self, client: Client, informers: SharedInformers, recorder: EventRecorder | None = None,
                 *, cluster_dns: str = "") -> None:
        super().__init__(client, informers, recorder or EventRecorder(client, "depends-on-controller"))
        self.cluster_dns = cluster_dns
        self.kinds = {kind: builtin(group, kind) for group, kind in WORKLOADS}
        self.workloads: dict[str, Informer] = {}
        for kind, k in self.kinds.items():
            inf = self.informer(k)
            inf.add_handlers(on_add=lambda o, kd=kind: self._enqueue(kd, o),  # type: ignore[misc]
                             on_update=lambda _o, o, kd=kind: self._enqueue(kd, o),  # type: ignore[misc]
                             on_delete=lambda o, kd=kind: None)  # type: ignore[misc]
            self.workloads[kind] = inf
        self.policy_kind = builtin("networking.k8s.io", "NetworkPolicy")
        self.policies = self.informer(self.policy_kind)
        self.services = self.informer(builtin("", "Service"))
        self.slices = self.informer(builtin("discovery.k8s.io", "EndpointSlice"))
        for inf in (self.services, self.slices):
            inf.add_handlers(on_add=self._all, on_update=lambda _o, n: self._all(n), on_delete=self._all)
        self.policies.add_handlers(on_update=lambda _o, n: self._policy_changed(n), on_delete=self._policy_changed)

    def _enqueue(self, kind: str, obj: Obj) -> None:
        meta = obj.get("metadata") or {}
        self.queue.add(f"{kind}|{meta.get('namespace', '')}/{meta.get('name', '')}")

    def _all(self, _obj: Obj) -> None:
        for kind, inf in self.workloads.items():
            for obj in inf.list():
                if template_annotation(obj) is not None:
                    self._enqueue(kind, obj)

    def _policy_changed(self, policy: Obj) -> None:
        ref = controller_of(policy)
        if ref is not None and ref.get("kind") in self.workloads and str(policy["metadata"]["name"]).endswith(SUFFIX):
            self.queue.add(f"{ref['kind']}|{policy['metadata'].get('namespace', '')}/{ref.get('name', '')}")

    def initial_keys(self) -> list[str]:
        return [f"{kind}|{key}" for kind, inf in self.workloads.items() for key in list(inf.keys())]

    async def reconcile(self, key: str) -> float | None:
        kind, _, obj_key = key.partition("|")
        workload = self.workloads[kind].get(obj_key)
        if workload is None:
            return None
        workload = {"apiVersion": self.kinds[kind].api_version, **workload, "kind": kind}
        ns, _, name = obj_key.partition("/")
        existing = self.policies.get(f"{ns}/{(name + SUFFIX)[:253]}")
        ours = existing is not None and (controller_of(existing) or {}).get("uid") == workload["metadata"].get("uid")
        annotation = template_annotation(workload)
        if kind == "ReplicaSet" and controller_of(workload) is not None:
            annotation = None  # its Deployment has the policy
        if annotation is None:
            if existing is not None and ours:
                await self._ignore_gone(self.client.delete(self.policy_kind, ns, existing["metadata"]["name"]))
            return None
        if existing is not None and not ours:
            return None  # a policy of that name made by someone else: leave it alone
        service_map = {(str(s["metadata"].get("namespace")), str(s["metadata"]["name"])): s
                       for s in self.services.list()}
        slice_map: dict[tuple[str, str], list[Obj]] = {}
        for s in self.slices.list():
            owner = ((s.get("metadata") or {}).get("labels") or {}).get("kubernetes.io/service-name")
            if owner:
                slice_map.setdefault((str(s["metadata"].get("namespace")), owner), []).append(s)
        want, missing = desired_policy(workload, annotation, service_map, slice_map, self.cluster_dns)
        if existing is None:
            await self.client.create(self.policy_kind, ns, want)
        elif existing.get("spec") != want["spec"] or (existing["metadata"].get("annotations") or {}).get(
                ANNOTATION) != annotation:
            body = deep_copy(existing)
            body["spec"] = want["spec"]
            body["metadata"].setdefault("annotations", {})[ANNOTATION] = annotation
            await self.client.update(self.policy_kind, ns, existing["metadata"]["name"], body)
        else:
            return None  # nothing changed: no write, no repeated event
        if missing:
            await self.recorder.event(workload, "Warning", "DependencyNotFound",
                                      f"lite.dev/depends-on names services that do not exist: {', '.join(missing)}")
        return None

    @staticmethod
    async def _ignore_gone(call: Any) -> None:
        try:
            await call
        except ApiError as exc:
            if exc.code != 404:
                raise
