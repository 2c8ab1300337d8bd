"""Writes what a node agent reports into the API: Node registration, pod and node status, Lease, Events,
final deletion of gracefully deleted pods.

Invariants:
- Pod status goes through `pods/status` only (spec is never touched) and only while the pod's uid is the
  one the agent reported: a pod deleted and recreated under the same name is not overwritten.
- The Node is created from Hello when absent (labels and taints from the agent only then); later Hellos
  and NodeStatus messages replace status fields only, so spec set by others (cordon, taints, podCIDR) stays.
- Status writes are read-modify-write with the resourceVersion precondition, retried on 409.
- A report about a pod or node that no longer exists is dropped (logged at debug), never an error.
"""

from __future__ import annotations

import datetime as dt
import logging
import platform
import time
from collections.abc import Awaitable, Callable
from typing import Any

from lite import wire
from lite.client import Client
from lite.errors import ApiError
from lite.kinds import Kind, KindRegistry
from lite.objects import deep_copy, rfc3339, rfc3339_micro

log = logging.getLogger("lite.server.join")

Obj = dict[str, Any]
RETRIES = 5
LEASE_NAMESPACE = "kube-node-lease"


def _kind(kinds: KindRegistry, group: str, kind: str) -> Kind:
    k = kinds.by_gvk(group, "v1", kind)
    if k is None:
        raise RuntimeError(f"kind {group}/v1 {kind} is not registered")
    return k


def event_name(involved_name: str, unix_ns: int) -> str:
    """client-go's recorder's Event name: `fmt.Sprintf("%v.%x", ref.Name, t.UnixNano())`."""
    return f"{involved_name}.{unix_ns:x}"


def default_labels(node: str) -> dict[str, str]:
    arch = {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), platform.machine())
    return {"kubernetes.io/hostname": node, "kubernetes.io/os": "linux", "kubernetes.io/arch": arch,
            "beta.kubernetes.io/os": "linux", "beta.kubernetes.io/arch": arch}


