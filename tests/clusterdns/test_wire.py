"""The server's wire helpers as pure functions: question extraction, error replies, the memo of cached upstream
answers (`memo_deadline`, and `DnsServer.answer_now` on a clock the test sets; no sockets)."""

from __future__ import annotations

import struct
import types

import dns.message
import dns.rcode
import pytest
from dnslib import PTR, QTYPE, RR, A, DNSRecord

from lite.agent.dns import server as server_module
from lite.agent.dns.forward import Cached, Forwarder
from lite.agent.dns.server import DnsServer, Question, error_reply, memo_deadline, parse_question
from lite.agent.dns.zone import ClusterZone


def query(name: bytes, *, ident: int = 0x1234, flags: int = 0x0100, qd: int = 1, ar: int = 0, qtype: int = 1,
          tail: bytes = b"") -> bytes:
    """A query with `name` written as is (labels in wire form, so tests can put odd bytes there)."""
    return struct.pack("!HHHHHH", ident, flags, qd, 0, 0, ar) + name + struct.pack("!HH", qtype, 1) + tail


WWW = b"\x03www\x07example\x04test\x00"
OPT_1232 = b"\x00" + struct.pack("!HHIH", 41, 1232, 0, 0)


@pytest.mark.parametrize(("data", "expected"), [
    (query(WWW), Question(0x1234, 0x0100, "www.example.test", 1, 1, 12 + len(WWW) + 4, 0)),
    (query(b"\x03WwW\x07EXAMPLE\x04test\x00"), Question(0x1234, 0x0100, "www.example.test", 1, 1, 34, 0)),
    (query(WWW, qtype=28, flags=0), Question(0x1234, 0, "www.example.test", 28, 1, 34, 0)),
    (query(b"\x00", qtype=2), Question(0x1234, 0x0100, "", 2, 1, 17, 0)),  # the root
    (query(WWW, ar=1, tail=OPT_1232), Question(0x1234, 0x0100, "www.example.test", 1, 1, 34, 1232)),
    (query(WWW, ar=1, tail=b"\x00" + struct.pack("!HHIH", 41, 100, 0, 0)),  # a small payload counts as 512
     Question(0x1234, 0x0100, "www.example.test", 1, 1, 34, 512)),
    (query(WWW, ar=1, tail=b"\x00" + struct.pack("!HHIH", 41, 65000, 0, 0)),  # a large one as 4096
     Question(0x1234, 0x0100, "www.example.test", 1, 1, 34, 4096)),
    (query(WWW, ar=1, tail=OPT_1232[:6]), Question(0x1234, 0x0100, "www.example.test", 1, 1, 34, 0)),  # cut OPT
    (query(WWW, ar=0, tail=OPT_1232), Question(0x1234, 0x0100, "www.example.test", 1, 1, 34, 0)),  # uncounted
], ids=["plain", "uppercase", "aaaa-no-rd", "root", "edns", "edns-small", "edns-large", "edns-cut", "ar-zero"])
def test_parse_question(data: bytes, expected: Question) -> None:
    assert parse_question(data) == expected


@pytest.mark.parametrize(("data", "rcode"), [
    (query(WWW)[:16], dns.rcode.FORMERR),  # cut inside the type/class
    (query(WWW)[:20], dns.rcode.FORMERR),  # cut inside the name
    (query(WWW, qd=0), dns.rcode.FORMERR),
    (query(WWW, qd=2), dns.rcode.FORMERR),
    (query(b"\xc0\x0c"), dns.rcode.FORMERR),  # a compression pointer in the question
    (query(b"\x03www\xc0\x0c"), dns.rcode.FORMERR),
    (query(b"\x40" + b"a" * 64 + b"\x00"), dns.rcode.FORMERR),  # a label longer than 63
    (query(WWW, flags=0x2900), dns.rcode.NOTIMP),  # opcode 5 (UPDATE)
    (query(WWW, flags=0x8100), None),  # a response: dropped
    (query(WWW)[:11], None),  # shorter than a header: dropped
])
def test_refused_queries(data: bytes, rcode: int | None) -> None:
    assert parse_question(data) is None
    reply = error_reply(data)
    if rcode is None:
        assert reply is None
    else:
        assert reply is not None
        msg = dns.message.from_wire(reply, question_only=True)
        assert msg.rcode() == rcode and msg.id == struct.unpack_from("!H", data)[0]


