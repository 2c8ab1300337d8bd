"""healthCheckNodePort: the HTTP answer an external load balancer polls for `externalTrafficPolicy: Local`.

Role: for every LoadBalancer Service with `externalTrafficPolicy: Local` and a `healthCheckNodePort`, listen on
that port on the node and answer any GET with kube-proxy's document
    {"service": {"namespace": ..., "name": ...}, "localEndpoints": N, "serviceProxyHealthy": true}
and status 200 when this node has a local endpoint for it (N > 0), 503 otherwise, so the load balancer sends
traffic only to nodes that can serve it without leaving the node (the client IP stays preserved).

Invariants:
- `wanted(ports, node)` is pure: health port → (namespace, name, local endpoint count). `HealthServers.update`
  converges the listeners to it: opens missing ones, closes dropped ones, and changes counts in place (an open
  listener is never restarted for a count change).
- Listening sockets are created inside the node netns (`nsfs.run_in_netns`) and served by the event loop.
- A port that cannot be bound is logged once and retried at the next update; it never fails the sync.
- Requests are bounded: 8 KiB of request head, 5 s to send it; one answer per connection.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import socket
from collections.abc import Iterable

from lite.agent.proxy.endpoints import ServicePort
from lite.netns import nsfs
from lite.netns.nsfs import NetnsRef

log = logging.getLogger("lite.agent.proxy")
Target = tuple[str, str, int]  # (namespace, name, local endpoints)
MAX_HEAD = 8192
READ_TIMEOUT = 5.0


def wanted(ports: Iterable[ServicePort], node: str) -> dict[int, Target]:
    local: dict[int, tuple[str, str, set[str]]] = {}
    for sp in ports:
        if sp.external_local and sp.health_check_node_port:
            entry = local.setdefault(sp.health_check_node_port, (sp.namespace, sp.name, set()))
            entry[2].update(e.ip for e in sp.local_endpoints(node))
    return {port: (ns, name, len(ips)) for port, (ns, name, ips) in local.items()}


def answer(target: Target) -> bytes:
    namespace, name, count = target
    body = json.dumps(
        {"service": {"namespace": namespace, "name": name}, "localEndpoints": count, "serviceProxyHealthy": True},
        indent=2,
    ).encode()
    status = "200 OK" if count > 0 else "503 Service Unavailable"
    head = (
        f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\nX-Content-Type-Options: nosniff\r\n"
        f"X-Load-Balancing-Endpoint-Weight: {count}\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    return head.encode() + body


def _listening_socket(port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("0.0.0.0", port))
        sock.listen(64)
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock


class HealthServers:
    def __init__(self, netns: NetnsRef = None) -> None:
        self.netns = netns
        self._targets: dict[int, Target] = {}
        self._servers: dict[int, asyncio.Server] = {}
        self._failed: set[int] = set()

    @property
    def ports(self) -> list[int]:
        return sorted(self._servers)

    async def update(self, targets: dict[int, Target]) -> None:
        self._targets = dict(targets)
        for port in [p for p in self._servers if p not in targets]:
            server = self._servers.pop(port)
            server.close()
            await server.wait_closed()
        for port in sorted(targets):
            if port in self._servers:
                continue
            try:
                sock = nsfs.run_in_netns(self.netns, functools.partial(_listening_socket, port))
                handler = functools.partial(self._serve, port)
                self._servers[port] = await asyncio.start_server(handler, sock=sock, limit=MAX_HEAD)
                self._failed.discard(port)
            except OSError as exc:
                if port not in self._failed:
                    log.warning("healthCheckNodePort %d: cannot listen: %s", port, exc)
                    self._failed.add(port)

    async def close(self) -> None:
        await self.update({})

    async def _serve(self, port: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            async with asyncio.timeout(READ_TIMEOUT):
                await reader.readuntil(b"\r\n\r\n")
            target = self._targets.get(port)
            if target is not None:
                writer.write(answer(target))
                await writer.drain()
        except (TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
            pass
        finally:
            writer.close()
