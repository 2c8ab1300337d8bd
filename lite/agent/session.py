"""The agent's end of the join session: dial the server, say Hello, receive desired state, send reports.

`JoinSession(server_url, token, node_name=..., agent=..., credentials_dir=..., streams=...)`; `run()` is eternal
(for a TaskGroup):

    node certificate (`nodecreds`: join token + node password at first, renewed at 2/3 of its life)
    dial wss://server/lite/join with it ──► Hello(node, info, running pods) ──► Welcome ──► resync ──► serve
        ▲                                                                                      │
        └──── backoff (0.5 s doubling, capped at 10 s, jittered; reset after a Welcome) ◄───────┘ closed/failed

- While the server is away, one line says so when the first attempt fails and one when a Welcome comes again
  (`lite.agent.away`); the attempts in between log at DEBUG only (hours of outage, no flood).

- Desired state goes to `agent.handle(msg)` (Welcome, NodeConfig, PodUpsert, PodDelete, ObjectUpsert,
  ObjectDelete, Synced), in order, from the reader task: handlers must only record and return quickly.
- Reports: `post(msg)` (never blocks; usable while disconnected). The latest PodStatus per uid, NodeStatus,
  LeaseRenew, Metrics and TokenRequest per pod token source replace older unsent ones and go out first; then
  PodFinals (never dropped), then Events (at most `max_events` queued: the oldest are dropped first and
  counted; after the next Welcome the count is logged and sent as one Warning Event `EventsDropped` on the
  Node). Stream replies posted while disconnected are dropped. All are sent after the next Hello.
- Convergence after a cut: the session remembers the last PodStatus posted per pod (until its PodFinal); a
  PodUpsert (every Welcome's resync sends each pod) whose status on the server differs from it in phase,
  conditions or container readiness (node lifecycle marks a silent node's pods Ready=False) gets that status
  posted again, so the server shows the pods as the node runs them. TokenRequests a connection took with it
  unanswered are posted again for the next one (their waiters may still be waiting).
- Credentials: the join token only obtains the node's client certificate (kept in `credentials_dir`); the
  websocket authenticates with that certificate. A refusal (e.g. this node name is registered with another
  node password) is logged and retried with the backoff; a due renewal happens while connected and is used
  from the next connection on.
- In process (`dial`, the agent `lite server` embeds): `dial(node, node_password)` gives a `lite.joinpipe` end
  that the server serves as a session of that node, after the same node password check the credentials
  endpoint makes (an ApiError 401/403/422 from it is a refusal, as above); no certificate, TLS or HTTP.
- Several servers (`servers_dir`, the agent's dir; `lite.agent.servers` decides): the `apiServers` of each
  Welcome/NodeConfig are remembered there; a connection that fails or ends is followed by one to the next server
  in this node's order (the backoff grows only once all failed in turn); a changed list moves the session to
  the node's new first choice at once. The Welcome/NodeConfig that moves it, and a NodeConfig that changes only
  the list, never reach the agent. In process (`dial`) there is one server and no list.
- Heartbeats: websocket pings both ways (aiohttp `heartbeat`), and a LeaseRenew every `lease_interval`
  seconds while connected (the Node's lease, which node lifecycle watches).
- Streams (StreamOpen & co.) go to a `StreamServer` over the given `StreamBackend`, one per connection.

Invariants:
- Reconnecting never restarts pods: an upsert equal (same uid and `wire.pod_fingerprint`: only status or
  resourceVersion differ) to one already handed to the agent is dropped, so a resync re-announcing running
  pods reaches the agent as nothing.
- After Synced, pods this session handed over earlier that are no longer desired get a PodDelete (the
  server only knows about pods the agent reported as running).
- The session never raises out of `run()` except by cancellation.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import ssl
from collections import OrderedDict, deque
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Protocol

import aiohttp

from lite import wire
from lite.agent import servers as server_list
from lite.agent.away import Away
from lite.agent.nodecreds import CredentialsRefused, NodeCredentials
from lite.agent.streams.backend import StreamBackend
from lite.agent.streams.server import StreamServer
from lite.errors import ApiError
from lite.joinpipe import JoinSocket

log = logging.getLogger("lite.agent.session")

Obj = dict[str, Any]
DATA_QUEUE = 256
MAX_EVENTS = 10000
CONNECT_TIMEOUT = 10.0
_STREAM_IN = (wire.StreamOpen, wire.StreamData, wire.StreamClose, wire.StreamResize, wire.StreamAck)
_STREAM_OUT = (wire.StreamReady, wire.StreamData, wire.StreamClose, wire.StreamError, wire.StreamExit, wire.Pong)


# kinds whose consumers replace their whole set at each resync's Synced: the service proxy, the cluster DNS and
# the service env (Services, slices), and the local-path volume sweep (PersistentVolumes: one left out of a
# resync is taken as deleted and its directory removed)
RESYNC_KINDS = frozenset({"Service", "EndpointSlice", "PersistentVolume"})
LocalDial = Callable[[str, str], Awaitable[JoinSocket]]  # (node, node password) -> an in-process session end

class NodeAgent(Protocol):
    """What the session needs from the node agent (the pod runner implements it)."""

    def hello_info(self) -> Obj:
        """labels and taints (applied only when the Node is created) and `status` (a NodeStatus dict)."""
        ...

    def running_pods(self) -> dict[str, str]:
        """uid → "namespace/name" of every pod running on this node now."""
        ...

    async def handle(self, msg: wire.Message) -> None:
        """Desired state from the server; record it and return quickly."""
        ...


class JoinSession:
    """See the module docstring."""

    def __init__(self, server_url: str, token: str, *, node_name: str, agent: NodeAgent, credentials_dir: Path,
                 streams: StreamBackend | None = None, ca_data: bytes | None = None, ca_file: str | None = None,
                 insecure: bool = False, heartbeat: float = 20.0, backoff: tuple[float, float] = (0.5, 10.0),
                 lease_interval: float = 10.0, lease_duration: int = 40,
                 rand: Callable[[], float] = random.random, dial: LocalDial | None = None,
                 servers_dir: Path | None = None, max_events: int = MAX_EVENTS) -> None:
        self.configured = server_url.rstrip("/")
        self.servers_dir = servers_dir if dial is None else None
        self.servers: list[str] = [] if self.servers_dir is None else server_list.load(self.servers_dir,
                                                                                      self.configured)
        self.url = self.base_url = ""
        self._target(server_list.candidates(self.configured, self.servers, node_name)[0])
        self._move: str | None = None  # the server a changed list told this session to move to
        self.token = token
        self.node_name = node_name
        self.credentials = NodeCredentials(credentials_dir, node_name)
        self.agent = agent
        self.backend = streams
        self.heartbeat = heartbeat
        self.backoff = backoff
        self.lease_interval = lease_interval
        self.lease_duration = lease_duration
        self._rand = rand
        self.dial = dial
        self._ssl: ssl.SSLContext | bool = False
        if dial is None and (self.url.startswith("https://") or self.url.startswith("wss://")):
            ctx = ssl.create_default_context(cafile=ca_file, cadata=ca_data.decode() if ca_data else None)
            if insecure:
                ctx.check_hostname = False
                ctx.verify_mode = ssl.CERT_NONE
            self._ssl = ctx
        self._latest: OrderedDict[tuple[str, ...], wire.Message] = OrderedDict()
        self._fifo: deque[wire.Message] = deque()  # PodFinals (and stream replies while connected)
        self._events: deque[wire.Message] = deque()
        self.max_events = max_events
        self.dropped_events = 0  # Events dropped since the last EventsDropped report
        self._reported: dict[str, wire.PodStatus] = {}  # uid -> the last status posted, until its PodFinal
        self._tokens_sent: dict[int, wire.TokenRequest] = {}  # sent on this connection, not answered yet
        self._data: asyncio.Queue[wire.Message] = asyncio.Queue(DATA_QUEUE)
        self._wake = asyncio.Event()
        self._seen_pods: dict[str, tuple[bytes, str]] = {}  # uid -> (pod_fingerprint, "ns/name") handed over
        self._seen_objects: dict[tuple[str, str, str], str] = {}
        self.connected = asyncio.Event()
        self._http: aiohttp.ClientSession | None = None
        self.config: Obj = {}
        self.sessions = 0  # number of Welcomes received (tests and status)
        self._away = Away(log, cap=backoff[1] * 1.5)  # one line when the server goes away, one when it is back

    def _target(self, base_url: str) -> None:
        self.base_url = base_url.rstrip("/")
        self.url = self.base_url + wire.JOIN_PATH

    def _learn(self, config: Obj) -> bool:
        """Take the server list of a Welcome/NodeConfig; True when this session should move to another server
        (`lite.agent.servers.move_to`: the list changed and this node now prefers another)."""
        new = server_list.learned(config)
        if self.servers_dir is None or new is None or new == self.servers:
            return False
        old, self.servers = self.servers, new
        try:
            server_list.save(self.servers_dir, self.configured, new)
        except OSError as e:
            log.warning("node %s: cannot remember the API servers in %s: %s", self.node_name, self.servers_dir, e)
        log.info("node %s: API servers %s", self.node_name, ", ".join(new))
        self._move = server_list.move_to(self.base_url, old, new, self.configured, self.node_name)
        if self._move is not None:
            log.info("node %s: moving from %s to %s (this node's first choice)", self.node_name, self.base_url,
                     self._move)
        return self._move is not None

    # -- reports --

    def post(self, msg: wire.Message) -> None:
        """Queue a report; see the module docstring for which ones replace older unsent ones."""
        key: tuple[str, ...]
        if isinstance(msg, wire.PodStatus):
            key = ("pod", msg.uid)
            self._reported[msg.uid] = msg
        elif isinstance(msg, (wire.NodeStatus, wire.LeaseRenew, wire.Metrics)):
            key = (msg.T, "")
        elif isinstance(msg, wire.TokenRequest):
            key = (msg.T, msg.uid, ",".join(msg.audiences), str(msg.seconds))
        elif isinstance(msg, wire.Event):
            if len(self._events) >= self.max_events:
                self._events.popleft()
                self.dropped_events += 1
            self._events.append(msg)
            self._wake.set()
            return
        else:
            if isinstance(msg, _STREAM_OUT) and not self.connected.is_set():
                return  # a reply to a stream of a connection that is gone
            if isinstance(msg, wire.PodFinal):
                self._reported.pop(msg.uid, None)
            self._fifo.append(msg)
            self._wake.set()
            return
        self._latest.pop(key, None)
        self._latest[key] = msg
        self._wake.set()

    async def send(self, msg: wire.Message) -> None:
        """Stream traffic: waits for room (backpressure); fails when not connected."""
        if not self.connected.is_set():
            raise ConnectionError("not connected to the server")
        await self._data.put(msg)
        self._wake.set()

    def _next_report(self) -> wire.Message | None:
        # statuses first: a burst of Events must not delay a Running report, and a pod's final status then
        # precedes its PodFinal (after which the server drops reports about it)
        if self._latest:
            return self._latest.popitem(last=False)[1]
        if self._fifo:
            return self._fifo.popleft()
        if self._events:
            return self._events.popleft()
        if not self._data.empty():
            return self._data.get_nowait()
        return None

    async def _writer(self, ws: JoinSocket) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            while (msg := self._next_report()) is not None:
                try:
                    await ws.send_bytes(wire.encode(msg))
                    if isinstance(msg, wire.TokenRequest):
                        self._tokens_sent[msg.id] = msg
                except (ConnectionError, RuntimeError) as e:
                    if not isinstance(msg, _STREAM_OUT):
                        self.post(msg)  # keep the report for the next session
                    log.info("join session: send failed (%s); reconnecting", e)
                    await ws.close()  # ends the reader, hence this connection
                    return

    # -- the connection loop --

    async def run(self) -> None:
        delay = self.backoff[0]
        async with contextlib.AsyncExitStack() as stack:
            # A server host that is gone without a trace (no RST) holds a dial until the connect timeout: the
            # next server in this node's order is tried after CONNECT_TIMEOUT (aiohttp's default is 30 s).
            http = None if self.dial is not None else await stack.enter_async_context(aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=300, sock_connect=CONNECT_TIMEOUT)))
            failed = 0  # connections that failed since the last Welcome
            while True:
                welcomed_before = self.sessions
                self._move = None
                try:
                    await self._connect_once(http)
                except asyncio.CancelledError:
                    raise
                except CredentialsRefused as e:
                    log.error("join session to %s: node credentials refused: %s", self.url, e)
                except (aiohttp.ClientError, OSError, TimeoutError, wire.WireError) as e:
                    self._away.failed(self.base_url, e)
                    if http is not None and self.sessions == welcomed_before and \
                            await self._certificate_rejected(http):
                        delay = self.backoff[0]
                        continue
                except Exception:
                    log.exception("join session to %s failed", self.url)
                finally:
                    self.connected.clear()
                order = server_list.candidates(self.configured, self.servers, self.node_name)
                if self._move is not None:  # the list changed: straight to this node's first choice
                    self._target(self._move)
                    delay, failed = self.backoff[0], 0
                    continue
                if self.sessions > welcomed_before:
                    delay, failed = self.backoff[0], 0
                else:
                    failed += 1
                if self.dial is None:  # the next server in this node's order (the same one when it is alone)
                    self._target(server_list.next_after(order, self.base_url))
                await asyncio.sleep(delay * (0.5 + self._rand()))
                if failed >= len(order):  # back off once every server failed in turn
                    delay, failed = min(delay * 2, self.backoff[1]), 0

    async def _certificate_rejected(self, http: aiohttp.ClientSession) -> bool:
        """After a failed connect: when the server refuses the node certificate itself (a wiped server with a new
        client CA), drop the certificate so the next attempt joins with the join token and the node password."""
        if not isinstance(self._ssl, ssl.SSLContext):
            return False
        if not await self.credentials.rejected(http, self.base_url, self._ssl):
            return False
        log.warning("node %s: the server no longer accepts this node's certificate (its client CA changed); "
                    "joining again with the join token and the node password", self.node_name)
        self.credentials.discard()
        return True

    async def _dial(self, http: aiohttp.ClientSession | None) -> JoinSocket:
        if self.dial is not None:
            try:
                return await self.dial(self.node_name, self.credentials.password())
            except ApiError as e:
                if e.code in (401, 403, 422):
                    raise CredentialsRefused(e.message) from None
                raise ConnectionError(f"in-process join refused: {e}") from None
        assert http is not None
        await self.credentials.ensure(http, self.base_url, self.token, self._ssl)
        if not isinstance(self._ssl, ssl.SSLContext):
            raise wire.WireError("a node joins over https only (its client certificate authenticates it)")
        tls = self.credentials.ssl_context(self._ssl)
        self._http = http
        return await http.ws_connect(self.url, ssl=tls, heartbeat=self.heartbeat, max_msg_size=64 * 1024 * 1024)

    async def _connect_once(self, http: aiohttp.ClientSession | None) -> None:
        ws = await self._dial(http)
        async with contextlib.AsyncExitStack() as stack:
            stack.push_async_callback(ws.close)
            hello = wire.Hello(self.node_name, wire.PROTOCOL_VERSION, self.agent.hello_info(),
                               self.agent.running_pods())
            await ws.send_bytes(wire.encode(hello))
            first = await ws.receive()
            if first.type != aiohttp.WSMsgType.BINARY:
                raise wire.WireError(f"the server closed the session: {first.extra or first.type.name}")
            welcome = wire.decode(first.data)
            if not isinstance(welcome, wire.Welcome):
                raise wire.WireError(f"expected welcome, got {welcome.T}")
            if self._learn(welcome.config):
                return  # another server is this node's first choice: the loop dials it at once
            self.config = welcome.config
            self.sessions += 1
            self._forget_resync_kinds()
            await self.agent.handle(welcome)
            self.connected.set()
            self._report_dropped()
            self._wake.set()
            self._away.back(self.base_url)
            log.info("joined %s as node %s", "in process" if self.dial is not None else self.url, self.node_name)
            await self._serve(ws)

    async def _serve(self, ws: JoinSocket) -> None:
        streams = StreamServer(self.backend, self.send) if self.backend is not None else None
        async with asyncio.TaskGroup() as tg:
            writer = tg.create_task(self._writer(ws))
            lease = tg.create_task(self._renew_lease()) if self.lease_interval > 0 else None
            stream_task = tg.create_task(streams.run()) if streams is not None else None
            renew = tg.create_task(self._renew_certificate())
            try:
                await self._read(ws, streams)
            except (aiohttp.ClientError, ConnectionError) as e:  # the link went (answering a ping, say)
                log.info("join session to %s: connection lost (%s); reconnecting", self.url, e or type(e).__name__)
            finally:
                self.connected.clear()
                writer.cancel()
                renew.cancel()
                if lease is not None:
                    lease.cancel()
                if stream_task is not None:
                    stream_task.cancel()
                if streams is not None:
                    streams.reset()
                while not self._data.empty():  # stream traffic of this session dies with it
                    self._data.get_nowait()
                unanswered, self._tokens_sent = list(self._tokens_sent.values()), {}
                for request in unanswered:  # for the next connection
                    self.post(request)

    def _report_dropped(self) -> None:
        """Log and report (one Warning Event on the Node, ahead of the queued ones) the Events dropped."""
        if not self.dropped_events:
            return
        n, self.dropped_events = self.dropped_events, 0
        message = f"{n} events were dropped while the node was cut off from its server"
        log.warning("node %s: %s (at most %d are kept, the oldest dropped first)", self.node_name, message,
                    self.max_events)
        self._events.appendleft(wire.Event({
            "type": "Warning", "reason": "EventsDropped", "message": message,
            "source": {"component": "kubelet", "host": self.node_name},
            "involvedObject": {"kind": "Node", "apiVersion": "v1", "name": self.node_name, "uid": self.node_name}}))

    async def _renew_certificate(self) -> None:
        """Renew the node certificate when due (2/3 of its life); failures retry a minute later."""
        while self._http is not None:
            await asyncio.sleep(max(1.0, self.credentials.seconds_to_renewal()))
            try:
                await self.credentials.ensure(self._http, self.base_url, self.token, self._ssl)
            except (CredentialsRefused, aiohttp.ClientError, OSError, TimeoutError) as e:
                log.warning("node %s: certificate renewal failed: %s", self.node_name, e)
                await asyncio.sleep(60.0)

    async def _renew_lease(self) -> None:
        """The node heartbeat: renew kube-node-lease/<node> while the session is up."""
        while True:
            self.post(wire.LeaseRenew(self.lease_duration))
            await asyncio.sleep(self.lease_interval)

    async def _read(self, ws: JoinSocket, streams: StreamServer | None) -> None:
        async for frame in ws:
            if frame.type != aiohttp.WSMsgType.BINARY:
                continue
            msg = wire.decode(frame.data)
            if isinstance(msg, _STREAM_IN):
                if streams is not None:
                    streams.handle(msg)
                elif isinstance(msg, wire.StreamOpen):
                    self.post(wire.StreamError(msg.id, "this node serves no streams", 501, "NotImplemented"))
            elif isinstance(msg, wire.Ping):
                self.post(wire.Pong(msg.seq))
            elif isinstance(msg, wire.TokenResponse):
                self._tokens_sent.pop(msg.id, None)
                await self.agent.handle(msg)
            elif isinstance(msg, wire.NodeConfig) and self._learn(msg.config):
                await ws.close()  # ends this session; the loop dials the server `_learn` chose
                return
            elif isinstance(msg, wire.NodeConfig) and _node_part(msg.config) == _node_part(self.config):
                self.config = msg.config  # only the server list changed: nothing for the agent
            elif not isinstance(msg, wire.Pong):
                if isinstance(msg, wire.NodeConfig):
                    self.config = msg.config
                for out in self._filter(msg):
                    await self.agent.handle(out)

    def _converge_status(self, uid: str, pod: Obj) -> None:
        """The server's copy of a pod this node reported on differs from the last report: post it again."""
        last = self._reported.get(uid)
        if last is None or ("pod", uid) in self._latest:
            return
        if status_summary(pod.get("status")) != status_summary(last.status):
            self.post(last)

    def _forget_resync_kinds(self) -> None:
        """Every session resyncs everything; the kinds whose consumers rebuild their whole state from that resync
        (`RESYNC_KINDS`) must see each object again, even one unchanged since the last session, or it would drop
        out of their set."""
        for key in [k for k in self._seen_objects if k[0] in RESYNC_KINDS]:
            del self._seen_objects[key]

    def _filter(self, msg: wire.Message) -> list[wire.Message]:
        """Drop what the agent already has; turn Synced into deletes for pods no longer desired."""
        if isinstance(msg, wire.PodUpsert):
            meta = msg.pod.get("metadata") or {}
            uid, fp = str(meta.get("uid", "")), wire.pod_fingerprint(msg.pod)
            self._converge_status(uid, msg.pod)
            seen = self._seen_pods.get(uid)
            if seen is not None and seen[0] == fp:
                return []
            self._seen_pods[uid] = (fp, f"{meta.get('namespace', '')}/{meta.get('name', '')}")
        elif isinstance(msg, wire.PodDelete):
            self._seen_pods.pop(msg.uid, None)
        elif isinstance(msg, wire.ObjectUpsert):
            meta = msg.obj.get("metadata") or {}
            key = (msg.kind, str(meta.get("namespace", "")), str(meta.get("name", "")))
            rv = str(meta.get("resourceVersion", ""))
            if rv and self._seen_objects.get(key) == rv:
                return []
            self._seen_objects[key] = rv
        elif isinstance(msg, wire.ObjectDelete):
            self._seen_objects.pop((msg.kind, msg.namespace, msg.name), None)
        elif isinstance(msg, wire.Synced):
            desired = set(msg.uids)
            out: list[wire.Message] = []
            for uid in [u for u in self._seen_pods if u not in desired]:
                ns, _, name = self._seen_pods.pop(uid)[1].partition("/")
                out.append(wire.PodDelete(uid, ns, name))
            return [*out, msg]
        return [msg]


def status_summary(status: Obj | None) -> tuple[Any, ...]:
    """What of a pod status must match between the node and the server: phase, the conditions' statuses and
    the containers' readiness (timestamps and details may differ without the server being wrong)."""
    st = status or {}
    conditions = sorted((str(c.get("type")), str(c.get("status"))) for c in st.get("conditions") or []
                        if isinstance(c, dict))
    containers = sorted((str(c.get("name")), bool(c.get("ready")), bool(c.get("started")))
                        for key in ("initContainerStatuses", "containerStatuses")
                        for c in st.get(key) or [] if isinstance(c, dict))
    return str(st.get("phase") or ""), tuple(conditions), tuple(containers)


def _node_part(config: Obj) -> Obj:
    """A Welcome/NodeConfig's config without the server list (`lite.agent.servers`), which the session keeps."""
    return {k: v for k, v in config.items() if k != "apiServers"}
