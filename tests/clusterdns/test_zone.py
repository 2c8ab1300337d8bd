"""The cluster zone as plain data: Services/EndpointSlices → answers, decoded with dnspython (no sockets).

Expectations follow kubernetes/dns docs/specification.md (schema 1.1.0) section by section.
"""

from __future__ import annotations

import copy
import struct
from typing import Any

import dns.message
import dns.rcode
import dns.rdatatype
import pytest

from lite.agent.dns.zone import ClusterZone

Obj = dict[str, Any]


def svc(name: str, cluster_ip: str = "10.43.0.20", ns: str = "default", ports: list[Obj] | None = None,
        **spec: Any) -> Obj:
    ports = ports if ports is not None else [{"name": "http", "port": 80, "protocol": "TCP"}, {"port": 81}]
    return {"metadata": {"namespace": ns, "name": name}, "spec": {"clusterIP": cluster_ip, "ports": ports, **spec}}


def ep(ip: str, hostname: str | None = None, ready: bool = True) -> Obj:
    e: Obj = {"addresses": [ip], "conditions": {"ready": ready}}
    if hostname:
        e["hostname"] = hostname
    return e


def eps(service: str, *endpoints: Obj, ns: str = "default", suffix: str = "abc", family: str = "IPv4",
        ports: list[Obj] | None = None) -> Obj:
    ports = ports if ports is not None else [{"name": "http", "port": 8080, "protocol": "TCP"}]
    meta = {"namespace": ns, "name": f"{service}-{suffix}", "labels": {"kubernetes.io/service-name": service}}
    return {"metadata": meta, "addressType": family, "ports": ports, "endpoints": list(endpoints)}


def ask(zone: ClusterZone, name: str, qtype: str) -> dns.message.Message | None:
    """The full response message the server would send for this question, parsed by dnspython."""
    q = dns.message.make_query(name, qtype)
    prepared = zone.lookup(name.lower().rstrip("."), dns.rdatatype.from_text(qtype))
    if prepared is None:
        return None
    wire = q.to_wire()
    question = wire[12:]
    header = struct.pack("!HHHHHH", q.id, 0x8580 | prepared.rcode, 1, prepared.ancount, prepared.nscount,
                         prepared.arcount)
    return dns.message.from_wire(header + question + prepared.tail)


def answers(msg: dns.message.Message | None) -> list[str]:
    assert msg is not None
    return sorted(f"{rrset.name} {rrset.ttl} {dns.rdatatype.to_text(rrset.rdtype)} {rd}"
                  for rrset in msg.answer for rd in rrset)


def rcode(msg: dns.message.Message | None) -> str:
    assert msg is not None
    return dns.rcode.to_text(msg.rcode())


@pytest.fixture
def zone() -> ClusterZone:
    z = ClusterZone("cluster.local")
    z.set_service(svc("web"))
    z.set_slice(eps("web", ep("10.42.0.5", "web-host"), ep("10.42.0.6"), ep("10.42.0.7", ready=False)))
    z.set_service(svc("nginx", "None", ports=[{"name": "web", "port": 80}]))
    z.set_slice(eps("nginx", ep("10.42.1.2", "web-0"), ep("10.42.1.3", "web-1"), ep("10.42.1.4", "web-2", False),
                    ports=[{"name": "web", "port": 8080, "protocol": "TCP"}]))
    z.set_service(svc("ext", "", type="ExternalName", externalName="Example.COM."))
    return z


def test_cluster_ip_a_record(zone: ClusterZone) -> None:  # 2.3.1
    assert answers(ask(zone, "web.default.svc.cluster.local.", "A")) == [
        "web.default.svc.cluster.local. 5 A 10.43.0.20"]
    assert answers(ask(zone, "WEB.Default.SVC.cluster.LOCAL.", "A")) == [
        "WEB.Default.SVC.cluster.LOCAL. 5 A 10.43.0.20"]  # case-insensitive, question case echoed


def test_cluster_ip_srv_for_named_ports_only(zone: ClusterZone) -> None:  # 2.3.2
    msg = ask(zone, "_http._tcp.web.default.svc.cluster.local.", "SRV")
    assert answers(msg) == ["_http._tcp.web.default.svc.cluster.local. 5 SRV 0 100 80 web.default.svc.cluster.local."]
    assert msg is not None and [str(r) for r in msg.additional] == ["web.default.svc.cluster.local. 5 IN A 10.43.0.20"]
    assert rcode(ask(zone, "_http._udp.web.default.svc.cluster.local.", "SRV")) == "NXDOMAIN"


