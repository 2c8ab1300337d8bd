"""pods/log, exec, attach and portforward of one pod: upstream's checks, then the protocol module.

`serve_pod_stream(request, pod, subresource, connect)` checks what upstream's API server and kubelet check (a
host assigned, the container valid, started, running, the parameters) and hands over to the protocol: chunked
text or WebSocket messages (`binary.k8s.io`, `base64.binary.k8s.io`) here for logs, `exec_ws` (or raw SPDY) for
exec/attach, `portforward` (or raw SPDY) for port-forward. `connect()` gives the `StreamOpener` of the pod's
node; it is called where upstream would look for the node's connection (so a missing one answers in upstream's
order: 503 before a container check for exec, after it for logs) and may raise an `ApiError`.

Invariants:
- Every refusal before the response starts is an `ApiError` with upstream's code and wording: 400 bad
  container / not started / bad parameters; except that a WebSocket upgrade offering only subprotocols the
  kubelet does not serve gets its bare `403 Forbidden` (no body, connection closed), as kube-apiserver relays
  it, before any agent stream is opened.
- A log stream ends when the agent ends it or the client goes away; the agent's stream is always closed.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from aiohttp import web

from lite import wire
from lite.errors import bad_request
from lite.kubestreams.exec_ws import PROTOCOLS, refuse_subprotocols, serve_exec
from lite.kubestreams.portforward import serve_portforward
from lite.kubestreams.rawspdy import is_spdy_upgrade, serve_raw_spdy, serve_spdy_exec
from lite.kubestreams.tunnel import AgentStream
from lite.objects import parse_time
from lite.queryparams import query_bool, query_int

Obj = dict[str, Any]
DEFAULT_CONTAINER = "kubectl.kubernetes.io/default-container"
CLIENT_CHECK = 2.0  # seconds between checks that a quiet follow stream's client is still there
SUBRESOURCES = ("log", "exec", "attach", "portforward")


class StreamOpener(Protocol):
    """A node's end for streams: the server's join session of the node, or the agent's in-process pair."""

    def open_stream(self, kind: str, params: dict[str, object]) -> AgentStream: ...


def pick_container(pod: Obj, requested: str) -> str:
    spec = pod.get("spec") or {}
    name = pod["metadata"]["name"]
    main = [str(c.get("name", "")) for c in spec.get("containers") or []]
    others = [c.get("name", "") for k in ("initContainers", "ephemeralContainers") for c in spec.get(k) or []]
    if not requested:
        default = ((pod.get("metadata") or {}).get("annotations") or {}).get(DEFAULT_CONTAINER, "")
        if default in main:
            return str(default)
        if len(main) == 1:
            return main[0]
        raise bad_request(f"a container name must be specified for pod {name}, choose one of: [{' '.join(main)}]")
    if requested not in main and requested not in others:
        raise bad_request(f"container {requested} is not valid for pod {name}")
    return requested


def container_status(pod: Obj, container: str) -> Obj | None:
    status = pod.get("status") or {}
    for key in ("containerStatuses", "initContainerStatuses", "ephemeralContainerStatuses"):
        for cs in status.get(key) or []:
            if cs.get("name") == container:
                return dict(cs)
    return None


def check_log_status(pod: Obj, container: str, previous: bool) -> None:
    """Refuse, as the kubelet does, logs of a container that never started (or has no previous instance)."""
    name = pod["metadata"]["name"]
    cs = container_status(pod, container) or {}
    last = (cs.get("lastState") or {}).get("terminated")
    if previous:
        if not last:
            raise bad_request(f'previous terminated container "{container}" in pod "{name}" not found')
        return
    state = cs.get("state") or {}
    if state.get("running") or state.get("terminated") or last:
        return
    reason = (state.get("waiting") or {}).get("reason") or "ContainerCreating"
    raise bad_request(f'container "{container}" in pod "{name}" is waiting to start: {reason}')


def check_running(pod: Obj, container: str) -> None:
    phase = (pod.get("status") or {}).get("phase", "")
    if phase in ("Succeeded", "Failed"):
        raise bad_request(f"cannot exec into a container in a completed pod; current phase is {phase}")
    state = (container_status(pod, container) or {}).get("state") or {}
    if not state.get("running"):
        raise bad_request(f'container "{container}" in pod "{pod["metadata"]["name"]}" is not running')


