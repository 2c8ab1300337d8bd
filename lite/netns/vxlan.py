"""The VXLAN device of the pod network and its per-peer routes, neighbour and FDB entries (flannel's vxlan).

Role: `ensure_vxlan` makes the node's VTEP (VNI, UDP port, local address, fixed MAC, MTU, the podCIDR's network
address /32, up, no learning); `sync_vxlan_peers` makes the kernel hold exactly the desired peers: for each, the
route `<podCIDR> via <vtep ip> dev <device> onlink`, the permanent neighbour `<vtep ip> lladdr <mac>` and the
permanent FDB entry `<mac> dst <public ip>`; `remove_vxlan` deletes the device (its neighbours and FDB
entries go with it; the routes through it too).

Invariants:
- Converges: stale entries on the device are deleted, missing or different ones replaced; every call is
  idempotent. Routes carry `RTPROT_LITE`: lite routes with a gateway that are not desired (for example host-gw
  routes left by a backend switch, or a deleted node's) are removed; the Service CIDR route (no gateway) stays.
- An unchanged device is not written: setting its MAC (even the same one) would flush its neighbours, and the
  fabric calls `ensure_vxlan` at every sync (each Node event, an agent restart).
- Everything goes through one rtnetlink socket per call (no fork, no `ip` process).
Blocking: netlink requests are async; the socket is opened in the node netns (`nsfs.rtnl_socket_fd`) and driven by
pyroute2's AsyncIPRoute (neighbour and FDB messages are pyroute2's; only multi-node clusters load it).
"""

from __future__ import annotations

import errno
import socket
from collections.abc import Mapping
from dataclasses import field
from ipaddress import IPv4Address, IPv4Network

from pyroute2.iproute.linux import AsyncIPRoute
from pyroute2.netlink.exceptions import NetlinkError
from pyroute2.netlink.rtnl.ndmsg import NTF_SELF, NUD_PERMANENT

from lite.netns import nsfs
from lite.netns.nsfs import NetnsRef
from lite.netns.routes import RT_TABLE_MAIN, RTPROT_LITE
from lite.records import dataclass

RTNH_F_ONLINK = 4
IFF_UP = 0x1


async def _open_ipr(node_netns: NetnsRef) -> AsyncIPRoute:
    if node_netns is None:
        return AsyncIPRoute()
    return AsyncIPRoute(fileno=nsfs.run_in_netns(node_netns, nsfs.rtnl_socket_fd))


@dataclass
class VxlanState:
    """What `sync_vxlan_peers` found and did (for logs and tests)."""

    routes_set: list[str] = field(default_factory=list)
    routes_deleted: list[str] = field(default_factory=list)
    neigh_set: list[str] = field(default_factory=list)
    neigh_deleted: list[str] = field(default_factory=list)
    fdb_set: list[str] = field(default_factory=list)
    fdb_deleted: list[str] = field(default_factory=list)


async def ensure_vxlan(
    device: str, *, vni: int, port: int, local_ip: str, mac: str, mtu: int, address: str,
    uplink: str = "", node_netns: NetnsRef = None,
) -> int:  # fmt: skip
    """The VTEP `device` as described (re-created when its VNI, port or local address differ); its ifindex."""
    ipr = await _open_ipr(node_netns)
    try:
        found = await ipr.link_lookup(ifname=device)
        if found:
            (link,) = await ipr.link("get", index=found[0])
            info = (link.get("linkinfo") or {}).get("data") or {}
            if (info.get("vxlan_id"), info.get("vxlan_port"), info.get("vxlan_local")) != (vni, port, local_ip):
                await ipr.link("del", index=found[0])
                found = []
        if not found:
            extra = {}
            if uplink:
                extra["vxlan_link"] = (await ipr.link_lookup(ifname=uplink))[0]
            try:
                await ipr.link("add", ifname=device, kind="vxlan", vxlan_id=vni, vxlan_port=port,
                               vxlan_local=local_ip, vxlan_learning=0, address=mac, mtu=mtu, **extra)
            except NetlinkError as exc:
                if exc.code != errno.EEXIST:
                    raise
            found = await ipr.link_lookup(ifname=device)
        index = int(found[0])
        # only what differs: setting the MAC, even to the same value, flushes the device's neighbours
        (link,) = await ipr.link("get", index=index)
        change: dict[str, object] = {}
        if str(link.get("address") or "").lower() != mac.lower():
            change["address"] = mac
        if link.get("mtu") != mtu:
            change["mtu"] = mtu
        if not int(link.get("flags") or 0) & IFF_UP:
            change["state"] = "up"
        if change:
            await ipr.link("set", index=index, **change)
        addresses = [a async for a in await ipr.addr("dump", index=index, family=socket.AF_INET)]
        for a in addresses:
            if a.get("address") != address or a["prefixlen"] != 32:
                await ipr.addr("del", index=index, address=a.get("address"), prefixlen=a["prefixlen"])
        if not any(a.get("address") == address and a["prefixlen"] == 32 for a in addresses):
            try:
                await ipr.addr("add", index=index, address=address, prefixlen=32)
            except NetlinkError as exc:
                if exc.code != errno.EEXIST:
                    raise
        return index
    finally:
        ipr.close()


