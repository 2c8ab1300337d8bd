"""Cluster DNS records: Services and EndpointSlices in, prepared answers keyed by (name, type) out (pure).

Role: the record side of the node's cluster DNS (kubernetes/dns docs/specification.md, schema 1.1.0, with
CoreDNS's choices where the spec leaves room). `Records` folds objects in one Service at a time (a change to a
Service or one of its slices rebuilds only that Service's records) and keeps, for every (name, type) that
exists, the answer already encoded, so the server's hot path is one dictionary lookup (`lookup`).

Records (zone = the cluster domain, TTL 5 s everywhere):
- ClusterIP service: `<svc>.<ns>.svc.<zone>` A/AAAA of its cluster IPs; SRV `_<port>._<proto>.<svc>.<ns>.svc`
  for each named port (target the service name); PTR of each cluster IP to the service name.
- Headless service (`clusterIP: None`): `<svc>.<ns>.svc` A/AAAA of every ready endpoint (NXDOMAIN when none is
  ready); `<host>.<svc>.<ns>.svc` per ready endpoint, `<host>` being its `hostname` or else its dashed address
  (CoreDNS's choice); SRV per named slice port and endpoint (target `<host>.<svc>...`, port the endpoint's);
  PTR of each endpoint address to `<host>.<svc>.<ns>.svc`. `publishNotReadyAddresses` publishes unready ones.
- ClusterIP services also answer `<host>.<svc>.<ns>.svc` for their ready endpoints (as CoreDNS does).
- ExternalName: CNAME `<svc>.<ns>.svc` → the external name (answered for every query type; the server chases it).
- `<a-b-c-d>.<ns>.pod.<zone>` A (synthesized, any namespace: CoreDNS's `pods insecure`), and
  `dns-version.<zone>` TXT "1.1.0".
- SRV answers carry the targets' A/AAAA records in the additional section.

Invariants:
- Names are compared lower-cased, without the trailing dot.
- Inside the zone a name that exists with other types only, or that is an ancestor of a name that exists
  (an empty non-terminal such as `<ns>.svc.<zone>`), gets NODATA; any other name NXDOMAIN. Both carry the
  zone's SOA in the authority section (negative caching, RFC 2308).
- `lookup` returns None for names outside the zone, and for reverse names (in-addr.arpa / ip6.arpa) that hold
  no record: those are the forwarder's (CoreDNS's `fallthrough in-addr.arpa ip6.arpa`).
- Answers are encoded against a question at offset 12 (compression pointer 0xC00C to the question name), so
  a `Prepared` can be sent after any question for the same name whatever its letter case.
"""

from __future__ import annotations

import ipaddress
import struct
from collections.abc import Iterable, Mapping
from typing import Any

from lite.records import dataclass

Obj = Mapping[str, Any]
Key = tuple[str, str]  # (namespace, service name)
NameType = tuple[str, int]

A, NS, CNAME, SOA, PTR, TXT, AAAA, SRV = 1, 2, 5, 6, 12, 16, 28, 33
NOERROR, SERVFAIL, NXDOMAIN = 0, 2, 3
TTL = 5
SCHEMA_VERSION = "1.1.0"
SERVICE_NAME_LABEL = "kubernetes.io/service-name"
REVERSE_ZONES = ("in-addr.arpa", "ip6.arpa")


@dataclass(frozen=True)
class Prepared:
    """An encoded answer: the header's rcode and section counts, and the sections after the question."""

    rcode: int
    ancount: int
    nscount: int
    arcount: int
    tail: bytes
    cname: str = ""  # the target when the answer is a CNAME (the server chases it for other types)


@dataclass(frozen=True)
class Entry:
    """What one Service contributes to one (name, type): rdatas, and additional records (name, type, rdata)."""

    rdatas: tuple[bytes, ...]
    additional: tuple[tuple[str, int, bytes], ...] = ()


Fragment = dict[NameType, Entry]


# ---- wire encoding ----------------------------------------------------------------------------------------

def encode_name(name: str) -> bytes:
    """A domain name in wire form, uncompressed (`name` without the trailing dot; "" is the root)."""
    out = bytearray()
    for label in name.split(".") if name else ():
        raw = label.encode("idna") if not label.isascii() else label.encode()
        if not 0 < len(raw) < 64:
            raise ValueError(f"bad DNS label in {name!r}")
        out += bytes((len(raw),)) + raw
    return bytes(out + b"\0")


def decode_name(wire: bytes) -> str:
    """An uncompressed wire name back to text (lower-cased, no trailing dot)."""
    labels, pos = [], 0
    while wire[pos]:
        labels.append(wire[pos + 1: pos + 1 + wire[pos]].decode("latin-1").lower())
        pos += 1 + wire[pos]
    return ".".join(labels)


def rr(name: str | None, rtype: int, rdata: bytes, ttl: int = TTL) -> bytes:
    """One resource record; name None means the question's name (pointer to offset 12)."""
    owner = b"\xc0\x0c" if name is None else encode_name(name)
    return owner + struct.pack("!HHIH", rtype, 1, ttl, len(rdata)) + rdata


def rdata_address(ip: str) -> tuple[int, bytes]:
    addr = ipaddress.ip_address(ip)
    return (A if addr.version == 4 else AAAA), addr.packed


