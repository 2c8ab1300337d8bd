"""A real lite API stack with the join hub, served over TLS on 127.0.0.1, and a test node agent.

Not a test module. `serve_join(tmp_path, port)` builds Store + Resources + build_api_app(streams=hub,
metrics=hub) + the /lite/join route, runs the hub, and yields a `Stack`. `TestAgent` is a NodeAgent that
records what it is told and "starts" each pod uid once (counting starts, to catch duplicates). `HostBackend`
serves streams from the host (log files written by the test, exec as plain host subprocesses, port
connections to 127.0.0.1): test only, the namespace versions come with the runtime.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from lite import wire
from lite.agent.session import JoinSession, LocalDial
from lite.agent.streams.backend import ExecProcess, LogSource, PodRef
from lite.agent.streams.netns_socket import open_connection
from lite.errors import bad_request
from lite.httpclient import HttpClient
from lite.kinds import KindRegistry
from lite.server.auth import TokenAuthenticator
from lite.server.authn.authenticator import ClusterAuthenticator
from lite.server.authn.x509 import issue_client_cert
from lite.server.certs import Credentials, ensure_credentials, server_ssl_context, write_kubeconfig
from lite.server.config import ServerConfig
from lite.server.join import JoinHub, add_join_routes
from lite.server.join.nodecreds import NodeCredentialIssuer
from lite.server.store.store import Store

KINDS = KindRegistry()
POD = KINDS.by_gvk("", "v1", "Pod")
NODE = KINDS.by_gvk("", "v1", "Node")
CM = KINDS.by_gvk("", "v1", "ConfigMap")
SECRET = KINDS.by_gvk("", "v1", "Secret")
LEASE = KINDS.by_gvk("coordination.k8s.io", "v1", "Lease")
EVENT = KINDS.by_gvk("", "v1", "Event")
assert POD and NODE and CM and SECRET and LEASE and EVENT
GUARD = 20.0  # hang guard, never a speed assertion


@dataclass
class Stack:
    resources: Any
    hub: JoinHub
    creds: Credentials
    kubeconfig: Path
    url: str
    http: HttpClient
    cred_root: Path  # each test agent's node credentials live in <cred_root>/<node>
    issuer: NodeCredentialIssuer | None = None
    runner: web.AppRunner | None = None  # more sites may serve the same app (a second "server" address)


@contextlib.asynccontextmanager
async def serve_join(tmp_path: Path, port: int, *, bound_pods_only: bool = False) -> AsyncIterator[Stack]:
    resources_mod = pytest.importorskip("lite.server.api.resources")
    strategies = pytest.importorskip("lite.server.api.strategies")
    from lite.server.api.http import build_api_app

    cfg = ServerConfig.create(tmp_path / "data", bind_address="127.0.0.1", port=port)
    creds = await asyncio.to_thread(ensure_credentials, cfg)
    kubeconfig = await asyncio.to_thread(write_kubeconfig, cfg, creds)
    store = await Store.open(str(tmp_path / "state.db"))
    resources = resources_mod.Resources(store, KINDS, strategies.default_strategies())
    await resources.start()
    hub = JoinHub(resources, KINDS, cluster_dns="10.43.0.10", heartbeat=5.0, bound_pods_only=bound_pods_only)
    auth = ClusterAuthenticator(TokenAuthenticator(creds.admin_token, creds.join_secret))
    app = build_api_app(resources, KINDS, auth, streams=hub, metrics=hub)
    assert creds.client_ca_cert is not None and creds.client_ca_key is not None
    issuer = NodeCredentialIssuer(resources, SECRET, creds.client_ca_cert.read_bytes(),
                                  creds.client_ca_key.read_bytes())
    add_join_routes(app, hub, auth, issuer)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", port, ssl_context=server_ssl_context(creds))
    await site.start()
    http = HttpClient.from_kubeconfig(str(kubeconfig))
    hub_task = asyncio.create_task(hub.run())
    try:
        yield Stack(resources, hub, creds, kubeconfig, cfg.server_url, http, tmp_path / "agents", issuer, runner)
    finally:
        hub_task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await hub_task
        await http.close()
        await runner.cleanup()
        stop = getattr(resources, "stop", None)
        if stop is not None:
            await stop()
        await store.close()


@dataclass
class TestAgent:
    """A NodeAgent that records messages and counts pod starts per uid."""

    __test__ = False
    labels: dict[str, str] = field(default_factory=dict)
    messages: list[wire.Message] = field(default_factory=list)
    running: dict[str, str] = field(default_factory=dict)
    starts: Counter[str] = field(default_factory=Counter)
    objects: dict[tuple[str, str, str], dict[str, Any]] = field(default_factory=dict)
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    def hello_info(self) -> dict[str, Any]:
        return {"labels": self.labels, "taints": [{"key": "lite.test/new", "effect": "PreferNoSchedule"}],
                "status": {"capacity": {"cpu": "2", "memory": "2Gi", "pods": "110"},
                           "allocatable": {"cpu": "2", "memory": "2Gi", "pods": "110"},
                           "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}],
                           "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                                           "message": "ready"}]}}

    def running_pods(self) -> dict[str, str]:
        return dict(self.running)

    async def handle(self, msg: wire.Message) -> None:
        self.messages.append(msg)
        if isinstance(msg, wire.PodUpsert):
            meta = msg.pod["metadata"]
            if meta["uid"] not in self.running:
                self.running[meta["uid"]] = f"{meta['namespace']}/{meta['name']}"
                self.starts[meta["uid"]] += 1
        elif isinstance(msg, wire.PodDelete):
            self.running.pop(msg.uid, None)
        elif isinstance(msg, wire.ObjectUpsert):
            m = msg.obj["metadata"]
            self.objects[(msg.kind, m.get("namespace", ""), m["name"])] = msg.obj  # RuntimeClass: cluster-scoped
        elif isinstance(msg, wire.ObjectDelete):
            self.objects.pop((msg.kind, msg.namespace, msg.name), None)
        self.changed.set()

    async def wait_for(self, predicate: Any) -> None:
        async with asyncio.timeout(GUARD):
            while not predicate():
                self.changed.clear()
                await self.changed.wait()


class HostProcess:
    """An asyncio subprocess as an ExecProcess (no TTY)."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc

    @property
    def stdin(self) -> asyncio.StreamWriter | None:
        return self.proc.stdin

    @property
    def stdout(self) -> asyncio.StreamReader | None:
        return self.proc.stdout

    @property
    def stderr(self) -> asyncio.StreamReader | None:
        return self.proc.stderr

    async def wait(self) -> int:
        return await self.proc.wait()

    def resize(self, width: int, height: int) -> None:
        pass


