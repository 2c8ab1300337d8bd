"""The join hub: node agents' sessions, and the relay of desired state to them.

`JoinHub(client, kinds, informers=None, cluster_dns=..., cluster_domain=..., flannel_backend=..., cluster_cidr=...,
service_cidr=..., bound_pods_only=False)`:
- `handle(request, node)` serves `GET /lite/join` for node `node` (a websocket; `routes.add_join_routes`
  authenticates the node's certificate first; a Hello naming another node is closed with 4403):
  Hello → Node registered/updated → Welcome (podCIDR, cluster DNS, pod network backend and cluster CIDR) → full
  resync (every Node for the pod network, `noderelay`; pods bound to the node, their ConfigMaps/Secrets,
  deletions for reported pods no longer bound, Synced) → the session runs until the websocket closes.
  TokenRequests are answered on the session (`tokens.answer_token_request`).
- `connect_local(node)` serves the same session for node `node` over an in-process pipe (`lite.joinpipe`) and
  returns the agent's end: the embedded agent's join (`routes.local_join` checks its node password first);
  `serve_session(ws, node)` is what both serve, on any `JoinSocket`.
- `on_node_deleted(name)`, when set (the node credentials), runs as a task for every deleted Node.
- `run()` runs the hub's informers (when it created them itself) until cancelled, then closes sessions.
- `serve(...)` is the API layer's `StreamProvider`; `pod_metrics`/`node_metrics` its `MetricsProvider`.

Invariants:
- One session per node name: a new Hello for a connected node closes the old session first.
- Desired state comes from shared informers (pods indexed by spec.nodeName, ConfigMaps, Secrets, Nodes,
  PersistentVolumeClaims and PersistentVolumes (`relay.node_needs_volume`); and
  Services/EndpointSlices for agents that run a service proxy, `proxyrelay`; slim Pods, Namespaces and
  NetworkPolicies for agents that enforce policies, `policyrelay`);
  their handlers push changes to the affected sessions synchronously, in event order. Everything the hub
  does with pods concerns pods bound to a node; with `bound_pods_only` (when no scheduler or controller
  shares the informers: the API server alone) its pod informer watches `spec.nodeName!=` and caches no
  pending pod. Registering a
  session and taking its resync snapshot happen with no await in between, so no event is missed or doubled.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import Any

from aiohttp import WSMsgType, web

from lite import wire
from lite.client import Client
from lite.informer import Informer, SharedInformers
from lite.joinpipe import JoinSocket, PipeEnd, pipe
from lite.kinds import Kind, KindRegistry
from lite.objects import name_of
from lite.server.controllers.nodelifecycle import NODE_NAME_INDEX, ensure_node_index
from lite.server.join.intake import Intake, intake_for
from lite.server.join.metrics import node_metrics, pod_metrics, stats_summary
from lite.server.join.noderelay import NodeFabricRelay, wants_nodes
from lite.server.join.policyrelay import PolicyRelay, wants_policies
from lite.server.join.proxyrelay import ServiceRelay, wants_services
from lite.server.join.relay import NodeRelay
from lite.server.join.session import NodeSession
from lite.server.join.tokens import answer_token_request
from lite.server.services.kubernetes import SERVICE_NAME_LABEL, server_urls

log = logging.getLogger("lite.server.join")

Obj = dict[str, Any]
NODE_INDEX = NODE_NAME_INDEX  # the node controllers' index of bound pods: one index (one set per node) for all
BOUND_PODS = "spec.nodeName!="  # the field selector of pods bound to a node
HELLO_TIMEOUT = 30.0
MAX_FRAME = 64 * 1024 * 1024


def _node_of(pod: Obj) -> str:
    return str((pod.get("spec") or {}).get("nodeName") or "")


def _must(kind: Kind | None) -> Kind:
    if kind is None:
        raise RuntimeError("the core kinds are not registered")
    return kind


class JoinHub:
    """See the module docstring."""

    def __init__(self, client: Client, kinds: KindRegistry, *, informers: SharedInformers | None = None,
                 cluster_dns: str = "", cluster_domain: str = "cluster.local", heartbeat: float = 20.0,
                 flannel_backend: str = "vxlan", cluster_cidr: str = "", service_cidr: str = "",
                 bound_pods_only: bool = False) -> None:
        self.client = client
        self.kinds = kinds
        self.intake = Intake(client, kinds)
        self._pod_kind = _must(kinds.by_gvk("", "v1", "Pod"))
        self._sa_kind = _must(kinds.by_gvk("", "v1", "ServiceAccount"))
        self._own_informers = informers is None
        self.informers = informers if informers is not None else SharedInformers(client)
        self.pods = self.informers.informer(self.intake.pod,
                                            field_selector=BOUND_PODS if bound_pods_only else "")
        self.nodes = self.informers.informer(self.intake.node)
        self.objects: dict[str, Informer] = {}
        for group, kind in (("", "ConfigMap"), ("", "Secret"), ("node.k8s.io", "RuntimeClass"),
                            ("", "PersistentVolumeClaim")):
            k = kinds.by_gvk(group, "v1", kind)
            assert k is not None
            self.objects[kind] = self.informers.informer(k)
        pv_kind = kinds.by_gvk("", "v1", "PersistentVolume")
        assert pv_kind is not None
        self.volumes = self.informers.informer(pv_kind)
        self.cluster_dns = cluster_dns
        self.cluster_domain = cluster_domain
        self.flannel_backend = flannel_backend
        self.cluster_cidr = cluster_cidr
        self.service_cidr = service_cidr
        self.heartbeat = heartbeat
        self._sessions: dict[str, tuple[NodeSession, NodeRelay]] = {}
        # Told (as a task) when a Node is deleted: the node credentials free its name.
        self.on_node_deleted: Callable[[str], Coroutine[Any, Any, None]] | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._wire_handlers()
        self._proxy_nodes: set[str] = set()  # nodes whose agent runs a service proxy
        self.services = ServiceRelay(self.informers, kinds, self._proxy_emitters)
        # The API servers agents may dial (from the `default/kubernetes` EndpointSlices), in every Welcome and, when
        # they change, in a NodeConfig to every session (agents fail over by them: `lite.agent.servers`).
        self.api_servers: list[str] = []
        self._slices = self.services.informers["EndpointSlice"]
        self._slices.add_handlers(on_add=self._slice_changed, on_update=lambda _old, new: self._slice_changed(new),
                                  on_delete=self._slice_changed)
        self._policy_nodes: set[str] = set()  # nodes whose agent enforces NetworkPolicies
        self.policies = PolicyRelay(self.informers, kinds, self._policy_emitters, pods=self.pods)
        self._fabric_nodes: set[str] = set()  # nodes whose agent runs the pod network
        self.fabric = NodeFabricRelay(self.nodes, lambda: [s.emit for node, (s, _) in self._sessions.items()
                                                           if node in self._fabric_nodes])

    # -- informer handlers: changes to sessions --

    def _wire_handlers(self) -> None:
        ensure_node_index(self.pods)  # shared with the node controllers (and another hub on the same informers)
        self.pods.add_handlers(on_add=lambda p: self._pod_changed(None, p), on_update=self._pod_changed,
                               on_delete=self._pod_deleted)
        for kind, inf in self.objects.items():
            inf.add_handlers(on_add=lambda o, k=kind: self._object_changed(k, o),  # type: ignore[misc]
                             on_update=lambda _old, o, k=kind: self._object_changed(k, o),  # type: ignore[misc]
                             on_delete=lambda o, k=kind: self._object_changed(k, o, True))  # type: ignore[misc]
        self.nodes.add_handlers(on_update=self._node_changed, on_delete=self._node_deleted)
        self.volumes.add_handlers(on_add=self._volumes_changed, on_update=lambda _o, n: self._volumes_changed(n),
                                  on_delete=self._volumes_changed)

    def _volumes_changed(self, _pv: Obj) -> None:
        for _, relay in self._sessions.values():
            relay.volumes_changed()

    def _proxy_emitters(self) -> list[Any]:
        return [s.emit for node, (s, _) in self._sessions.items() if node in self._proxy_nodes]

    def _policy_emitters(self) -> list[Any]:
        return [s.emit for node, (s, _) in self._sessions.items() if node in self._policy_nodes]

    def _relay(self, node: str) -> NodeRelay | None:
        pair = self._sessions.get(node)
        return pair[1] if pair else None

    def _pod_changed(self, old: Obj | None, new: Obj) -> None:
        old_node = _node_of(old) if old is not None else ""
        new_node = _node_of(new)
        if old_node and old_node != new_node and (relay := self._relay(old_node)):
            relay.remove_pod(old)  # type: ignore[arg-type]
        if new_node and (relay := self._relay(new_node)):
            relay.upsert_pod(new)

    def _pod_deleted(self, pod: Obj) -> None:
        if (relay := self._relay(_node_of(pod))) is not None:
            relay.remove_pod(pod)

    def _object_changed(self, kind: str, obj: Obj, deleted: bool = False) -> None:
        for _, relay in self._sessions.values():
            relay.object_changed(kind, obj, deleted)

    def _node_changed(self, old: Obj, new: Obj) -> None:
        if old is not new and (old.get("spec") or {}).get("podCIDR") != (new.get("spec") or {}).get("podCIDR"):
            pair = self._sessions.get(name_of(new))
            if pair:
                pair[0].emit(wire.NodeConfig(self._config(new)))

    def _slice_changed(self, obj: Obj) -> None:
        meta = obj.get("metadata") or {}
        if meta.get("namespace") != "default" or (meta.get("labels") or {}).get(SERVICE_NAME_LABEL) != "kubernetes":
            return
        urls = server_urls(self._slices.list())
        if urls == self.api_servers:
            return
        self.api_servers = urls
        for node, (session, _) in list(self._sessions.items()):
            node_obj = self.nodes.get(node)
            if node_obj is not None:
                session.emit(wire.NodeConfig(self._config(node_obj)))

    def _node_deleted(self, node: Obj) -> None:
        if self.on_node_deleted is not None:
            task = asyncio.get_running_loop().create_task(self.on_node_deleted(name_of(node)))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    def _lookup(self, kind: str, namespace: str, name: str) -> Obj | None:
        return self.objects[kind].get(f"{namespace}/{name}" if namespace else name)

    def _config(self, node: Obj) -> Obj:
        spec = node.get("spec") or {}
        return {"podCIDR": spec.get("podCIDR", ""), "podCIDRs": spec.get("podCIDRs") or [],
                "clusterDNS": [self.cluster_dns] if self.cluster_dns else [],
                "clusterDomain": self.cluster_domain, "flannelBackend": self.flannel_backend,
                "clusterCIDR": self.cluster_cidr, "serviceCIDR": self.service_cidr, "apiServers": self.api_servers}

    # -- sessions --

    def session(self, node: str) -> NodeSession | None:
        pair = self._sessions.get(node)
        return pair[0] if pair else None

    def connected_nodes(self) -> list[str]:
        return sorted(self._sessions)

    async def handle(self, request: web.Request, node: str) -> web.StreamResponse:
        """The /lite/join websocket of node `node` (authenticated by the route: its Hello must name it)."""
        ws = web.WebSocketResponse(heartbeat=self.heartbeat, max_msg_size=MAX_FRAME)
        await ws.prepare(request)
        await self.serve_session(ws, node)
        return ws

    def connect_local(self, node: str) -> PipeEnd:
        """An in-process session for node `node` (`lite.joinpipe`): the agent end is returned, the server end
        is served as `handle` serves a websocket authenticated as that node (its Hello must name it)."""
        agent_end, server_end = pipe()
        task = asyncio.get_running_loop().create_task(self._serve_local(server_end, node))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return agent_end

    async def _serve_local(self, end: PipeEnd, node: str) -> None:
        """`serve_session` on a pipe end, closed when it returns or fails, as aiohttp closes a websocket whose
        handler returned or raised (1011 then): the agent sees the close and dials again."""
        try:
            await self.serve_session(end, node)
        except Exception:
            log.exception("node %s: in-process session failed", node)
            await end.close(code=1011, message=b"internal error")
        finally:
            await end.close()

    async def serve_session(self, ws: JoinSocket, node: str) -> None:
        """Serve one join session of node `node` on `ws` until it closes (see the module docstring)."""
        hello = await self._hello(ws)
        if hello is None:
            return
        if hello.node != node:
            await ws.close(code=4403, message=f"this credential is node {node}, not {hello.node}".encode()[:120])
            return
        node_obj = await self.intake.register(hello)
        # The volumes too: a resync missing a volume would make the agent remove that volume's directory.
        for inf in (self.pods, self.nodes, *self.objects.values(), self.volumes):
            await inf.wait_synced()
        if wants_services(hello):
            await self.services.wait_synced()
        if wants_policies(hello):
            await self.policies.wait_synced()
        old = self._sessions.pop(hello.node, None)
        if old is not None:
            log.info("node %s: a new session replaces the old one", hello.node)
            await old[0].close()
        reports = intake_for(self.intake, hello)

        async def apply(msg: wire.Message) -> None:
            if isinstance(msg, wire.TokenRequest):
                session.emit(await answer_token_request(self.client, self._pod_kind, self._sa_kind, hello.node,
                                                        msg))
            else:
                await reports(msg)

        session = NodeSession(hello.node, ws, hello, apply)
        relay = NodeRelay(session.emit, self._lookup, node=hello.node, volumes=self.volumes.list)
        # No await from here to resync: the snapshot and the handlers see the same cache state.
        self._sessions[hello.node] = (session, relay)
        session.emit(wire.Welcome(config=self._config(node_obj)))
        self._proxy_nodes.discard(hello.node)
        if wants_services(hello):
            self._proxy_nodes.add(hello.node)
            self.services.resync(session.emit)  # before Synced: see proxyrelay
        self._policy_nodes.discard(hello.node)
        if wants_policies(hello):
            self._policy_nodes.add(hello.node)
            self.policies.resync(session.emit)  # before Synced: see policyrelay
        self._fabric_nodes.discard(hello.node)
        if wants_nodes(hello):
            self._fabric_nodes.add(hello.node)
            self.fabric.resync(session.emit)  # before Synced: see noderelay
        relay.resync(self.pods.by_index(NODE_INDEX, hello.node), hello.pods)
        log.info("node %s joined (%d pods reported)", hello.node, len(hello.pods))
        try:
            await session.run()
        finally:
            if self._sessions.get(hello.node, (None,))[0] is session:
                del self._sessions[hello.node]
            log.info("node %s: session ended", hello.node)

    async def _hello(self, ws: JoinSocket) -> wire.Hello | None:
        try:
            frame = await ws.receive(timeout=HELLO_TIMEOUT)
        except TimeoutError:
            await ws.close(code=4408, message=b"no hello")
            return None
        if frame.type != WSMsgType.BINARY:
            await ws.close(code=4400, message=b"expected a hello frame")
            return None
        try:
            msg = wire.decode(frame.data)
        except wire.WireError as e:
            await ws.close(code=4400, message=str(e).encode()[:120])
            return None
        if not isinstance(msg, wire.Hello) or not msg.node:
            await ws.close(code=4400, message=b"expected a hello frame")
            return None
        if msg.version != wire.PROTOCOL_VERSION:
            await ws.close(code=4426, message=f"protocol version {wire.PROTOCOL_VERSION} required".encode())
            return None
        return msg

    async def run(self) -> None:
        """Run the hub's own informers (if it made them) until cancelled; then close every session."""
        try:
            if self._own_informers:
                await self.informers.run()
            else:
                await asyncio.Event().wait()
        finally:
            await self.close()

    async def close(self) -> None:
        """Close every agent session (agents redial later); `add_join_routes` calls it in on_shutdown."""
        for session, _ in list(self._sessions.values()):
            await session.close()

    # -- API providers --

    async def serve(self, request: web.Request, kind: Any, namespace: str, name: str,
                    subresource: str) -> web.StreamResponse:
        """`StreamProvider`: pods/log, exec, attach, portforward through the node's session. The stream
        protocols (websocket and SPDY exec, port forwarding, proxy) are imported on the first such request:
        a server whose users never exec or forward does not hold them."""
        from lite.server.join.streams import serve_stream

        return await serve_stream(self, request, kind, namespace, name, subresource)

    def stats_summary(self, node: str) -> Obj | None:
        """The kubelet-shaped `/stats/summary` of a node from its agent's latest sample (None: no sample)."""
        got = self._sessions.get(node)
        if got is None or got[0].metrics is None:
            return None
        return stats_summary(node, got[0].metrics)

    def _samples(self) -> list[tuple[str, wire.Metrics]]:
        return [(node, s.metrics) for node, (s, _) in sorted(self._sessions.items()) if s.metrics is not None]

    def agent_stats(self) -> list[tuple[str, Obj]]:
        """(node, the pod-start and image-pull numbers its agent last reported) for `/metrics`."""
        return [(node, m.stats) for node, m in self._samples() if isinstance(m.stats, dict) and m.stats]

    async def pod_metrics(self, namespace: str, label_selector: str) -> list[Obj]:
        """`MetricsProvider`: PodMetrics items from the connected agents' latest samples."""
        return pod_metrics((m for _, m in self._samples()), self.pods, namespace, label_selector)

    async def node_metrics(self, label_selector: str) -> list[Obj]:
        """`MetricsProvider`: NodeMetrics items from the connected agents' latest samples."""
        return node_metrics(self._samples(), self.nodes, label_selector)