def log_params(query: Any) -> Obj:
    params: Obj = {"follow": query_bool(query, "follow"), "previous": query_bool(query, "previous"),
                   "timestamps": query_bool(query, "timestamps")}
    for key in ("tailLines", "sinceSeconds", "limitBytes"):
        value = query_int(query, key)
        if value is not None:
            if value < 0 or (value == 0 and key != "tailLines"):
                raise bad_request(f"{key} must be greater than {'or equal to ' if key == 'tailLines' else ''}0")
            params[key] = value
    since_time = query.get("sinceTime", "")
    if since_time:
        if "sinceSeconds" in params:
            raise bad_request("at most one of `sinceTime` or `sinceSeconds` may be specified")
        try:
            parse_time(since_time)
        except ValueError:
            raise bad_request(f'invalid value for sinceTime: "{since_time}"') from None
        params["sinceTime"] = since_time
    return params


async def serve_pod_stream(request: web.Request, pod: Obj, subresource: str,
                           connect: Callable[[], StreamOpener]) -> web.StreamResponse:
    """Serve `subresource` (one of `SUBRESOURCES`) of `pod` through the streams `connect()` opens."""
    name = pod["metadata"]["name"]
    node = str((pod.get("spec") or {}).get("nodeName") or "")
    base: Obj = {"namespace": pod["metadata"].get("namespace", ""), "name": name,
                 "uid": pod["metadata"].get("uid", "")}
    if subresource == "portforward":
        session = connect()
        if is_spdy_upgrade(request):
            return await serve_raw_spdy(request, session, base)
        return await serve_portforward(request, session, base)
    container = pick_container(pod, request.query.get("container", ""))
    base["container"] = container
    if subresource == "log":
        params = log_params(request.query)
        if not node:
            raise bad_request(f'container "{container}" in pod "{name}" is waiting to start: ContainerCreating')
        check_log_status(pod, container, params["previous"])
        stream = connect().open_stream("log", {**base, **params})
        return await serve_log(request, stream)
    session = connect()
    check_running(pod, container)
    q = request.query
    params = {**base, "stdin": query_bool(q, "stdin"), "stdout": query_bool(q, "stdout"),
              "stderr": query_bool(q, "stderr"), "tty": query_bool(q, "tty")}
    if subresource == "exec":
        params["command"] = list(q.getall("command", ()))
        if not params["command"]:
            raise bad_request("you must specify at least 1 command")
    if not (params["stdin"] or params["stdout"] or params["stderr"]):
        raise bad_request("you must specify at least 1 of stdin, stdout, stderr")
    if not is_spdy_upgrade(request):
        refused = refuse_subprotocols(request, PROTOCOLS)  # before any process starts, as the kubelet
        if refused is not None:
            return refused
    stream = session.open_stream(subresource, params)
    if is_spdy_upgrade(request):
        try:
            await stream.ready()
            return await serve_spdy_exec(request, stream, params)
        finally:
            await stream.close()
    return await serve_exec(request, stream, tty=bool(params["tty"]), stdout=bool(params["stdout"]),
                            stderr=bool(params["stderr"]))


# Logs over WebSocket (upstream's wsstream reader protocols): each chunk one message, binary or base64 text.
LOG_PROTOCOLS = ("binary.k8s.io", "base64.binary.k8s.io")


async def serve_log(request: web.Request, stream: AgentStream) -> web.StreamResponse:
    """Chunked text/plain, or WebSocket messages when the client asks to upgrade. A client that goes away
    mid-stream (`kubectl logs p | head`) ends the stream quietly: that is not a server error."""
    try:
        await stream.ready()
        ws = web.WebSocketResponse(protocols=LOG_PROTOCOLS, autoping=True)
        if ws.can_prepare(request).ok:
            await ws.prepare(request)
            b64 = ws.ws_protocol == "base64.binary.k8s.io"
            with contextlib.suppress(ConnectionResetError):
                await _pump_log(request, stream, lambda data: ws.send_str(base64.b64encode(data).decode()) if b64
                                else ws.send_bytes(data))
                await ws.close()
            return ws
        resp = web.StreamResponse(status=200, headers={"Content-Type": "text/plain"})
        resp.enable_chunked_encoding()
        await resp.prepare(request)
        try:
            await _pump_log(request, stream, resp.write)
            await resp.write_eof()
        except ConnectionResetError:
            pass  # the client closed its end; nothing is left to tell it
        return resp
    finally:
        await stream.close()


async def _pump_log(request: web.Request, stream: AgentStream,
                    send: Callable[[bytes], Awaitable[None]]) -> None:
    """Forward the agent's log chunks until the stream ends or the client is gone."""
    while True:
        try:
            msg = await asyncio.wait_for(stream.next(), CLIENT_CHECK)
        except TimeoutError:
            if request.transport is None or request.transport.is_closing():
                return
            continue
        if isinstance(msg, wire.StreamData):
            await send(msg.data)
        elif isinstance(msg, (wire.StreamClose, wire.StreamExit, wire.StreamError)):
            return
