"""`lite agent --local-api`: a read-only Kubernetes API of this node alone, on 127.0.0.1, for kubectl.

An edge node cut off from its server still answers `kubectl get pods -A`, `get pod -o yaml`, `get/describe
node`, `logs`, `exec`, `attach` and `port-forward` for what runs on it: the pods of its runners with the
status the agent computes now, its Node from what it knows (`view`), the ConfigMaps relayed for its pods
and the Services and EndpointSlices relayed to its service proxy.
Streams are served by the same protocol code as the API server's (`lite.kubestreams`) through an in-process
pair with the agent's StreamServer (`tunnel.LocalTunnel`), so no server is involved.

`LocalApi(source, port, root)`; `await run()` serves until cancelled. At start it writes
`<agent-dir>/local-api/kubeconfig` (mode 0600, directory 0700) pointing at `https://127.0.0.1:<port>` with a
new random bearer token and the new self-signed certificate it serves (`cert`) as the CA.

Why a token on loopback: every local user (and every process of a hostNetwork pod) can reach 127.0.0.1, and
this API hands out pod specs, logs and exec into containers: only who can read the kubeconfig (root, as the
agent's data dir) may use it. A request without the token gets 401 Unauthorized. Why TLS on loopback:
kubectl sends no bearer token over plain http.

Invariants: binds 127.0.0.1 only (there is no address option; `check_port` refuses ports outside 1-65535);
nothing is ever written through it (`view.route`: writes 405, Secrets 403); answers are computed from the
agent's memory on the loop (a few hundred objects at most: tiny); the kubeconfig's token changes each start.
"""

from __future__ import annotations

import asyncio
import base64
import hmac
import logging
import os
import secrets
import ssl
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Protocol

import orjson
import yaml
from aiohttp import web

from lite import atomicfile, kubetables
from lite.agent.localapi import view
from lite.agent.localapi.cert import new_serving_pair, server_context
from lite.agent.localapi.tunnel import LocalTunnel
from lite.agent.streams.backend import StreamBackend
from lite.errors import ApiError, method_not_allowed, unauthorized
from lite.kubetables.core import PRINTERS

log = logging.getLogger("lite.agent.localapi")
Obj = dict[str, Any]
HOST = "127.0.0.1"
KUBECONFIG = "kubeconfig"
VERSION = {"major": "1", "minor": "32", "gitVersion": "v1.32.0-lite-node", "platform": "linux"}
DISCOVERY: dict[str, Callable[[], Obj]] = {"/version": lambda: dict(VERSION), "/api": view.api_versions,
                                           "/apis": view.api_groups, "/api/v1": view.core_resources}
RETRY = 30.0  # seconds between attempts to listen when the port is taken


class NodeSource(Protocol):
    """What the local API reads from the agent (the `Agent` is one)."""

    node_name: str

    def local_pods(self) -> list[Obj]: ...

    def local_node(self) -> Obj: ...

    def local_objects(self, kind: str) -> list[Obj]:
        """Relayed objects of a kind (ConfigMap, Service, EndpointSlice); never Secrets."""
        ...

    @property
    def stream_backend(self) -> StreamBackend: ...


def check_port(port: int) -> int:
    if not 0 < port < 65536:
        raise ValueError(f"--local-api-port must be in 1-65535, not {port}")
    return port


def kubeconfig(port: int, token: str, node: str, ca_pem: bytes) -> str:
    name = f"lite-node-{node}"
    return yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": name,
        "clusters": [{"name": name, "cluster": {"server": f"https://{HOST}:{port}",
                                                "certificate-authority-data": base64.b64encode(ca_pem).decode()}}],
        "users": [{"name": name, "user": {"token": token}}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": name, "namespace": "default"}}],
    }, sort_keys=False)