def rdata_srv(priority: int, weight: int, port: int, target: str) -> bytes:
    return struct.pack("!HHH", priority, weight, port) + encode_name(target)


def rdata_txt(text: str) -> bytes:
    raw = text.encode()
    return bytes((len(raw),)) + raw


def soa_rr(zone: str) -> bytes:
    rdata = encode_name(f"ns.dns.{zone}") + encode_name(f"hostmaster.{zone}") + struct.pack(
        "!IIIII", 1, 7200, 1800, 86400, TTL)
    return rr(zone, SOA, rdata)


def prepare(rcode: int, answers: Iterable[tuple[int, bytes]], authority: Iterable[bytes] = (),
            additional: Iterable[bytes] = ()) -> Prepared:
    """Answers (type, rdata) owned by the question's name, then ready-made authority and additional RRs."""
    an = [rr(None, t, d) for t, d in answers]
    ns, ar = list(authority), list(additional)
    return Prepared(rcode, len(an), len(ns), len(ar), b"".join(an + ns + ar))


def reverse_name(ip: str) -> str:
    return ipaddress.ip_address(ip).reverse_pointer


# ---- translation (one Service) ----------------------------------------------------------------------------

def service_records(svc: Obj, slices: Iterable[Obj], zone: str) -> Fragment:
    """Everything one Service publishes, given the slices that belong to it."""
    meta, spec = svc.get("metadata") or {}, svc.get("spec") or {}
    base = f"{meta['name']}.{meta.get('namespace') or 'default'}.svc.{zone}".lower()
    frag: dict[NameType, list[bytes]] = {}
    extra: dict[NameType, list[tuple[str, int, bytes]]] = {}

    def add(name: str, rtype: int, rdata: bytes) -> None:
        have = frag.setdefault((name, rtype), [])
        if rdata not in have:
            have.append(rdata)

    if spec.get("type") == "ExternalName":
        target = str(spec.get("externalName") or "").lower().rstrip(".")
        if target:
            add(base, CNAME, encode_name(target))
        return {k: Entry(tuple(v)) for k, v in frag.items()}
    headless = spec.get("clusterIP") == "None"
    if not headless:
        ips = [ip for ip in spec.get("clusterIPs") or [spec.get("clusterIP") or ""] if _is_ip(ip)]
        if not ips:
            return {}
        for ip in ips:
            add(base, *rdata_address(ip))
            add(reverse_name(ip), PTR, encode_name(base))
        addresses = [(rdata_address(ip)) for ip in ips]
        for port in spec.get("ports") or []:
            if port.get("name"):
                srv = f"_{port['name']}._{str(port.get('protocol') or 'TCP').lower()}.{base}".lower()
                add(srv, SRV, rdata_srv(0, 100, int(port["port"]), base))
                extra.setdefault((srv, SRV), []).extend((base, t, d) for t, d in addresses)
    publish_all = bool(spec.get("publishNotReadyAddresses"))
    endpoints = _endpoints(slices, publish_all)
    weight = max(1, 100 // max(1, len(endpoints)))
    for host, ip, ports in endpoints:
        rtype, packed = rdata_address(ip)
        host_name = f"{host}.{base}"
        add(host_name, rtype, packed)
        if not headless:
            continue
        add(base, rtype, packed)
        add(reverse_name(ip), PTR, encode_name(host_name))
        for port_name, protocol, number in ports:
            srv = f"_{port_name}._{protocol}.{base}"
            add(srv, SRV, rdata_srv(0, weight, number, host_name))
            extra.setdefault((srv, SRV), []).append((host_name, rtype, packed))
    return {k: Entry(tuple(v), tuple(dict.fromkeys(extra.get(k, ())))) for k, v in frag.items()}


def _endpoints(slices: Iterable[Obj], publish_all: bool) -> list[tuple[str, str, list[tuple[str, str, int]]]]:
    """(host label, address, named ports) of the published endpoints, sorted by address, one per address."""
    found: dict[str, tuple[str, str, list[tuple[str, str, int]]]] = {}
    for s in slices:
        ports = [(str(p["name"]).lower(), str(p.get("protocol") or "TCP").lower(), int(p["port"]))
                 for p in s.get("ports") or [] if p.get("name") and p.get("port") is not None]
        for e in s.get("endpoints") or []:
            if not publish_all and (e.get("conditions") or {}).get("ready") is False:
                continue
            for ip in (e.get("addresses") or [])[:1]:
                if not _is_ip(ip):
                    continue
                host = str(e.get("hostname") or ip.replace(".", "-").replace(":", "-")).lower()
                prior = found.get(ip)
                merged = ports if prior is None else prior[2] + [p for p in ports if p not in prior[2]]
                found[ip] = (host if prior is None else prior[0], ip, merged)
    return sorted(found.values(), key=lambda t: ipaddress.ip_address(t[1]))


def slice_owner(s: Obj) -> Key | None:
    meta = s.get("metadata") or {}
    owner = (meta.get("labels") or {}).get(SERVICE_NAME_LABEL)
    return (str(meta.get("namespace") or "default"), str(owner)) if owner else None


def object_key(obj: Obj) -> Key:
    meta = obj["metadata"]
    return (str(meta.get("namespace") or "default"), str(meta["name"]))


def _is_ip(value: str) -> bool:
    try:
        ipaddress.ip_address(value)
    except ValueError:
        return False
    return True
