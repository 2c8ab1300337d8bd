"""A small asynchronous netlink client: rtnetlink links, addresses and routes, and the message plumbing that
`conntrack` reuses for ctnetlink.

Role: what the agent asks of the kernel on every node (the bridge, pod veths, addresses, routes, the DNS
address, conntrack cleanup), without pyroute2, whose route socket alone imports about a hundred modules (4 MB
resident: its mock netlink engine, traffic-control messages, `unittest.mock`, ...). pyroute2 is still what the
multi-node parts use (VXLAN links, neighbours, FDB: `lite.netns.vxlan`), loaded only there.

Invariants:
- A `Netlink` owns one non-blocking netlink socket; it is opened in the caller's netns or adopted from an fd
  opened in another one (`nsfs.run_in_netns`), and keeps that netns for life.
- Requests on one `Netlink` are serialised (a lock): replies are matched by sequence number, and a request
  returns only once the kernel has answered every message it sent (an ack or an error for each, or the end of
  a dump), so the socket holds nothing stale for the next request.
- `request` sends a batch in one `sendto`; the kernel runs the messages in order and answers each; the first
  error (in message order) is raised as `NetlinkError` after all answers are in, like pyroute2's batches.
- Messages are built and parsed here as bytes; parsing keeps only the attributes callers read (`Link`,
  `Address`, `Route`), the last one of each type winning.
Blocking: sends and receives go through the event loop (`sock_recv`); nothing blocks.
"""

from __future__ import annotations

import asyncio
import errno
import os
import socket
import struct
from collections.abc import Iterator, Sequence
from ipaddress import IPv4Address

from lite.records import dataclass

# netlink (linux/netlink.h)
NLMSG_ERROR = 2
NLMSG_DONE = 3
NLM_F_REQUEST = 0x1
NLM_F_MULTI = 0x2
NLM_F_ACK = 0x4
NLM_F_DUMP = 0x300
NLM_F_REPLACE = 0x100
NLM_F_EXCL = 0x200
NLM_F_CREATE = 0x400
REQUEST = NLM_F_REQUEST | NLM_F_ACK
CREATE = REQUEST | NLM_F_CREATE | NLM_F_EXCL
REPLACE = REQUEST | NLM_F_CREATE | NLM_F_REPLACE

# rtnetlink (linux/rtnetlink.h, if_link.h, if_addr.h)
RTM_NEWLINK, RTM_DELLINK, RTM_GETLINK = 16, 17, 18
RTM_NEWADDR, RTM_DELADDR, RTM_GETADDR = 20, 21, 22
RTM_NEWROUTE, RTM_DELROUTE, RTM_GETROUTE = 24, 25, 26
IFLA_IFNAME, IFLA_MTU, IFLA_MASTER, IFLA_LINKINFO, IFLA_NET_NS_FD = 3, 4, 10, 18, 28
IFLA_INFO_KIND, IFLA_INFO_DATA, IFLA_INFO_SLAVE_KIND, IFLA_INFO_SLAVE_DATA = 1, 2, 4, 5
VETH_INFO_PEER = 1
IFLA_BRPORT_MODE = 4  # hairpin
IFA_ADDRESS, IFA_LOCAL = 1, 2
RTA_DST, RTA_OIF, RTA_GATEWAY, RTA_PREFSRC, RTA_TABLE = 1, 4, 5, 7, 15
IFF_UP = 1
RT_TABLE_MAIN = 254
RT_SCOPE_UNIVERSE = 0
RT_SCOPE_NOWHERE = 255  # in a delete: whatever the route's scope
RTN_UNICAST = 1

_HDR = struct.Struct("=IHHII")  # nlmsghdr: length, type, flags, seq, pid
_IFINFO = struct.Struct("=BxHiII")  # ifinfomsg: family, type, index, flags, change
_IFADDR = struct.Struct("=BBBBI")  # ifaddrmsg: family, prefixlen, flags, scope, index
_RTMSG = struct.Struct("=BBBBBBBBI")  # rtmsg: family, dst_len, src_len, tos, table, protocol, scope, type, flags
_NLA = struct.Struct("=HH")
_ERR = struct.Struct("=i")
RECV_SIZE = 65536


