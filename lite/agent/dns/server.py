"""The node's DNS server: asyncio UDP and TCP on one address, the cluster zone first, upstream for the rest.

    datagram / TCP frame ──► parse_question (header + one question + an optional OPT; no library)
        ├─ ClusterZone.lookup(name, type) hit ──► header + the asker's question + prepared tail   (hot path)
        │     └─ a CNAME (ExternalName) asked for another type: the target resolved too and appended
        └─ None (not the zone's) ──► Forwarder (cache, upstream) on a task; SERVFAIL if nobody answers

Invariants:
- The hot path is synchronous: a dictionary lookup and a few bytes joined; no parsing library, no task. A
  UDP query seen before (same bytes after the ID) is answered from a memo of whole responses, cleared whenever
  the zone changes (`ClusterZone.generation`) and when it reaches MEMO_SIZE entries. An upstream answer the
  forwarder holds in its cache is served on the hot path too: its packed bytes with the asker's ID, flags and
  question, TTLs reduced by its age in whole seconds (`render_cached`), and memoised like a zone answer but
  only until its age reaches the next whole second or the answer expires, whichever is first
  (`memo_deadline`): a memo hit is byte-identical to a fresh render and never outlives the TTL. Only misses
  go to a task.
- Responses echo the asker's ID, question (letter case included) and RD; RA is set; answers from the zone
  are authoritative (AA). A query carrying EDNS gets an OPT record back (payload 1232) and may receive up to
  its advertised size over UDP (at least 512, at most 4096); anything larger is sent truncated (TC, question
  only) so the client retries over TCP. TCP answers are never truncated.
- Malformed queries with a readable header get FORMERR, other opcodes NOTIMP; responses and runts are dropped.
- At most `max_pending` forwarded queries are in flight; beyond that queries are answered SERVFAIL at once.
  A failure while answering (a bug) is logged and answered SERVFAIL, never left to the client's timeout.
- `close` cancels the in-flight work and closes every socket and connection it opened.
- dnslib (parsing and building full messages) is imported by the first query that leaves the hot path
  (forwarded, chased or malformed past the header), not before: about 0.7 MB a node whose pods ask only for
  cluster names never holds; that first query waits for the import (a few ms, once).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import socket
import struct
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from lite.agent.dns.forward import Cached, Forwarder
from lite.agent.dns.records import CNAME, NOERROR, SERVFAIL, Prepared
from lite.agent.dns.zone import ClusterZone
from lite.records import dataclass

if TYPE_CHECKING:
    from dnslib import DNSRecord

log = logging.getLogger("lite.agent.dns")
HEADER = struct.Struct("!HHHHHH")
FORMERR, NOTIMP = 1, 4
QR, AA, TC, RD, RA = 0x8000, 0x0400, 0x0200, 0x0100, 0x0080
OPT, ANY = 41, 255
EDNS_SIZE = 1232
OPT_RR = b"\0" + struct.pack("!HHIH", OPT, EDNS_SIZE, 0, 0)
MEMO_SIZE = 20000
SocketFactory = Callable[[int], socket.socket]  # socket type (SOCK_DGRAM / SOCK_STREAM) → an unbound socket


@dataclass(frozen=True)
class Question:
    ident: int
    flags: int
    name: str  # lower-cased, no trailing dot
    qtype: int
    qclass: int
    end: int  # offset just after the question
    edns: int  # the asker's UDP payload size, 0 without EDNS


def parse_question(data: bytes) -> Question | None:
    """The one question of a standard query; None if it is not one (see `error_reply` for what to answer)."""
    if len(data) < 17:
        return None
    ident, flags, qd, _an, _ns, ar = HEADER.unpack_from(data)
    if flags & QR or (flags >> 11) & 0xF or qd != 1:
        return None
    labels, pos = [], 12
    while True:
        n = data[pos] if pos < len(data) else 0xC0
        if n == 0:
            break
        if n > 63 or pos + 1 + n > len(data):
            return None
        labels.append(data[pos + 1 : pos + 1 + n])
        pos += 1 + n
    end = pos + 5
    if end > len(data):
        return None
    qtype, qclass = struct.unpack_from("!HH", data, pos + 1)
    edns = 0
    if ar and len(data) >= end + 11 and data[end] == 0 and struct.unpack_from("!H", data, end + 1)[0] == OPT:
        edns = max(512, min(4096, struct.unpack_from("!H", data, end + 3)[0]))
    name = b".".join(labels).lower().decode("latin-1")
    return Question(ident, flags, name, qtype, qclass, end, edns)


def error_reply(data: bytes) -> bytes | None:
    """FORMERR/NOTIMP for a query `parse_question` refused, None (drop it) for responses and runts."""
    if len(data) < 12:
        return None
    ident, flags = struct.unpack_from("!HH", data)
    if flags & QR:
        return None
    rcode = NOTIMP if (flags >> 11) & 0xF else FORMERR
    return HEADER.pack(ident, QR | (flags & 0x7800) | (flags & RD) | RA | rcode, 0, 0, 0, 0)


def render(data: bytes, q: Question, p: Prepared, limit: int) -> bytes:
    """The response to `data` (whose question is `q`) from a prepared answer, truncated beyond `limit`."""
    flags = QR | AA | (q.flags & RD) | RA | p.rcode
    opt = OPT_RR if q.edns else b""
    ar = p.arcount + (1 if q.edns else 0)
    out = HEADER.pack(q.ident, flags, 1, p.ancount, p.nscount, ar) + data[12 : q.end] + p.tail + opt
    if len(out) <= limit:
        return out
    return HEADER.pack(q.ident, flags | TC, 1, 0, 0, 1 if q.edns else 0) + data[12 : q.end] + opt


def render_cached(data: bytes, q: Question, c: Cached, limit: int, now: float) -> bytes:
    """A cached upstream answer for `data`: the asker's ID, RD and question; RA; no AA; TTLs aged; OPT if asked.

    The age is the whole seconds since the answer was stored (`int(now - c.stored)`), as `memo_deadline` assumes.
    """
    out = bytearray(c.wire)
    age = int(now - c.stored)
    if age:
        for off in c.ttl_offsets:
            struct.pack_into("!I", out, off, max(0, struct.unpack_from("!I", out, off)[0] - age))
    flags = (struct.unpack_from("!H", out, 2)[0] & ~(AA | RD | TC)) | (q.flags & RD) | RA
    struct.pack_into("!HH", out, 0, q.ident, flags)
    out[12 : c.question_end] = data[12 : q.end]  # same name and type: same length, the asker's letter case
    if q.edns:
        out += OPT_RR
        struct.pack_into("!H", out, 10, struct.unpack_from("!H", out, 10)[0] + 1)
    if len(out) <= limit:
        return bytes(out)
    opt = OPT_RR if q.edns else b""
    return HEADER.pack(q.ident, flags | TC, 1, 0, 0, 1 if q.edns else 0) + data[12 : q.end] + opt


def memo_deadline(stored: float, expires: float, now: float) -> float:
    """Until when a cached upstream answer rendered at `now` may be sent again as it is (monotonic seconds).

    `render_cached` ages TTLs by whole seconds since `stored`, so the bytes stay exact until the next whole
    second of age, and never past the cached answer's expiry: the earlier of the two.
    """
    return min(expires, stored + math.floor(now - stored) + 1)


def servfail(data: bytes, q: Question) -> bytes:
    return HEADER.pack(q.ident, QR | (q.flags & RD) | RA | SERVFAIL, 1, 0, 0, 0) + data[12 : q.end]


def udp_limit(q: Question) -> int:
    return q.edns or 512


class DnsServer:
    def __init__(self, zone: ClusterZone, forwarder: Forwarder | None = None, *, max_pending: int = 1000) -> None:
        self.zone = zone
        self.forwarder = forwarder
        self.max_pending = max_pending
        self._udp: _UdpReader | None = None
        self._memo: dict[bytes, tuple[bytes, float]] = {}  # UDP query minus ID → (response minus ID, valid until)
        self._memo_generation = -1
        self._tcp: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._writers: set[asyncio.StreamWriter] = set()
        self.address: tuple[str, int] = ("", 0)

    # ---- lifecycle ----
    async def start(self, host: str, port: int = 53, *, make_socket: SocketFactory | None = None) -> None:
        """Listen on UDP and TCP host:port (port 0: one free port for both); `make_socket` e.g. in another netns."""
        make = make_socket or (lambda kind: socket.socket(socket.AF_INET, kind))
        udp = make(socket.SOCK_DGRAM)
        tcp = make(socket.SOCK_STREAM)
        try:
            udp.bind((host, port))
            port = udp.getsockname()[1]
            tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            tcp.bind((host, port))
            tcp.listen(128)
            udp.setblocking(False)
            tcp.setblocking(False)
            self._tcp = await asyncio.start_server(self._serve_tcp, sock=tcp)
            self._udp = _UdpReader(self, udp)
        except BaseException:
            udp.close()
            tcp.close()
            raise
        self.address = (host, port)

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._udp is not None:
            self._udp.close()
        if self._tcp is not None:
            self._tcp.close()
        for writer in list(self._writers):
            writer.close()
        if self._tcp is not None:
            await self._tcp.wait_closed()
        if self.forwarder is not None:
            await self.forwarder.close()

    # ---- answering ----
    def answer_now(self, data: bytes, limit: int | None) -> tuple[bytes | None, Question | None]:
        """(response, None) when answered at once or dropped; (None, question) when it must go upstream.

        `limit` None means TCP (no size limit, no memo); any number means UDP, whose size limit is 512 bytes
        or the query's EDNS payload size.
        """
        now = time.monotonic()
        if limit is not None:
            if self._memo_generation != self.zone.generation:
                self._memo.clear()
                self._memo_generation = self.zone.generation
            hit = self._memo.get(data[2:])
            if hit is not None and hit[1] > now:
                return data[:2] + hit[0], None
        q = parse_question(data)
        if q is None:
            return error_reply(data), None
        p = self.zone.lookup(q.name, q.qtype) if q.qclass == 1 else None
        if p is None and self.forwarder is not None:
            cached = self.forwarder.fresh(q.name, q.qtype, q.qclass, now)
            if cached is not None:
                if limit is None:
                    return render_cached(data, q, cached, 65535, now), None
                reply = render_cached(data, q, cached, udp_limit(q), now)
                self._remember(data, reply, memo_deadline(cached.stored, cached.expires, now))
                return reply, None
        if p is None or (p.cname and q.qtype not in (CNAME, ANY)):
            return None, q
        if limit is None:
            return render(data, q, p, 65535), None
        reply = render(data, q, p, udp_limit(q))
        self._remember(data, reply, math.inf)
        return reply, None

    def _remember(self, data: bytes, reply: bytes, deadline: float) -> None:
        if len(self._memo) >= MEMO_SIZE:
            self._memo.clear()
        self._memo[data[2:]] = (reply[2:], deadline)

    async def answer_later(self, data: bytes, q: Question, limit: int | None, depth: int = 0) -> bytes:
        """The forwarded (or CNAME-chased) answer; SERVFAIL when no upstream answers. dnslib is imported here,
        off the hot path, by the first query the zone does not answer at once."""
        from dnslib import EDNS0, DNSRecord
        from dnslib.dns import DNSError

        try:
            query = DNSRecord.parse(data)
        except DNSError:
            return error_reply(data) or b""
        p = self.zone.lookup(q.name, q.qtype) if q.qclass == 1 else None
        if p is not None and p.cname and depth < 8:
            reply = await self._chase(data, q, p, depth)
        elif self.forwarder is not None:
            reply = await self.forwarder.resolve(query)
            if reply is not None:
                reply.header.aa = 0  # not our zone: we only relay
        else:
            reply = None
        if reply is None:
            reply = query.reply()
            reply.header.rcode = SERVFAIL
        reply.header.id, reply.header.rd, reply.header.ra = q.ident, bool(q.flags & RD), 1
        reply.questions = list(query.questions)
        reply.ar = [r for r in reply.ar if r.rtype != OPT]
        if q.edns:
            reply.add_ar(EDNS0(udp_len=EDNS_SIZE))
        wire: bytes = reply.pack()
        size = 65535 if limit is None else udp_limit(q)
        if len(wire) > size:
            reply.rr, reply.auth, reply.ar = [], [], [r for r in reply.ar if r.rtype == OPT]
            reply.header.tc = 1
            wire = reply.pack()
        return wire

    async def _chase(self, data: bytes, q: Question, p: Prepared, depth: int) -> DNSRecord:
        """The CNAME answer followed by the answer for its target (from the zone or upstream)."""
        from dnslib import DNSQuestion, DNSRecord

        own = DNSRecord.parse(render(data, Question(q.ident, q.flags, q.name, q.qtype, q.qclass, q.end, 0), p,
                                     65535))
        sub_query = DNSRecord(q=DNSQuestion(p.cname, q.qtype))
        sub_query.header.rd = 1
        sub_data = sub_query.pack()
        sq = parse_question(sub_data)
        assert sq is not None
        sub_wire, _ = self.answer_now(sub_data, None)
        if sub_wire is None:
            sub_wire = await self.answer_later(sub_data, sq, None, depth + 1)
        sub = DNSRecord.parse(sub_wire)
        own.rr.extend(sub.rr)
        own.header.rcode = sub.header.rcode if sub.header.rcode != SERVFAIL else NOERROR
        if not sub.rr:
            own.auth = list(sub.auth)
        own.header.aa = 0
        return own

    def forward(self, data: bytes, q: Question, limit: int | None, send: Callable[[bytes], None]) -> None:
        """Answer `data` on a task (`send` gets the response); SERVFAIL at once when too much is pending."""
        if len(self._tasks) >= self.max_pending:
            send(servfail(data, q))
            return

        async def work() -> None:
            try:
                send(await self.answer_later(data, q, limit))
            except Exception:
                log.exception("DNS query for %s failed", q.name)
                send(servfail(data, q))

        task = asyncio.get_running_loop().create_task(work())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _serve_tcp(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        try:
            while True:
                async with asyncio.timeout(10):
                    size = struct.unpack("!H", await reader.readexactly(2))[0]
                    data = await reader.readexactly(size)
                reply, q = self.answer_now(data, None)
                if reply is None and q is not None:
                    try:
                        reply = await self.answer_later(data, q, None)
                    except Exception:
                        log.exception("DNS query for %s failed", q.name)
                        reply = servfail(data, q)
                if reply:
                    writer.write(struct.pack("!H", len(reply)) + reply)
                    await writer.drain()
        except (asyncio.IncompleteReadError, TimeoutError, ConnectionError):
            pass
        finally:
            self._writers.discard(writer)
            writer.close()
            with contextlib.suppress(OSError, asyncio.CancelledError):
                await writer.wait_closed()


class _UdpReader:
    """The UDP socket, read straight from the loop's selector: each wake-up drains up to BATCH datagrams.

    (asyncio's datagram transport reads one datagram per loop iteration; draining amortises the select call
    and the callback dispatch over a burst, which is most of the cost per query.) Sends never block: a reply
    the socket buffer cannot take is dropped, as a lost UDP packet would be, and the client retries.
    """

    BATCH = 64

    def __init__(self, server: DnsServer, sock: socket.socket) -> None:
        self.server = server
        self.sock = sock
        self.closed = False
        asyncio.get_running_loop().add_reader(sock.fileno(), self._readable)

    def _readable(self) -> None:
        sock, server = self.sock, self.server
        for _ in range(self.BATCH):
            try:
                data, addr = sock.recvfrom(65535)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                continue  # an ICMP error queued on the socket: nothing to answer
            reply, q = server.answer_now(data, 512)
            if reply is not None:
                self._send(reply, addr)
            elif q is not None:
                server.forward(data, q, 512, self._sender(addr))

    def _sender(self, addr: tuple[str, int]) -> Callable[[bytes], None]:
        return lambda wire: self._send(wire, addr)

    def _send(self, wire: bytes, addr: tuple[str, int]) -> None:
        if self.closed:
            return
        with contextlib.suppress(OSError):
            self.sock.sendto(wire, addr)

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            asyncio.get_running_loop().remove_reader(self.sock.fileno())
            self.sock.close()
