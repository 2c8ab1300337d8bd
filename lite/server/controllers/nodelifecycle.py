"""Node lifecycle: notice nodes that stopped reporting, mark them, taint them (upstream nodelifecycle).

reconcile(node name), as upstream `monitorNodeHealth` + `doNoScheduleTaintingPass` + `doNoExecuteTaintingPass`:
    probe time = when this controller last *saw* the node's Lease (kube-node-lease/<node>) renewTime or its
                 Ready heartbeat change (first sight counts as a change, so a new leader grants a grace period)
    now - probe > grace period (40 s) ──► Ready, MemoryPressure, DiskPressure, PIDPressure become Unknown,
                 reason NodeStatusUnknown "Kubelet stopped posting node status." (NodeStatusNeverUpdated
                 "Kubelet never posted node status." when there was no Ready condition)
    taints follow Ready: Unknown → node.kubernetes.io/unreachable, False → node.kubernetes.io/not-ready,
                 each NoSchedule + NoExecute (timeAdded set), removed once Ready is True again; no Ready
                 condition yet → not-ready:NoSchedule only (as upstream's admission does for new nodes);
                 spec.unschedulable → node.kubernetes.io/unschedulable:NoSchedule
    Ready not True ──► pods on the node still Ready get Ready=False (upstream MarkPodsNotReady), stopping as soon
                 as the cached node is Ready again (a reconnected agent re-sends its pods' statuses at its
                 resync only: a write after that would stay)
    otherwise requeued for when the grace period would run out.

Invariants: taints other than the ones above are left untouched; writes use the read resourceVersion (a
racing kubelet heartbeat makes a 409 and a retry on fresh state); the clock and grace period are injected
(`clock() -> float` seconds, monotonic; `now() -> datetime` for timestamps). Eviction of pods from tainted
nodes is `taints.py`. Zone-disruption rate limiting is not done (lite clusters are one zone).
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable
from typing import Any, ClassVar

from lite.client import Client
from lite.errors import ApiError
from lite.events import EventRecorder
from lite.informer import Informer, SharedInformers
from lite.objects import deep_copy, name_of, namespace_of, rfc3339
from lite.objects import now as utc_now
from lite.server.controllers.runtime import Controller, builtin

Obj = dict[str, Any]
NODE_GRACE_PERIOD = 40.0
LEASE_NAMESPACE = "kube-node-lease"
UNREACHABLE = "node.kubernetes.io/unreachable"
NOT_READY = "node.kubernetes.io/not-ready"
UNSCHEDULABLE = "node.kubernetes.io/unschedulable"
MANAGED_TAINTS = (UNREACHABLE, NOT_READY, UNSCHEDULABLE)
NODE_NAME_INDEX = "spec.nodeName"
_UNKNOWN_CONDITIONS = ("Ready", "MemoryPressure", "DiskPressure", "PIDPressure")


def node_name_index(pod: Obj) -> list[str]:
    """`NODE_NAME_INDEX`'s value of a pod: its node; none for a pod not bound (no reader asks for those, and
    10,000 pending pods under "" were a set of 10,000 keys, ~0.5 MB)."""
    node = (pod.get("spec") or {}).get("nodeName")
    return [str(node)] if node else []


def ensure_node_index(pods: Informer) -> None:
    """Index pods by spec.nodeName (shared by the node controllers; added once)."""
    try:
        pods.add_index(NODE_NAME_INDEX, node_name_index)
    except ValueError:
        pass


def ready_status(node: Obj) -> str:
    """The Ready condition's status; "" when the node never reported one."""
    for c in (node.get("status") or {}).get("conditions") or []:
        if c.get("type") == "Ready":
            return str(c.get("status", "Unknown"))
    return ""


def wanted_taints(node: Obj, stamp: str) -> list[Obj]:
    """The node's taints with the managed ones set from its Ready condition and spec.unschedulable."""
    spec = node.get("spec") or {}
    have = [t for t in spec.get("taints") or [] if isinstance(t, dict)]
    status = ready_status(node)
    key = UNREACHABLE if status == "Unknown" else NOT_READY if status == "False" else ""
    want: list[tuple[str, str]] = []
    if key:
        want += [(key, "NoSchedule"), (key, "NoExecute")]
    elif not status:  # never reported (upstream's TaintNodesByCondition admission): no scheduling yet
        want.append((NOT_READY, "NoSchedule"))
    if spec.get("unschedulable"):
        want.append((UNSCHEDULABLE, "NoSchedule"))
    out = [t for t in have if t.get("key") not in MANAGED_TAINTS or (t.get("key"), t.get("effect")) in want]
    present = {(t.get("key"), t.get("effect")) for t in out}
    for k, effect in want:
        if (k, effect) not in present:
            taint: Obj = {"key": k, "effect": effect}
            if effect == "NoExecute":
                taint["timeAdded"] = stamp
            out.append(taint)
    return out


