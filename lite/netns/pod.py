"""A pod's network: its named netns, a veth pair to the node bridge, its address and default route.

Role: `setup_pod_network` / `teardown_pod_network` for the agent's network hook, plus the read side used to adopt
pods after an agent restart (`pod_network_exists`, `list_pod_netns`). hostNetwork pods never come here.

Layout per pod `<id>`: netns file `<netns_dir>/lite-<id>` (default /run/netns, so `ip netns exec` works); host veth
end `lv<13 hex of sha1(id)>` (15 chars, the kernel limit) in the node netns, enslaved to the bridge, hairpin on;
pod end `eth0` with `<ip>/<prefixlen>`, `lo` up, default route via the gateway (the bridge address).

Invariants:
- Fast path without forking or threads (see `nsfs`): a short switched section opens a netlink socket in the
  node netns, unshares a new netns, pins it at the netns file and opens a netlink socket there; the event loop then
  drives both sockets (`netlink.Rtnl`). Four round trips in all: bridge lookup; one batch creating the veth
  straight into the pod netns, enslaved and up, plus hairpin; eth0 lookup; one batch with lo up, address, eth0 up
  and the default route.
- Setup is all or nothing: on failure everything it made is removed before the error propagates.
- Setup of an already complete pod network returns it untouched (containers may be in it); an incomplete
  leftover is torn down and rebuilt.
- Teardown is idempotent and cheap: the host veth is set down (so a netns still held by a leaked process carries
  no traffic and its address can be reused), then the netns file is unmounted and unlinked; the kernel destroys
  the namespace and both veth ends asynchronously once nothing holds it. Deleting the veth synchronously would
  cost ~30 ms (an RCU grace period); setup deletes a same-named leftover itself if it meets one.
- Calls for one pod id must not overlap (the agent runs one runner per pod); different pods may run concurrently.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
from ipaddress import IPv4Address
from pathlib import Path

from lite.netns import nsfs
from lite.netns.netlink import (
    CREATE,
    IFF_UP,
    IFLA_IFNAME,
    IFLA_INFO_DATA,
    IFLA_INFO_KIND,
    IFLA_LINKINFO,
    IFLA_MASTER,
    IFLA_MTU,
    IFLA_NET_NS_FD,
    RTA_GATEWAY,
    RTA_OIF,
    RTM_NEWADDR,
    RTM_NEWLINK,
    RTM_NEWROUTE,
    VETH_INFO_PEER,
    Message,
    NetlinkError,
    Rtnl,
    address_message,
    hairpin_message,
    ifinfo,
    nest,
    nla_ip,
    nla_str,
    nla_u32,
    rtmsg,
    up_message,
)
from lite.netns.nsfs import NETNS_RUN_DIR, NetnsRef
from lite.records import dataclass

NETNS_PREFIX = "lite-"
RTPROT_STATIC = 4
POD_IFNAME = "eth0"


@dataclass(frozen=True)
class PodNetwork:
    pod_id: str
    netns_path: Path
    ip: IPv4Address
    gateway: IPv4Address
    prefixlen: int
    host_ifname: str
    ifname: str = POD_IFNAME

    @property
    def netns_name(self) -> str:
        return self.netns_path.name


def netns_name(pod_id: str) -> str:
    if not pod_id or "/" in pod_id or pod_id in (".", "..") or len(pod_id) > 200:
        raise ValueError(f"unusable pod id for a netns name: {pod_id!r}")
    return NETNS_PREFIX + pod_id


def pod_netns_path(pod_id: str, netns_dir: Path = NETNS_RUN_DIR) -> Path:
    return netns_dir / netns_name(pod_id)


def host_ifname(pod_id: str) -> str:
    """The node-side veth name: stable per pod id, 15 characters (IFNAMSIZ - 1)."""
    return "lv" + hashlib.sha1(pod_id.encode(), usedforsecurity=False).hexdigest()[:13]


async def setup_pod_network(
    pod_id: str,
    ip: IPv4Address | str,
    gateway: IPv4Address | str,
    prefixlen: int,
    *,
    bridge: str = "lite0",
    node_netns: NetnsRef = None,
    mtu: int = 1500,
    hairpin: bool = True,
    netns_dir: Path = NETNS_RUN_DIR,
) -> PodNetwork:
    """Create the pod's netns, veth, address and route (see the module docstring); returns what was made."""
    net = PodNetwork(
        pod_id, pod_netns_path(pod_id, netns_dir), IPv4Address(ip), IPv4Address(gateway), prefixlen, host_ifname(pod_id)
    )
    if nsfs.netns_file_present(net.netns_path):  # a stat on tmpfs: fine on the loop
        if await _is_complete(net, bridge, node_netns):
            return net
        await teardown_pod_network(pod_id, node_netns=node_netns, netns_dir=netns_dir)
    nsfs.ensure_netns_dir(netns_dir)
    node_fd, pod_fd, ns_fd = nsfs.run_in_netns(node_netns, lambda: _create_netns(net.netns_path))
    node, pod = nsfs.rtnl_from_fd(node_fd), nsfs.rtnl_from_fd(pod_fd)
    try:
        await _add_veth(node, net, bridge, ns_fd, mtu, hairpin)
        await _configure_pod_side(pod, net)
    except BaseException:
        await teardown_pod_network(pod_id, node_netns=node_netns, netns_dir=netns_dir)
        raise
    finally:
        os.close(ns_fd)
        node.close()
        pod.close()
    return net


