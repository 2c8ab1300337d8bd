"""The service proxy loop: Services and EndpointSlices in, one nftables transaction per sync out.

    set_service / delete_service / set_slice / delete_slice / replace ──► state + dirty flag
                                                                          │ (at most one sync per min_interval)
    run() ──► sync_once(): rules.translate(state) ─► TableSyncer.sync (ONE transaction, diff only)
                          ├► conntrack: delete UDP flows of endpoints that went away (endpoints.stale_udp)
                          ├► conntrack, after the first sync only: flows to the Service CIDR no DNAT translated
                          └► healthCheckNodePort listeners (healthcheck.HealthServers), if given

Invariants:
- Callers only record objects (cheap, never blocking); `run` does the work, and none before the first object
  is recorded (through the feed: the first `replace`, a complete set): a restarted agent must not program a
  table from a config change alone (node IPs, cluster CIDR come first), or every service would stop answering.
  A burst of changes within `min_interval` of the last sync is folded into one sync (kube-proxy's
  minSyncPeriod); a change never waits longer than `min_interval` after the previous sync finished.
- Each sync re-translates only the Services whose object or slices changed (fragments cached per Service),
  assembles the whole table and lets the syncer send only the difference, so an endpoint change costs one
  small transaction whatever the number of services. A config change (node IPs) rebuilds only the skeleton.
- Objects handed in are not mutated or kept beyond what translation reads (they are plain dicts from the API).
- A failed sync is logged once per failure streak and retried after `retry_interval`; state is never lost.
- `synced` counts completed syncs; `last_error` holds the most recent failure (None after a success).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable, Mapping
from typing import Any

from lite.agent.proxy.endpoints import ServicePort, object_key, ports_of, slice_owner, stale_udp
from lite.agent.proxy.healthcheck import HealthServers, wanted
from lite.agent.proxy.rules import Fragment, ProxyConfig, assemble, fragment
from lite.agent.syncloop import SyncLoop
from lite.netns import conntrack
from lite.netns.nftstate import Table
from lite.netns.nsfs import NetnsRef
from lite.netns.proxysync import TableSyncer

log = logging.getLogger("lite.agent.proxy")
Obj = Mapping[str, Any]
Key = tuple[str, str]


class Proxier(SyncLoop):
    what = "service proxy sync"

    def __init__(
        self,
        config: ProxyConfig,
        syncer: TableSyncer,
        *,
        netns: NetnsRef = None,
        min_interval: float = 1.0,
        retry_interval: float = 5.0,
        clear_conntrack: bool = True,
        health: HealthServers | None = None,
    ) -> None:
        super().__init__(log, min_interval=min_interval, retry_interval=retry_interval)
        self.config = config
        self.syncer = syncer
        self.netns = netns
        self.clear_conntrack = clear_conntrack
        self.health = health
        self._services: dict[Key, Obj] = {}
        self._slices: dict[Key, Obj] = {}
        self._owner: dict[Key, Key] = {}  # slice → its service
        self._slices_of: dict[Key, set[Key]] = {}  # service → its slices
        self._stale: set[Key] = set()  # services whose cached translation is out of date
        self._cache: dict[Key, tuple[list[ServicePort], list[Fragment]]] = {}
        self._ports: list[ServicePort] = []

    # ---- recording (cheap, any time) ----
    def set_service(self, obj: Obj) -> None:
        key = object_key(obj)
        self._services[key] = obj
        self._touch(key)

    def delete_service(self, namespace: str, name: str) -> None:
        if self._services.pop((namespace, name), None) is not None:
            self._touch((namespace, name))

    def set_slice(self, obj: Obj) -> None:
        key = object_key(obj)
        self._unlink_slice(key)
        self._slices[key] = obj
        owner = slice_owner(obj)
        if owner is not None:
            self._owner[key] = owner
            self._slices_of.setdefault(owner, set()).add(key)
            self._touch(owner)

    def delete_slice(self, namespace: str, name: str) -> None:
        self._unlink_slice((namespace, name))
        self._slices.pop((namespace, name), None)

    def replace(self, services: Iterable[Obj], slices: Iterable[Obj]) -> None:
        """A full relist: the state becomes exactly these objects."""
        self._services, self._slices, self._owner, self._slices_of = {}, {}, {}, {}
        self._cache.clear()
        for svc in services:
            self.set_service(svc)
        for s in slices:
            self.set_slice(s)
        self.mark()
        self.have_state()  # any object recorded: the feed's first `replace` is a complete set

    def set_node_ips(self, node_ips: tuple[str, ...]) -> None:
        if node_ips != self.config.node_ips:
            self.config = dataclasses.replace(self.config, node_ips=node_ips)
            self.mark()

    def set_cluster_cidr(self, cidr: str) -> None:
        """The cluster's pod CIDR as the server tells it (Welcome); fragments depend on it, so all are redone."""
        if cidr != self.config.cluster_cidr:
            self.config = dataclasses.replace(self.config, cluster_cidr=cidr)
            self._stale |= set(self._services)
            self.mark()

    def set_service_cidr(self, cidr: str) -> None:
        """The Service CIDR (the server's, from Welcome): only the skeleton's ClusterIP check depends on it."""
        if cidr != self.config.service_cidr:
            self.config = dataclasses.replace(self.config, service_cidr=cidr)
            self.mark()

    def _touch(self, service: Key) -> None:
        self._stale.add(service)
        self.mark()
        self.have_state()

    def _unlink_slice(self, key: Key) -> None:
        owner = self._owner.pop(key, None)
        if owner is not None:
            self._slices_of.get(owner, set()).discard(key)
            self._touch(owner)

    # ---- work ----
    def desired(self) -> tuple[list[ServicePort], Table]:
        """Re-translate the services that changed since the last call, and assemble the whole table."""
        stale, self._stale = self._stale, set()
        for key in stale:
            svc = self._services.get(key)
            if svc is None:
                self._cache.pop(key, None)
                continue
            ports = ports_of(svc, [self._slices[k] for k in sorted(self._slices_of.get(key, ()))])
            self._cache[key] = (ports, [fragment(sp, self.config) for sp in ports])
        ports = [sp for cached, _ in self._cache.values() for sp in cached]
        return ports, assemble((f for _, frags in self._cache.values() for f in frags), self.config)

    async def sync_once(self) -> bool:
        """Translate what changed and apply the whole state (one transaction at most); True if the kernel changed."""
        self._dirty.clear()
        ports, table = self.desired()
        changed = await self.syncer.sync(table)
        endpoints, services = stale_udp(self._ports, ports, self.config.node_name, self.config.node_ips)
        self._ports = ports
        first = self.synced == 0
        self.synced_now()
        if first and self.clear_conntrack and self.config.service_cidr:  # flows that began before any rules
            await conntrack.delete_untranslated(self.netns, self.config.service_cidr)
        if self.clear_conntrack and (endpoints or services):
            await conntrack.delete_udp_flows(self.netns, endpoints=endpoints, services=services)
        if self.health is not None:
            await self.health.update(wanted(ports, self.config.node_name))
        return changed
