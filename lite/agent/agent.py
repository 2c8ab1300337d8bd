"""The node agent: turns the pods the server assigns to this node into running pods and reports on them.

    JoinSession ──handle()──► Agent ──► PodRunner per pod uid (lite.agent.podrunner)
        ▲                      │  ├──► node loop: LeaseRenew every 10 s, NodeStatus on change / every 60 s
        └──────post()──────────┘  └──► metrics loop: cgroup usage → wire.Metrics every 15 s
    streams (logs/exec/port-forward) ──► AgentStreams (lite.agent.backend)

`Agent(config)`; `await agent.run()` until cancelled. At start it adopts the pods found under
`<data-dir>/agent/pods/*/pod.json` (live containers keep running and are never restarted; a pod whose sandbox
was lost — a reboot, `lite killall` — gets a new one, as `lite.agent.podrunner` says), before it dials the
server; after the server's `Synced`, adopted pods that are no longer desired are killed. Cancelling `run()` is
"the agent is shutting down": pods keep running. `handle()` only records and schedules (the session's reader
calls it). The node network (bridge with the podCIDR's gateway, Ipam in `<data-dir>/agent/ipam.json`) is set up
when the Welcome carries a podCIDR; pod networks wait for it. The pod network across nodes (`lite.agent.fabric`)
follows the Welcome's `flannelBackend` and the Nodes the server relays (kind "Node").
Resource limits: `open_services` looks for a usable cgroup hierarchy and `lite.agent.limits` decides; an agent
that cannot enforce limits (and may not run without them) keeps running and reporting, Ready=False, but starts
no pod (one Warning event per pod; a deleted one is final at once).

Edge autonomy (issue 21): every desired-state message `handle` gets is recorded in the node-local cache
(`lite.agent.cache.DesiredCache`, `<data-dir>/agent/cache/`). An agent with no Welcome from its server
`REPLAY_AFTER` seconds after it started serving hands itself the cached state (`_replay_offline`):
Welcome(cached config) → cached objects → pods → Synced, through the same path as `handle`, so the node
network, proxy, DNS, policies and pods come up as from the server. Never after a server's Welcome in this
process; the embedded agent keeps no cache at all (its server is this process: it is never cut off). The
server's later resync wins as usual (pods it no longer wants are stopped at its Synced; pods it sends again
are updates of the running ones, never restarts). A replay removes nothing on the node but pods: the local-path
volume sweep waits for the server's own resync.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import ipaddress
import json
import logging
import os
import shutil
import socket
from dataclasses import field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lite import wire
from lite.agent import localstorage, podpaths, security
from lite.agent.backend import AgentStreams
from lite.agent.dns.node import NodeDns
from lite.agent.fabric.fabric import KIND as FABRIC_KIND
from lite.agent.fabric.fabric import Fabric
from lite.agent.fabric.plan import node_annotations
from lite.agent.hooks.base import Deps
from lite.agent.limits import ANNOTATION as LIMITS_ANNOTATION
from lite.agent.limits import ENFORCED, REFUSED_REASON, Limits, decide, pod_refusal
from lite.agent.metrics import PodSample, UsageSampler
from lite.agent.netpol.enforcer import add_refusals
from lite.agent.netpol.feed import HELLO_FLAG as POLICY_FLAG
from lite.agent.netpol.feed import KINDS as POLICY_KINDS
from lite.agent.netpol.feed import PolicyFeed
from lite.agent.node import LEASE_DURATION, LEASE_RENEW, STATUS_REFRESH, NodeReporter, default_node_ip, iface_address
from lite.agent.podrunner import POD_FILE, PodRunner
from lite.agent.proxy.feed import KINDS as PROXY_KINDS
from lite.agent.proxy.feed import ProxyFeed
from lite.agent.runtime.container import ProcessRuntime, Runtime
from lite.agent.satokens import TokenClient
from lite.agent.serviceenv import ServiceCatalog
from lite.agent.session import LocalDial
from lite.agent.stats import AgentStats
from lite.netns.nftables import AsyncNft
from lite.netns.nsfs import NETNS_RUN_DIR, NetnsRef
from lite.records import dataclass

if TYPE_CHECKING:
    from lite.agent.cache import DesiredCache
    from lite.netns.ipam import Ipam

log = logging.getLogger("lite.agent")
Obj = dict[str, Any]
METRICS_EVERY = 15.0
IMPORT_EVERY = 5.0  # how soon an image archive dropped into <data-dir>/agent/images/ is imported
NODE_CONFIG = "node-config.json"
# With no server Welcome this long after start, run from the cache. A timer rather than "the first dial
# failed": it covers a refused connection and a black-holed link (a dial that hangs up to the session's 10 s
# connect timeout) alike, needs nothing from the session, and leaves a server that is merely slow to answer
# (a site powering up together) a few seconds to be the one that decides. Adopted pods run meanwhile.
REPLAY_AFTER = 5.0


@dataclass
class AgentConfig:
    server_url: str
    token: str
    node_name: str = ""
    data_dir: Path = Path("/var/lib/lite")
    runtime: str = "namespaces"  # or "process": plain host processes, no isolation
    ca_file: str | None = None
    ca_data: bytes | None = None
    insecure: bool = False
    bridge: str = "lite0"
    node_netns: NetnsRef = None  # tests: a netns of their own holding the bridge
    netns_dir: Path | None = None
    node_ip: str = ""
    node_external_ip: str = ""
    flannel_iface: str = ""  # the uplink for the pod network (and the node IP when node_ip is not given)
    registries: Path | None = None  # k3s registries.yaml
    labels: dict[str, str] = field(default_factory=dict)
    taints: list[Obj] = field(default_factory=list)
    cgroup_root: str = "lite"
    use_cgroups: bool = True
    service_proxy: bool = False  # program Services into nftables (lite.agent.proxy) in the node netns
    network_policy: bool = True  # with the service proxy: enforce NetworkPolicies (lite.agent.netpol)
    service_cidr: str = "10.43.0.0/16"
    cluster_cidr: str = ""  # all pods' CIDR: sources outside it reaching a ClusterIP are masqueraded
    resolv_conf: Path = Path("/etc/resolv.conf")  # the cluster DNS forwards other names to these nameservers
    seccomp_default: bool = False  # kubelet's --seccomp-default: RuntimeDefault for pods that set no profile
    allowed_unsafe_sysctls: tuple[str, ...] = ()  # kubelet's --allowed-unsafe-sysctls (namespaced ones only)
    dial: LocalDial | None = None  # the agent `lite server` embeds: its in-process join (`session.JoinSession`)
    allow_no_limits: bool = False  # --allow-no-resource-limits: no usable cgroups → pods run unlimited, not refused
    local_api_port: int = 0  # `--local-api`: the node-local read-only API on 127.0.0.1:<port> (0 = off)



def ipv4_cidr(cidrs: str) -> str:
    """The IPv4 network of a `--service-cidr` value (one CIDR, or a dual-stack "v4,v6" pair); "" when none."""
    for part in cidrs.split(","):
        with contextlib.suppress(ValueError):
            net = ipaddress.ip_network(part.strip(), strict=False)
            if net.version == 4:
                return str(net)
    return ""

class Agent:
    def __init__(self, config: AgentConfig) -> None:
        self.config = config
        self.node_name = config.node_name or socket.gethostname()
        self.root = config.data_dir / "agent"
        self.runners: dict[str, PodRunner] = {}
        self.tasks: dict[str, asyncio.Task[None]] = {}
        self.objects: dict[tuple[str, str, str], Obj] = {}  # (kind, namespace, name) -> ConfigMap/Secret
        self.net_ready = asyncio.Event()
        self.session: Any = None
        self.replay_after = REPLAY_AFTER
        self.replayed = False  # this process ran from the cache (tests, logs)
        self._welcomed = asyncio.Event()  # a server's Welcome reached `handle` in this process
        self._replaying = False
        self._handle_lock = asyncio.Lock()  # a replay is one uninterrupted Welcome ... Synced
        # the embedded agent's server is its own process: it is never cut off, so it keeps no cache
        self.caching = config.dial is None
        self.tokens = TokenClient(self._post, memory=self.cache if self.caching else None, online=self._online)
        self.services = ServiceCatalog()  # fed by the proxy feed: the service environment variables of pods
        self.deps = self._deps()
        self.deps.admitted_specs = lambda: [r.st.spec for r in self.runners.values() if r.active]
        self.node = NodeReporter(self.node_name, self.root, node_ip=self.deps.node_ip,
                                 external_ip=config.node_external_ip)
        self.limits: Limits = ENFORCED  # decided in open_services (`lite.agent.limits`)
        self._refused: set[str] = set()  # uids of pods not started because limits cannot be enforced
        self.fabric = Fabric(self.node_name, self.deps.node_ip, iface=config.flannel_iface,
                             node_netns=config.node_netns)
        # limits.cpu/limits.memory of a container without limits read the node's allocatable (downward API)
        self.deps.allocatable = self.node.resources()[1]
        self.sampler = UsageSampler()
        self.stats = AgentStats()  # pod start latency and image pulls, sent with the usage samples
        self._tg: asyncio.TaskGroup | None = None
        self._pending: list[Obj] = []
        self._pvs_resent: set[str] | None = None  # PersistentVolumes relayed since the last Welcome
        self.local_volumes = localstorage.LocalVolumes(self.root / "local-volumes.json", self.node_name)
        self.proxy: ProxyFeed | None = None
        self.dns: NodeDns | None = None
        self.netpol: PolicyFeed | None = None
        if config.service_proxy:  # the cluster DNS comes with the proxy: same feed, same netns
            # one libnftables context (and worker thread) for both tables: ~1 MB of context caches each
            nft = AsyncNft(config.node_netns)
            self.dns = NodeDns(node_netns=config.node_netns, resolv_conf=config.resolv_conf)
            self.proxy = _proxy_feed(config, self.node_name, self.deps.node_ip, self.dns, nft)
            self.proxy.sinks += (self.services,)
            if config.network_policy:  # same node netns as the proxy's table
                self.netpol = _policy_feed(self.node_name, self._event, nft)

    @cached_property
    def cache(self) -> DesiredCache:
        """The node-local desired-state cache, made (and its modules imported) at first use: the embedded agent,
        which keeps no cache (`caching` False), never loads them."""
        from lite.agent.cache import DesiredCache

        return DesiredCache(self.root / "cache", self.root / "credentials" / "cache.key")

    def _deps(self) -> Deps:
        c = self.config
        runtime = ProcessRuntime() if c.runtime == "process" else Runtime()
        return Deps(runtime=runtime, images=None, cgroups=None, ipam=None, data_dir=self.root,
                    node_name=self.node_name, bridge=c.bridge,
                    node_ip=c.node_ip or (iface_address(c.flannel_iface) if c.flannel_iface else default_node_ip()),
                    node_netns=c.node_netns, netns_dir=c.netns_dir, objects=self._objects_in, event=self._event,
                    connect=_node_connect(c.node_netns),
                    runtime_class=lambda name: self.objects.get(("RuntimeClass", "", name)),
                    storage=self._storage_in,
                    seccomp_default=c.seccomp_default, allowed_unsafe_sysctls=c.allowed_unsafe_sysctls,
                    kernel=security.kernel_version(os.uname().release),
                    request_token=self.tokens.request, service_env=self.services.env_for)

    # ---- what hooks and runners call -------------------------------------------------------------------

    def _objects_in(self, namespace: str) -> tuple[dict[str, Obj], dict[str, Obj]]:
        cms = {n: o for (k, ns, n), o in self.objects.items() if k == "ConfigMap" and ns == namespace}
        secrets = {n: o for (k, ns, n), o in self.objects.items() if k == "Secret" and ns == namespace}
        return cms, secrets

    def _storage_in(self, namespace: str) -> tuple[dict[str, Obj], dict[str, Obj]]:
        claims = {n: o for (k, ns, n), o in self.objects.items() if k == "PersistentVolumeClaim" and ns == namespace}
        volumes = {n: o for (k, _ns, n), o in self.objects.items() if k == "PersistentVolume"}
        return claims, volumes

    def _volumes_gone(self, names: set[str]) -> None:
        """Relayed PersistentVolumes were deleted: remove their local-path directories (`localstorage`)."""
        for name in names:
            self.objects.pop(("PersistentVolume", "", name), None)
        for path in self.local_volumes.gone(names):
            log.info("removing the directory %s of a deleted volume", path)
            self._spawn(f"..rmpv-{path.name}", asyncio.to_thread(localstorage.remove_dir, path))

    def _post(self, msg: wire.Message) -> None:
        if self.session is not None:
            self.session.post(msg)

    def _online(self) -> bool:
        """The session is connected (a stand-in session without a `connected` event counts as connected)."""
        connected = getattr(self.session, "connected", None)
        return not isinstance(connected, asyncio.Event) or connected.is_set()

    def _event(self, pod: Obj, type_: str, reason: str, message: str) -> None:
        meta = pod.get("metadata") or {}
        self._post(wire.Event({"type": type_, "reason": reason, "message": message,
                               "source": {"component": "kubelet", "host": self.node_name},
                               "involvedObject": {"kind": "Pod", "apiVersion": "v1", "name": meta.get("name"),
                                                  "namespace": meta.get("namespace"), "uid": meta.get("uid")}}))

    def _report(self, pod: Obj, status: Obj) -> None:
        meta = pod["metadata"]
        self.stats.pod_reported(str(meta["uid"]), str(status.get("phase") or ""))
        self._post(wire.PodStatus(str(meta["uid"]), str(meta.get("namespace", "")), str(meta["name"]), status))

    def _final(self, pod: Obj) -> None:
        meta = pod["metadata"]
        uid = str(meta["uid"])
        self._post(wire.PodFinal(uid, str(meta.get("namespace", "")), str(meta["name"])))
        self.runners.pop(uid, None)
        self.tasks.pop(uid, None)
        self.stats.pod_gone(uid)
        # logs and emptyDirs may be large: delete them off the loop
        self._spawn(f"..rm-{uid}", asyncio.to_thread(shutil.rmtree, self.root / "pods" / uid, True))

    # ---- what the node-local API reads (lite.agent.localapi) -------------------------------------------

    def local_pods(self) -> list[Obj]:
        """The pods this node runs, each with the status its runner computes now."""
        from lite.agent.localapi.view import pod_object

        return [pod_object(r.st.pod, r.status()) for r in list(self.runners.values())]

    def local_node(self) -> Obj:
        from lite.agent.localapi.view import node_object

        cidr = str(self.deps.ipam.network) if self.deps.ipam is not None else ""
        return node_object(self.node_name, self.config.labels, self.config.taints, cidr, self.node.status())

    def local_objects(self, kind: str) -> list[Obj]:
        """The relayed objects of `kind` this node holds: ConfigMaps its pods use, Services and EndpointSlices
        (with the proxy)."""
        if kind == "Service":
            return list(self.services.services.values())
        if kind == "EndpointSlice":
            return list(self.services.slices.values())
        return [o for (k, _ns, _n), o in self.objects.items() if k == kind and k != "Secret"]

    @property
    def stream_backend(self) -> AgentStreams:
        return AgentStreams(lambda: self.runners)

    # ---- the session's NodeAgent protocol ----------------------------------------------------------------

    def hello_info(self) -> Obj:
        info: Obj = {"labels": self.config.labels, "taints": self.config.taints, "status": self.node.status()}
        if self.proxy is not None:
            info["serviceProxy"] = True
        if self.netpol is not None:
            info[POLICY_FLAG] = True
        if self.fabric.usable:
            info["annotations"] = node_annotations(self.fabric.node_ip)
            info["podNetwork"] = True
        info["annotations"] = {**(info.get("annotations") or {}), LIMITS_ANNOTATION: self.limits.annotation}
        return info

    def running_pods(self) -> dict[str, str]:
        return {uid: f"{r.st.namespace}/{r.st.name}" for uid, r in self.runners.items()}

    async def handle(self, msg: wire.Message) -> None:
        """Desired state from the server: recorded in the cache, then applied (`_apply`)."""
        async with self._handle_lock:
            if isinstance(msg, wire.Welcome):
                self._welcomed.set()
            if self.caching:
                self.cache.record(msg)
            await self._apply(msg)

    async def _replay_offline(self) -> None:
        """Run from the cache when no server Welcome came within `replay_after` seconds (see the module doc)."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self.replay_after):
                await self._welcomed.wait()
            return
        messages = self.cache.replay()
        if messages is None:
            log.warning("no server yet and no cached desired state: waiting for the server")
            return
        async with self._handle_lock:
            if self._welcomed.is_set():
                return
            pods = sum(isinstance(m, wire.PodUpsert) for m in messages)
            log.warning("no server after %.0f s: running from the cached desired state (%d pods, %d objects) "
                        "until it answers", self.replay_after, pods, len(messages) - pods - 2)
            self._replaying, self.replayed = True, True
            try:
                for m in messages:
                    try:
                        await self._apply(m)
                    except Exception:  # one bad cached object must not take the agent down
                        log.exception("replaying the cached %s failed", m.T)
            finally:
                self._replaying = False

    async def _apply(self, msg: wire.Message) -> None:
        if isinstance(msg, (wire.ObjectUpsert, wire.ObjectDelete)) and msg.kind in POLICY_KINDS:
            if self.netpol is not None:
                self.netpol.handle(msg)
            return
        if self.netpol is not None and isinstance(msg, wire.Welcome):
            self.netpol.begin_resync()
        if self.netpol is not None and isinstance(msg, wire.Synced):
            self.netpol.synced()
        if isinstance(msg, (wire.ObjectUpsert, wire.ObjectDelete)) and msg.kind in PROXY_KINDS:
            if self.proxy is not None:
                self.proxy.handle(msg)
            return
        if isinstance(msg, (wire.ObjectUpsert, wire.ObjectDelete)) and msg.kind == FABRIC_KIND:
            self.fabric.handle(msg)
            return
        if isinstance(msg, wire.Welcome):
            self.fabric.begin_resync()
            if self.proxy is not None:
                self.proxy.begin_resync()
        if isinstance(msg, wire.Synced):
            self.fabric.synced()
            if self.proxy is not None:
                self.proxy.synced()
        if isinstance(msg, wire.Welcome):
            # a replay sweeps no volume: only the server's own resync says one is gone
            self._pvs_resent = None if self._replaying else set()
        elif isinstance(msg, wire.ObjectUpsert) and msg.kind == "PersistentVolume":
            self.local_volumes.seen(msg.obj)
            if self._pvs_resent is not None:
                self._pvs_resent.add(str((msg.obj.get("metadata") or {}).get("name", "")))
        elif isinstance(msg, wire.ObjectDelete) and msg.kind == "PersistentVolume":
            self._volumes_gone({msg.name})
            return
        elif isinstance(msg, wire.Synced) and self._pvs_resent is not None:
            relayed = {name for kind, _ns, name in self.objects if kind == "PersistentVolume"}
            self._volumes_gone((relayed | set(self.local_volumes.known)) - self._pvs_resent)
            self._pvs_resent = None
        if isinstance(msg, (wire.Welcome, wire.NodeConfig)):
            self._configure(msg.config)
        elif isinstance(msg, wire.PodUpsert):
            self._upsert(msg.pod)
        elif isinstance(msg, wire.PodDelete):
            self._refused.discard(msg.uid)
            runner = self.runners.get(msg.uid)
            if runner is not None:
                runner.terminate()
        elif isinstance(msg, wire.ObjectUpsert):
            meta = msg.obj.get("metadata") or {}
            self.objects[(msg.kind, str(meta.get("namespace", "")), str(meta.get("name", "")))] = msg.obj
            self._refresh(str(meta.get("namespace", "")))
        elif isinstance(msg, wire.ObjectDelete):
            self.objects.pop((msg.kind, msg.namespace, msg.name), None)
            self._refresh(msg.namespace)
        elif isinstance(msg, wire.TokenResponse):
            self.tokens.deliver(msg)
        elif isinstance(msg, wire.Synced):
            desired = set(msg.uids)
            for uid, runner in list(self.runners.items()):
                if uid not in desired:
                    runner.terminate()

    def _configure(self, config: Obj, *, save: bool = True) -> None:
        if save:  # remembered so that a restart without the server still has the podCIDR
            with contextlib.suppress(OSError):
                (self.root / NODE_CONFIG).write_text(json.dumps(config))
        self.deps.cluster_dns = str((config.get("clusterDNS") or [""])[0])
        self.deps.cluster_domain = str(config.get("clusterDomain") or "cluster.local")
        if self.netpol is not None:
            self.netpol.enforcer.set_cluster_dns(self.deps.cluster_dns)
        if self.dns is not None and self.deps.cluster_dns:
            self._spawn("..dns", self._configure_dns(self.deps.cluster_dns, self.deps.cluster_domain))
        cidr = str(config.get("podCIDR") or "")
        if self.proxy is not None and config.get("clusterCIDR"):  # remote agents learn it from the server
            self.proxy.proxier.set_cluster_cidr(str(config["clusterCIDR"]))
        service_cidr = ipv4_cidr(str(config.get("serviceCIDR") or ""))
        if service_cidr:  # the server's (agents older than the field keep their own --service-cidr default)
            self.config.service_cidr = service_cidr
        if self.proxy is not None:
            self.proxy.proxier.set_service_cidr(ipv4_cidr(self.config.service_cidr))
        backend = str(config.get("flannelBackend") or "none")  # a server that says nothing runs no fabric
        if cidr and (self.deps.ipam is None or str(self.deps.ipam.network) != cidr or backend != self.fabric.backend):
            self._spawn("..network", self._setup_network(cidr, backend, str(config.get("clusterCIDR") or "")))

    async def _setup_network(self, cidr: str, backend: str = "none", cluster_cidr: str = "") -> None:
        from lite.netns.bridge import ensure_bridge

        ipam = await asyncio.to_thread(_load_ipam, self.root, cidr)
        self.deps.mtu = await self.fabric.prepare(backend, cidr, cluster_cidr)
        await ensure_bridge(self.config.bridge, f"{ipam.gateway}/{ipam.prefixlen}", node_netns=self.config.node_netns,
                            mtu=self.deps.mtu)
        if self.proxy is not None:  # node processes reach ClusterIPs even without a default route
            from lite.netns.routes import ensure_service_route

            await ensure_service_route(ipv4_cidr(self.config.service_cidr), bridge=self.config.bridge,
                                       gateway=str(ipam.gateway), node_netns=self.config.node_netns)
        self.deps.ipam = ipam
        self.net_ready.set()

    async def _configure_dns(self, cluster_dns: str, cluster_domain: str) -> None:
        assert self.dns is not None
        try:
            await self.dns.configure(cluster_dns, cluster_domain)
        except Exception as exc:  # netlink or bind failures: pods keep working, names will not resolve
            log.error("cluster DNS cannot serve on %s:53: %s", cluster_dns, exc)

    def _refresh(self, namespace: str) -> None:
        for uid, r in list(self.runners.items()):
            if r.st.namespace == namespace:
                self._spawn(f"..refresh-{uid}", r.refresh())

    def _upsert(self, pod: Obj) -> None:
        uid = str(pod["metadata"]["uid"])
        if not podpaths.is_component(uid):
            # The uid names the pod's directory (created, then removed with rmtree): never a path.
            log.error("refusing pod %s/%s: uid %r is not a plain name", pod["metadata"].get("namespace", ""),
                      pod["metadata"].get("name", ""), uid)
            return
        runner = self.runners.get(uid)
        if runner is not None:
            runner.update(pod)
            return
        if self.limits.refused:
            self._refuse(pod)
            return
        runner = PodRunner(self.deps, pod, report=self._report, on_final=self._final)
        self.runners[uid] = runner
        self.stats.pod_seen(uid, pod)
        if (pod.get("metadata") or {}).get("deletionTimestamp"):
            runner.update(pod)
        self._spawn(uid, self._run_pod(runner))

    def _refuse(self, pod: Obj) -> None:
        """A pod this node does not start (no resource limits, `lite.agent.limits`): one Warning event; a pod
        being deleted is final at once (it never ran here), so its deletion does not wait for this node."""
        meta = pod["metadata"]
        uid = str(meta["uid"])
        if meta.get("deletionTimestamp"):
            self._refused.discard(uid)
            self._post(wire.PodFinal(uid, str(meta.get("namespace", "")), str(meta["name"])))
        elif uid not in self._refused:
            self._refused.add(uid)
            self._event(pod, "Warning", REFUSED_REASON, pod_refusal(self.limits, self.node_name))

    async def _run_pod(self, runner: PodRunner) -> None:
        """Pod networks need the node network (podCIDR); a pod deleted meanwhile still runs its kill path."""
        if not runner.st.host_network and not self.net_ready.is_set():
            waits = [asyncio.ensure_future(self.net_ready.wait()), asyncio.ensure_future(runner.terminating.wait())]
            try:
                await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for w in waits:
                    w.cancel()
        await runner.run()

    def _spawn(self, name: str, coro: Any) -> None:
        if self._tg is None:
            self._pending.append({"name": name, "coro": coro})
            return
        task = self._tg.create_task(coro, name=name)
        if not name.startswith(".."):
            self.tasks[name] = task

    # ---- run ---------------------------------------------------------------------------------------------

    def adopt_from_disk(self) -> None:
        """Runners for every pod found on disk (their records make them adopt, never restart, live containers)."""
        base = self.root / "pods"
        if not base.is_dir():
            return
        for d in sorted(base.iterdir()):
            with contextlib.suppress(OSError, ValueError):
                pod = json.loads((d / POD_FILE).read_text())
                self._upsert(pod)

    async def open_services(self) -> None:
        from lite.agent.images import ImageService, RegistriesConfig
        from lite.agent.killall import HostRecord
        from lite.agent.runtime.cgroups import CgroupError, detect

        c = self.config
        node_netns = str(c.node_netns) if isinstance(c.node_netns, str | Path) else None
        await asyncio.to_thread(HostRecord(c.cgroup_root, str(c.netns_dir or NETNS_RUN_DIR), node_netns,
                                           c.bridge).save, self.root)
        regs = await asyncio.to_thread(RegistriesConfig.load, self.config.registries) if self.config.registries \
            else RegistriesConfig()  # (a thread: the file may be parsed in a forked child, see `load_yaml`)
        self.deps.images = await ImageService.open(self.root / "images", regs)
        self.deps.images.on_pull = self.stats.pull_done
        self.node.image_list = self.deps.images.list
        problem: str | None = "cgroups are turned off in this agent's configuration"
        if self.config.use_cgroups:
            try:
                cgroups = detect(self.config.cgroup_root)
            except (CgroupError, OSError) as e:
                problem = str(e)
            else:
                try:  # mounted is not enough: the agent's cgroup root must take sub-cgroups with controllers
                    await asyncio.to_thread(cgroups.ensure_shims)
                    self.deps.cgroups, problem = cgroups, None
                    log.info("using %s", cgroups.describe())
                except (CgroupError, OSError) as e:
                    problem = f"cgroup root {self.config.cgroup_root!r} is not usable: {e}"
        self.limits = self.node.limits = decide(c.runtime, problem, c.allow_no_limits)
        if self.limits.refused:
            log.error("node %s: %s", self.node_name, self.limits.message)
        elif not self.limits.enforced:
            log.warning("node %s: %s", self.node_name, self.limits.message)

    async def run(self) -> None:
        from lite.agent.session import JoinSession

        self.root.mkdir(parents=True, exist_ok=True)
        await self.open_services()
        session = JoinSession(self.config.server_url, self.config.token, node_name=self.node_name, agent=self,
                              credentials_dir=self.root / "credentials",
                              streams=AgentStreams(lambda: self.runners), ca_data=self.config.ca_data,
                              ca_file=self.config.ca_file, insecure=self.config.insecure, dial=self.config.dial,
                              servers_dir=self.root)
        await self.serve(session)

    async def serve(self, session: Any) -> None:
        """Run with `session` (anything with `post(msg)` and an eternal `run()`) until cancelled."""
        self.session = session
        self.root.mkdir(parents=True, exist_ok=True)
        if self.caching:
            await asyncio.to_thread(self.cache.load)
        try:
            async with asyncio.TaskGroup() as tg:
                self._tg = tg
                with contextlib.suppress(OSError, ValueError):
                    self._configure(json.loads((self.root / NODE_CONFIG).read_text()), save=False)
                self.adopt_from_disk()
                for p in self._pending:
                    self._spawn(p["name"], p["coro"])
                self._pending.clear()
                tg.create_task(session.run(), name="..session")
                if self.caching:
                    tg.create_task(self.cache.run(), name="..cache")
                    tg.create_task(self._replay_offline(), name="..replay")
                tg.create_task(self._node_loop(), name="..node")
                tg.create_task(self._metrics_loop(), name="..metrics")
                tg.create_task(self._import_loop(), name="..images")
                tg.create_task(self.fabric.run(), name="..fabric")
                if self.config.local_api_port:
                    from lite.agent.localapi.server import LocalApi

                    tg.create_task(LocalApi(self, self.config.local_api_port, self.root).run(), name="..local-api")
                if self.proxy is not None:
                    tg.create_task(self.proxy.proxier.run(), name="..proxy")
                if self.netpol is not None:
                    tg.create_task(self.netpol.enforcer.run(), name="..netpol")
                    tg.create_task(self.netpol.enforcer.watch_refusals(), name="..netpol-refusals")
        finally:
            self._tg = None
            try:
                if "cache" in self.__dict__:  # never made: nothing to write
                    await self.cache.close()
            except (OSError, TypeError, ValueError) as e:
                log.error("desired-state cache: final write failed: %s", e)
            if self.dns is not None:
                await self.dns.close()
            if self.proxy is not None:  # the rules stay in the kernel: a restarted agent reconciles them
                # (the policy table too); one context for both
                await asyncio.to_thread(self.proxy.proxier.syncer.close)
                if self.proxy.proxier.health is not None:
                    await self.proxy.proxier.health.close()
            await asyncio.to_thread(self.deps.runtime.close)  # the shim zygote; shims and containers stay
            if self.deps.images is not None:
                await self.deps.images.close()

    async def _node_loop(self) -> None:
        last_full = 0.0
        loop = asyncio.get_running_loop()
        while True:
            self._post(wire.LeaseRenew(LEASE_DURATION))
            status = await asyncio.to_thread(self.node.status)
            if self.node.changed(status) or loop.time() - last_full >= STATUS_REFRESH:
                self._post(wire.NodeStatus(status))
                last_full = loop.time()
            await asyncio.sleep(LEASE_RENEW)

    async def _import_loop(self) -> None:
        """Air gap (k3s's agent/images): archives in <data-dir>/agent/images/ are imported at start and, when
        added or changed later, within IMPORT_EVERY seconds; each archive once (ImageService remembers)."""
        while True:
            if self.deps.images is not None:
                try:
                    for info in await self.deps.images.import_dir(self.root / "images"):
                        log.info("imported image %s (%s)", ", ".join(info.repo_tags) or info.id, info.id)
                except OSError as e:
                    log.warning("image import from %s failed: %s", self.root / "images", e)
            await asyncio.sleep(IMPORT_EVERY)

    async def _metrics_loop(self) -> None:
        while True:
            await asyncio.sleep(METRICS_EVERY)
            samples = [PodSample(r.st.namespace, r.st.name, r.st.cgroup, tuple(c.name for c in r.st.apps))
                       for r in list(self.runners.values()) if r.st.cgroup is not None]
            sample = await asyncio.to_thread(self.sampler.sample, samples, METRICS_EVERY)
            if self.netpol is not None:  # refused connections per pod ride along (lite.agent.netpol)
                add_refusals(sample.pods, self.netpol.enforcer.refused)
            self._post(dataclasses.replace(sample, stats=self.stats.as_wire()))