class Intake:
    """API writes for one hub (all nodes): stateless apart from the client and kinds."""

    def __init__(self, client: Client, kinds: KindRegistry) -> None:
        self.client = client
        self.pod = _kind(kinds, "", "Pod")
        self.node = _kind(kinds, "", "Node")
        self.event_kind = _kind(kinds, "", "Event")
        self.lease = _kind(kinds, "coordination.k8s.io", "Lease")

    async def register(self, hello: wire.Hello) -> Obj:
        """Create the Node if absent (with the annotations the agent publishes, e.g. its VTEP MAC), then
        write the status the agent reported. Returns the Node."""
        info = hello.info
        annotations = {str(k): str(v) for k, v in (info.get("annotations") or {}).items()}
        try:
            node = await self.client.get(self.node, "", hello.node)
        except ApiError as e:
            if e.code != 404:
                raise
            body: Obj = {"apiVersion": "v1", "kind": "Node", "metadata": {
                "name": hello.node, "labels": {**default_labels(hello.node), **(info.get("labels") or {})}},
                "spec": {}}
            if annotations:
                body["metadata"]["annotations"] = annotations
            if info.get("taints"):
                body["spec"]["taints"] = info["taints"]
            try:
                node = await self.client.create(self.node, "", body)
            except ApiError as e2:
                if e2.code != 409:
                    raise
                node = await self.client.get(self.node, "", hello.node)
        have = (node.get("metadata") or {}).get("annotations") or {}
        if any(have.get(k) != v for k, v in annotations.items()):
            node = await self.client.patch(self.node, "", hello.node, {"metadata": {"annotations": annotations}})
        status = info.get("status") or {}
        if status:
            node = await self.node_status(hello.node, status) or node
        return node

    async def _rmw(self, kind: Kind, ns: str, name: str, change: Callable[[Obj], Obj | None]) -> Obj | None:
        """Read, change (None: give up), write status with the RV precondition; retried on conflicts."""
        for _ in range(RETRIES):
            try:
                cur = await self.client.get(kind, ns, name)
            except ApiError as e:
                if e.code == 404:
                    return None
                raise
            new = change(deep_copy(cur))
            if new is None:
                return None
            try:
                return await self.client.update(kind, ns, name, new, subresource="status")
            except ApiError as e:
                if e.code == 404:
                    return None
                if e.code != 409:
                    raise
        log.warning("status of %s %s/%s: too many conflicts, dropped", kind.kind, ns, name)
        return None

    async def pod_status(self, msg: wire.PodStatus) -> None:
        def change(pod: Obj) -> Obj | None:
            if pod.get("metadata", {}).get("uid") != msg.uid:
                return None
            pod["status"] = msg.status
            return pod
        await self._rmw(self.pod, msg.namespace, msg.name, change)

    async def node_status(self, node: str, status: Obj) -> Obj | None:
        def change(obj: Obj) -> Obj:
            merged = dict(obj.get("status") or {})
            merged.update(status)
            obj["status"] = merged
            return obj
        return await self._rmw(self.node, "", node, change)

    async def renew_lease(self, node: str, msg: wire.LeaseRenew) -> None:
        now = rfc3339_micro()
        for _ in range(RETRIES):
            try:
                cur = await self.client.get(self.lease, LEASE_NAMESPACE, node)
            except ApiError as e:
                if e.code != 404:
                    raise
                owner = await self._node_owner(node)
                body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {
                    "name": node, "namespace": LEASE_NAMESPACE, "ownerReferences": owner},
                    "spec": {"holderIdentity": node, "leaseDurationSeconds": msg.duration_seconds,
                             "renewTime": now}}
                try:
                    await self.client.create(self.lease, LEASE_NAMESPACE, body)
                    return
                except ApiError as e2:
                    if e2.code != 409:
                        raise
                    continue
            new = deep_copy(cur)
            new.setdefault("spec", {}).update(
                {"holderIdentity": node, "leaseDurationSeconds": msg.duration_seconds, "renewTime": now})
            try:
                await self.client.update(self.lease, LEASE_NAMESPACE, node, new)
                return
            except ApiError as e:
                if e.code not in (404, 409):
                    raise

    async def _node_owner(self, node: str) -> list[Obj]:
        try:
            obj = await self.client.get(self.node, "", node)
        except ApiError:
            return []
        return [{"apiVersion": "v1", "kind": "Node", "name": node, "uid": obj["metadata"]["uid"]}]

    async def event(self, node: str, msg: wire.Event) -> None:
        """Create the Event an agent recorded, named and stamped as the kubelet's recorder (client-go
        `tools/record`) does: `<involved object's name>.<hex nanoseconds since the epoch>`, the same instant as
        first/lastTimestamp."""
        ev = deep_copy(msg.event)
        involved = ev.get("involvedObject") or {}
        ns = involved.get("namespace") or "default"
        meta = ev.setdefault("metadata", {})
        ns_now = time.time_ns()
        meta.setdefault("name", event_name(str(involved.get("name") or node), ns_now))
        meta["namespace"] = ns
        now = rfc3339(dt.datetime.fromtimestamp(ns_now / 1e9, dt.UTC))
        ev.setdefault("apiVersion", "v1")
        ev.setdefault("kind", "Event")
        ev.setdefault("source", {"component": "kubelet", "host": node})
        ev.setdefault("firstTimestamp", now)
        ev.setdefault("lastTimestamp", now)
        ev.setdefault("count", 1)
        ev.setdefault("type", "Normal")
        ev.setdefault("reportingComponent", "kubelet")
        ev.setdefault("reportingInstance", node)
        await self.client.create(self.event_kind, ns, ev)

    async def pod_final(self, msg: wire.PodFinal) -> None:
        try:
            await self.client.delete(self.pod, msg.namespace, msg.name, grace_period_seconds=0,
                                     preconditions={"uid": msg.uid})
        except ApiError as e:
            if e.code not in (404, 409):
                raise


Apply = Callable[[wire.Message], Awaitable[None]]


def intake_for(intake: Intake, hello: wire.Hello) -> Apply:
    """The handler of one node's reports (agent → server messages that write to the API)."""
    node = hello.node

    async def apply(msg: wire.Message) -> None:
        if isinstance(msg, wire.PodStatus):
            await intake.pod_status(msg)
        elif isinstance(msg, wire.NodeStatus):
            if await intake.node_status(node, msg.status) is None:
                # The Node was deleted while its agent is connected: register it again, as a kubelet does.
                await intake.register(hello)
                await intake.node_status(node, msg.status)
        elif isinstance(msg, wire.LeaseRenew):
            await intake.renew_lease(node, msg)
        elif isinstance(msg, wire.Event):
            await intake.event(node, msg)
        elif isinstance(msg, wire.PodFinal):
            await intake.pod_final(msg)
    return apply
