"""The join protocol between the server and node agents: versioned msgpack maps over one websocket.

Every message is one binary websocket frame holding a msgpack map `{"t": <type>, ...fields}`. Each type is a
frozen dataclass below; `encode(msg)` and `decode(frame)` convert. Objects (pods, ConfigMaps, Secrets,
statuses, events) travel as the same JSON dicts the API serves.

Flow (server ⇐ agent after the websocket opens):
    agent  → Hello(node, version, info, pods)       the pods it runs (uid → "ns/name"), for resync
    server → Welcome(config)                        podCIDR, cluster DNS, cluster domain
    server → ObjectUpsert* PodUpsert* PodDelete*    desired state: every pod bound to the node and the
    server → Synced(uids)                           ConfigMaps/Secrets they use, then the full desired set
    then both ways: PodUpsert/PodDelete/ObjectUpsert/ObjectDelete/NodeConfig (server → agent),
    PodStatus/NodeStatus/LeaseRenew/Event/PodFinal/Metrics (agent → server), Ping/Pong (either way),
    Stream* (multiplexed log/exec/attach/port-forward streams, opened by the server),
    TokenRequest (agent → server) answered by TokenResponse: pod-bound ServiceAccount tokens for projected volumes.

Streams: the server sends StreamOpen(id, kind, params); the agent answers StreamReady or StreamError, then
StreamData flows on channels (exec/attach: 0 stdin, 1 stdout, 2 stderr; log and port-forward: 1 from the
agent, 0 to it). StreamClose(id, channel) half-closes one channel (channel -1: the whole stream, either side);
StreamExit(id, code, message) ends an exec/attach with the process's exit status. Flow control: the agent
sends at most STREAM_WINDOW bytes of a stream's output beyond what the server acknowledged (StreamAck), so a
slow client slows its own stream, never the session or the server's memory.

Invariants: `PROTOCOL_VERSION` goes up whenever a message changes incompatibly; unknown message types and
missing fields raise `WireError` (the session is then closed); extra fields are ignored so a newer peer
may add optional ones. Pure: no I/O, no state.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import field
from types import MappingProxyType
from typing import Any, ClassVar, Literal

import msgpack

from lite.records import dataclass

PROTOCOL_VERSION = 1
JOIN_PATH = "/lite/join"
# Node credentials (HTTP POST, before the websocket): join token + node password, or the node certificate to renew.
NODE_CREDENTIALS_PATH = "/lite/node-credentials"

Obj = dict[str, Any]
StreamKind = Literal["log", "exec", "attach", "portforward"]
STREAM_KINDS: frozenset[str] = frozenset({"log", "exec", "attach", "portforward"})
WHOLE_STREAM = -1
STREAM_WINDOW = 1024 * 1024


class WireError(ValueError):
    """A frame that is not a valid message of this protocol version."""


@dataclass(frozen=True)
class Hello:
    """Agent → server, first frame. `info`: labels, taints (used on create), and a NodeStatus dict."""

    T: ClassVar[str] = "hello"
    node: str
    version: int = PROTOCOL_VERSION
    info: Obj = field(default_factory=dict)
    pods: dict[str, str] = field(default_factory=dict)  # uid -> "namespace/name" of pods running now


@dataclass(frozen=True)
class Welcome:
    """Server → agent, answer to Hello. `config`: podCIDR, podCIDRs, clusterDNS, clusterDomain, flannelBackend,
    clusterCIDR, serviceCIDR, apiServers (the live API servers' https URLs, which agents fail over by)."""

    T: ClassVar[str] = "welcome"
    version: int = PROTOCOL_VERSION
    config: Obj = field(default_factory=dict)


@dataclass(frozen=True)
class NodeConfig:
    """Server → agent: the node config changed (e.g. podCIDR assigned after registration, or the API servers)."""

    T: ClassVar[str] = "node_config"
    config: Obj = field(default_factory=dict)


@dataclass(frozen=True)
class PodUpsert:
    """Server → agent: a pod bound to this node, full object (deletionTimestamp set = stop gracefully)."""

    T: ClassVar[str] = "pod_upsert"
    pod: Obj


@dataclass(frozen=True)
class PodDelete:
    """Server → agent: the pod is gone from the API or no longer bound here: stop it now."""

    T: ClassVar[str] = "pod_delete"
    uid: str
    namespace: str = ""
    name: str = ""


@dataclass(frozen=True)
class Synced:
    """Server → agent: the desired set is complete; `uids` are all pods bound to this node."""

    T: ClassVar[str] = "synced"
    uids: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class ObjectUpsert:
    """Server → agent: a ConfigMap, Secret or RuntimeClass that a pod of this node references."""

    T: ClassVar[str] = "object_upsert"
    # "ConfigMap" | "Secret" | "RuntimeClass" | "PersistentVolumeClaim" | "PersistentVolume" (cluster-scoped:
    # namespace "")
    kind: str
    obj: Obj


@dataclass(frozen=True)
class ObjectDelete:
    """Server → agent: the ConfigMap/Secret was deleted or no pod of this node references it any more."""

    T: ClassVar[str] = "object_delete"
    kind: str
    namespace: str
    name: str


@dataclass(frozen=True)
class PodStatus:
    """Agent → server: a pod's whole status; written through pods/status only if the uid still matches."""

    T: ClassVar[str] = "pod_status"
    uid: str
    namespace: str
    name: str
    status: Obj


@dataclass(frozen=True)
class NodeStatus:
    """Agent → server: node status fields (conditions, capacity, allocatable, addresses, nodeInfo, ...)."""

    T: ClassVar[str] = "node_status"
    status: Obj


@dataclass(frozen=True)
class LeaseRenew:
    """Agent → server: renew kube-node-lease/<node>."""

    T: ClassVar[str] = "lease_renew"
    duration_seconds: int = 40


@dataclass(frozen=True)
class Event:
    """Agent → server: a core/v1 Event body (involvedObject, reason, message, type; name optional)."""

    T: ClassVar[str] = "event"
    event: Obj


@dataclass(frozen=True)
class PodFinal:
    """Agent → server: a gracefully deleted pod has stopped; delete it with grace 0 and a uid precondition."""

    T: ClassVar[str] = "pod_final"
    uid: str
    namespace: str
    name: str


@dataclass(frozen=True)
class Metrics:
    """Agent → server: usage samples. `node`: {"cpu": "250m", "memory": "1Gi"}; `pods`: PodMetrics-like
    items {"namespace", "name", "containers": [{"name", "usage"}]}; `timestamp` RFC 3339, `window` e.g. "30s";
    `stats`: the agent's cumulative pod-start and image-pull numbers (`lite.agent.stats.AgentStats.as_wire`)."""

    T: ClassVar[str] = "metrics"
    timestamp: str
    window: str = "30s"
    node: Obj = field(default_factory=dict)
    pods: list[Obj] = field(default_factory=list)
    stats: Obj = field(default_factory=dict)


@dataclass(frozen=True)
class Ping:
    T: ClassVar[str] = "ping"
    seq: int = 0


@dataclass(frozen=True)
class Pong:
    T: ClassVar[str] = "pong"
    seq: int = 0


@dataclass(frozen=True)
class StreamOpen:
    """Server → agent. params: namespace, name, uid, container; log: follow, previous, tailLines,
    sinceSeconds, sinceTime, timestamps, limitBytes; exec: command, stdin, stdout, stderr, tty;
    attach: stdin, stdout, stderr, tty; portforward: port."""

    T: ClassVar[str] = "stream_open"
    id: int
    kind: str
    params: Obj = field(default_factory=dict)


@dataclass(frozen=True)
class StreamReady:
    """Agent → server: the stream is set up (container found, process started, port connected)."""

    T: ClassVar[str] = "stream_ready"
    id: int


@dataclass(frozen=True)
class StreamData:
    T: ClassVar[str] = "stream_data"
    id: int
    channel: int
    data: bytes


@dataclass(frozen=True)
class StreamAck:
    """Server → agent: the client consumed `size` more bytes of this stream's output (flow control: the
    agent keeps at most STREAM_WINDOW bytes per stream unacknowledged)."""

    T: ClassVar[str] = "stream_ack"
    id: int
    size: int


@dataclass(frozen=True)
class StreamResize:
    T: ClassVar[str] = "stream_resize"
    id: int
    width: int
    height: int


@dataclass(frozen=True)
class StreamClose:
    """Half-close `channel` (EOF), or end the whole stream with WHOLE_STREAM."""

    T: ClassVar[str] = "stream_close"
    id: int
    channel: int = WHOLE_STREAM


@dataclass(frozen=True)
class StreamError:
    """The stream failed (before or after StreamReady). `code`/`reason` follow Kubernetes Status."""

    T: ClassVar[str] = "stream_error"
    id: int
    message: str
    code: int = 500
    reason: str = "InternalError"


@dataclass(frozen=True)
class StreamExit:
    """Agent → server: an exec/attach process ended with `code` (the stream ends with it)."""

    T: ClassVar[str] = "stream_exit"
    id: int
    code: int
    message: str = ""


@dataclass(frozen=True)
class TokenRequest:
    """Agent → server: a ServiceAccount token for a `serviceAccountToken` projected volume source of pod
    `uid` (`namespace`/`pod`), bound to that pod. The server answers with a TokenResponse of the same `id`,
    after checking the pod is bound to the session's node."""

    T: ClassVar[str] = "token_request"
    id: int
    namespace: str
    pod: str
    uid: str
    audiences: list[str] = field(default_factory=list)  # empty: the API server's audiences
    seconds: int = 3600


@dataclass(frozen=True)
class TokenResponse:
    """Server → agent: the token and its expiry (epoch seconds), or `error` (then no token)."""

    T: ClassVar[str] = "token_response"
    id: int
    token: str = ""
    expires: float = 0.0
    error: str = ""


Message = (Hello | Welcome | NodeConfig | PodUpsert | PodDelete | Synced | ObjectUpsert | ObjectDelete | PodStatus
           | NodeStatus | LeaseRenew | Event | PodFinal | Metrics | Ping | Pong | StreamOpen | StreamReady
           | StreamData | StreamAck | StreamResize | StreamClose | StreamError | StreamExit | TokenRequest
           | TokenResponse)

_TYPES: Mapping[str, type[Any]] = MappingProxyType({cls.T: cls for cls in (
    Hello, Welcome, NodeConfig, PodUpsert, PodDelete, Synced, ObjectUpsert, ObjectDelete, PodStatus, NodeStatus,
    LeaseRenew, Event, PodFinal, Metrics, Ping, Pong, StreamOpen, StreamReady, StreamData, StreamAck, StreamResize,
    StreamClose, StreamError, StreamExit, TokenRequest, TokenResponse)})


def encode(msg: Message) -> bytes:
    """One websocket frame for `msg`."""
    body: Obj = {"t": msg.T}
    for f in dataclasses.fields(msg):
        body[f.name] = getattr(msg, f.name)
    out: bytes = msgpack.packb(body, use_bin_type=True)
    return out


def decode(frame: bytes) -> Message:
    """The message in `frame`; `WireError` when it is not one of this protocol."""
    try:
        body = msgpack.unpackb(frame, raw=False, strict_map_key=False)
    except Exception as e:  # msgpack raises several unrelated types for bad input
        raise WireError(f"undecodable frame: {e}") from None
    if not isinstance(body, dict):
        raise WireError("a frame must hold a map")
    cls = _TYPES.get(body.get("t"))  # type: ignore[arg-type]
    if cls is None:
        raise WireError(f"unknown message type {body.get('t')!r}")
    kwargs = {f.name: body[f.name] for f in dataclasses.fields(cls) if f.name in body}
    try:
        msg: Message = cls(**kwargs)
    except TypeError as e:
        raise WireError(f"bad {cls.T} message: {e}") from None
    return msg


def pod_fingerprint(pod: Obj) -> bytes:
    """What a node acts on: the pod minus status and bookkeeping metadata (resourceVersion, managedFields).

    Two versions with equal fingerprints differ only in what the agent itself reports, so neither side
    needs to pass the second one on."""
    meta = {k: v for k, v in (pod.get("metadata") or {}).items() if k not in ("resourceVersion", "managedFields")}
    body = {k: v for k, v in pod.items() if k not in ("status", "metadata")}
    return msgpack.packb([sorted(meta.items()), sorted(body.items())], use_bin_type=True)  # type: ignore[no-any-return]


def stream_error_status(message: str, code: int, reason: str) -> Obj:
    """The Kubernetes Status dict for a failed stream."""
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message,
            "reason": reason, "code": code}
