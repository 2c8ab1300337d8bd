"""The NetworkPolicy loop of one agent: Pods, Namespaces and NetworkPolicies in, one nftables transaction out.

    set / delete / replace ──► state + dirty flag ──► run(): at most one sync per `min_interval`
        sync_once(): compile.IncrementalCompiler (this node's pods) ─► rules.Renderer ─► TableSyncer.sync
        (each stage reuses what the last sync computed for unchanged inputs: one policy edit recompiles,
        re-renders and re-diffs that policy only; a pod or namespace change recompiles every policy)
    watch_refusals(): every `check_every` s read the drop counters; a pod whose egress refusals grew gets
        a Warning event `NetworkPolicyDenied` (at most one per pod per `event_every` s)

Invariants:
- Recording is cheap and never blocks; the work happens in `run`. Nothing is synced before the first state
  (`replace`) arrives, so a restarted agent leaves the kernel's table as it is until it knows the cluster
  again, then reconciles it (TableSyncer reads it back; chains of pods no longer isolated are removed).
- Only this node's pods are enforced (`node_name`); pods of every node are peers.
- Objects kept are the relay's slim copies; they are never mutated.
- A failed sync is logged once per failure streak and retried after `retry_interval`; state is never lost.
- The cluster DNS is served by the agent itself, not by a pod; so that the usual "allow DNS" egress rule
  (`namespaceSelector` kube-system + `podSelector` `k8s-app: kube-dns`, ports 53 or `dns`/`dns-tcp`) works as
  it does with CoreDNS, the DNS address takes part as a peer pod `kube-system/kube-dns` with those labels and
  named ports (`compile.dns_view`); it is never a local pod, so never isolated.
- `refused` maps (namespace, name) → packets of new connections refused since this agent started (egress
  and ingress summed); `add_refusals` puts them into the agent's metrics samples (→ the node's
  `/stats/summary`, pod field `networkPolicyRefused`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from lite.agent.netpol import compile as comp
from lite.agent.netpol import rules
from lite.agent.syncloop import SyncLoop
from lite.netns.nftables import AsyncNft
from lite.netns.proxysync import TableSyncer

log = logging.getLogger("lite.agent.netpol")
Obj = Mapping[str, Any]
Key = tuple[str, str]
KINDS = ("NetworkPolicy", "Namespace", "PolicyPod")
EventFn = Callable[[Obj, str, str, str], None]


def add_refusals(pods: list[dict[str, Any]], refused: Mapping[Key, int]) -> None:
    """Mark the agent's metrics sample: each pod item ({"namespace", "name", ...}) with refusals gets
    `networkPolicyRefused` (packets of new connections refused since the agent started)."""
    for item in pods:
        count = refused.get((str(item.get("namespace", "")), str(item.get("name", ""))))
        if count:
            item["networkPolicyRefused"] = count


def _key(obj: Obj) -> Key:
    meta = obj.get("metadata") or {}
    return (str(meta.get("namespace") or ""), str(meta.get("name") or ""))


class Enforcer(SyncLoop):
    what = "network policy sync"

    def __init__(self, node_name: str, nft: AsyncNft, *, table: str = rules.TABLE, min_interval: float = 0.2,
                 retry_interval: float = 5.0, event: EventFn | None = None, check_every: float = 5.0,
                 event_every: float = 60.0) -> None:
        super().__init__(log, min_interval=min_interval, retry_interval=retry_interval)
        self.node_name = node_name
        self.nft = nft
        self.syncer = TableSyncer(nft, rules.FAMILY, table)
        self.compiler = comp.IncrementalCompiler()
        self.renderer = rules.Renderer(table)
        self._views: dict[Key, tuple[Obj, comp.PodView | None]] = {}  # pod → (object, its view), last sync
        # (pods, local pods, namespaces' labels) as given to the compiler, while no pod, namespace or the DNS
        # address changed since (None: rebuild)
        self._inputs: tuple[list[comp.PodView], list[comp.PodView], dict[str, dict[str, str]]] | None = None
        self.event = event
        self.check_every = check_every
        self.event_every = event_every
        self.state: dict[str, dict[Key, Obj]] = {kind: {} for kind in KINDS}
        self._synced: list[comp.PodPolicy] = []  # the isolated local pods of the last sync
        self._by_chain: tuple[list[comp.PodPolicy], dict[str, comp.PodView]] = ([], {})  # chain id → local pod
        self._seen: dict[tuple[str, str], int] = {}  # (chain id, direction) → last counter value read
        self._last_event: dict[Key, float] = {}
        self.refused: dict[Key, int] = {}
        self.cluster_dns = ""

    # ---- recording ----
    def set(self, kind: str, obj: Obj) -> None:
        self.state[kind][_key(obj)] = obj
        if kind != "NetworkPolicy":
            self._inputs = None
        self.mark()

    def delete(self, kind: str, namespace: str, name: str) -> None:
        if self.state[kind].pop((namespace, name), None) is not None:
            if kind != "NetworkPolicy":
                self._inputs = None
            self.mark()

    def set_cluster_dns(self, address: str) -> None:
        """The node-local cluster DNS address, which policies see as the pod `kube-system/kube-dns`."""
        if address != self.cluster_dns:
            self.cluster_dns = address
            self._inputs = None
            self.mark()

    def replace(self, objects: Mapping[str, Iterable[Obj]]) -> None:
        """A full relist: the state becomes exactly these objects (kind → objects)."""
        self.state = {kind: {_key(o): o for o in objects.get(kind, ())} for kind in KINDS}
        self._inputs = None
        self.have_state()
        self.mark()

    # ---- work ----
    def desired(self) -> tuple[list[comp.PodPolicy], Any]:
        if self._inputs is None:
            self._inputs = self._pod_inputs()
        views, local, namespaces = self._inputs
        compiled = self.compiler.compile(self.state["NetworkPolicy"].values(), views, namespaces, local)
        return compiled.pods, self.renderer.render(compiled)

    def _pod_inputs(self) -> tuple[list[comp.PodView], list[comp.PodView], dict[str, dict[str, str]]]:
        """Every pod's view (this node's apart), the DNS peer, the namespaces' labels: rebuilt only after a pod,
        namespace or DNS address change (a policy change, the common one, reuses them)."""
        views: list[comp.PodView] = []
        known: dict[Key, tuple[Obj, comp.PodView | None]] = {}
        for key, p in self.state["PolicyPod"].items():
            cached = self._views.get(key)
            if cached is None or cached[0] is not p:
                cached = (p, comp.pod_view(p))
            known[key] = cached
            if cached[1] is not None:
                views.append(cached[1])
        self._views = known
        local = [v for v in views if v.node == self.node_name]
        if self.cluster_dns:
            views.append(comp.dns_view(self.cluster_dns))
        namespaces = {name: dict((o.get("metadata") or {}).get("labels") or {})
                      for (_, name), o in self.state["Namespace"].items()}
        return views, local, namespaces

    async def sync_once(self) -> bool:
        self._dirty.clear()
        compiled, table = self.desired()
        changed = await self.syncer.sync(table)
        self._synced = compiled
        self.synced_now()
        return changed

    async def check_refusals(self) -> list[Key]:
        """Read the drop counters once; update `refused`; return the pods whose egress refusals grew."""
        try:
            items = await self.nft.json(f"list table {rules.FAMILY} {self.syncer.name}")
        except Exception as exc:  # no table yet, or the netns is going away
            log.debug("reading policy counters: %s", exc)
            return []
        grown: list[Key] = []
        if self._by_chain[0] is not self._synced:  # built here, every few seconds, not on every sync
            self._by_chain = (self._synced, {rules.chain_id(pp.pod.ip): pp.pod for pp in self._synced})
        for (cid, direction), packets in rules.drop_counters(items).items():
            pod = self._by_chain[1].get(cid)
            before = self._seen.get((cid, direction), 0)
            self._seen[(cid, direction)] = packets
            if pod is None or packets <= before:
                continue
            key = (pod.namespace, pod.name)
            self.refused[key] = self.refused.get(key, 0) + packets - before
            if direction == "out":
                grown.append(key)
        return grown

    async def watch_refusals(self) -> None:
        """Forever: count refusals, and report growing egress refusals as rate-limited Warning events."""
        while True:
            await asyncio.sleep(self.check_every)
            for key in await self.check_refusals():
                self.report(key)

    def report(self, key: Key) -> None:
        now = time.monotonic()
        if self.event is None or now - self._last_event.get(key, float("-inf")) < self.event_every:
            return
        pod = self.state["PolicyPod"].get(key)
        if pod is None:
            return
        self._last_event[key] = now
        self.event(pod, "Warning", "NetworkPolicyDenied",
                   f"network policy refused {self.refused.get(key, 0)} outgoing connection attempt(s) "
                   "to destinations the pod's policies (lite.dev/depends-on) do not allow")
