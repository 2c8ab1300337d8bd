"""Per-node credentials against a real `lite server` process: two agents (real JoinSessions) join with the join
token and their node passwords, then each node's certificate, read from its credentials directory, is held to
its own pods by the Node authorizer and NodeRestriction; the join token alone reads nothing."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from liteproc import LiteServer, find_free_port

from lite import wire
from lite.agent.session import JoinSession

pytestmark = [pytest.mark.e2e]
GUARD = 30.0  # hang guard, never a speed assertion


class Quiet:
    """A NodeAgent that runs nothing."""

    def hello_info(self) -> dict[str, Any]:
        return {"labels": {}, "taints": [], "status": {"addresses": [{"type": "InternalIP", "address": "127.0.0.1"}]}}

    def running_pods(self) -> dict[str, str]:
        return {}

    async def handle(self, msg: wire.Message) -> None:
        return None


@pytest.fixture
def server(tmp_path: Path) -> Any:
    srv = LiteServer(tmp_path / "data", find_free_port()).start()
    try:
        srv.wait_ready()
        yield srv
    finally:
        srv.stop()


@contextlib.asynccontextmanager
async def agents(server: LiteServer, tmp_path: Path, *nodes: str) -> AsyncIterator[list[JoinSession]]:
    token = (server.data_dir / "token").read_text().strip()
    ca = server.config()["clusters"][0]["cluster"]["certificate-authority-data"]
    sessions = [JoinSession(server.url, token, node_name=n, agent=Quiet(), ca_data=base64.b64decode(ca),
                            credentials_dir=tmp_path / f"agent-{n}", backoff=(0.05, 0.5)) for n in nodes]
    tasks = [asyncio.create_task(s.run()) for s in sessions]
    try:
        async with asyncio.timeout(GUARD):
            for s in sessions:
                await s.connected.wait()
        yield sessions
    finally:
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await t


def node_tls(server: LiteServer, session: JoinSession) -> ssl.SSLContext:
    ctx = server.ssl_context()
    ctx.load_cert_chain(str(session.credentials.cert_path), str(session.credentials.key_path))
    return ctx


def _pod(name: str, node: str, secret: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"nodeName": node, "containers": [{"name": "c", "image": "busybox"}],
                     "volumes": [{"name": "s", "secret": {"secretName": secret}}]}}


async def test_a_node_certificate_reaches_only_its_own_pods_objects(server: LiteServer, tmp_path: Path) -> None:
    for name in ("sec-a", "sec-b"):
        code, _ = server.request("/api/v1/namespaces/default/secrets", "POST",
                                 {"metadata": {"name": name}, "stringData": {"k": name}})
        assert code == 201
    async with agents(server, tmp_path, "nca", "ncb") as (a, _b):
        for pod, node, secret in (("pa", "nca", "sec-a"), ("pb", "ncb", "sec-b")):
            code, out = server.request("/api/v1/namespaces/default/pods", "POST", _pod(pod, node, secret))
            assert code == 201, out
        async with aiohttp.ClientSession() as http:
            tls = node_tls(server, a)

            async def call(method: str, path: str, body: Any = None) -> tuple[int, Any]:
                headers = {"Content-Type": "application/merge-patch+json"} if method == "PATCH" else {}
                async with http.request(method, server.url + path, ssl=tls, json=body, headers=headers) as r:
                    return r.status, await r.json(content_type=None)

            code, got = await call("GET", "/api/v1/namespaces/default/secrets/sec-a")
            assert code == 200 and got["metadata"]["name"] == "sec-a"
            code, got = await call("GET", "/api/v1/namespaces/default/secrets/sec-b")
            assert code == 403 and got["reason"] == "Forbidden"
            assert "no relationship found between node 'nca' and this object" in got["message"]
            code, got = await call("GET", "/api/v1/secrets")
            assert code == 403
            code, got = await call("PATCH", "/api/v1/nodes/ncb", {"metadata": {"labels": {"x": "y"}}})
            assert code == 403, got
            code, got = await call("PATCH", "/api/v1/nodes/nca", {"metadata": {"labels": {"x": "y"}}})
            assert code == 200, got
            code, got = await call("PATCH", "/api/v1/nodes/nca",
                                   {"metadata": {"labels": {"node-role.kubernetes.io/master": "true"}}})
            assert code == 403 and "node-role.kubernetes.io/master" in got["message"], got
            code, got = await call("PATCH", "/api/v1/namespaces/default/pods/pb/status",
                                   {"status": {"phase": "Failed"}})
            assert code == 403, got
            code, got = await call("PATCH", "/api/v1/namespaces/default/pods/pa/status",
                                   {"status": {"message": "from the node"}})
            assert code == 200, got


async def test_the_join_token_alone_reads_nothing(server: LiteServer) -> None:
    token = (server.data_dir / "token").read_text().strip()
    for path in ("/api/v1/secrets", "/api/v1/namespaces/kube-system/secrets", "/api/v1/configmaps"):
        code, got = server.request(path, token=token)
        assert code == 403 and got["reason"] == "Forbidden", (path, got)


async def test_a_second_machine_with_a_registered_name_is_refused(server: LiteServer, tmp_path: Path) -> None:
    async with agents(server, tmp_path, "ncc"):
        pass
    token = (server.data_dir / "token").read_text().strip()
    code, got = server.request(wire.NODE_CREDENTIALS_PATH, "POST", {"node": "ncc", "password": "z" * 64},
                               token=token)
    assert code == 403 and "already registered with a different node password" in got["message"]
