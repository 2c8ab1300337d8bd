"""The cluster DNS address as a local address of the node netns, and sockets made there to bind it.

Role: NodeLocal DNSCache's trick: the cluster DNS IP (e.g. 10.43.0.10) is a local /32 address in the node
netns, so a pod's query to it, routed to the node over the bridge like any other off-pod packet, is delivered
locally to the agent's DNS server: no hop to another node, no DNAT. The address goes on `lo` (NodeLocal
DNSCache uses a dummy link; the dummy driver is not always there, e.g. in containers, and Linux delivers to any
local address whatever the link that carries it).

Invariants:
- `ensure_dns_address` is idempotent (adds the address if missing); it never removes other addresses.
  `remove_dns_address` takes it off again (idempotent).
- A Service that claims the same IP would be DNATed by the proxy before local delivery; the server reserves
  this IP for DNS (it is the service CIDR's tenth address, as in k3s).
- `bound_socket` creates the socket inside the node netns (a tiny syscall-only switch, on the calling thread);
  the socket keeps its netns after the thread switches back.
"""

from __future__ import annotations

import errno
import socket

from lite.netns import nsfs
from lite.netns.netlink import NetlinkError
from lite.netns.nsfs import NetnsRef

DNS_LINK = "lo"


async def ensure_dns_address(ip: str, *, link: str = DNS_LINK, node_netns: NetnsRef = None) -> int:
    """`ip/32` on `link` (up) in the node netns; returns the link's ifindex."""
    ipr = await nsfs.open_rtnl(node_netns)
    try:
        index = (await ipr.link(link)).index
        await ipr.set_link(index, up=True)
        try:
            await ipr.add_address(index, ip, 32)
        except NetlinkError as exc:
            if exc.code != errno.EEXIST:
                raise
        return int(index)
    finally:
        ipr.close()


async def remove_dns_address(ip: str, *, link: str = DNS_LINK, node_netns: NetnsRef = None) -> bool:
    """Take `ip/32` off `link` again; True if it was there. Idempotent."""
    ipr = await nsfs.open_rtnl(node_netns)
    try:
        index = await ipr.link_index(link)
        if index is None:
            return False
        try:
            await ipr.delete_address(index, ip, 32)
        except NetlinkError as exc:
            if exc.code not in (errno.EADDRNOTAVAIL, errno.ENODEV, errno.ESRCH):
                raise
            return False
        return True
    finally:
        ipr.close()


def node_socket(kind: int, *, node_netns: NetnsRef = None) -> socket.socket:
    """An unbound IPv4 socket of `kind` (SOCK_DGRAM / SOCK_STREAM) living in the node netns."""
    return nsfs.run_in_netns(node_netns, lambda: socket.socket(socket.AF_INET, kind))