async def teardown_pod_network(pod_id: str, *, node_netns: NetnsRef = None, netns_dir: Path = NETNS_RUN_DIR) -> bool:
    """Take the pod's veth down and remove its netns file; True if anything was there. Idempotent."""
    node = await nsfs.open_rtnl(node_netns)
    try:
        had_link = await _link_down(node, host_ifname(pod_id))
    finally:
        node.close()
    had_netns = nsfs.remove_netns(pod_netns_path(pod_id, netns_dir))
    return had_link or had_netns


async def pod_network_exists(pod_id: str, *, netns_dir: Path = NETNS_RUN_DIR) -> bool:
    """True if the pod's netns file is a mounted namespace (the network may still need checking by setup)."""
    return nsfs.is_netns_mount(pod_netns_path(pod_id, netns_dir))


def list_pod_netns(netns_dir: Path = NETNS_RUN_DIR) -> list[str]:
    """Pod ids with a netns file (mounted or stale) in `netns_dir`, sorted: for adoption or cleanup at start."""
    try:
        names = os.listdir(netns_dir)
    except FileNotFoundError:
        return []
    return sorted(n[len(NETNS_PREFIX) :] for n in names if n.startswith(NETNS_PREFIX) and len(n) > len(NETNS_PREFIX))


def _create_netns(path: Path) -> tuple[int, int, int]:
    """Thread body (already in the node netns): node rtnl fd, then new netns at path, its rtnl fd and ns fd."""
    node_fd = nsfs.rtnl_socket_fd()
    try:
        nsfs.create_netns_here(path)
        try:
            pod_fd = nsfs.rtnl_socket_fd()
            ns_fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except BaseException:
            nsfs.remove_netns(path)
            raise
    except BaseException:
        os.close(node_fd)
        raise
    return node_fd, pod_fd, ns_fd


async def _add_veth(node: Rtnl, net: PodNetwork, bridge: str, ns_fd: int, mtu: int, hairpin: bool) -> None:
    """Veth created straight into the pod netns, enslaved and up, then hairpin: one batch, one round trip."""
    try:
        br = await node.link(bridge)
    except NetlinkError as exc:
        if exc.code != errno.ENODEV:
            raise
        raise FileNotFoundError(errno.ENODEV, f"bridge {bridge} does not exist (ensure_bridge first)") from None
    # The peer cannot be created up: the kernel opens it before the pair is linked (ENOTCONN); the pod side does.
    peer = ifinfo() + nla_str(IFLA_IFNAME, net.ifname) + nla_u32(IFLA_NET_NS_FD, ns_fd) + nla_u32(IFLA_MTU, mtu)
    linkinfo = nest(IFLA_LINKINFO, nla_str(IFLA_INFO_KIND, "veth"), nest(IFLA_INFO_DATA, nest(VETH_INFO_PEER, peer)))
    create = Message(RTM_NEWLINK, CREATE, ifinfo(flags=IFF_UP, change=IFF_UP) + nla_str(IFLA_IFNAME, net.host_ifname)
                     + nla_u32(IFLA_MTU, mtu) + nla_u32(IFLA_MASTER, br.index) + linkinfo)
    # by name (index 0): RTM_NEWLINK looks the device up by IFLA_IFNAME
    batch = [create, hairpin_message(name=net.host_ifname)] if hairpin else [create]
    try:
        await node.request(batch, f"veth {net.host_ifname}")
    except NetlinkError as exc:
        if exc.code != errno.EEXIST:
            raise
        # A leftover from a pod whose netns died without teardown: its name is ours (same pod id).
        await _delete_link(node, net.host_ifname)
        await node.request(batch, f"veth {net.host_ifname}")


async def _configure_pod_side(pod: Rtnl, net: PodNetwork) -> None:
    """lo up, address, eth0 up, default route: one lookup and one batch."""
    index = (await pod.link(net.ifname)).index
    route = Message(RTM_NEWROUTE, CREATE, rtmsg(0, protocol=RTPROT_STATIC) + nla_ip(RTA_GATEWAY, net.gateway)
                    + nla_u32(RTA_OIF, index))
    await pod.request(
        [
            up_message(1),  # lo is 1
            address_message(RTM_NEWADDR, CREATE, index, str(net.ip), net.prefixlen),
            up_message(index),
            route,
        ],
        f"pod network {net.pod_id}",
    )


async def _delete_link(ipr: Rtnl, ifname: str) -> bool:
    try:
        await ipr.delete_link((await ipr.link(ifname)).index)
    except NetlinkError as exc:
        if exc.code != errno.ENODEV:
            raise
        return False
    return True


async def _link_down(ipr: Rtnl, ifname: str) -> bool:
    try:
        await ipr.set_link((await ipr.link(ifname)).index, up=False)
    except NetlinkError as exc:
        if exc.code != errno.ENODEV:
            raise
        return False
    return True


async def _is_complete(net: PodNetwork, bridge: str, node_netns: NetnsRef) -> bool:
    """The netns is mounted and the host veth exists, enslaved to `bridge`."""
    if not nsfs.is_netns_mount(net.netns_path):
        return False
    node = await nsfs.open_rtnl(node_netns)
    try:
        with contextlib.suppress(NetlinkError):
            link = await node.link(net.host_ifname)
            return link.master == (await node.link(bridge)).index
        return False
    finally:
        node.close()