class NetlinkError(OSError):
    """The kernel refused a request: `code` is the errno (as pyroute2's NetlinkError has it)."""

    def __init__(self, code: int, what: str = "") -> None:
        super().__init__(code, f"{what}: {os.strerror(code)}" if what else os.strerror(code))
        self.code = code


# ---- attributes -------------------------------------------------------------------------------------------


def nla(kind: int, payload: bytes) -> bytes:
    """One attribute, padded to 4 bytes."""
    size = _NLA.size + len(payload)
    return _NLA.pack(size, kind) + payload + b"\0" * (-size % 4)


def nla_str(kind: int, value: str) -> bytes:
    return nla(kind, value.encode() + b"\0")


def nla_u32(kind: int, value: int) -> bytes:
    return nla(kind, struct.pack("=I", value))


def nla_u8(kind: int, value: int) -> bytes:
    return nla(kind, struct.pack("=B", value))


def nla_ip(kind: int, value: str | IPv4Address) -> bytes:
    return nla(kind, socket.inet_pton(socket.AF_INET, str(value)))


def nest(kind: int, *attrs: bytes) -> bytes:
    return nla(kind, b"".join(attrs))


def attrs(data: bytes | memoryview, offset: int = 0) -> dict[int, bytes]:
    """Attribute type (flag bits cleared) → payload, of the attributes from `offset` on."""
    found: dict[int, bytes] = {}
    view = memoryview(data)
    end = len(view)
    while offset + _NLA.size <= end:
        size, kind = _NLA.unpack_from(view, offset)
        if size < _NLA.size:
            break
        found[kind & 0x3FFF] = bytes(view[offset + _NLA.size : offset + size])
        offset += (size + 3) & ~3
    return found


def u32(payload: bytes | None) -> int | None:
    return struct.unpack("=I", payload[:4])[0] if payload is not None and len(payload) >= 4 else None


def ip_text(payload: bytes | None) -> str | None:
    if payload is None:
        return None
    if len(payload) == 4:
        return socket.inet_ntop(socket.AF_INET, payload)
    if len(payload) == 16:
        return socket.inet_ntop(socket.AF_INET6, payload)
    return None


def asciiz(payload: bytes | None) -> str | None:
    return payload.split(b"\0", 1)[0].decode(errors="replace") if payload is not None else None


# ---- messages ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Message:
    """One request to send: its type, flags and body (the fixed header of its family plus attributes)."""

    type: int
    flags: int
    body: bytes


def ifinfo(index: int = 0, *, flags: int = 0, change: int = 0, family: int = socket.AF_UNSPEC) -> bytes:
    return _IFINFO.pack(family, 0, index, flags, change)


def ifaddr(index: int, prefixlen: int = 0, family: int = socket.AF_INET) -> bytes:
    return _IFADDR.pack(family, prefixlen, 0, 0, index)


def rtmsg(dst_len: int = 0, *, table: int = RT_TABLE_MAIN, protocol: int = 0, scope: int = RT_SCOPE_UNIVERSE,
          type: int = RTN_UNICAST, family: int = socket.AF_INET) -> bytes:
    return _RTMSG.pack(family, dst_len, 0, 0, table if table < 256 else 252, protocol, scope, type, 0)


@dataclass(frozen=True)
class Link:
    index: int
    name: str | None
    master: int | None
    mtu: int | None
    flags: int


@dataclass(frozen=True)
class Address:
    index: int
    prefixlen: int
    address: str | None
    local: str | None


@dataclass(frozen=True)
class Route:
    dst: str | None
    dst_len: int
    table: int
    protocol: int
    gateway: str | None
    oif: int | None


def parse_link(body: bytes) -> Link:
    _family, _type, index, flags, _change = _IFINFO.unpack_from(body)
    a = attrs(body, _IFINFO.size)
    return Link(index, asciiz(a.get(IFLA_IFNAME)), u32(a.get(IFLA_MASTER)), u32(a.get(IFLA_MTU)), flags)


def parse_address(body: bytes) -> Address:
    _family, prefixlen, _flags, _scope, index = _IFADDR.unpack_from(body)
    a = attrs(body, _IFADDR.size)
    return Address(index, prefixlen, ip_text(a.get(IFA_ADDRESS)), ip_text(a.get(IFA_LOCAL)))


