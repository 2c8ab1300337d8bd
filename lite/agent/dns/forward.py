"""Forwarding to the node's upstream resolvers, with a small TTL-respecting answer cache.

Role: what the cluster zone does not answer goes to the upstream resolvers (the host's resolv.conf, or
`--resolv-conf`), tried in order, over UDP with a fresh random message ID on one shared socket per upstream,
and again over TCP when the UDP answer comes back truncated. Answers are parsed with dnslib (untrusted input:
compression, odd records) to learn their TTL and rcode, and kept in a cache keyed by (name, type, class).

Invariants:
- `fresh` gives the server a cached answer already packed (ID 0, no OPT) with the offsets of its TTLs, so a
  cache hit is served by patching bytes on the hot path, without parsing or a task.
- A cached answer lives for its smallest TTL (answers), or the SOA's negative TTL (NXDOMAIN/NODATA, RFC 2308),
  capped at `max_ttl`; SERVFAIL, REFUSED and answers without any TTL are not cached. A cache hit is served
  with its TTLs reduced by its age and the asker's message ID; callers always get a copy of what is cached.
- The cache is bounded (`max_entries`, oldest dropped first); expired entries are dropped when met.
- An upstream that does not answer within `timeout` is skipped for this query; when none answers the caller
  gets None and sends SERVFAIL. Replies whose ID or question do not match a pending query are ignored.
- Only the event loop touches the state; nothing blocks.
- dnslib is imported by the first query forwarded, not before: a node whose pods only ask for cluster names
  never loads it (about 0.7 MB resident).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import struct
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, cast

from lite.records import dataclass

if TYPE_CHECKING:
    from dnslib import DNSRecord

log = logging.getLogger("lite.agent.dns")
Address = tuple[str, int]
CacheKey = tuple[str, int, int]
NOERROR, SERVFAIL, NXDOMAIN, REFUSED = 0, 2, 3, 5
SOA, OPT = 6, 41  # record types (dnslib's SOA, OPT)


@dataclass
class Cached:
    expires: float
    stored: float
    record: DNSRecord
    wire: bytes = b""  # the record packed with ID 0 and without OPT, for `fresh` callers that patch bytes
    question_end: int = 0  # offset just after the question in `wire`
    ttl_offsets: tuple[int, ...] = ()  # where the TTL of each record sits in `wire`

    @classmethod
    def of(cls, record: DNSRecord, expires: float, stored: float) -> Cached:
        from dnslib import DNSRecord

        bare = DNSRecord.parse(record.pack())
        bare.header.id = 0
        bare.ar = [r for r in bare.ar if r.rtype != OPT]
        wire = bare.pack()
        end, offsets = ttl_offsets(wire)
        return cls(expires, stored, record, wire, end, tuple(offsets))


class _UdpClient(asyncio.DatagramProtocol):
    """One UDP socket towards one upstream; replies are matched to waiters by message ID."""

    def __init__(self) -> None:
        self.transport: asyncio.DatagramTransport | None = None
        self.pending: dict[int, asyncio.Future[bytes]] = {}

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.DatagramTransport, transport)

    def datagram_received(self, data: bytes, addr: Address) -> None:
        if len(data) >= 2:
            waiter = self.pending.get(struct.unpack_from("!H", data)[0])
            if waiter is not None and not waiter.done():
                waiter.set_result(data)

    def connection_lost(self, exc: Exception | None) -> None:
        for waiter in self.pending.values():
            if not waiter.done():
                waiter.set_exception(ConnectionError("upstream socket closed"))


class Forwarder:
    def __init__(self, upstreams: Sequence[Address], *, timeout: float = 2.0, max_entries: int = 10000,
                 max_ttl: int = 3600) -> None:
        self.upstreams = list(upstreams)
        self.timeout = timeout
        self.max_entries = max_entries
        self.max_ttl = max_ttl
        self._clients: dict[Address, _UdpClient] = {}
        self._cache: dict[CacheKey, Cached] = {}
        self.hits = 0
        self.misses = 0

    async def close(self) -> None:
        for client in self._clients.values():
            if client.transport is not None:
                client.transport.close()
        self._clients.clear()

    async def resolve(self, query: DNSRecord) -> DNSRecord | None:
        """The answer to `query` (its ID and question), from the cache or upstream; None if no upstream answers."""
        q = query.q
        key = (str(q.qname).lower().rstrip("."), q.qtype, q.qclass)
        now = time.monotonic()
        cached = self._cache.get(key)
        if cached is not None and cached.expires > now:
            self.hits += 1
            return _aged(cached.record, query, int(now - cached.stored))
        if cached is not None:
            del self._cache[key]
        self.misses += 1
        reply = await self._ask(query)
        if reply is not None:
            ttl = cache_ttl(reply, self.max_ttl)
            if ttl > 0:
                if len(self._cache) >= self.max_entries:
                    self._cache.pop(next(iter(self._cache)))
                self._cache[key] = Cached.of(reply, now + ttl, now)
            return _aged(reply, query, 0)  # a copy: callers may change what they get, never the cached one
        return reply

    def fresh(self, name: str, qtype: int, qclass: int, now: float) -> Cached | None:
        """The cached answer for (lower-cased name, type, class) if it has not expired (a hit), else None."""
        cached = self._cache.get((name, qtype, qclass))
        if cached is None or cached.expires <= now:
            return None
        self.hits += 1
        return cached

    async def _ask(self, query: DNSRecord) -> DNSRecord | None:
        from dnslib import DNSRecord
        from dnslib.dns import DNSError

        for upstream in self.upstreams:
            try:
                wire = await self._udp(upstream, query)
                reply = DNSRecord.parse(wire)
                if reply.header.tc:
                    reply = DNSRecord.parse(await self._tcp(upstream, query))
            except (TimeoutError, OSError, DNSError, asyncio.IncompleteReadError) as exc:
                log.debug("upstream %s:%d failed for %s: %s", *upstream, query.q.qname, exc)
                continue
            if reply.header.rcode in (SERVFAIL, REFUSED):
                continue
            return reply
        return None

    async def _udp(self, upstream: Address, query: DNSRecord) -> bytes:
        client = self._clients.get(upstream)
        if client is None or client.transport is None or client.transport.is_closing():
            loop = asyncio.get_running_loop()
            _, client = await loop.create_datagram_endpoint(_UdpClient, remote_addr=upstream)
            self._clients[upstream] = client
        ident = secrets.randbelow(65536)
        while ident in client.pending:
            ident = secrets.randbelow(65536)
        from dnslib import DNSRecord

        out = DNSRecord.parse(query.pack())
        out.header.id = ident
        waiter: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        client.pending[ident] = waiter
        try:
            assert client.transport is not None
            client.transport.sendto(out.pack())
            async with asyncio.timeout(self.timeout):
                while True:
                    data = await waiter
                    if _same_question(data, out):
                        return data
                    waiter = asyncio.get_running_loop().create_future()
                    client.pending[ident] = waiter
        finally:
            client.pending.pop(ident, None)

    async def _tcp(self, upstream: Address, query: DNSRecord) -> bytes:
        async with asyncio.timeout(self.timeout):
            reader, writer = await asyncio.open_connection(*upstream)
            try:
                wire = query.pack()
                writer.write(struct.pack("!H", len(wire)) + wire)
                size = struct.unpack("!H", await reader.readexactly(2))[0]
                return await reader.readexactly(size)
            finally:
                writer.close()
                with contextlib.suppress(OSError):
                    await writer.wait_closed()


def cache_ttl(reply: DNSRecord, max_ttl: int) -> int:
    """How long a reply may be cached: its smallest answer TTL, or the negative TTL of its SOA; 0 = never."""
    rcode = reply.header.rcode
    if rcode not in (NOERROR, NXDOMAIN) or reply.header.tc:
        return 0
    if rcode == NOERROR and reply.rr:
        return min(min(int(r.ttl) for r in reply.rr), max_ttl)
    soas = [min(int(r.ttl), int(r.rdata.times[-1])) for r in reply.auth if r.rtype == SOA]
    return min(min(soas), max_ttl) if soas else 0


def ttl_offsets(wire: bytes) -> tuple[int, list[int]]:
    """(end of the question section, offsets of the TTL field of every non-OPT record) of a well-formed message."""
    qd, an, ns, ar = struct.unpack_from("!HHHH", wire, 4)
    pos = 12
    for _ in range(qd):
        pos = _skip_name(wire, pos) + 4
    end, offsets = pos, []
    for _ in range(an + ns + ar):
        pos = _skip_name(wire, pos)
        rtype, _, _, rdlen = struct.unpack_from("!HHIH", wire, pos)
        if rtype != OPT:
            offsets.append(pos + 4)
        pos += 10 + rdlen
    return end, offsets


def _skip_name(wire: bytes, pos: int) -> int:
    while True:
        n = wire[pos]
        if n == 0:
            return pos + 1
        if n & 0xC0 == 0xC0:
            return pos + 2
        pos += 1 + n


def _aged(record: DNSRecord, query: DNSRecord, age: int) -> DNSRecord:
    from dnslib import DNSRecord

    out = DNSRecord.parse(record.pack())
    out.header.id = query.header.id
    out.questions = list(query.questions)
    for r in [*out.rr, *out.auth, *out.ar]:
        if r.rtype != OPT:
            r.ttl = max(0, r.ttl - age)
    return out


def _same_question(data: bytes, sent: DNSRecord) -> bool:
    from dnslib import DNSRecord
    from dnslib.dns import DNSError

    try:
        got = DNSRecord.parse(data)
    except DNSError:
        return False
    return bool(got.questions) and got.q.qtype == sent.q.qtype and str(got.q.qname).lower() == str(
        sent.q.qname).lower()