class NodeLifecycleController(Controller):
    name: ClassVar[str] = "nodelifecycle"

    def __init__(self, client: Client, informers: SharedInformers, recorder: EventRecorder | None = None, *,
                 grace_period: float = NODE_GRACE_PERIOD, clock: Callable[[], float] = time.monotonic,
                 now: Callable[[], dt.datetime] = utc_now) -> None:
        super().__init__(client, informers, recorder or EventRecorder(client, "node-controller"))
        self.kind = builtin("", "Node")
        self.pod_kind = builtin("", "Pod")
        self.grace_period = grace_period
        self.clock = clock
        self.now = now
        self.nodes = self.informer(self.kind, primary=True)
        self.leases = self.informers.informer(builtin("coordination.k8s.io", "Lease"), LEASE_NAMESPACE)
        self.watched.append(self.leases)
        self.pods = self.informer(self.pod_kind)
        ensure_node_index(self.pods)
        self.watch_primary(self.nodes)
        self.leases.add_handlers(on_add=self._lease, on_update=lambda _o, n: self._lease(n))
        self._probe: dict[str, tuple[str, float]] = {}

    def on_start(self) -> None:
        self._probe = {}

    def _lease(self, lease: Obj) -> None:
        self.queue.add(name_of(lease))

    def _heartbeat(self, node: Obj) -> str:
        # peek: a read that keeps nothing decoded (each node's Lease is read on each of its renewals)
        lease = self.leases.peek(f"{LEASE_NAMESPACE}/{name_of(node)}")
        renew = str(((lease or {}).get("spec") or {}).get("renewTime") or "")
        beat = ""
        for c in (node.get("status") or {}).get("conditions") or []:
            if c.get("type") == "Ready":
                beat = str(c.get("lastHeartbeatTime") or "")
        return f"{renew}|{beat}"

    def _silent_for(self, node: Obj) -> float:
        """Seconds since this controller last saw a sign of life from the node."""
        beat, t = self._heartbeat(node), self.clock()
        seen = self._probe.get(name_of(node))
        if seen is None or seen[0] != beat:
            self._probe[name_of(node)] = (beat, t)
            return 0.0
        return t - seen[1]

    async def reconcile(self, key: str) -> float | None:
        node = self.nodes.get(key)
        if node is None:
            self._probe.pop(key, None)
            return None
        silent = self._silent_for(node)
        if silent > self.grace_period:
            node = await self._mark_unknown(node)
        node = await self._taint(node)
        if ready_status(node) in ("False", "Unknown"):
            await self._mark_pods_not_ready(key)
        return max(self.grace_period - silent, 0.0) + 1.0

    async def _mark_unknown(self, node: Obj) -> Obj:
        conds = [dict(c) for c in (node.get("status") or {}).get("conditions") or []]
        stamp = rfc3339(self.now())
        changed = False
        never = not any(c.get("type") == "Ready" for c in conds)
        for ctype in _UNKNOWN_CONDITIONS:
            c = next((c for c in conds if c.get("type") == ctype), None)
            if c is None:
                if ctype != "Ready":
                    continue
                c = {"type": "Ready"}
                conds.append(c)
            if c.get("status") == "Unknown":
                continue
            reason, msg = ("NodeStatusNeverUpdated", "Kubelet never posted node status.") if never else \
                ("NodeStatusUnknown", "Kubelet stopped posting node status.")
            c.update(status="Unknown", reason=reason, message=msg, lastTransitionTime=stamp)
            c.setdefault("lastHeartbeatTime", stamp)
            changed = True
        if not changed:
            return node
        new = deep_copy(node)
        new.setdefault("status", {})["conditions"] = conds
        out = await self.client.update(self.kind, "", name_of(node), new, subresource="status")
        await self.recorder.normal(node, "NodeNotReady", f"Node {name_of(node)} status is now: NodeNotReady")
        return out

    async def _taint(self, node: Obj) -> Obj:
        want = wanted_taints(node, rfc3339(self.now()))
        if want == [t for t in (node.get("spec") or {}).get("taints") or [] if isinstance(t, dict)]:
            return node
        new = deep_copy(node)
        new.setdefault("spec", {})["taints"] = want
        if not want:
            del new["spec"]["taints"]
        return await self.client.update(self.kind, "", name_of(node), new)

    async def _mark_pods_not_ready(self, node_name: str) -> None:
        for pod in self.pods.by_index(NODE_NAME_INDEX, node_name):
            if ready_status(self.nodes.get(node_name) or {}) == "True":
                return  # the node is back meanwhile: its agent reports its pods itself (a write here would stick)
            conds = (pod.get("status") or {}).get("conditions") or []
            if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                continue
            if not any(c.get("type") == "Ready" and c.get("status") == "True" for c in conds):
                continue
            new = deep_copy(pod)
            for c in new["status"]["conditions"]:
                if c.get("type") == "Ready":
                    c.update(status="False", lastTransitionTime=rfc3339(self.now()))
            try:
                await self.client.update(self.pod_kind, namespace_of(pod), name_of(pod), new, subresource="status")
            except ApiError as e:
                if e.code != 404:
                    raise
            await self.recorder.warning(pod, "NodeNotReady", "Node is not ready")
