"""One simulated node's control loop: register the Node, renew its Lease, post its status heartbeat.

    register (create Node, or adopt the existing one) ──► post full status ──► ensure Lease
         │
         └─► every `lease_interval` (±10 % jitter): renew the Lease
             every `status_interval`: post the conditions' lastHeartbeatTime (strategic merge patch)
             paused (annotation lite.dev/sim-paused=true, or the whole simulator paused): do neither;
             `kick()` wakes the loop at once (on resume it heartbeats immediately)

Invariants: a node never writes while paused; failures (server away, timeouts) are logged once per kind
and retried within ~2 s, the loop never ends but by cancellation; a Node deleted by someone else is not
re-created (as the kubelet, it only re-registers when restarted). The Lease is renewed by a merge patch of
renewTime (no read-modify-write), created when missing.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from typing import Any

from lite.agent.sim.model import LEASE_NAMESPACE, PodIPs, lease_object, node_object, node_status
from lite.agent.sim.spec import NodeGroup
from lite.client import Client
from lite.errors import ApiError
from lite.kinds import BUILTIN_KINDS, Kind
from lite.objects import rfc3339, rfc3339_micro

log = logging.getLogger("lite.agent.sim")

Obj = dict[str, Any]
PAUSED_ANNOTATION = "lite.dev/sim-paused"


def builtin(group: str, kind: str) -> Kind:
    for k in BUILTIN_KINDS:
        if k.group == group and k.kind == kind and not k.virtual:
            return k
    raise KeyError(f"{kind}.{group}")


NODE = builtin("", "Node")
LEASE = builtin("coordination.k8s.io", "Lease")


def _tainted_not_ready(node: Obj) -> Obj:
    """Register tainted not-ready:NoSchedule (upstream's TaintNodesByCondition admission does this for every
    new Node): a node that never gets a podCIDR, hence never Ready, must not take pods in the moment before
    node lifecycle taints it. Node lifecycle removes the taint once the node reports Ready."""
    spec = node.setdefault("spec", {})
    spec["taints"] = [*(spec.get("taints") or []), {"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}]
    return node


class SimNode:
    """State and loop of one simulated node. `paused_all` is the simulator-wide pause (SIGUSR1)."""

    def __init__(self, client: Client, name: str, group: NodeGroup, ip: str, *,
                 lease_interval: float = 10.0, status_interval: float = 60.0) -> None:
        self.client = client
        self.name = name
        self.group = group
        self.ip = ip
        self.lease_interval = lease_interval
        self.status_interval = status_interval
        self.uid = ""
        self.pod_cidr = ""
        self.ips: PodIPs | None = None
        self.annotated_paused = False
        self.paused_all = False
        self.registered = asyncio.Event()
        self._kick = asyncio.Event()
        self._lease_exists = False
        self._since = rfc3339()
        self._posted_ready: bool | None = None  # the Ready status last posted (None: not yet)
        self._ready_stale = False  # the podCIDR arrived after the status was computed: post it again now
        self._registered_at = 0.0
        self._warned_no_cidr = False
        self._last_status = 0.0
        self._last_error = ""

    @property
    def paused(self) -> bool:
        return self.annotated_paused or self.paused_all

    def kick(self) -> None:
        """Wake the loop now (e.g. after a resume), resetting the status timer so it heartbeats at once."""
        self._last_status = 0.0
        self._kick.set()

    def observe(self, node: Obj) -> bool:
        """Take what the server says about this Node (uid, pod CIDR, pause). True when pods need a look."""
        meta = node.get("metadata") or {}
        self.uid = str(meta.get("uid") or self.uid)
        was_paused = self.paused
        self.annotated_paused = (meta.get("annotations") or {}).get(PAUSED_ANNOTATION) == "true"
        changed = was_paused != self.paused
        if changed:
            log.info("node %s %s", self.name, "paused" if self.paused else "resumed")
            self.kick()
        cidr = str((node.get("spec") or {}).get("podCIDR") or "")
        if cidr and cidr != self.pod_cidr:
            self.pod_cidr = cidr
            self.ips = PodIPs(cidr)
            changed = True
            if self._posted_ready is not True:
                self._ready_stale = True  # post Ready=True now rather than at the next status interval
                self._kick.set()
        return changed

    def _report(self, what: str, e: Exception) -> None:
        msg = f"{what}: {e}"
        if msg != self._last_error:
            log.warning("node %s: %s", self.name, msg)
            self._last_error = msg

    async def register(self) -> None:
        """Create the Node (or adopt an existing one of that name) and post its full status."""
        try:
            node = await self.client.create(NODE, "", _tainted_not_ready(node_object(self.name, self.group)))
        except ApiError as e:
            if e.code != 409:
                raise
            node = await self.client.get(NODE, "", self.name)
        self.observe(node)
        await self.post_status(full=True)
        self.registered.set()

    async def post_status(self, *, full: bool = False) -> None:
        """Ready is False until the node has a podCIDR (pods bound to it could never get an IP)."""
        stamp = rfc3339()
        self._ready_stale = False
        ready = self.ips is not None
        if self._posted_ready is not None and ready != self._posted_ready:
            self._since = stamp
        if not ready:
            self._warn_no_cidr()
        status = node_status(self.name, self.group, self.ip, stamp, self._since, ready)
        if not full:
            status = {"conditions": status["conditions"]}
        await self.client.patch(NODE, "", self.name, {"status": status}, patch_type="strategic",
                                subresource="status")
        self._last_status = time.monotonic()
        self._posted_ready = ready

    def _warn_no_cidr(self) -> None:
        if not self._registered_at:
            self._registered_at = time.monotonic()
        elif not self._warned_no_cidr and time.monotonic() - self._registered_at > 10.0:
            self._warned_no_cidr = True
            log.warning("node %s still has no podCIDR (cluster CIDR full? see its CIDRNotAvailable events); "
                        "it stays NotReady", self.name)

    async def renew_lease(self) -> None:
        """Renew (or create) the Lease. A merge patch of renewTime: one request even when an earlier write
        timed out on our side but landed on the server (an update would then conflict and need a re-read)."""
        now = rfc3339_micro()
        if not self._lease_exists:
            try:
                await self.client.create(LEASE, LEASE_NAMESPACE,
                                         lease_object({"metadata": {"name": self.name, "uid": self.uid}}, now))
                self._lease_exists = True
                return
            except ApiError as e:
                if e.code != 409:
                    raise
                self._lease_exists = True
        try:
            await self.client.patch(LEASE, LEASE_NAMESPACE, self.name,
                                    {"spec": {"renewTime": now, "holderIdentity": self.name}})
        except ApiError as e:
            if e.code == 404:  # deleted (e.g. with its Node): create it again next time
                self._lease_exists = False
            raise

    async def _tick(self) -> None:
        if not self.registered.is_set():
            await self.register()
        await self.renew_lease()
        if self._ready_stale or time.monotonic() - self._last_status >= self.status_interval:
            await self.post_status()
        self._last_error = ""

    async def run(self, start_delay: float = 0.0) -> None:
        """The node's eternal loop (see the module docstring)."""
        with contextlib.suppress(TimeoutError):  # spread over the period, but a podCIDR arriving ends the wait
            async with asyncio.timeout(start_delay):
                await self._kick.wait()
        while True:
            failed = False
            if not self.paused:
                try:
                    await self._tick()
                except ApiError as e:
                    self._report("heartbeat failed", e)
                    failed = True
            # a podCIDR that arrived during this tick must not wait a whole period (but never spin)
            if self.paused or failed or not self._ready_stale:
                self._kick.clear()
            delay = self.lease_interval * random.uniform(0.9, 1.1)
            if failed or (not self.registered.is_set() and not self.paused):
                # As the kubelet, retry a failed heartbeat soon rather than a whole period later.
                delay = min(delay, 2.0 * random.uniform(0.5, 1.0))
            # asyncio.timeout, not wait_for: 3.11's wait_for can swallow a cancellation that races its wake-up.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(delay):
                    await self._kick.wait()
