"""The agent's side of the pod network: Nodes from the join session → kernel state, one sync at a time.

    join session ──Welcome / Node upserts+deletes / Synced──► Fabric ──plan()──► netns.vxlan | netns.routes
                                                                   └──────────► netns.masq (ip lite-nat)

Role: record the Nodes the server relays (kind "Node", slimmed), and after every change make the node netns
hold exactly `plan(backend, self, nodes)`: with `vxlan` the VTEP device plus one route, neighbour and FDB entry
per other node; with `host-gw` one route per other node via its address; with `none` nothing (the user brings
a CNI). Pod traffic leaving the cluster CIDR is masqueraded (vxlan and host-gw).

Invariants:
- No sync before the first complete Node set (Welcome … Synced): a restarted agent leaves the kernel's entries
  alone until it knows the cluster, then converges (deleted nodes' entries go, live ones stay untouched).
- Between Welcome and Synced objects are collected aside and swapped in whole at Synced.
- Changes only set a flag; `run()` syncs when it is set, so a burst of Node updates costs one sync. A failed
  sync is logged and retried after `RETRY` seconds.
- A loopback node IP, or one that no interface of the node netns holds (and no `--flannel-iface`), disables the
  data path with a warning: there is nothing to tunnel over.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from lite import wire
from lite.agent.fabric.plan import VNI, VXLAN_DEVICE, VXLAN_PORT, Plan, plan, pod_mtu, vtep_address, vtep_mac
from lite.netns.nsfs import NetnsRef

log = logging.getLogger("lite.agent.fabric")
Obj = dict[str, Any]
RETRY = 2.0
KIND = "Node"


class Fabric:
    def __init__(self, node_name: str, node_ip: str, *, iface: str = "", node_netns: NetnsRef = None,
                 device: str = VXLAN_DEVICE) -> None:
        self.node_name = node_name
        self.node_ip = node_ip
        self.iface = iface
        self.node_netns = node_netns
        self.device = device
        self.backend = ""  # until the Welcome says
        self.pod_cidr = ""
        self.cluster_cidr = ""
        self.mtu = 1500  # of the pods' veths and the bridge, once `prepare` ran
        self.uplink = ""  # the interface holding the node IP (or --flannel-iface), once `prepare` ran
        self.nodes: dict[str, Obj] = {}
        self._resync: dict[str, Obj] | None = None
        self._have_state = False
        self._dirty = asyncio.Event()
        self.last: Plan | None = None  # the plan of the last successful sync

    @property
    def usable(self) -> bool:
        return bool(self.node_ip) and not self.node_ip.startswith("127.")

    # ---- what the session delivers ------------------------------------------------------------------------

    def begin_resync(self) -> None:
        self._resync = {}

    def synced(self) -> None:
        if self._resync is not None:
            self.nodes, self._resync = self._resync, None
            self._have_state = True
            self._dirty.set()

    def handle(self, msg: wire.ObjectUpsert | wire.ObjectDelete) -> None:
        target = self._resync if self._resync is not None else self.nodes
        if isinstance(msg, wire.ObjectUpsert):
            target[str((msg.obj.get("metadata") or {}).get("name") or "")] = msg.obj
        else:
            target.pop(msg.name, None)
        if self._resync is None:
            self._dirty.set()

    async def prepare(self, backend: str, pod_cidr: str, cluster_cidr: str) -> int:
        """Take the server's choices; returns the MTU the bridge and pod veths must use."""
        from lite.netns.uplink import uplink_of

        self.backend, self.pod_cidr, self.cluster_cidr = backend, pod_cidr, cluster_cidr
        uplink_mtu = 1500
        if self.usable:
            try:
                self.uplink, uplink_mtu = await uplink_of(self.node_ip, self.iface, node_netns=self.node_netns)
            except Exception as exc:  # netlink errors are not OSErrors
                log.warning("cannot find the uplink: %s", exc)
            if not self.uplink and backend in ("vxlan", "host-gw"):
                log.warning("no interface holds the node IP %s (or --flannel-iface is missing): no %s pod network",
                            self.node_ip, backend)
        self.mtu = pod_mtu(backend, uplink_mtu)
        self._dirty.set()
        return self.mtu

    def desired(self) -> Plan:
        return plan(self.backend, self.node_name, list(self.nodes.values()))

    # ---- applying -----------------------------------------------------------------------------------------

    async def run(self) -> None:
        while True:
            await self._dirty.wait()
            self._dirty.clear()
            try:
                await self.sync_once()
            except Exception as exc:  # netlink / nftables: keep the agent, try again
                log.error("pod network sync failed (retrying in %.0fs): %s", RETRY, exc)
                await asyncio.sleep(RETRY)
                self._dirty.set()

    async def sync_once(self) -> Plan | None:
        """Converge the kernel to the plan; None when there is nothing to do yet (no state, no podCIDR)."""
        if not self._have_state or not self.backend or not self.pod_cidr or not self.usable or not self.uplink:
            return None
        from lite.netns import masq, routes, vxlan

        want = self.desired()
        if self.backend == "vxlan":
            await vxlan.ensure_vxlan(self.device, vni=VNI, port=VXLAN_PORT, local_ip=self.node_ip,
                                     mac=vtep_mac(self.node_ip), mtu=self.mtu,
                                     address=vtep_address(self.pod_cidr), uplink=self.iface,
                                     node_netns=self.node_netns)
            state = await vxlan.sync_vxlan_peers(self.device, want.vxlan_routes(), want.neighbours(), want.fdb(),
                                                 node_netns=self.node_netns)
            if state.routes_set or state.routes_deleted or state.fdb_deleted:
                log.info("vxlan peers: routes +%s -%s", state.routes_set, state.routes_deleted)
        elif self.backend == "host-gw":
            await vxlan.remove_vxlan(self.device, node_netns=self.node_netns)
            done = await routes.sync_pod_routes(dict(want.routes), node_netns=self.node_netns)
            if done["set"] or done["deleted"]:
                log.info("host-gw routes: +%s -%s", done["set"], done["deleted"])
        if self.backend in ("vxlan", "host-gw") and self.cluster_cidr:
            await asyncio.to_thread(masq.ensure_masquerade, self.cluster_cidr, node_netns=self.node_netns)
        self.last = want
        return want

