"""The node's uplink: the interface the pod network uses between nodes, and its MTU.

Role: `uplink_of` for the fabric (`lite.agent.fabric`), which sizes the bridge and pod MTU from it and names it
as the VXLAN device's underlay. Read-only: it changes nothing in the kernel.
Blocking: two netlink requests at most, async.
"""

from __future__ import annotations

from lite.netns import nsfs
from lite.netns.nsfs import NetnsRef


async def uplink_of(node_ip: str, iface: str = "", *, node_netns: NetnsRef = None) -> tuple[str, int]:
    """(interface name, MTU) of `iface`, else of the interface holding `node_ip`; ("", 1500) when neither."""
    ipr = await nsfs.open_rtnl(node_netns)
    try:
        index: int | None = 0
        if iface:
            index = await ipr.link_index(iface)
        else:
            index = next((a.index for a in await ipr.addresses() if a.address == node_ip), 0)
        if not index:
            return "", 1500
        link = await ipr.link(index=index)
        return str(link.name), int(link.mtu or 1500)
    finally:
        ipr.close()