@pytest.mark.parametrize(("stored", "expires", "now", "deadline"), [
    (100.0, 105.0, 100.0, 101.0),  # rendered with age 0: good until age 1
    (100.0, 105.0, 100.75, 101.0),
    (100.0, 105.0, 101.0, 102.0),
    (100.0, 105.0, 104.5, 105.0),  # the last whole second ends with the expiry
    (100.0, 104.5, 104.2, 104.5),  # expiry before the next whole second: expiry
    (100.0, 130.0, 110.25, 111.0),
])
def test_memo_deadline(stored: float, expires: float, now: float, deadline: float) -> None:
    assert memo_deadline(stored, expires, now) == deadline


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def monotonic(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    clock = Clock(100.0)
    monkeypatch.setattr(server_module, "time", types.SimpleNamespace(monotonic=clock.monotonic))
    return clock


def cached_server(ttl: int, stored: float) -> DnsServer:
    forwarder = Forwarder([("127.0.0.1", 9)])  # never asked: every query here is a cache hit or a miss
    reply = DNSRecord.question("www.example.test", "A").reply()
    reply.add_answer(RR("www.example.test", QTYPE.A, rdata=A("192.0.2.10"), ttl=ttl))
    forwarder._cache[("www.example.test", 1, 1)] = Cached.of(reply, stored + ttl, stored)
    return DnsServer(ClusterZone(), forwarder)


def ttl_of(reply: bytes | None) -> int:
    assert reply is not None
    msg = dns.message.from_wire(reply)
    assert [rr.to_text() for rs in msg.answer for rr in rs] == ["192.0.2.10"]
    return int(msg.answer[0].ttl)


@pytest.mark.parametrize(("now", "ttl"), [
    (100.0, 5), (100.5, 5), (100.999, 5), (101.0, 4), (102.5, 3), (104.0, 1), (104.999, 1), (105.0, None),
    (107.0, None),
])
def test_memoised_upstream_answer_ages_and_expires(clock: Clock, now: float, ttl: int | None) -> None:
    """Asked once a second earlier (memo filled), then again at `now`: the TTL of a fresh render, or a miss."""
    server = cached_server(5, 100.0)
    data = query(WWW)
    clock.now = max(100.0, now - 1)
    server.answer_now(data, 512)
    clock.now = max(100.0, now - 0.001)
    server.answer_now(query(WWW, ident=7), 512)
    clock.now = now
    reply, q = server.answer_now(query(WWW, ident=9), 512)
    if ttl is None:
        assert reply is None and q is not None and q.name == "www.example.test"  # to the forwarder
    else:
        assert reply is not None and struct.unpack_from("!H", reply)[0] == 9 and ttl_of(reply) == ttl


def test_memo_keeps_each_askers_bytes(clock: Clock) -> None:
    """The memo is keyed by the query after its ID: letter case, RD and EDNS each get their own response."""
    server = cached_server(30, 100.0)
    for _ in range(2):  # the second round comes from the memo
        upper = dns.message.from_wire(server.answer_now(query(b"\x03WWW\x07example\x04test\x00"), 512)[0] or b"")
        assert upper.question[0].name.to_text() == "WWW.example.test."
        no_rd = dns.message.from_wire(server.answer_now(query(WWW, flags=0), 512)[0] or b"")
        assert not no_rd.flags & 0x0100 and no_rd.flags & 0x0080 and not no_rd.flags & 0x0400  # RA, not AA
        edns = dns.message.from_wire(server.answer_now(query(WWW, ar=1, tail=OPT_1232), 512)[0] or b"")
        assert edns.edns == 0 and edns.payload == 1232
        plain = dns.message.from_wire(server.answer_now(query(WWW), 512)[0] or b"")
        assert plain.edns == -1
        clock.now += 0.25


def test_tcp_answers_skip_the_memo(clock: Clock) -> None:
    server = cached_server(30, 100.0)
    assert ttl_of(server.answer_now(query(WWW), None)[0]) == 30
    server.forwarder._cache.clear()  # type: ignore[union-attr]
    reply, q = server.answer_now(query(WWW), None)
    assert reply is None and q is not None  # TCP asked the forwarder again, not a memo
    reply, q = server.answer_now(query(WWW), 512)
    assert reply is None and q is not None  # and TCP left nothing in the UDP memo


def test_zone_change_clears_memoised_upstream_answers(clock: Clock) -> None:
    """A reverse name forwarded while the zone had no record for it is the zone's once a Service takes the IP."""
    server = cached_server(30, 100.0)
    name = b"\x0220\x010\x0243\x0210\x07in-addr\x04arpa\x00"
    reply = DNSRecord.question("20.0.43.10.in-addr.arpa", "PTR").reply()
    reply.add_answer(RR("20.0.43.10.in-addr.arpa", QTYPE.PTR, rdata=PTR("elsewhere.example."), ttl=30))
    assert server.forwarder is not None
    server.forwarder._cache[("20.0.43.10.in-addr.arpa", 12, 1)] = Cached.of(reply, 130.0, 100.0)
    first = dns.message.from_wire(server.answer_now(query(name, qtype=12), 512)[0] or b"")
    assert not first.flags & 0x0400  # relayed
    server.zone.set_service({"metadata": {"namespace": "default", "name": "web"},
                             "spec": {"clusterIP": "10.43.0.20", "ports": []}})
    second = dns.message.from_wire(server.answer_now(query(name, qtype=12), 512)[0] or b"")
    assert second.flags & 0x0400
    assert [rr.to_text() for rs in second.answer for rr in rs] == ["web.default.svc.cluster.local."]
