"""lite's own netlink client: message layout and parsing (pure), and its request semantics against the kernel in
a test netns (root): errors carry the errno, a batch runs every message and raises the first error, dumps and
gets answer what `ip` shows, and the socket stays usable after an error."""

from __future__ import annotations

import errno
import json
import socket
import struct

import pytest
from conftest import ip, needs_root

from lite.netns import conntrack, netlink, nsfs
from lite.netns.netlink import NetlinkError


def test_attributes_are_padded_to_four_bytes_and_parse_back() -> None:
    data = netlink.nla_str(netlink.IFLA_IFNAME, "eth0") + netlink.nla_u32(netlink.IFLA_MTU, 1450)
    assert len(netlink.nla_str(netlink.IFLA_IFNAME, "eth0")) == 12  # 4 header + "eth0\0" + 3 padding
    got = netlink.attrs(data)
    assert netlink.asciiz(got[netlink.IFLA_IFNAME]) == "eth0"
    assert netlink.u32(got[netlink.IFLA_MTU]) == 1450


def test_a_nested_attribute_carries_its_children_and_flag_bits_are_ignored() -> None:
    inner = netlink.nla_u8(netlink.IFLA_BRPORT_MODE, 1)
    outer = netlink.nest(netlink.IFLA_INFO_SLAVE_DATA | 0x8000, inner)  # NLA_F_NESTED set, as some senders do
    got = netlink.attrs(outer)
    assert list(got) == [netlink.IFLA_INFO_SLAVE_DATA]
    assert netlink.attrs(got[netlink.IFLA_INFO_SLAVE_DATA])[netlink.IFLA_BRPORT_MODE] == b"\x01"


@pytest.mark.parametrize(("payload", "text"), [
    (socket.inet_pton(socket.AF_INET, "10.42.0.1"), "10.42.0.1"),
    (socket.inet_pton(socket.AF_INET6, "fd00::1"), "fd00::1"),
    (b"\x01\x02", None),
    (None, None),
])  # fmt: skip
def test_addresses_are_read_by_their_length(payload: bytes | None, text: str | None) -> None:
    assert netlink.ip_text(payload) == text


def test_a_route_message_parses_into_its_fields() -> None:
    body = netlink.rtmsg(24, protocol=77) + netlink.nla_ip(netlink.RTA_DST, "10.42.1.0") + netlink.nla_ip(
        netlink.RTA_GATEWAY, "10.99.0.2") + netlink.nla_u32(netlink.RTA_OIF, 3)
    assert netlink.parse_route(body) == netlink.Route("10.42.1.0", 24, 254, 77, "10.99.0.2", 3)


def test_split_reads_every_message_of_a_datagram() -> None:
    def msg(kind: int, seq: int, body: bytes) -> bytes:
        return struct.pack("=IHHII", 16 + len(body), kind, 0, seq, 0) + body + b"\0" * (-len(body) % 4)

    data = msg(16, 1, b"abc") + msg(netlink.NLMSG_DONE, 2, struct.pack("=i", 0))
    assert [(k, s, b) for k, _f, s, b in netlink.split(data)] == [(16, 1, b"abc"), (3, 2, b"\0\0\0\0")]


def test_a_conntrack_entry_keeps_its_original_tuple_for_the_delete() -> None:
    def tup(src: str, dst: str, sport: int, dport: int) -> bytes:
        ips = netlink.nla(1, socket.inet_aton(src)) + netlink.nla(2, socket.inet_aton(dst))
        proto = netlink.nla_u8(1, socket.IPPROTO_UDP) + netlink.nla(2, struct.pack("!H", sport)) + netlink.nla(
            3, struct.pack("!H", dport))
        return netlink.nest(1, ips) + netlink.nest(2, proto)

    orig = netlink.nest(conntrack.CTA_TUPLE_ORIG, tup("10.42.0.5", "10.43.0.10", 40000, 53))
    reply = netlink.nest(conntrack.CTA_TUPLE_REPLY, tup("10.42.0.9", "10.42.0.5", 5353, 40000))
    entry = conntrack.parse_entry(struct.pack("=BBH", socket.AF_INET, 0, 0) + orig + reply)
    assert entry.orig == conntrack.Tuple(socket.IPPROTO_UDP, "10.42.0.5", "10.43.0.10", 40000, 53)
    assert (entry.reply.saddr, entry.reply.sport) == ("10.42.0.9", 5353)
    assert entry.key == orig  # no zone: the tuple alone, byte for byte


@pytest.mark.root
@needs_root
async def test_requests_against_the_kernel(node_netns: str) -> None:
    rtnl = await nsfs.open_rtnl(node_netns)
    try:
        with pytest.raises(NetlinkError) as missing:
            await rtnl.link("nope0")
        assert missing.value.code == errno.ENODEV
        assert await rtnl.link_index("nope0") is None
        lo = await rtnl.link("lo")
        assert (lo.index, lo.name) == (1, "lo")
        await rtnl.add_bridge("ltbr0", 1400)
        index = await rtnl.link_index("ltbr0")
        assert index is not None
        # a batch: the first message applies, the second fails (the address exists now), the third still runs
        add = netlink.address_message(netlink.RTM_NEWADDR, netlink.CREATE, index, "10.77.0.1", 24)
        with pytest.raises(NetlinkError) as exists:
            await rtnl.request([add, add, netlink.up_message(index)])
        assert exists.value.code == errno.EEXIST
        shown = json.loads(ip("-n", node_netns, "-j", "addr", "show", "dev", "ltbr0"))[0]
        assert [a["local"] for a in shown["addr_info"] if a["family"] == "inet"] == ["10.77.0.1"]
        assert "UP" in shown["flags"] and shown["mtu"] == 1400
        # the socket answers the next request correctly after the error
        assert [(a.address, a.prefixlen) for a in await rtnl.addresses() if a.index == index] == [("10.77.0.1", 24)]
        assert {link.name for link in await rtnl.links()} >= {"lo", "ltbr0"}
        await rtnl.replace_route("10.78.0.0", 16, oif=index, protocol=77)
        lite_routes = [(r.dst, r.dst_len, r.oif) for r in await rtnl.routes() if r.protocol == 77]
        assert lite_routes == [("10.78.0.0", 16, index)]
        await rtnl.delete_route("10.78.0.0", 16, protocol=77)
        with pytest.raises(NetlinkError) as gone:
            await rtnl.delete_route("10.78.0.0", 16, protocol=77)
        assert gone.value.code == errno.ESRCH
        await rtnl.delete_link(index)
        assert await rtnl.link_index("ltbr0") is None
    finally:
        rtnl.close()