async def remove_vxlan(device: str, *, node_netns: NetnsRef = None) -> bool:
    """Delete the device (and with it its neighbours, FDB entries and routes); True if it existed."""
    return await nsfs.remove_link(node_netns, device)


async def sync_vxlan_peers(
    device: str, routes: Mapping[str, str], neighbours: Mapping[str, str], fdb: Mapping[str, str],
    *, node_netns: NetnsRef = None,
) -> VxlanState:  # fmt: skip
    """Make the kernel hold exactly: routes podCIDR → vtep ip (onlink, dev), neighbours ip → mac, fdb mac → ip."""
    state = VxlanState()
    ipr = await _open_ipr(node_netns)
    try:
        found = await ipr.link_lookup(ifname=device)
        if not found:
            raise OSError(errno.ENODEV, f"vxlan device {device} does not exist")
        index = int(found[0])
        await _sync_neighbours(ipr, index, {str(IPv4Address(k)): v.lower() for k, v in neighbours.items()}, state)
        await _sync_fdb(ipr, index, {k.lower(): str(IPv4Address(v)) for k, v in fdb.items()}, state)
        await _sync_routes(ipr, index, {str(IPv4Network(k)): str(IPv4Address(v)) for k, v in routes.items()}, state)
    finally:
        ipr.close()
    return state


async def _sync_neighbours(ipr: AsyncIPRoute, index: int, want: dict[str, str], state: VxlanState) -> None:
    have: dict[str, str] = {}
    async for n in await ipr.neigh("dump", ifindex=index, family=socket.AF_INET):
        if n.get("dst"):
            have[str(n.get("dst"))] = str(n.get("lladdr") or "").lower()
    for ip in have.keys() - want.keys():
        await _ignore_missing(ipr.neigh("del", ifindex=index, dst=ip))
        state.neigh_deleted.append(ip)
    for ip, mac in want.items():
        if have.get(ip) != mac:
            await ipr.neigh("replace", ifindex=index, dst=ip, lladdr=mac, state=NUD_PERMANENT)
            state.neigh_set.append(ip)


async def _sync_fdb(ipr: AsyncIPRoute, index: int, want: dict[str, str], state: VxlanState) -> None:
    have: dict[str, str] = {}
    async for e in await ipr.fdb("dump", ifindex=index):
        if e.get("ifindex") != index or not e.get("dst"):
            continue
        have[str(e.get("lladdr") or "").lower()] = str(e.get("dst"))
    for mac in have.keys() - want.keys():
        await _ignore_missing(ipr.fdb("del", ifindex=index, lladdr=mac, dst=have[mac]))
        state.fdb_deleted.append(mac)
    for mac, dst in want.items():
        if have.get(mac) != dst:
            if mac in have:
                await _ignore_missing(ipr.fdb("del", ifindex=index, lladdr=mac, dst=have[mac]))
            await ipr.fdb("replace", ifindex=index, lladdr=mac, dst=dst, state=NUD_PERMANENT, flags=NTF_SELF)
            state.fdb_set.append(mac)


async def _sync_routes(ipr: AsyncIPRoute, index: int, want: dict[str, str], state: VxlanState) -> None:
    have: dict[str, tuple[str, int]] = {}
    async for r in await ipr.route("dump", family=socket.AF_INET, table=RT_TABLE_MAIN):
        if r["proto"] == RTPROT_LITE and r.get("gateway"):
            have[f"{r.get('dst') or '0.0.0.0'}/{r['dst_len']}"] = (str(r.get("gateway")), int(r.get("oif") or 0))
    for dst in have.keys() - want.keys():
        net = IPv4Network(dst)
        await _ignore_missing(ipr.route("del", dst=str(net.network_address), dst_len=net.prefixlen,
                                        proto=RTPROT_LITE))
        state.routes_deleted.append(dst)
    for dst, via in want.items():
        if have.get(dst) != (via, index):
            net = IPv4Network(dst)
            await ipr.route("replace", dst=str(net.network_address), dst_len=net.prefixlen, gateway=via,
                            oif=index, flags=RTNH_F_ONLINK, proto=RTPROT_LITE)
            state.routes_set.append(dst)


async def _ignore_missing(request: object) -> None:
    try:
        await request  # type: ignore[misc]
    except NetlinkError as exc:
        if exc.code not in (errno.ENOENT, errno.ESRCH, errno.ENODEV):
            raise
