"""Removing stale conntrack entries in a netns, over ctnetlink (pyroute2), without forking `conntrack`.

Role: after the service proxy drops a UDP endpoint, a client that keeps sending from the same source port would
stay pinned to the dead endpoint by its conntrack entry (UDP has no close); and after a UDP service gains
endpoints, entries made while it was rejecting would keep bypassing the new DNAT. kube-proxy deletes both kinds;
so does `delete_udp_flows`. `delete_untranslated` removes entries of any protocol addressed to the Service CIDR
that were never DNATed (made before the proxy's first sync): every later packet of such a flow (a SYN's
retransmits) would follow the entry past the new rules.

Invariants:
- `delete_udp_flows` touches only UDP entries, and only those matching what the caller names: a reply source
  (an endpoint `ip:port`, i.e. an entry DNATed to it) or an original destination (a service `ip:port`).
- `delete_untranslated` touches only entries whose original destination is in the given network and whose reply
  comes from that same address (no DNAT).
- An entry vanishing between dump and delete (it expired, or another deleter won) is not an error.
- The netlink socket is opened inside the target netns (`nsfs.run_in_netns`) and then driven asynchronously.
Blocking: async netlink only; the dump is proportional to the UDP entries in the netns.
"""

from __future__ import annotations

import errno
import ipaddress
import socket
from collections.abc import Collection

from pyroute2.conntrack import AsyncConntrack
from pyroute2.netlink.exceptions import NetlinkError
from pyroute2.netlink.nfnetlink.nfctsocket import NFCTAttrTuple

__all__ = ["NFCTAttrTuple", "delete_udp_flows", "open_conntrack"]

from lite.netns import nsfs
from lite.netns.nsfs import NetnsRef

NETLINK_NETFILTER = 12
Address = tuple[str, int]


def _nfnl_socket_fd() -> int:
    return socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, NETLINK_NETFILTER).detach()


async def open_conntrack(netns: NetnsRef) -> AsyncConntrack:
    if netns is None:
        return AsyncConntrack()
    return AsyncConntrack(fileno=nsfs.run_in_netns(netns, _nfnl_socket_fd))


async def delete_udp_flows(
    netns: NetnsRef, *, endpoints: Collection[Address] = (), services: Collection[Address] = ()
) -> int:
    """Delete UDP entries DNATed to one of `endpoints` or addressed to one of `services`; returns how many."""
    if not endpoints and not services:
        return 0
    ct = await open_conntrack(netns)
    deleted = 0
    try:
        doomed = []
        async for entry in await ct.dump_entries(tuple_orig=NFCTAttrTuple(proto=socket.IPPROTO_UDP)):
            orig, reply = entry.tuple_orig, entry.tuple_reply
            if (reply.saddr, reply.sport) in endpoints or (orig.daddr, orig.dport) in services:
                doomed.append(orig)
        for orig in doomed:
            try:
                await ct.entry("del", tuple_orig=orig)
                deleted += 1
            except NetlinkError as exc:
                if exc.code != errno.ENOENT:
                    raise
    finally:
        ct.close()
    return deleted


async def delete_untranslated(netns: NetnsRef, network: str) -> int:
    """Delete entries addressed to `network` (the Service CIDR) that no DNAT translated; returns how many."""
    net = ipaddress.ip_network(network)
    ct = await open_conntrack(netns)
    deleted = 0
    try:
        doomed = []
        async for entry in await ct.dump_entries():
            orig, reply = entry.tuple_orig, entry.tuple_reply
            if orig.daddr and reply.saddr == orig.daddr and ipaddress.ip_address(orig.daddr) in net:
                doomed.append(orig)
        for orig in doomed:
            try:
                await ct.entry("del", tuple_orig=orig)
                deleted += 1
            except NetlinkError as exc:
                if exc.code != errno.ENOENT:
                    raise
    finally:
        ct.close()
    return deleted