def _load_ipam(root: Path, cidr: str) -> Ipam:
    """The node's Ipam, holding addresses only for pods the node still has (their directories under pods/, the
    ones a reboot brings back with their address): an owner without one, whose release was lost, is freed."""
    from lite.netns.ipam import Ipam

    ipam = Ipam(root / "ipam.json", cidr)
    pods = root / "pods"
    gone = ipam.reconcile(d.name for d in pods.iterdir() if d.is_dir()) if pods.is_dir() else {}
    for owner, ip in gone.items():
        log.warning("pod IP %s of %s released: the node has no such pod", ip, owner)
    return ipam


def _close_made(f: asyncio.Future[Any]) -> None:
    if not f.cancelled() and f.exception() is None:
        f.result().close()


def _node_connect(node_netns: NetnsRef) -> Any:
    """Probes and hooks dial pod IPs from the node netns (where the bridge is); None = the agent's own."""
    if node_netns is None:
        return None
    from lite.agent.streams.netns_socket import socket_in_netns
    from lite.netns.nsfs import netns_path

    path = str(netns_path(node_netns))

    async def connect(host: str, port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        made = asyncio.ensure_future(asyncio.to_thread(socket_in_netns, path))
        try:
            sock = await asyncio.shield(made)
        except asyncio.CancelledError:  # the thread still makes the socket: close it when it does
            made.add_done_callback(_close_made)
            raise
        try:
            await asyncio.get_running_loop().sock_connect(sock, (host, port))
            return await asyncio.open_connection(sock=sock)
        except BaseException:
            sock.close()
            raise

    return connect


def _proxy_feed(config: AgentConfig, node_name: str, node_ip: str, dns: NodeDns, nft: AsyncNft) -> ProxyFeed:
    """The service proxy of this node: one nftables table `ip lite` in the node netns."""
    from lite.agent.proxy.healthcheck import HealthServers
    from lite.agent.proxy.proxier import Proxier
    from lite.agent.proxy.rules import ProxyConfig
    from lite.netns.proxysync import TableSyncer

    node_ips = tuple(ip for ip in (node_ip,) if ip and not ip.startswith("127."))
    proxy_config = ProxyConfig(node_name, node_ips, config.cluster_cidr, service_cidr=ipv4_cidr(config.service_cidr))
    proxier = Proxier(proxy_config, TableSyncer(nft),
                      netns=config.node_netns, health=HealthServers(config.node_netns))
    return ProxyFeed(proxier, dns)


def _policy_feed(node_name: str, event: Any, nft: AsyncNft) -> PolicyFeed:
    """NetworkPolicy enforcement of this node: one nftables table `inet lite-policy` in the node netns, through
    the service proxy's libnftables context."""
    from lite.agent.netpol.enforcer import Enforcer

    return PolicyFeed(Enforcer(node_name, nft, event=event))


def build_agent(config: AgentConfig) -> Agent:
    """What `lite server` (embedded agent) and `lite agent` call; `await agent.run()` runs it."""
    return Agent(config)