def parse_route(body: bytes) -> Route:
    _family, dst_len, _src_len, _tos, table, protocol, _scope, _type, _flags = _RTMSG.unpack_from(body)
    a = attrs(body, _RTMSG.size)
    return Route(ip_text(a.get(RTA_DST)), dst_len, u32(a.get(RTA_TABLE)) or table, protocol,
                 ip_text(a.get(RTA_GATEWAY)), u32(a.get(RTA_OIF)))


def split(data: bytes) -> Iterator[tuple[int, int, int, bytes]]:
    """(type, flags, seq, body) of each message in one datagram."""
    offset = 0
    while offset + _HDR.size <= len(data):
        length, kind, flags, seq, _pid = _HDR.unpack_from(data, offset)
        if length < _HDR.size:
            break
        yield kind, flags, seq, data[offset + _HDR.size : offset + length]
        offset += (length + 3) & ~3


# ---- the socket -------------------------------------------------------------------------------------------


class Netlink:
    """One netlink socket of `protocol` (see the module docstring)."""

    def __init__(self, protocol: int = socket.NETLINK_ROUTE, fd: int | None = None) -> None:
        self.sock = socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, protocol, fileno=fd)
        self.sock.setblocking(False)
        self._seq = 0
        self._lock = asyncio.Lock()

    def close(self) -> None:
        self.sock.close()

    async def request(self, messages: Sequence[Message], what: str = "") -> list[list[tuple[int, bytes]]]:
        """Send `messages` in one datagram and wait for every answer; per message, the (type, body) replies
        it got (a dump's entries, a get's answer; nothing for a plain ack). Raises the first error."""
        async with self._lock:
            loop = asyncio.get_running_loop()
            if self._seq > 0x7FFF0000:
                self._seq = 0
            first = self._seq + 1
            out = bytearray()
            for m in messages:
                self._seq += 1
                out += _HDR.pack(_HDR.size + len(m.body), m.type, m.flags, self._seq, 0) + m.body
            await loop.sock_sendto(self.sock, bytes(out), (0, 0))
            replies: list[list[tuple[int, bytes]]] = [[] for _ in messages]
            errors: list[int] = [0] * len(messages)
            open_ = {first + i: i for i in range(len(messages))}
            while open_:
                data = await loop.sock_recv(self.sock, RECV_SIZE)
                for kind, flags, seq, body in split(data):
                    i = open_.get(seq)
                    if i is None:
                        continue
                    if kind == NLMSG_ERROR:
                        errors[i] = -_ERR.unpack_from(body)[0]
                        del open_[i + first]
                    elif kind == NLMSG_DONE:
                        if len(body) >= 4 and _ERR.unpack_from(body)[0] < 0:
                            errors[i] = -_ERR.unpack_from(body)[0]
                        del open_[i + first]
                    else:
                        replies[i].append((kind, body))
                        if not flags & NLM_F_MULTI and not messages[i].flags & NLM_F_ACK:
                            del open_[i + first]  # a plain get's single answer
            for code in errors:
                if code:
                    raise NetlinkError(code, what)
            return replies

    async def one(self, message: Message, what: str = "") -> list[tuple[int, bytes]]:
        return (await self.request([message], what))[0]


