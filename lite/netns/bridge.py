"""The node bridge that every pod's veth hangs off.

Role: make sure the bridge (default `lite0`) exists in the node netns, is up, carries the pod gateway address,
and that the node forwards and lets bridged traffic pass netfilter; remove it again.

Invariants:
- `ensure_bridge` is idempotent and converges: run it at every agent start; it never removes addresses or ports.
- `net.ipv4.ip_forward=1` and `net.bridge.bridge-nf-call-iptables=1` are set in the node netns. The second is
  what makes a pod → Service → pod reply on the same bridge go back through conntrack to be un-DNATed; it is a
  per-netns knob that defaults to 1 here, but set it anyway (measured: with 0 such replies bypass conntrack).
- Every bridge port has hairpin mode on, so a pod reaching its own Service through DNAT gets the packet back.
- `node_netns=None` means the host netns: only the real agent passes it; tests pass a netns of their own.
Blocking: netlink requests are async; the two sysctl writes are tiny and run switched into the node netns
(`nsfs.in_netns`).
"""

from __future__ import annotations

import errno
import ipaddress
import logging

from lite.netns import nsfs
from lite.netns.netlink import NetlinkError, Rtnl, hairpin_message
from lite.netns.nsfs import NetnsRef

log = logging.getLogger(__name__)

NODE_SYSCTLS = (
    ("net.ipv4.ip_forward", "1"),
    ("net.bridge.bridge-nf-call-iptables", "1"),
)


async def ensure_bridge(
    name: str = "lite0", gateway_cidr: str = "10.42.0.1/24", *, node_netns: NetnsRef = None, mtu: int = 1500
) -> int:
    """Bridge `name` up with `gateway_cidr`, forwarding on, hairpin on its ports; returns its ifindex."""
    gateway = ipaddress.IPv4Interface(gateway_cidr)
    ipr = await nsfs.open_rtnl(node_netns)
    try:
        index = await _ensure_link(ipr, name, mtu)
        await _ensure_address(ipr, index, gateway)
        ports = await bridge_ports(ipr, index)
        if ports:
            await ipr.request([hairpin_message(index=port) for port in ports], "hairpin on")
    finally:
        ipr.close()
    missing = await nsfs.in_netns(node_netns, _write_node_sysctls)
    for knob in missing:
        log.warning("sysctl %s does not exist in the node netns; Service hairpin traffic may fail", knob)
    return index


async def remove_bridge(name: str = "lite0", *, node_netns: NetnsRef = None) -> bool:
    """Delete the bridge (its ports are detached, not deleted); True if it existed. Idempotent."""
    return await nsfs.remove_link(node_netns, name)


async def bridge_ports(ipr: Rtnl, bridge_index: int) -> list[int]:
    """The ifindexes of the links enslaved to the bridge."""
    return [link.index for link in await ipr.links() if link.master == bridge_index]


async def _ensure_link(ipr: Rtnl, name: str, mtu: int) -> int:
    index = await ipr.link_index(name)
    if index is None:
        try:
            await ipr.add_bridge(name, mtu)
        except NetlinkError as exc:
            if exc.code != errno.EEXIST:  # another agent task created it meanwhile
                raise
        index = (await ipr.link(name)).index
    await ipr.set_link(index, up=True, mtu=mtu)
    return index


async def _ensure_address(ipr: Rtnl, index: int, gateway: ipaddress.IPv4Interface) -> None:
    for addr in await ipr.addresses():
        if addr.index == index and addr.address == str(gateway.ip) and addr.prefixlen == gateway.network.prefixlen:
            return
    try:
        await ipr.add_address(index, str(gateway.ip), gateway.network.prefixlen)
    except NetlinkError as exc:
        if exc.code != errno.EEXIST:
            raise


def _write_node_sysctls() -> list[str]:
    """Set the node sysctls in the calling thread's netns; returns the knobs that do not exist."""
    return [name for name, value in NODE_SYSCTLS if not nsfs.write_sysctl(name, value)]
