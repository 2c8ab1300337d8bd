"""An upstream resolver the cluster DNS tests start themselves (never a real one), and small helpers.

(A helper module, not conftest.py: every test directory's conftest is the module `conftest`, and runs naming
several directories would hand the netns tests this one.)

The upstream is dnslib's threaded server with a fixed resolver, bound to a loopback address of its own.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from dnslib import QTYPE, RCODE, RR, SOA, A, DNSRecord
from dnslib.server import BaseResolver, DNSLogger
from dnslib.server import DNSServer as LibServer

UPSTREAM_HOST = "127.0.53.2"


class FixedUpstream(BaseResolver):  # type: ignore[misc]
    """www.example.test A 192.0.2.10 (TTL 30); other names NXDOMAIN with an SOA (negative TTL 60)."""

    def __init__(self) -> None:
        self.asked: list[str] = []
        self.lock = threading.Lock()

    def resolve(self, request: DNSRecord, handler: Any) -> DNSRecord:
        with self.lock:
            self.asked.append(f"{request.q.qname} {QTYPE[request.q.qtype]}")
        reply = request.reply()
        name = str(request.q.qname).lower()
        if name == "www.example.test." and request.q.qtype == QTYPE.A:
            reply.add_answer(RR(request.q.qname, QTYPE.A, rdata=A("192.0.2.10"), ttl=30))
        elif name == "big.example.test.":
            for i in range(60):
                reply.add_answer(RR(request.q.qname, QTYPE.A, rdata=A(f"192.0.2.{i + 1}"), ttl=30))
        else:
            reply.header.rcode = RCODE.NXDOMAIN
            reply.add_auth(RR("example.test", QTYPE.SOA, ttl=60, rdata=SOA(
                "ns.example.test", "h.example.test", (1, 60, 60, 60, 60))))
        return reply


def free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind((host, 0))
        port: int = s.getsockname()[1]
        return port


@contextmanager
def running_upstream() -> Iterator[tuple[FixedUpstream, int]]:
    """The upstream on UPSTREAM_HOST:<free port>, UDP and TCP, until the block ends."""
    resolver = FixedUpstream()
    port = free_port(UPSTREAM_HOST)
    quiet = DNSLogger(log="-request,-reply,-truncated,-error,-recv,-send,-data", logf=lambda _: None)
    servers = [LibServer(resolver, address=UPSTREAM_HOST, port=port, tcp=tcp, logger=quiet) for tcp in (False, True)]
    for s in servers:
        s.start_thread()
    try:
        yield resolver, port
    finally:
        for s in servers:
            s.stop()
            s.server.server_close()