def private_dir(directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(directory, 0o700)
    return directory


def prepare(directory: Path, port: int, token: str, node: str) -> tuple[ssl.SSLContext, Path]:
    """The TLS context and the kubeconfig (0600 in a 0700 directory: the token is what guards the API)."""
    private_dir(directory)
    cert_pem, key_pem = new_serving_pair(node)
    ctx = server_context(directory, cert_pem, key_pem)
    atomicfile.write(directory / KUBECONFIG, kubeconfig(port, token, node, cert_pem).encode(), mode=0o600)
    return ctx, directory / KUBECONFIG


def _json(obj: Obj, status: int = 200) -> web.Response:
    return web.Response(body=orjson.dumps(obj), status=status, content_type="application/json")


def _wants_table(request: web.Request) -> bool:
    return "as=Table" in request.headers.get("Accept", "")


class LocalApi:
    """See the module docstring."""

    def __init__(self, source: NodeSource, port: int, root: Path, *, retry: float = RETRY) -> None:
        self.source = source
        self.retry = retry
        self.port = check_port(port)
        self.dir = root / "local-api"
        self.token = secrets.token_urlsafe(32)
        self.tunnel = LocalTunnel(source.stream_backend)

    def app(self) -> web.Application:
        app = web.Application(middlewares=[self._guard])
        app.router.add_route("*", "/{tail:.*}", self._dispatch)
        return app

    @web.middleware
    async def _guard(self, request: web.Request,
                     handler: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> web.StreamResponse:
        try:
            auth = request.headers.get("Authorization", "")
            given = auth[7:].strip() if auth[:7].lower() == "bearer " else ""
            if not hmac.compare_digest(given.encode(), self.token.encode()):
                raise unauthorized()
            return await handler(request)
        except ApiError as e:
            return _json(e.status(), e.code)

    async def _dispatch(self, request: web.Request) -> web.StreamResponse:
        path = "/" + request.match_info["tail"].strip("/")
        discovery = DISCOVERY.get(path)
        parts = path.split("/")
        if discovery is None and len(parts) == 4 and parts[1] == "apis":
            found = view.group_resources(parts[2], parts[3])
            discovery = (lambda: found) if found is not None else None
        if discovery is not None:
            if request.method not in ("GET", "HEAD"):
                raise method_not_allowed(view.READ_ONLY.format(verb=request.method))
            return _json(discovery())
        r = view.route(request.method, path, request.query)
        if r.subresource:
            from lite.kubestreams.pods import serve_pod_stream

            pod = view.pick(r.kind, self.source.local_pods(), r.namespace, r.name)
            return await serve_pod_stream(request, pod, r.subresource, lambda: self.tunnel)
        items = view.in_namespace([view.typed(r.kind, o) for o in self._items(r.kind.kind)], r.namespace)
        printer = PRINTERS.get(r.kind.gk)
        if r.name:
            obj = view.pick(r.kind, items, r.namespace, r.name)
            if _wants_table(request) and printer is not None:
                return _json(kubetables.table(r.kind.gk, printer, [obj], {"resourceVersion": ""},
                                              include_object=request.query.get("includeObject", "Metadata")))
            return _json(obj)
        items = view.select(r.kind, items, request.query)
        if _wants_table(request) and printer is not None:
            return _json(kubetables.table(r.kind.gk, printer, items, {"resourceVersion": ""},
                                          include_object=request.query.get("includeObject", "Metadata")))
        return _json(view.as_list(r.kind, items))

    def _items(self, kind: str) -> list[Obj]:
        if kind == "Pod":
            return self.source.local_pods()
        if kind == "Node":
            return [self.source.local_node()]
        if kind == "Event":
            return []  # the node sends its events to the server and keeps none
        return self.source.local_objects(kind)

    async def run(self) -> None:
        """Serve until cancelled (the tunnel's streams end with it). A port that is taken is logged once and
        tried again every `retry` seconds: the agent and its pods never depend on this API."""
        runner = web.AppRunner(self.app(), access_log=None, handle_signals=False)
        await runner.setup()
        try:
            ctx, path = await asyncio.to_thread(prepare, self.dir, self.port, self.token, self.source.node_name)
            logged = False
            while True:
                site = web.TCPSite(runner, HOST, self.port, ssl_context=ctx, reuse_address=True)
                try:
                    await site.start()
                    break
                except OSError as e:
                    await site.stop()  # unregistered: the runner keeps no failed site
                    if not logged:
                        log.error("the node-local API cannot listen on %s:%d (%s); trying again every %gs",
                                  HOST, self.port, e.strerror or e, self.retry)
                        logged = True
                    await asyncio.sleep(self.retry)
            log.info("node-local read-only API on https://%s:%d (kubeconfig %s)", HOST, self.port, path)
            await self.tunnel.run()
        finally:
            await runner.cleanup()
