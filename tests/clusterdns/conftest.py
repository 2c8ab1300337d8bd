"""Fixtures for the cluster DNS tests: the upstream resolver (see dnsupstream.py), started once per session."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from dnslib.server import DNSLogger
from dnslib.server import DNSServer as LibServer
from dnsupstream import UPSTREAM_HOST, FixedUpstream, free_port


@pytest.fixture(scope="session")
def upstream_servers() -> Iterator[tuple[FixedUpstream, int]]:
    resolver = FixedUpstream()
    port = free_port(UPSTREAM_HOST)
    quiet = DNSLogger(log="-request,-reply,-truncated,-error,-recv,-send,-data", logf=lambda _: None)
    servers = [LibServer(resolver, address=UPSTREAM_HOST, port=port, tcp=tcp, logger=quiet) for tcp in (False, True)]
    for s in servers:
        s.start_thread()
    yield resolver, port
    for s in servers:
        s.stop()
        s.server.server_close()


@pytest.fixture
def upstream(upstream_servers: tuple[FixedUpstream, int]) -> tuple[FixedUpstream, int]:
    upstream_servers[0].asked.clear()
    return upstream_servers


