"""Removing stale conntrack entries in a netns, over ctnetlink (`lite.netns.netlink`), without forking `conntrack`.

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
- An entry is deleted by the original tuple the kernel reported for it (and its zone), byte for byte.
- An entry vanishing between dump and delete (it expired, or another deleter won) is not an error.
- The netlink socket is opened inside the target netns (`nsfs.run_in_netns`) and then driven asynchronously.
Blocking: async netlink only; the dump is proportional to the entries of the address family in the netns.
"""

from __future__ import annotations

import errno
import ipaddress
import socket
import struct
from collections.abc import Collection

from lite.netns import nsfs
from lite.netns.netlink import NLM_F_DUMP, NLM_F_REQUEST, REQUEST, Message, Netlink, NetlinkError, attrs, ip_text, nla
from lite.netns.nsfs import NetnsRef
from lite.records import dataclass

__all__ = ["Entry", "Tuple", "delete_udp_flows", "delete_untranslated", "entries", "open_conntrack"]

NETLINK_NETFILTER = 12
NFNL_SUBSYS_CTNETLINK = 1
IPCTNL_MSG_CT_NEW, IPCTNL_MSG_CT_GET, IPCTNL_MSG_CT_DELETE = 0, 1, 2
CTA_TUPLE_ORIG, CTA_TUPLE_REPLY, CTA_ZONE = 1, 2, 18
CTA_TUPLE_IP, CTA_TUPLE_PROTO = 1, 2
CTA_IP_V4_SRC, CTA_IP_V4_DST, CTA_IP_V6_SRC, CTA_IP_V6_DST = 1, 2, 3, 4
CTA_PROTO_NUM, CTA_PROTO_SRC_PORT, CTA_PROTO_DST_PORT = 1, 2, 3
NFNETLINK_V0 = 0
Address = tuple[str, int]


@dataclass(frozen=True)
class Tuple:
    """One direction of a conntrack entry (ports are 0 for protocols without them)."""

    proto: int
    saddr: str | None
    daddr: str | None
    sport: int
    dport: int


@dataclass(frozen=True)
class Entry:
    family: int
    orig: Tuple
    reply: Tuple
    key: bytes  # the CTA_TUPLE_ORIG attribute as reported (and CTA_ZONE if any): what a delete sends back


def _tuple(payload: bytes | None) -> Tuple:
    a = attrs(payload or b"")
    ip, proto = attrs(a.get(CTA_TUPLE_IP, b"")), attrs(a.get(CTA_TUPLE_PROTO, b""))

    def port(kind: int) -> int:
        raw = proto.get(kind)
        return int(struct.unpack("!H", raw[:2])[0]) if raw is not None and len(raw) >= 2 else 0

    num = proto.get(CTA_PROTO_NUM)
    return Tuple(num[0] if num else 0, ip_text(ip.get(CTA_IP_V4_SRC) or ip.get(CTA_IP_V6_SRC)),
                 ip_text(ip.get(CTA_IP_V4_DST) or ip.get(CTA_IP_V6_DST)), port(CTA_PROTO_SRC_PORT),
                 port(CTA_PROTO_DST_PORT))


def _nfgen(family: int) -> bytes:
    return struct.pack("=BBH", family, NFNETLINK_V0, 0)


def parse_entry(body: bytes) -> Entry:
    family = body[0]
    a = attrs(body, 4)
    key = nla(CTA_TUPLE_ORIG, a.get(CTA_TUPLE_ORIG, b""))
    if CTA_ZONE in a:
        key += nla(CTA_ZONE, a[CTA_ZONE])
    return Entry(family, _tuple(a.get(CTA_TUPLE_ORIG)), _tuple(a.get(CTA_TUPLE_REPLY)), key)


def _nfnl_socket_fd() -> int:
    return socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, NETLINK_NETFILTER).detach()


async def open_conntrack(netns: NetnsRef) -> Netlink:
    if netns is None:
        return Netlink(NETLINK_NETFILTER)
    return Netlink(NETLINK_NETFILTER, nsfs.run_in_netns(netns, _nfnl_socket_fd))


async def entries(ct: Netlink, family: int = socket.AF_INET, proto: int | None = None) -> list[Entry]:
    """The entries of `family` (of layer-4 protocol `proto`, if given) in the socket's netns."""
    get = NFNL_SUBSYS_CTNETLINK << 8 | IPCTNL_MSG_CT_GET
    got = await ct.one(Message(get, NLM_F_REQUEST | NLM_F_DUMP, _nfgen(family)), "conntrack dump")
    found = [parse_entry(body) for k, body in got if k == NFNL_SUBSYS_CTNETLINK << 8 | IPCTNL_MSG_CT_NEW]
    return [e for e in found if proto is None or e.orig.proto == proto]


async def _delete(ct: Netlink, doomed: list[Entry]) -> int:
    deleted = 0
    for entry in doomed:
        kind = NFNL_SUBSYS_CTNETLINK << 8 | IPCTNL_MSG_CT_DELETE
        try:
            await ct.one(Message(kind, REQUEST, _nfgen(entry.family) + entry.key), "conntrack delete")
            deleted += 1
        except NetlinkError as exc:
            if exc.code != errno.ENOENT:
                raise
    return deleted


async def delete_udp_flows(
    netns: NetnsRef, *, endpoints: Collection[Address] = (), services: Collection[Address] = ()
) -> int:
    """Delete UDP entries DNATed to one of `endpoints` or addressed to one of `services`; returns how many."""
    if not endpoints and not services:
        return 0
    ct = await open_conntrack(netns)
    try:
        doomed = [e for e in await entries(ct, socket.AF_INET, socket.IPPROTO_UDP)
                  if (e.reply.saddr, e.reply.sport) in endpoints or (e.orig.daddr, e.orig.dport) in services]
        return await _delete(ct, doomed)
    finally:
        ct.close()


async def delete_untranslated(netns: NetnsRef, network: str) -> int:
    """Delete entries addressed to `network` (the Service CIDR) that no DNAT translated; returns how many."""
    net = ipaddress.ip_network(network)
    family = socket.AF_INET if net.version == 4 else socket.AF_INET6
    ct = await open_conntrack(netns)
    try:
        doomed = [e for e in await entries(ct, family)
                  if e.orig.daddr and e.reply.saddr == e.orig.daddr and ipaddress.ip_address(e.orig.daddr) in net]
        return await _delete(ct, doomed)
    finally:
        ct.close()
