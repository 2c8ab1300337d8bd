"""Node IPAM: a pod CIDR per Node from the cluster CIDR (upstream nodeipam, range allocator).

reconcile(node name):
    Node gone                        ──► its CIDR is free again
    Node with spec.podCIDR(s) set    ──► mark them used (rebuilt from the informer at every leadership term)
    Node without                     ──► next free /`mask` (default /24 of 10.42.0.0/16), patched into
                                         spec.podCIDR and spec.podCIDRs

Invariants: the set of used CIDRs is per-term memory rebuilt in `on_start` from every cached Node, so a
restart or a new leader never hands out a CIDR a Node still holds; a Node keeps its CIDR for life
(spec.podCIDR is immutable once set, as upstream). A full range raises an event CIDRNotAvailable.
"""

from __future__ import annotations

import ipaddress
from typing import Any, ClassVar

from lite.client import Client
from lite.events import EventRecorder
from lite.informer import SharedInformers
from lite.server.controllers.runtime import Controller, builtin

Obj = dict[str, Any]
DEFAULT_CLUSTER_CIDR = "10.42.0.0/16"
DEFAULT_NODE_MASK = 24


class CIDRSet:
    """Sub-networks of `cidr` of prefix length `mask`, handed out lowest first."""

    def __init__(self, cidr: str, mask: int) -> None:
        self.network = ipaddress.ip_network(cidr, strict=False)
        if mask < self.network.prefixlen:
            raise ValueError(f"node mask /{mask} is larger than the cluster CIDR {cidr}")
        self.mask = mask
        self.count = 1 << min(mask - self.network.prefixlen, 24)
        self._step = 1 << (self.network.max_prefixlen - mask)
        self._used: set[int] = set()

    def _index(self, cidr: str) -> int | None:
        try:
            net = ipaddress.ip_network(cidr, strict=False)
        except ValueError:
            return None
        if net.version != self.network.version or net.prefixlen != self.mask or not net.subnet_of(self.network):  # type: ignore[arg-type]
            return None
        return (int(net.network_address) - int(self.network.network_address)) // self._step

    def occupy(self, cidr: str) -> bool:
        i = self._index(cidr)
        if i is None:
            return False
        self._used.add(i)
        return True

    def release(self, cidr: str) -> None:
        i = self._index(cidr)
        if i is not None:
            self._used.discard(i)

    def allocate_next(self) -> str | None:
        for i in range(self.count):
            if i not in self._used:
                self._used.add(i)
                addr = ipaddress.ip_address(int(self.network.network_address) + i * self._step)
                return f"{addr}/{self.mask}"
        return None


class NodeIpamController(Controller):
    name: ClassVar[str] = "nodeipam"

    def __init__(self, client: Client, informers: SharedInformers, recorder: EventRecorder | None = None, *,
                 cluster_cidr: str = DEFAULT_CLUSTER_CIDR, node_mask: int = DEFAULT_NODE_MASK) -> None:
        super().__init__(client, informers, recorder or EventRecorder(client, "cidrAllocator"))
        self.kind = builtin("", "Node")
        self.cluster_cidr = cluster_cidr
        self.node_mask = node_mask
        self.cidrs = CIDRSet(cluster_cidr, node_mask)
        self.held: dict[str, list[str]] = {}
        self.nodes = self.informer(self.kind, primary=True)
        self.watch_primary(self.nodes)

    def on_start(self) -> None:
        self.cidrs = CIDRSet(self.cluster_cidr, self.node_mask)
        self.held = {}
        for node in self.nodes.list():
            self._occupy(node)

    def _occupy(self, node: Obj) -> list[str]:
        spec = node.get("spec") or {}
        got = list(spec.get("podCIDRs") or ([spec["podCIDR"]] if spec.get("podCIDR") else []))
        for c in got:
            self.cidrs.occupy(c)
        if got:
            self.held[(node.get("metadata") or {}).get("name", "")] = got
        return got

    async def reconcile(self, key: str) -> float | None:
        node = self.nodes.get(key)
        if node is None:
            for c in self.held.pop(key, []):
                self.cidrs.release(c)
            return None
        if self._occupy(node) or key in self.held:
            return None  # held but not in the cache yet: our patch has not come back through the informer
        cidr = self.cidrs.allocate_next()
        if cidr is None:
            await self.recorder.warning(node, "CIDRNotAvailable",
                                        f"Node {key} status is now: CIDRNotAvailable")
            return 30.0
        try:
            await self.client.patch(self.kind, "", key, {"spec": {"podCIDR": cidr, "podCIDRs": [cidr]}})
        except BaseException:
            self.cidrs.release(cidr)
            raise
        self.held[key] = [cidr]
        return None