@dataclass
class HostBackend:
    """StreamBackend for tests: see the module docstring."""

    logs: dict[tuple[str, str], Path] = field(default_factory=dict)  # (pod, container) -> CRI log file
    previous: dict[tuple[str, str], Path] = field(default_factory=dict)
    still_running: bool = False
    procs: list[asyncio.subprocess.Process] = field(default_factory=list)

    async def kill_all(self) -> None:
        """Exec processes outlive a dropped stream (as upstream): the test reaps them."""
        for proc in self.procs:
            if proc.returncode is None:
                proc.kill()
            await proc.wait()

    def log_source(self, pod: PodRef, container: str, *, previous: bool) -> LogSource:
        table = self.previous if previous else self.logs
        path = table.get((pod.name, container))
        if path is None:
            raise bad_request(f'container "{container}" in pod "{pod.name}" has no log')
        return LogSource(str(path), lambda: self.still_running)

    async def exec(self, pod: PodRef, container: str, command: list[str], *, stdin: bool,
                   tty: bool) -> ExecProcess:
        proc = await asyncio.create_subprocess_exec(
            *command, stdin=asyncio.subprocess.PIPE if stdin else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        self.procs.append(proc)
        return HostProcess(proc)

    async def attach(self, pod: PodRef, container: str, *, stdin: bool, tty: bool) -> ExecProcess:
        # Stands in for the container's main process: greets, then echoes stdin until EOF.
        return await self.exec(pod, container, ["sh", "-c", "echo attached; cat"], stdin=stdin, tty=tty)

    async def connect(self, pod: PodRef, port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        return await open_connection("", port)


def node_tls(stack: Stack, node: str) -> ssl.SSLContext:
    """A client TLS context presenting a fresh certificate of node `node` (system:node:<node>, system:nodes)."""
    assert stack.creds.client_ca_cert is not None and stack.creds.client_ca_key is not None
    cert, key = issue_client_cert(stack.creds.client_ca_cert.read_bytes(), stack.creds.client_ca_key.read_bytes(),
                                  f"system:node:{node}", ("system:nodes",), 1)
    d = stack.cred_root / f"tls-{node}"
    d.mkdir(parents=True, exist_ok=True)
    (d / "c.crt").write_bytes(cert)
    (d / "c.key").write_bytes(key)
    ctx = ssl.create_default_context(cadata=stack.creds.ca_pem.decode())
    ctx.load_cert_chain(str(d / "c.crt"), str(d / "c.key"))
    return ctx


@contextlib.asynccontextmanager
async def joined(stack: Stack, node: str, agent: TestAgent, backend: HostBackend | None = None, *,
                 dial: LocalDial | None = None, servers_dir: Path | None = None) -> AsyncIterator[JoinSession]:
    """A JoinSession of `node` connected to the stack: over TLS, or in process through `dial` (`local_join`)."""
    session = JoinSession(stack.url, stack.creds.join_token, node_name=node, agent=agent, streams=backend,
                          credentials_dir=stack.cred_root / node,
                          ca_data=stack.creds.ca_pem, heartbeat=5.0, backoff=(0.05, 0.5), dial=dial,
                          servers_dir=servers_dir)
    task = asyncio.create_task(session.run())
    try:
        async with asyncio.timeout(GUARD):
            await session.connected.wait()
        yield session
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def pod(name: str, node: str = "", **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
                            "spec": {"containers": [{"name": "c", "image": "busybox"}], **spec}}
    if node:
        body["spec"]["nodeName"] = node
    return body


async def set_running(client: Any, namespace: str, name: str, *, restarted: bool = False) -> dict[str, Any]:
    """Write status.phase Running with a running container `c` (after one restart), as the pod runner would."""
    cur = await client.get(POD, namespace, name)
    cur = {**cur, "status": {"phase": "Running", "podIP": "10.42.0.5", "hostIP": "127.0.0.1",
                             "startTime": "2026-11-22T00:00:00Z",
                             "conditions": [{"type": "Ready", "status": "True"}],
                             "containerStatuses": [{"name": "c", "image": "busybox", "imageID": "sha256:00",
                                                    "ready": True, "restartCount": 0, "started": True,
                                                    "containerID": "lite://c1",
                                                    "state": {"running": {"startedAt": "2026-11-22T00:00:00Z"}}}]}}
    if restarted:
        cs = cur["status"]["containerStatuses"][0]
        cs["restartCount"] = 1
        cs["lastState"] = {"terminated": {"exitCode": 1, "reason": "Error", "containerID": "lite://c0",
                                          "startedAt": "2026-11-21T23:00:00Z", "finishedAt": "2026-11-21T23:59:59Z"}}
    out: dict[str, Any] = await client.update(POD, namespace, name, cur, subresource="status")
    return out
