"""The proxy subresources: `pods/proxy`, `services/proxy` and `nodes/proxy`, as `kubectl proxy`, `kubectl get
--raw` and dashboards use them.

- `pods/<[scheme:]name[:port]>/proxy/<path>`: the request goes to that port of the pod (without a port, the
  first declared container port), through a port-forward stream of the pod's node agent, so pods on any node
  are reached the same way. The agent connects to the port on the pod's loopback inside its network
  namespace (as port-forward does), where upstream dials the pod IP: a server bound only to the pod IP is the
  one difference.
- `services/<[scheme:]name[:port]>/proxy/<path>`: the service port named (or numbered) `port` (the only port
  when there is one), then one ready endpoint of it, chosen at random, and its target port, as upstream's
  service ResourceLocation does; 503 `no endpoints available for service "x"` when there is none.
- `nodes/<name>/proxy/<path>`: lite has no kubelet HTTP server, so the read-only kubelet paths that have a
  meaning here are answered by the server from what the node's agent reports: `healthz`, `pods` (the PodList
  of pods bound to the node) and `stats/summary` (node and pod usage from the agent's latest sample).

Schemes (upstream's SplitSchemeNamePort): none or `http:` is plain HTTP; `https:` runs TLS from the API server
to the pod over the same stream (`_TlsPipe`, memory BIOs), and, as upstream's proxy transport, does not verify
the pod's certificate (a pod's serving certificate is rarely one the API server could check); any other scheme
is 400 `invalid <pod|service|node> request`. A TLS failure (e.g. https to a plain-HTTP port) is a 503
`error trying to reach service: …`, as a connection failure is.

Invariants:
- Requests are sent as HTTP/1.0 with `Connection: close` and the response body is relayed until the pod side
  closes, so no response framing needs to be parsed beyond the status line and headers; the caller's
  credentials (`Authorization`, cookies) never reach the pod, and hop-by-hop headers are dropped both ways.
  Plain HTTP half-closes the request direction once the request is sent; TLS does not (a TLS server may take
  the half-close for the end of the connection) and relies on `Connection: close`.
- The path relayed is what follows the `proxy` segment that comes right after the target's name, so a
  namespace or name containing "proxy" does not shift it.
- The agent stream is always closed, whatever happens to the client.
"""

from __future__ import annotations

import contextlib
import random
import ssl
from typing import TYPE_CHECKING, Any

from aiohttp import web

from lite import wire
from lite.errors import ApiError, bad_request, not_found, service_unavailable
from lite.kinds import Kind

if TYPE_CHECKING:
    from lite.server.join.hub import JoinHub

Obj = dict[str, Any]
MAX_HEAD = 64 * 1024
_HOP = frozenset({"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer",
                  "transfer-encoding", "upgrade", "authorization", "cookie", "host", "content-length",
                  "impersonate-user", "impersonate-group", "impersonate-uid"})


def parse_target(name: str, what: str = "service") -> tuple[str, str, str]:
    """upstream's SplitSchemeNamePort: `name`, `name:port` or `scheme:name:port` → (scheme, name, port); the
    scheme is "", http or https, else 400 `invalid <what> request "<name>"`."""
    parts = name.split(":")
    if len(parts) == 1 and parts[0]:
        return "", parts[0], ""
    if len(parts) == 2 and parts[0]:
        return "", parts[0], parts[1]
    if len(parts) == 3 and parts[0] in ("http", "https", "") and parts[1]:
        return parts[0], parts[1], parts[2]
    raise bad_request(f'invalid {what} request "{name}"')


_PROXIED = frozenset({"pods", "services", "nodes"})


def sub_path(request: web.Request) -> str:
    """The path after the `proxy` segment that follows `<pods|services|nodes>/<name>` (at least `/`), with the
    query string."""
    path, _, query = request.raw_path.partition("?")
    segments = path.split("/")
    rest = "/"
    for i in range(2, len(segments)):
        if segments[i] == "proxy" and segments[i - 2] in _PROXIED:
            rest = "/" + "/".join(segments[i + 1:])
            break
    return rest + ("?" + query if query else "")


def pod_port(pod: Obj, port: str, scheme: str = "") -> int:
    """The port named or numbered `port`; none given: the first declared container port, else the scheme's
    default (upstream leaves the port out of the URL then: 80, or 443 for https)."""
    if not port:
        for c in (pod.get("spec") or {}).get("containers") or []:
            for p in c.get("ports") or []:
                if p.get("containerPort"):
                    return int(p["containerPort"])
        return 443 if scheme == "https" else 80
    if port.isdigit() and 0 < int(port) < 65536:
        return int(port)
    for c in (pod.get("spec") or {}).get("containers") or []:
        for p in c.get("ports") or []:
            if p.get("name") == port and p.get("containerPort"):
                return int(p["containerPort"])
    raise bad_request(f"invalid port {port!r} for pod {pod['metadata']['name']}")


