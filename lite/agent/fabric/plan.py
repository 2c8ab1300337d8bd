"""Nodes → what the kernel must hold for pods on every node to reach pods on every other node (pure).

Role: the translation half of the pod network (flannel's vxlan and host-gw backends). From the Node objects the
agent hears about, `plan(backend, self_name, nodes)` computes the desired routes, neighbour (ARP) entries and
bridge FDB entries; `lite.netns.vxlan` / `lite.netns.routes` make the kernel hold exactly that.

Node facts read (flannel's annotation names, so existing tooling reads them):
- `flannel.alpha.coreos.com/public-ip`: the node's tunnel / next-hop address (else its InternalIP);
- `flannel.alpha.coreos.com/backend-data`: `{"VNI": 1, "VtepMAC": "..."}` (vxlan only);
- `spec.podCIDR`.

Invariants:
- A node lacking a podCIDR or an address (or, for vxlan, a VTEP MAC) yields nothing: it is not reachable yet.
- This node itself never yields an entry; output is sorted, so equal inputs give equal plans.
- The VTEP MAC is derived from the node IP (`vtep_mac`), so it survives agent restarts and device re-creation
  and the annotation never has to change.
- The VTEP address of a node is its podCIDR's network address (flannel's choice), used as an onlink next hop.
"""

from __future__ import annotations

import json
from ipaddress import IPv4Address, IPv4Network
from typing import Any

from lite.records import dataclass

VNI = 1
VXLAN_PORT = 8472  # flannel's (and the Linux kernel's legacy) VXLAN port
VXLAN_DEVICE = "lite.1"
VXLAN_OVERHEAD = 50  # outer IPv4 20 + UDP 8 + VXLAN 8 + inner Ethernet 14
BACKENDS = ("vxlan", "host-gw", "none")
ANN_PREFIX = "flannel.alpha.coreos.com/"
ANN_PUBLIC_IP = ANN_PREFIX + "public-ip"
ANN_BACKEND_DATA = ANN_PREFIX + "backend-data"
ANN_MANAGED = ANN_PREFIX + "kube-subnet-manager"

Obj = dict[str, Any]


@dataclass(frozen=True, order=True)
class Peer:
    """Another node as the data path sees it."""

    name: str
    pod_cidr: str  # e.g. "10.42.1.0/24"
    public_ip: str  # the node address packets to it are sent to (outer destination / next hop)
    vtep_mac: str = ""  # vxlan only

    @property
    def vtep_ip(self) -> str:
        return vtep_address(self.pod_cidr)


@dataclass(frozen=True)
class Plan:
    """Desired kernel state: host-gw routes (podCIDR → node IP) or vxlan peers (route + neigh + fdb each)."""

    backend: str
    routes: tuple[tuple[str, str], ...] = ()  # host-gw: (podCIDR, via)
    peers: tuple[Peer, ...] = ()  # vxlan

    def vxlan_routes(self) -> dict[str, str]:
        """podCIDR → VTEP IP (onlink via the vxlan device)."""
        return {p.pod_cidr: p.vtep_ip for p in self.peers}

    def neighbours(self) -> dict[str, str]:
        """VTEP IP → VTEP MAC."""
        return {p.vtep_ip: p.vtep_mac for p in self.peers}

    def fdb(self) -> dict[str, str]:
        """VTEP MAC → the node's public IP."""
        return {p.vtep_mac: p.public_ip for p in self.peers}


def vtep_mac(node_ip: str) -> str:
    """A locally administered unicast MAC for this node's VXLAN device, fixed by its IPv4 address."""
    b = IPv4Address(node_ip).packed
    return "0e:6c:" + ":".join(f"{x:02x}" for x in b)


def vtep_address(pod_cidr: str) -> str:
    """A node's VTEP address: its podCIDR's network address (on its VXLAN device as a /32)."""
    return str(IPv4Network(pod_cidr).network_address)


def vxlan_mtu(uplink_mtu: int) -> int:
    return uplink_mtu - VXLAN_OVERHEAD


def pod_mtu(backend: str, uplink_mtu: int) -> int:
    """The MTU of the bridge and the pods' veths: VXLAN's encapsulation overhead taken off for vxlan."""
    return vxlan_mtu(uplink_mtu) if backend == "vxlan" else uplink_mtu


def node_annotations(node_ip: str) -> dict[str, str]:
    """What this node publishes on its Node object for the others (sent in its Hello, before it learns the
    backend: the VTEP MAC is published either way, host-gw simply does not read it)."""
    return {ANN_PUBLIC_IP: node_ip, ANN_BACKEND_DATA: json.dumps({"VNI": VNI, "VtepMAC": vtep_mac(node_ip)}),
            ANN_MANAGED: "true"}


def peer_of(node: Obj) -> Peer | None:
    """The node's data-path facts, or None when it has no podCIDR or no usable address."""
    meta = node.get("metadata") or {}
    ann = meta.get("annotations") or {}
    cidr = str((node.get("spec") or {}).get("podCIDR") or "")
    public = str(ann.get(ANN_PUBLIC_IP) or "") or _internal_ip(node)
    try:
        cidr = str(IPv4Network(cidr))
        public = str(IPv4Address(public))
    except ValueError:
        return None
    mac = ""
    try:
        data = json.loads(str(ann.get(ANN_BACKEND_DATA) or "null"))
        if isinstance(data, dict) and isinstance(data.get("VtepMAC"), str):
            mac = data["VtepMAC"].lower()
    except ValueError:
        pass
    return Peer(str(meta.get("name") or ""), cidr, public, mac)


def _internal_ip(node: Obj) -> str:
    for addr in (node.get("status") or {}).get("addresses") or []:
        if isinstance(addr, dict) and addr.get("type") == "InternalIP":
            return str(addr.get("address") or "")
    return ""


def plan(backend: str, self_name: str, nodes: list[Obj]) -> Plan:
    """The desired state for `backend` on node `self_name` given every Node the agent knows."""
    peers = sorted(p for n in nodes if (p := peer_of(n)) is not None and p.name != self_name)
    if backend == "host-gw":
        return Plan(backend, routes=tuple((p.pod_cidr, p.public_ip) for p in peers))
    if backend == "vxlan":
        return Plan(backend, peers=tuple(p for p in peers if p.vtep_mac))
    return Plan(backend)