def test_cluster_ip_ptr(zone: ClusterZone) -> None:  # 2.3.3
    assert answers(ask(zone, "20.0.43.10.in-addr.arpa.", "PTR")) == [
        "20.0.43.10.in-addr.arpa. 5 PTR web.default.svc.cluster.local."]


def test_headless_a_records_are_ready_endpoints(zone: ClusterZone) -> None:  # 2.4.1
    assert answers(ask(zone, "nginx.default.svc.cluster.local.", "A")) == [
        "nginx.default.svc.cluster.local. 5 A 10.42.1.2", "nginx.default.svc.cluster.local. 5 A 10.42.1.3"]
    assert answers(ask(zone, "web-0.nginx.default.svc.cluster.local.", "A")) == [
        "web-0.nginx.default.svc.cluster.local. 5 A 10.42.1.2"]
    assert rcode(ask(zone, "web-2.nginx.default.svc.cluster.local.", "A")) == "NXDOMAIN"  # not ready


def test_headless_srv_per_endpoint_with_additional(zone: ClusterZone) -> None:  # 2.4.2
    msg = ask(zone, "_web._tcp.nginx.default.svc.cluster.local.", "SRV")
    assert answers(msg) == [
        "_web._tcp.nginx.default.svc.cluster.local. 5 SRV 0 50 8080 web-0.nginx.default.svc.cluster.local.",
        "_web._tcp.nginx.default.svc.cluster.local. 5 SRV 0 50 8080 web-1.nginx.default.svc.cluster.local."]
    assert msg is not None and sorted(str(r) for r in msg.additional) == [
        "web-0.nginx.default.svc.cluster.local. 5 IN A 10.42.1.2",
        "web-1.nginx.default.svc.cluster.local. 5 IN A 10.42.1.3"]


def test_headless_ptr(zone: ClusterZone) -> None:  # 2.4.3
    assert answers(ask(zone, "3.1.42.10.in-addr.arpa.", "PTR")) == [
        "3.1.42.10.in-addr.arpa. 5 PTR web-1.nginx.default.svc.cluster.local."]


def test_endpoint_without_hostname_gets_dashed_name(zone: ClusterZone) -> None:
    assert answers(ask(zone, "10-42-0-6.web.default.svc.cluster.local.", "A")) == [
        "10-42-0-6.web.default.svc.cluster.local. 5 A 10.42.0.6"]
    assert answers(ask(zone, "web-host.web.default.svc.cluster.local.", "A")) == [
        "web-host.web.default.svc.cluster.local. 5 A 10.42.0.5"]


def test_external_name_is_a_cname_for_every_type(zone: ClusterZone) -> None:  # 2.5
    for qtype in ("A", "AAAA", "CNAME"):
        assert answers(ask(zone, "ext.default.svc.cluster.local.", qtype)) == [
            "ext.default.svc.cluster.local. 5 CNAME example.com."]


def test_pod_names_and_schema_version(zone: ClusterZone) -> None:  # 2.6, 2.2
    assert answers(ask(zone, "10-42-9-9.any.pod.cluster.local.", "A")) == [
        "10-42-9-9.any.pod.cluster.local. 5 A 10.42.9.9"]
    assert rcode(ask(zone, "10-42-9-9.any.pod.cluster.local.", "AAAA")) == "NOERROR"
    assert rcode(ask(zone, "10-42-9-999.any.pod.cluster.local.", "A")) == "NXDOMAIN"
    assert answers(ask(zone, "dns-version.cluster.local.", "TXT")) == ['dns-version.cluster.local. 5 TXT "1.1.0"']