def service_backend(service: Obj, slices: list[Obj], port: str, pick: Any = random.choice) -> tuple[Obj, int]:
    """(targetRef-like endpoint dict with `namespace`/`name`, target port) of one ready endpoint."""
    name = service["metadata"]["name"]
    ports = (service.get("spec") or {}).get("ports") or []
    chosen = None
    for p in ports:
        if (port and (p.get("name") == port or str(p.get("port")) == port)) or (not port and len(ports) == 1):
            chosen = p
            break
    if chosen is None:
        raise service_unavailable(f'no endpoints available for service "{name}"') if not ports else \
            bad_request(f'no service port {port!r} found for service "{name}"')
    want = chosen.get("name") or ""
    candidates: list[tuple[Obj, int]] = []
    for s in slices:
        numbers = [p.get("port") for p in s.get("ports") or [] if (p.get("name") or "") == want and p.get("port")]
        if not numbers:
            continue
        for ep in s.get("endpoints") or []:
            ready = (ep.get("conditions") or {}).get("ready")
            ref = ep.get("targetRef") or {}
            if ready is not False and ref.get("kind") == "Pod" and ref.get("name"):
                candidates.append((ref, int(numbers[0])))
    if not candidates:
        raise service_unavailable(f'no endpoints available for service "{name}"')
    return pick(candidates)  # type: ignore[no-any-return]


async def serve_proxy(hub: JoinHub, request: web.Request, kind: Kind, namespace: str, name: str) -> web.StreamResponse:
    scheme, target, port = parse_target(name, kind.kind.lower())
    if kind.kind == "Node":
        return await _node(hub, request, target)
    if kind.kind == "Service":
        service = await hub.client.get(kind, namespace, target)
        slice_kind = hub.kinds.by_api_version("discovery.k8s.io/v1", "EndpointSlice")
        assert slice_kind is not None
        listed = await hub.client.list(slice_kind, namespace,
                                       label_selector=f"kubernetes.io/service-name={target}")
        ref, number = service_backend(service, list(listed.get("items") or []), port)
        pod_kind = hub.kinds.by_api_version("v1", "Pod")
        assert pod_kind is not None
        pod = await hub.client.get(pod_kind, str(ref.get("namespace") or namespace), str(ref["name"]))
    else:
        pod = await hub.client.get(kind, namespace, target)
        number = pod_port(pod, port, scheme)
    node = str((pod.get("spec") or {}).get("nodeName") or "")
    if not node:
        raise bad_request(f"pod {pod['metadata']['name']} does not have a host assigned")
    session = hub.session(node)
    if session is None:
        raise service_unavailable(f'the node agent of node "{node}" is not connected')
    meta = pod["metadata"]
    stream = session.open_stream("portforward", {"namespace": meta.get("namespace", namespace),
                                                 "name": meta["name"], "uid": meta.get("uid", ""), "port": number})
    try:
        await stream.ready()
        pipe: _Pipe = _Pipe(stream)
        if scheme == "https":
            tls = _TlsPipe(stream)
            await tls.handshake()
            pipe = tls
        await pipe.send(_request_head(request, number) + await request.read())
        await pipe.finish_sending()
        return await _relay(request, pipe)
    finally:
        with contextlib.suppress(Exception):
            await stream.close()


def _unreachable(reason: str, code: int = 503) -> ApiError:
    return ApiError(f"error trying to reach service: {reason}", code,
                    "ServiceUnavailable" if code == 503 else "BadGateway")


