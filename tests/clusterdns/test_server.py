"""The DNS server over real sockets on 127.0.0.0/8, asked by dnspython (and dig when installed).

The upstream resolver is one the test starts itself: dnslib's threaded server with a fixed resolver bound to
another loopback address (never a real resolver).
"""

from __future__ import annotations

import asyncio
import shutil
import socket
import struct
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from typing import Any

import dns.asyncquery
import dns.edns
import dns.flags
import dns.message
import dns.rcode
import dns.rdatatype
import pytest
from dnsupstream import UPSTREAM_HOST, FixedUpstream, free_port, running_upstream

from lite.agent.dns.forward import Forwarder
from lite.agent.dns.server import DnsServer
from lite.agent.dns.zone import ClusterZone

Obj = dict[str, Any]


@pytest.fixture(scope="module")
def upstream_servers() -> Iterator[tuple[FixedUpstream, int]]:
    with running_upstream() as running:
        yield running


@pytest.fixture
def upstream(upstream_servers: tuple[FixedUpstream, int]) -> tuple[FixedUpstream, int]:
    upstream_servers[0].asked.clear()
    return upstream_servers


def svc(name: str, cluster_ip: str, **spec: Any) -> Obj:
    ports = [{"name": "http", "port": 80, "protocol": "TCP"}]
    return {"metadata": {"namespace": "default", "name": name}, "spec": {"clusterIP": cluster_ip, "ports": ports,
                                                                         **spec}}


def eps(service: str, ips: list[str]) -> Obj:
    meta = {"namespace": "default", "name": f"{service}-x", "labels": {"kubernetes.io/service-name": service}}
    return {"metadata": meta, "addressType": "IPv4", "ports": [{"name": "http", "port": 8080}],
            "endpoints": [{"addresses": [ip], "conditions": {"ready": True}} for ip in ips]}


@pytest.fixture
async def server(upstream: tuple[FixedUpstream, int]) -> AsyncIterator[DnsServer]:
    zone = ClusterZone()
    zone.set_service(svc("web", "10.43.0.20"))
    zone.set_service(svc("many", "None"))
    zone.set_slice(eps("many", [f"10.42.{i // 200}.{i % 200 + 1}" for i in range(60)]))
    zone.set_service(svc("ext", "", type="ExternalName", externalName="www.example.test"))
    srv = DnsServer(zone, Forwarder([(UPSTREAM_HOST, upstream[1])], timeout=1.0))
    await srv.start("127.0.53.1", 0)
    yield srv
    await srv.close()


async def udp(srv: DnsServer, name: str, qtype: str = "A", **kw: Any) -> dns.message.Message:
    return await dns.asyncquery.udp(dns.message.make_query(name, qtype, **kw), srv.address[0], port=srv.address[1],
                                    timeout=3, ignore_trailing=False)


async def tcp(srv: DnsServer, name: str, qtype: str = "A", **kw: Any) -> dns.message.Message:
    return await dns.asyncquery.tcp(dns.message.make_query(name, qtype, **kw), srv.address[0], port=srv.address[1],
                                    timeout=3)


def ips(msg: dns.message.Message) -> list[str]:
    return sorted(rd.to_text() for rrset in msg.answer for rd in rrset if rrset.rdtype == dns.rdatatype.A)


async def test_cluster_names_over_udp_and_tcp(server: DnsServer) -> None:
    for ask in (udp, tcp):
        msg = await ask(server, "web.default.svc.cluster.local.")
        assert ips(msg) == ["10.43.0.20"]
        assert msg.flags & dns.flags.AA and msg.flags & dns.flags.RA and msg.flags & dns.flags.RD
        srv = await ask(server, "_http._tcp.web.default.svc.cluster.local.", "SRV")
        assert [rd.to_text() for rs in srv.answer for rd in rs] == ["0 100 80 web.default.svc.cluster.local."]


async def test_question_case_is_echoed(server: DnsServer) -> None:
    msg = await udp(server, "wEb.DeFault.svc.Cluster.local.")  # dnspython checks the question matches
    assert ips(msg) == ["10.43.0.20"]
    assert msg.question[0].name.to_text() == "wEb.DeFault.svc.Cluster.local."


async def test_nxdomain_and_nodata_on_the_wire(server: DnsServer) -> None:
    nx = await udp(server, "nope.default.svc.cluster.local.")
    assert nx.rcode() == dns.rcode.NXDOMAIN and not nx.answer and nx.authority
    nodata = await udp(server, "web.default.svc.cluster.local.", "AAAA")
    assert nodata.rcode() == dns.rcode.NOERROR and not nodata.answer and nodata.authority