@pytest.mark.parametrize(("name", "qtype", "expected"), [
    ("web.default.svc.cluster.local.", "AAAA", "NOERROR"),  # exists as A only: NODATA
    ("web.default.svc.cluster.local.", "TXT", "NOERROR"),
    ("default.svc.cluster.local.", "A", "NOERROR"),  # empty non-terminal
    ("svc.cluster.local.", "A", "NOERROR"),
    ("cluster.local.", "A", "NOERROR"),
    ("nope.default.svc.cluster.local.", "A", "NXDOMAIN"),
    ("web.other.svc.cluster.local.", "A", "NXDOMAIN"),
    ("google.com.default.svc.cluster.local.", "A", "NXDOMAIN"),
])
def test_nxdomain_versus_nodata(zone: ClusterZone, name: str, qtype: str, expected: str) -> None:
    msg = ask(zone, name, qtype)
    assert rcode(msg) == expected
    assert msg is not None and not msg.answer
    assert [rrset.rdtype for rrset in msg.authority] == [dns.rdatatype.SOA]  # negative caching, RFC 2308


def test_outside_names_and_unknown_reverse_names_are_forwarded(zone: ClusterZone) -> None:
    assert ask(zone, "example.com.", "A") is None
    assert ask(zone, "9.9.9.9.in-addr.arpa.", "PTR") is None
    assert ask(zone, "cluster.localx.", "A") is None


def test_headless_without_ready_endpoints_is_nxdomain() -> None:
    z = ClusterZone()
    z.set_service(svc("db", "None"))
    assert rcode(ask(z, "db.default.svc.cluster.local.", "A")) == "NXDOMAIN"
    z.set_slice(eps("db", ep("10.42.0.9", ready=False)))
    assert rcode(ask(z, "db.default.svc.cluster.local.", "A")) == "NXDOMAIN"
    z.set_service(svc("db", "None", publishNotReadyAddresses=True))
    assert answers(ask(z, "db.default.svc.cluster.local.", "A")) == ["db.default.svc.cluster.local. 5 A 10.42.0.9"]


def test_incremental_changes_and_deletes(zone: ClusterZone) -> None:
    zone.set_slice(eps("nginx", ep("10.42.1.2", "web-0"), ports=[{"name": "web", "port": 8080}]))
    assert answers(ask(zone, "nginx.default.svc.cluster.local.", "A")) == [
        "nginx.default.svc.cluster.local. 5 A 10.42.1.2"]
    assert rcode(ask(zone, "web-1.nginx.default.svc.cluster.local.", "A")) == "NXDOMAIN"
    assert ask(zone, "3.1.42.10.in-addr.arpa.", "PTR") is None
    zone.delete_service("default", "nginx")
    assert rcode(ask(zone, "nginx.default.svc.cluster.local.", "A")) == "NXDOMAIN"
    assert rcode(ask(zone, "web-0.nginx.default.svc.cluster.local.", "A")) == "NXDOMAIN"
    zone.delete_service("default", "web")
    zone.delete_service("default", "ext")
    assert rcode(ask(zone, "default.svc.cluster.local.", "A")) == "NXDOMAIN"  # no longer a non-terminal
    zone.set_service(svc("nginx", "None", ports=[]))  # the slice kept meanwhile is used again
    assert answers(ask(zone, "web-0.nginx.default.svc.cluster.local.", "A")) == [
        "web-0.nginx.default.svc.cluster.local. 5 A 10.42.1.2"]


def test_two_slices_and_a_moved_slice() -> None:
    z = ClusterZone()
    z.set_service(svc("a", "None"))
    z.set_slice(eps("a", ep("10.42.0.1"), suffix="x"))
    z.set_slice(eps("a", ep("10.42.0.2"), suffix="y"))
    assert len(answers(ask(z, "a.default.svc.cluster.local.", "A"))) == 2
    z.delete_slice("default", "a-y")
    assert answers(ask(z, "a.default.svc.cluster.local.", "A")) == ["a.default.svc.cluster.local. 5 A 10.42.0.1"]


def test_dual_stack_and_ipv6_slices() -> None:
    z = ClusterZone()
    z.set_service(svc("d", "10.43.0.30", clusterIPs=["10.43.0.30", "fd00:43::30"]))
    assert answers(ask(z, "d.default.svc.cluster.local.", "AAAA")) == [
        "d.default.svc.cluster.local. 5 AAAA fd00:43::30"]
    assert answers(ask(z, "0.3.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.3.4.0.0.0.0.d.f.ip6.arpa.", "PTR")) == [
        "0.3.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.3.4.0.0.0.0.d.f.ip6.arpa. 5 PTR d.default.svc.cluster.local."]
    z.set_service(svc("h", "None"))
    z.set_slice(eps("h", ep("fd00:42::7", "h-0"), family="IPv6"))
    assert answers(ask(z, "h-0.h.default.svc.cluster.local.", "AAAA")) == [
        "h-0.h.default.svc.cluster.local. 5 AAAA fd00:42::7"]


