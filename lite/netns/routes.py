"""Node routes: host-gw routes to the other nodes' podCIDRs, and the route for the Service CIDR.

Role: make the node netns route pod traffic to pods on other nodes straight to that node's address (host-gw:
every node on one L2 segment), and give node-local processes a route to ClusterIPs.

Invariants:
- Every route made here carries the protocol number `RTPROT_LITE`, so `sync_pod_routes` can find and remove its
  own stale routes without touching anyone else's; it converges: after it returns the lite routes are exactly the
  desired ones (replace is idempotent).
- The Service CIDR route (`<service-cidr> dev <bridge> src <gateway>`) exists because the node netns may have no
  default route; without it connect() to a ClusterIP fails with ENETUNREACH before the nftables output hook can
  DNAT it (measured in the runtime notes).
Blocking: netlink requests are async; nothing else.
"""

from __future__ import annotations

import errno
from collections.abc import Mapping
from ipaddress import IPv4Address, IPv4Network

from lite.netns import nsfs
from lite.netns.netlink import NetlinkError, Rtnl
from lite.netns.nsfs import NetnsRef

RTPROT_LITE = 77  # a free number in iproute2's rt_protos (user range); marks the routes this module owns
RT_TABLE_MAIN = 254


async def sync_pod_routes(routes: Mapping[str, str], *, node_netns: NetnsRef = None) -> dict[str, list[str]]:
    """Make the lite pod routes exactly `routes` (podCIDR → node address); returns {"set": [...], "deleted": [...]}.

    Routes for the Service CIDR (`ensure_service_route`) are kept.
    """
    desired = {str(IPv4Network(cidr)): str(IPv4Address(via)) for cidr, via in routes.items()}
    ipr = await nsfs.open_rtnl(node_netns)
    try:
        current = await _lite_routes(ipr)
        deleted = []
        for dst, (gateway, _oif) in current.items():
            if dst not in desired and gateway is not None:
                await _delete(ipr, dst)
                deleted.append(dst)
        changed = []
        for dst, via in desired.items():
            if current.get(dst, (None, None))[0] != via:
                network = IPv4Network(dst)
                await ipr.replace_route(str(network.network_address), network.prefixlen, gateway=via,
                                        protocol=RTPROT_LITE)
                changed.append(dst)
        return {"set": changed, "deleted": deleted}
    finally:
        ipr.close()


async def ensure_service_route(
    service_cidr: str, *, bridge: str = "lite0", gateway: str, node_netns: NetnsRef = None
) -> None:
    """`<service_cidr> dev <bridge> src <gateway>` in the node netns (idempotent)."""
    network = IPv4Network(service_cidr)
    ipr = await nsfs.open_rtnl(node_netns)
    try:
        link = await ipr.link(bridge)
        await ipr.replace_route(str(network.network_address), network.prefixlen, oif=link.index,
                                prefsrc=str(IPv4Address(gateway)), protocol=RTPROT_LITE)
    finally:
        ipr.close()


async def remove_service_route(service_cidr: str, *, node_netns: NetnsRef = None) -> bool:
    ipr = await nsfs.open_rtnl(node_netns)
    try:
        return await _delete(ipr, str(IPv4Network(service_cidr)))
    finally:
        ipr.close()


async def _lite_routes(ipr: Rtnl) -> dict[str, tuple[str | None, int | None]]:
    """dst → (gateway, oif) of the IPv4 main-table routes carrying RTPROT_LITE."""
    found: dict[str, tuple[str | None, int | None]] = {}
    for route in await ipr.routes(RT_TABLE_MAIN):
        if route.protocol != RTPROT_LITE:
            continue
        found[f"{route.dst or '0.0.0.0'}/{route.dst_len}"] = (route.gateway, route.oif)
    return found


async def _delete(ipr: Rtnl, dst: str) -> bool:
    network = IPv4Network(dst)
    try:
        await ipr.delete_route(str(network.network_address), network.prefixlen, protocol=RTPROT_LITE)
    except NetlinkError as exc:
        if exc.code != errno.ESRCH:
            raise
        return False
    return True