async def test_large_answer_is_truncated_over_udp_and_whole_over_tcp(server: DnsServer) -> None:
    small = await udp(server, "many.default.svc.cluster.local.")
    assert small.flags & dns.flags.TC and not small.answer
    whole = await tcp(server, "many.default.svc.cluster.local.")
    assert not whole.flags & dns.flags.TC and len(ips(whole)) == 60
    edns = await udp(server, "many.default.svc.cluster.local.", use_edns=0, payload=4096)
    assert not edns.flags & dns.flags.TC and len(ips(edns)) == 60 and edns.edns == 0


async def test_other_names_are_forwarded_and_cached(server: DnsServer, upstream: tuple[FixedUpstream, int]) -> None:
    first = await udp(server, "www.example.test.")
    assert ips(first) == ["192.0.2.10"] and not first.flags & dns.flags.AA
    second = await tcp(server, "WWW.example.test.")
    assert ips(second) == ["192.0.2.10"] and second.answer[0].ttl <= 30
    assert upstream[0].asked == ["www.example.test. A"]  # the second came from the cache
    for _ in range(2):
        nx = await udp(server, "gone.example.test.")
        assert nx.rcode() == dns.rcode.NXDOMAIN
    assert upstream[0].asked == ["www.example.test. A", "gone.example.test. A"]  # negative answers cached too


async def test_truncated_upstream_answer_is_fetched_over_tcp(
        server: DnsServer, upstream: tuple[FixedUpstream, int]) -> None:
    big = await udp(server, "big.example.test.", use_edns=0, payload=4096)
    assert len(ips(big)) == 60 and not big.flags & dns.flags.TC
    small = await udp(server, "big.example.test.")  # cached, but too large for 512 bytes
    assert small.flags & dns.flags.TC
    assert len(ips(await tcp(server, "big.example.test."))) == 60


async def test_external_name_is_chased_upstream(server: DnsServer) -> None:
    msg = await udp(server, "ext.default.svc.cluster.local.")
    types = [(rs.name.to_text(), dns.rdatatype.to_text(rs.rdtype)) for rs in msg.answer]
    assert types == [("ext.default.svc.cluster.local.", "CNAME"), ("www.example.test.", "A")]
    assert ips(msg) == ["192.0.2.10"]
    cname = await udp(server, "ext.default.svc.cluster.local.", "CNAME")
    assert [rd.to_text() for rs in cname.answer for rd in rs] == ["www.example.test."]


async def test_no_upstream_answer_is_servfail() -> None:
    dead = free_port("127.0.53.3")
    srv = DnsServer(ClusterZone(), Forwarder([("127.0.53.3", dead)], timeout=0.3))
    await srv.start("127.0.53.1", 0)
    try:
        msg = await udp(srv, "www.example.test.")
        assert msg.rcode() == dns.rcode.SERVFAIL
    finally:
        await srv.close()


async def test_malformed_and_unsupported_queries(server: DnsServer) -> None:
    loop = asyncio.get_running_loop()
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.setblocking(False)
        await loop.sock_connect(s, server.address)
        await loop.sock_sendall(s, struct.pack("!HHHHHH", 7, 0x0100, 1, 0, 0, 0) + b"\x05abc")  # cut question
        reply = await asyncio.wait_for(loop.sock_recv(s, 512), 3)
        assert struct.unpack_from("!HH", reply) == (7, 0x8000 | 0x0100 | 0x0080 | 1)  # FORMERR
        status = dns.message.make_query("web.default.svc.cluster.local.", "A")
        status.set_opcode(2)  # STATUS
        await loop.sock_sendall(s, status.to_wire())
        reply = await asyncio.wait_for(loop.sock_recv(s, 512), 3)
        assert dns.message.from_wire(reply).rcode() == dns.rcode.NOTIMP


@pytest.mark.skipif(shutil.which("dig") is None, reason="dig (dnsutils) not installed")
async def test_dig_asks_over_udp_and_tcp(server: DnsServer) -> None:
    host, port = server.address
    for extra in ([], ["+tcp"]):
        out = await asyncio.to_thread(subprocess.run, ["dig", f"@{host}", "-p", str(port), "+short", *extra,
                                                       "web.default.svc.cluster.local"], capture_output=True,
                                      text=True, timeout=10, check=True)
        assert out.stdout.split() == ["10.43.0.20"]
    out = await asyncio.to_thread(subprocess.run, ["dig", f"@{host}", "-p", str(port), "+ignore", "+noedns",
                                                   "many.default.svc.cluster.local"], capture_output=True,
                                  text=True, timeout=10, check=True)
    assert " tc" in out.stdout.split("flags:")[1].split(";")[0]