def test_replace_drops_what_is_gone(zone: ClusterZone) -> None:
    zone.replace([svc("only", "10.43.0.99")], [])
    assert rcode(ask(zone, "web.default.svc.cluster.local.", "A")) == "NXDOMAIN"
    assert ask(zone, "20.0.43.10.in-addr.arpa.", "PTR") is None
    assert answers(ask(zone, "only.default.svc.cluster.local.", "A")) == [
        "only.default.svc.cluster.local. 5 A 10.43.0.99"]


def test_other_cluster_domain() -> None:
    z = ClusterZone("k8s.test.")
    z.set_service(svc("web"))
    assert answers(ask(z, "web.default.svc.k8s.test.", "A")) == ["web.default.svc.k8s.test. 5 A 10.43.0.20"]
    assert ask(z, "web.default.svc.cluster.local.", "A") is None


def contents(z: ClusterZone) -> dict[tuple[str, int], tuple[str, list[str], list[str]]]:
    """Every (name, type) the zone holds, with its rcode, answers and additional records (sorted)."""
    out = {}
    for name, qtype in z._answers:
        msg = ask(z, name + ".", dns.rdatatype.to_text(qtype))
        assert msg is not None
        out[(name, qtype)] = (rcode(msg), answers(msg), sorted(str(rs) for rs in msg.additional))
    return out


def fresh(services: list[Obj], slices: list[Obj]) -> ClusterZone:
    z = ClusterZone()
    for s in slices:
        z.set_slice(s)
    for s in services:
        z.set_service(s)
    return z


BASE_SERVICES = [svc("web"), svc("nginx", "None", ports=[{"name": "web", "port": 80}]), svc("db", "10.43.0.21")]
BASE_SLICES = [eps("web", ep("10.42.0.5", "web-host")), eps("nginx", ep("10.42.1.2", "web-0")),
               eps("nginx", ep("10.42.1.3", "web-1"), suffix="two"), eps("late", ep("10.42.2.1"))]


@pytest.mark.parametrize(("services", "slices"), [
    (BASE_SERVICES, BASE_SLICES),  # unchanged
    ([svc("web", "10.43.0.22"), *BASE_SERVICES[1:]], BASE_SLICES),  # a Service changed
    (BASE_SERVICES[1:], BASE_SLICES),  # a Service gone, its slice kept
    ([*BASE_SERVICES, svc("late", "None")], BASE_SLICES),  # a Service whose slice came first
    (BASE_SERVICES, BASE_SLICES[:2] + BASE_SLICES[3:]),  # a slice gone
    (BASE_SERVICES, [BASE_SLICES[0], eps("nginx", ep("10.42.1.9", "web-9")), *BASE_SLICES[2:]]),  # slice changed
    (BASE_SERVICES, [*BASE_SLICES[:2], eps("db", ep("10.42.1.3", "web-1"), suffix="two"), BASE_SLICES[3]]),  # moved
    ([], []),
], ids=["unchanged", "service-changed", "service-gone", "service-after-slice", "slice-gone", "slice-changed",
        "slice-moved", "empty"])
def test_replace_equals_a_fresh_build(services: list[Obj], slices: list[Obj]) -> None:
    z = fresh(BASE_SERVICES, BASE_SLICES)
    z.replace(copy.deepcopy(services), copy.deepcopy(slices))  # a resync brings equal objects, not the same ones
    assert contents(z) == contents(fresh(services, slices))
    assert z._nodes == fresh(services, slices)._nodes  # NODATA versus NXDOMAIN too


def test_replace_with_equal_objects_changes_no_answer() -> None:
    z = fresh(BASE_SERVICES, BASE_SLICES)
    generation = z.generation
    z.replace(copy.deepcopy(BASE_SERVICES), copy.deepcopy(BASE_SLICES))
    assert z.generation == generation  # the server's memo of rendered answers stays valid
    z.replace(copy.deepcopy(BASE_SERVICES), copy.deepcopy(BASE_SLICES[1:]))
    assert z.generation > generation
