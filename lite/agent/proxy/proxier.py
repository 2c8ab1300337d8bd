"""The service proxy loop: Services and EndpointSlices in, one nftables transaction per sync out.

    set_service / delete_service / set_slice / delete_slice / replace ──► state + dirty flag
                                                                          │ (at most one sync per min_interval)
    run() ──► sync_once(): rules.translate(state) ─► TableSyncer.sync (ONE transaction, diff only)
                          └► conntrack: delete UDP flows of endpoints that went away (endpoints.stale_udp)

Invariants:
- Callers only record objects (cheap, never blocking); `run` does the work. A burst of changes within
  `min_interval` of the last sync is folded into one sync (kube-proxy's minSyncPeriod); a change never waits
  longer than `min_interval` after the previous sync finished.
- Each sync translates the whole state (pure, fast) and the syncer sends only the difference, so an endpoint
  change costs one small transaction whatever the number of services.
- Objects handed in are not mutated or kept beyond what translation reads (they are plain dicts from the API).
- A failed sync is logged once per failure streak and retried after `retry_interval`; state is never lost.
- `synced` counts completed syncs; `last_error` holds the most recent failure (None after a success).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable, Mapping
from typing import Any

from lite.agent.proxy.endpoints import ServicePort, service_ports, stale_udp
from lite.agent.proxy.rules import ProxyConfig, table_for
from lite.netns import conntrack
from lite.netns.nsfs import NetnsRef
from lite.netns.proxysync import TableSyncer

log = logging.getLogger("lite.agent.proxy")
Obj = Mapping[str, Any]


def _key(obj: Obj) -> tuple[str, str]:
    meta = obj["metadata"]
    return (meta.get("namespace") or "default", meta["name"])


class Proxier:
    def __init__(
        self,
        config: ProxyConfig,
        syncer: TableSyncer,
        *,
        netns: NetnsRef = None,
        min_interval: float = 1.0,
        retry_interval: float = 5.0,
        clear_conntrack: bool = True,
    ) -> None:
        self.config = config
        self.syncer = syncer
        self.netns = netns
        self.min_interval = min_interval
        self.retry_interval = retry_interval
        self.clear_conntrack = clear_conntrack
        self._services: dict[tuple[str, str], Obj] = {}
        self._slices: dict[tuple[str, str], Obj] = {}
        self._ports: list[ServicePort] = []
        self._dirty = asyncio.Event()
        self._last_sync = float("-inf")
        self.synced = 0
        self.last_error: BaseException | None = None

    # ---- recording (cheap, any time) ----
    def set_service(self, obj: Obj) -> None:
        self._services[_key(obj)] = obj
        self._dirty.set()

    def delete_service(self, namespace: str, name: str) -> None:
        if self._services.pop((namespace, name), None) is not None:
            self._dirty.set()

    def set_slice(self, obj: Obj) -> None:
        self._slices[_key(obj)] = obj
        self._dirty.set()

    def delete_slice(self, namespace: str, name: str) -> None:
        if self._slices.pop((namespace, name), None) is not None:
            self._dirty.set()

    def replace(self, services: Iterable[Obj], slices: Iterable[Obj]) -> None:
        """A full relist: the state becomes exactly these objects."""
        self._services = {_key(o): o for o in services}
        self._slices = {_key(o): o for o in slices}
        self._dirty.set()

    def set_node_ips(self, node_ips: tuple[str, ...]) -> None:
        if node_ips != self.config.node_ips:
            self.config = ProxyConfig(self.config.node_name, node_ips, self.config.cluster_cidr, self.config.table)
            self._dirty.set()

    # ---- work ----
    async def sync_once(self) -> bool:
        """Translate the current state and apply it (one transaction at most); True if the kernel changed."""
        self._dirty.clear()
        ports = service_ports(self._services.values(), self._slices.values())
        changed = await self.syncer.sync(table_for(ports, self.config))
        endpoints, services = stale_udp(self._ports, ports, self.config.node_name, self.config.node_ips)
        self._ports = ports
        self._last_sync = time.monotonic()
        self.synced += 1
        if self.clear_conntrack and (endpoints or services):
            await conntrack.delete_udp_flows(self.netns, endpoints=endpoints, services=services)
        return changed

    async def run(self) -> None:
        """Sync whenever something changed, at most once per `min_interval`; until cancelled."""
        self._dirty.set()  # the first sync reconciles whatever table a previous agent left
        while True:
            await self._dirty.wait()
            wait = self._last_sync + self.min_interval - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            try:
                await self.sync_once()
            except Exception as exc:
                if self.last_error is None:
                    log.error("service proxy sync failed (retrying every %.0f s): %s", self.retry_interval, exc)
                self.last_error = exc
                self._dirty.set()
                await asyncio.sleep(self.retry_interval)
            else:
                self.last_error = None