class _Pipe:
    """Bytes to and from the pod over an agent port-forward stream (channel 0)."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream

    async def send(self, data: bytes) -> None:
        await self.stream.write(0, data)

    async def finish_sending(self) -> None:
        await self.stream.close_channel(0)

    async def recv(self) -> bytes:
        """The next bytes from the pod; b"" once its side closed."""
        while True:
            msg = await self.stream.next()
            if isinstance(msg, wire.StreamData):
                if msg.data:
                    return bytes(msg.data)
                continue
            if isinstance(msg, wire.StreamError):
                raise _unreachable(msg.message)
            return b""


class _TlsPipe(_Pipe):
    """A TLS client over the stream (memory BIOs, nothing blocks). The pod's certificate is not verified, as
    upstream's proxy transport does not; only the bytes of the TLS session cross the stream."""

    def __init__(self, stream: Any) -> None:
        super().__init__(stream)
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        ctx.set_alpn_protocols(["http/1.1"])
        self._in, self._out = ssl.MemoryBIO(), ssl.MemoryBIO()
        self._tls = ctx.wrap_bio(self._in, self._out, server_side=False)
        self._ended = False

    async def _flush(self) -> None:
        data = self._out.read()
        if data:
            await self.stream.write(0, data)

    async def _fill(self) -> bool:
        """More ciphertext from the pod into the TLS object; False once the pod side closed."""
        data = await super().recv()
        if not data:
            self._in.write_eof()
            return False
        self._in.write(data)
        return True

    async def handshake(self) -> None:
        while True:
            try:
                self._tls.do_handshake()
                break
            except ssl.SSLWantReadError:
                await self._flush()
                if not await self._fill():
                    raise _unreachable("the connection closed during the TLS handshake") from None
            except ssl.SSLError as e:
                raise _unreachable(f"TLS handshake: {e.reason or e}") from None
        await self._flush()

    async def send(self, data: bytes) -> None:
        self._tls.write(data)
        await self._flush()

    async def finish_sending(self) -> None:
        return None  # the request ends with `Connection: close`; no half-close under TLS

    async def recv(self) -> bytes:
        while not self._ended:
            try:
                data = self._tls.read(64 * 1024)
            except ssl.SSLWantReadError:
                await self._flush()
                if not await self._fill():
                    continue  # EOF written: the next read ends or raises
            except (ssl.SSLZeroReturnError, ssl.SSLEOFError):
                self._ended = True  # close_notify, or a server that closes without one (common)
            except ssl.SSLError as e:
                raise _unreachable(f"TLS: {e.reason or e}", 502) from None
            else:
                if data:
                    return data
                self._ended = True
        return b""


def _request_head(request: web.Request, port: int) -> bytes:
    lines = [f"{request.method} {sub_path(request)} HTTP/1.0", f"Host: localhost:{port}", "Connection: close"]
    for key, value in request.headers.items():
        if key.lower() not in _HOP:
            lines.append(f"{key}: {value}")
    body_len = request.content_length
    if body_len:
        lines.append(f"Content-Length: {body_len}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


async def _relay(request: web.Request, pipe: _Pipe) -> web.StreamResponse:
    head = b""
    while b"\r\n\r\n" not in head:
        data = await pipe.recv()
        if not data:
            raise _unreachable("the connection closed before a response", 502)
        head += data
        if len(head) > MAX_HEAD:
            raise ApiError("the proxied response's header is too large", 502, "BadGateway")
    raw_head, _, rest = head.partition(b"\r\n\r\n")
    status_line, *header_lines = raw_head.decode("latin-1").split("\r\n")
    try:
        status = int(status_line.split()[1])
    except (IndexError, ValueError):
        raise ApiError(f"error trying to reach service: bad status line {status_line[:80]!r}",
                       502, "BadGateway") from None
    resp = web.StreamResponse(status=status)
    for line in header_lines:
        key, _, value = line.partition(":")
        if key and key.strip().lower() not in _HOP:
            resp.headers.add(key.strip(), value.strip())
    await resp.prepare(request)
    if rest:
        await resp.write(rest)
    while True:
        try:
            data = await pipe.recv()
        except ApiError:
            break  # the status line is out: the body just ends
        if not data:
            break
        await resp.write(data)
    await resp.write_eof()
    return resp


async def _node(hub: JoinHub, request: web.Request, node: str) -> web.StreamResponse:
    node_kind = hub.kinds.by_api_version("v1", "Node")
    assert node_kind is not None
    await hub.client.get(node_kind, "", node)  # 404 for an unknown node
    path = sub_path(request).partition("?")[0].rstrip("/") or "/"
    if request.method != "GET":
        raise ApiError(f"the node proxy of lite serves GET only, not {request.method}", 405, "MethodNotAllowed")
    if path == "/healthz":
        return web.Response(text="ok" if hub.session(node) is not None else "node agent not connected",
                            status=200 if hub.session(node) is not None else 503)
    if path == "/pods":
        pod_kind = hub.kinds.by_api_version("v1", "Pod")
        assert pod_kind is not None
        pods = await hub.client.list(pod_kind, "", field_selector=f"spec.nodeName={node}")
        return web.json_response({"kind": "PodList", "apiVersion": "v1", "metadata": {},
                                  "items": [{"kind": "Pod", "apiVersion": "v1", **p} for p in pods["items"]]})
    if path == "/stats/summary":
        summary = hub.stats_summary(node)
        if summary is None:
            raise service_unavailable(f'the node agent of node "{node}" has not reported usage yet')
        return web.json_response(summary)
    raise not_found("nodes", f"{node}/proxy{path}")