async def test_udp_answers_follow_zone_changes(server: DnsServer) -> None:
    query = dns.message.make_query("web.default.svc.cluster.local.", "A")
    for expected in (["10.43.0.20"], ["10.43.0.21"], []):
        query.id = (query.id + 1) % 65536  # the same question again: served from the memo unless the zone changed
        msg = await dns.asyncquery.udp(query, server.address[0], port=server.address[1], timeout=3)
        assert ips(msg) == expected and msg.id == query.id
        if expected == ["10.43.0.20"]:
            server.zone.set_service(svc("web", "10.43.0.21"))
        else:
            server.zone.delete_service("default", "web")


async def test_cached_upstream_answers_carry_edns_only_when_asked(server: DnsServer) -> None:
    with_edns = await tcp(server, "www.example.test.", use_edns=0, payload=1232)
    assert with_edns.edns == 0 and ips(with_edns) == ["192.0.2.10"]
    for _ in range(2):
        plain = await tcp(server, "www.example.test.")
        assert plain.edns == -1 and ips(plain) == ["192.0.2.10"]
    again = await tcp(server, "www.example.test.", use_edns=0, payload=1232)
    assert again.edns == 0 and len(again.additional) == 0


async def test_external_name_chase_for_other_types(server: DnsServer) -> None:
    for qtype in ("AAAA", "TXT", "TYPE65000"):
        msg = await udp(server, "ext.default.svc.cluster.local.", qtype)
        assert msg.rcode() == dns.rcode.NXDOMAIN  # what the upstream says about www.example.test for that type
        assert [dns.rdatatype.to_text(rs.rdtype) for rs in msg.answer] == ["CNAME"]


async def test_a_failure_while_answering_is_servfail_not_silence(server: DnsServer,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    async def broken(query: Any) -> None:  # fault injection: a bug in the forwarding path
        raise RuntimeError("boom")

    assert server.forwarder is not None
    monkeypatch.setattr(server.forwarder, "resolve", broken)
    for ask in (udp, tcp):
        msg = await ask(server, "other.example.test.")
        assert msg.rcode() == dns.rcode.SERVFAIL


async def test_cached_upstream_answers_age(server: DnsServer, upstream: tuple[FixedUpstream, int]) -> None:
    assert (await udp(server, "www.example.test.")).answer[0].ttl == 30
    assert server.forwarder is not None
    for entry in server.forwarder._cache.values():
        entry.stored -= 10  # as if cached ten seconds ago
    for ask in (udp, tcp):
        msg = await ask(server, "WWW.Example.test.", use_edns=0)
        assert msg.answer[0].ttl == 20 and ips(msg) == ["192.0.2.10"] and msg.edns == 0
        assert msg.question[0].name.to_text() == "WWW.Example.test."
    assert upstream[0].asked == ["www.example.test. A"]


LAZY_DNSLIB = r'''
import asyncio, socket, struct, sys
from lite.agent.dns.forward import Forwarder
from lite.agent.dns.server import DnsServer
from lite.agent.dns.zone import ClusterZone

def query(name, ident):
    qname = b"".join(bytes([len(p)]) + p.encode() for p in name.split(".")) + b"\0"
    return struct.pack("!HHHHHH", ident, 0x0100, 1, 0, 0, 0) + qname + struct.pack("!HH", 1, 1)

async def main():
    zone = ClusterZone()
    zone.set_service({"metadata": {"namespace": "default", "name": "web"},
                      "spec": {"clusterIP": "10.43.0.20", "ports": [{"port": 80, "protocol": "TCP"}]}})
    dead = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); dead.bind(("127.0.53.3", 0))
    srv = DnsServer(zone, Forwarder([("127.0.53.3", dead.getsockname()[1])], timeout=0.2))
    await srv.start("127.0.53.1", 0)
    loop = asyncio.get_running_loop()
    c = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); c.setblocking(False)
    c.connect(srv.address)
    out = []
    for name, ident in (("web.default.svc.cluster.local", 7), ("www.example.test", 8)):
        await loop.sock_sendall(c, query(name, ident))
        reply = await loop.sock_recv(c, 4096)
        out.append(f"{struct.unpack('!H', reply[:2])[0]}:{struct.unpack('!H', reply[2:4])[0] & 0xF}:"
                   f"{struct.unpack('!H', reply[6:8])[0]}:{'dnslib' in sys.modules}")
    await srv.close()
    print(" ".join(out))
asyncio.run(main())
'''


def test_dnslib_loads_only_for_a_query_the_zone_does_not_answer() -> None:
    out = subprocess.run([sys.executable, "-c", LAZY_DNSLIB], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    # id:rcode:answers:dnslib loaded — the zone's answer without dnslib; the forwarded one (no upstream answers:
    # SERVFAIL) loads it
    assert out.stdout.split() == ["7:0:1:False", "8:2:0:True"]
