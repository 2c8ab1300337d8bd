"""This node's cluster DNS: the zone fed with Services and EndpointSlices, served at the cluster DNS IP.

    ProxyFeed ──set_service / set_slice / ... / replace──► NodeDns ──► ClusterZone (records, prepared answers)
    Welcome/NodeConfig (clusterDNS, clusterDomain) ──configure()──► <clusterDNS>/32 on `lo` of the node netns
        (lite.netns.dnsaddr) + DnsServer on <clusterDNS>:53 (UDP, TCP), Forwarder to the resolv.conf nameservers

Invariants:
- Objects are recorded in the zone whether or not the server runs yet; a change of cluster domain rebuilds the
  zone from the same objects.
- `configure` is idempotent: the same IP, domain and upstreams leave the running server alone; a different IP
  restarts it on the new address (the old address is removed). Upstreams are read from `resolv_conf` (the
  host's, or `--resolv-conf`) at each configure; the cluster DNS IP itself is never an upstream (it would loop).
- `close` stops the server; the address stays (like the proxy's rules; queries to it are refused meanwhile
  rather than left to time out) and is converged at the next start.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from pathlib import Path

from lite.agent.dns.forward import Forwarder
from lite.agent.dns.records import Obj
from lite.agent.dns.server import DnsServer
from lite.agent.dns.zone import ClusterZone
from lite.netns.dnsaddr import ensure_dns_address, node_socket, remove_dns_address
from lite.netns.files import parse_resolv
from lite.netns.nsfs import NetnsRef

log = logging.getLogger("lite.agent.dns")


def upstreams_of(resolv_text: str, cluster_dns: str, port: int = 53) -> list[tuple[str, int]]:
    """The nameservers of a resolv.conf as (ip, port), without the cluster DNS itself."""
    return [(ns, port) for ns in parse_resolv(resolv_text).nameservers if ns != cluster_dns]


class NodeDns:
    def __init__(self, *, node_netns: NetnsRef = None, resolv_conf: Path = Path("/etc/resolv.conf"),
                 port: int = 53, upstream_port: int = 53) -> None:
        self.node_netns = node_netns
        self.resolv_conf = resolv_conf
        self.port = port
        self.upstream_port = upstream_port  # tests: an upstream of their own on a loopback address
        self.zone = ClusterZone()
        self.server: DnsServer | None = None
        self._config: tuple[str, str, tuple[tuple[str, int], ...]] | None = None
        self._lock = asyncio.Lock()

    # ---- the feed's sink interface (same as the proxier's) ----
    def set_service(self, obj: Obj) -> None:
        self.zone.set_service(obj)

    def delete_service(self, namespace: str, name: str) -> None:
        self.zone.delete_service(namespace, name)

    def set_slice(self, obj: Obj) -> None:
        self.zone.set_slice(obj)

    def delete_slice(self, namespace: str, name: str) -> None:
        self.zone.delete_slice(namespace, name)

    def replace(self, services: Iterable[Obj], slices: Iterable[Obj]) -> None:
        self.zone.replace(services, slices)

    # ---- serving ----
    async def configure(self, cluster_dns: str, cluster_domain: str) -> None:
        """Serve `cluster_domain` at `cluster_dns`:port in the node netns (idempotent; see the docstring)."""
        async with self._lock:
            try:
                text = await asyncio.to_thread(self.resolv_conf.read_text)
            except OSError as exc:
                log.warning("cannot read %s (%s): names outside the cluster will fail", self.resolv_conf, exc)
                text = ""
            upstreams = tuple(upstreams_of(text, cluster_dns, self.upstream_port))
            config = (cluster_dns, cluster_domain.lower().strip("."), upstreams)
            if config == self._config or not cluster_dns:
                return
            if config[1] != self.zone.zone:
                self.zone = self.zone.rezone(config[1])
            await self._stop()
            if self._config is not None and self._config[0] != cluster_dns:
                await remove_dns_address(self._config[0], node_netns=self.node_netns)
            self._config = None
            await ensure_dns_address(cluster_dns, node_netns=self.node_netns)
            server = DnsServer(self.zone, Forwarder(list(upstreams)))
            await server.start(cluster_dns, self.port, make_socket=lambda kind: node_socket(
                kind, node_netns=self.node_netns))
            self.server, self._config = server, config
            log.info("cluster DNS for %s on %s:%d, upstream %s", config[1], cluster_dns, server.address[1],
                     ", ".join(ip for ip, _ in upstreams) or "none")

    async def close(self) -> None:
        async with self._lock:
            await self._stop()
            self._config = None

    async def _stop(self) -> None:
        if self.server is not None:
            await self.server.close()
            self.server = None