class Rtnl(Netlink):
    """rtnetlink: the link, address and route operations the agent uses."""

    def __init__(self, fd: int | None = None) -> None:
        super().__init__(socket.NETLINK_ROUTE, fd)

    async def link(self, name: str | None = None, *, index: int = 0) -> Link:
        """The link called `name` (or with ifindex `index`); NetlinkError(ENODEV) when there is none."""
        body = ifinfo(index) + (nla_str(IFLA_IFNAME, name) if name is not None else b"")
        got = await self.one(Message(RTM_GETLINK, NLM_F_REQUEST, body), name or f"link {index}")
        return parse_link(got[0][1])

    async def link_index(self, name: str) -> int | None:
        """The ifindex of `name`, None when there is no such link."""
        try:
            return (await self.link(name)).index
        except NetlinkError as exc:
            if exc.code == errno.ENODEV:
                return None
            raise

    async def links(self) -> list[Link]:
        got = await self.one(Message(RTM_GETLINK, NLM_F_REQUEST | NLM_F_DUMP, ifinfo()))
        return [parse_link(body) for kind, body in got if kind == RTM_NEWLINK]

    async def add_bridge(self, name: str, mtu: int) -> None:
        body = ifinfo() + nla_str(IFLA_IFNAME, name) + nla_u32(IFLA_MTU, mtu) + nest(
            IFLA_LINKINFO, nla_str(IFLA_INFO_KIND, "bridge"))
        await self.one(Message(RTM_NEWLINK, CREATE, body), f"add bridge {name}")

    async def set_link(self, index: int, *, up: bool | None = None, mtu: int | None = None) -> None:
        flags = IFF_UP if up else 0
        body = ifinfo(index, flags=flags, change=IFF_UP if up is not None else 0)
        if mtu is not None:
            body += nla_u32(IFLA_MTU, mtu)
        await self.one(Message(RTM_NEWLINK, REQUEST, body), f"set link {index}")

    async def delete_link(self, index: int) -> None:
        await self.one(Message(RTM_DELLINK, REQUEST, ifinfo(index)), f"delete link {index}")

    async def addresses(self, family: int = socket.AF_INET) -> list[Address]:
        got = await self.one(Message(RTM_GETADDR, NLM_F_REQUEST | NLM_F_DUMP, ifaddr(0, family=family)))
        return [parse_address(body) for kind, body in got if kind == RTM_NEWADDR]

    async def add_address(self, index: int, ip: str, prefixlen: int) -> None:
        await self.one(address_message(RTM_NEWADDR, CREATE, index, ip, prefixlen), f"add address {ip}/{prefixlen}")

    async def delete_address(self, index: int, ip: str, prefixlen: int) -> None:
        await self.one(address_message(RTM_DELADDR, REQUEST, index, ip, prefixlen), f"delete address {ip}")

    async def routes(self, table: int = RT_TABLE_MAIN) -> list[Route]:
        got = await self.one(Message(RTM_GETROUTE, NLM_F_REQUEST | NLM_F_DUMP, rtmsg(table=0, type=0)))
        return [r for r in (parse_route(body) for kind, body in got if kind == RTM_NEWROUTE) if r.table == table]

    async def replace_route(self, dst: str, dst_len: int, *, protocol: int, gateway: str | None = None,
                            oif: int | None = None, prefsrc: str | None = None) -> None:
        body = rtmsg(dst_len, protocol=protocol) + nla_ip(RTA_DST, dst)
        if gateway is not None:
            body += nla_ip(RTA_GATEWAY, gateway)
        if oif is not None:
            body += nla_u32(RTA_OIF, oif)
        if prefsrc is not None:
            body += nla_ip(RTA_PREFSRC, prefsrc)
        await self.one(Message(RTM_NEWROUTE, REPLACE, body), f"replace route {dst}/{dst_len}")

    async def delete_route(self, dst: str, dst_len: int, *, protocol: int) -> None:
        body = rtmsg(dst_len, protocol=protocol, scope=RT_SCOPE_NOWHERE, type=0) + nla_ip(RTA_DST, dst)
        await self.one(Message(RTM_DELROUTE, REQUEST, body), f"delete route {dst}/{dst_len}")


def address_message(kind: int, flags: int, index: int, ip: str, prefixlen: int) -> Message:
    """An IPv4 address request: IFA_LOCAL and IFA_ADDRESS both `ip`, as `ip addr add` and pyroute2 send it."""
    return Message(kind, flags, ifaddr(index, prefixlen) + nla_ip(IFA_LOCAL, ip) + nla_ip(IFA_ADDRESS, ip))


def up_message(index: int) -> Message:
    return Message(RTM_NEWLINK, REQUEST, ifinfo(index, flags=IFF_UP, change=IFF_UP))


def hairpin_message(*, name: str | None = None, index: int = 0) -> Message:
    """Hairpin mode on for a bridge port (by ifindex, or by name with index 0), through the bridge's slave
    data: the same flag `ip link set X type bridge_slave hairpin on` sets."""
    body = ifinfo(index) + (nla_str(IFLA_IFNAME, name) if name is not None else b"")
    body += nest(IFLA_LINKINFO, nla_str(IFLA_INFO_SLAVE_KIND, "bridge"),
                 nest(IFLA_INFO_SLAVE_DATA, nla_u8(IFLA_BRPORT_MODE, 1)))
    return Message(RTM_NEWLINK, REQUEST, body)
