"""Connection and request limits of a real `lite server` as clients meet them (issue 18, item 8).

- At default settings a client that opens a fresh TLS connection per request at 200 requests/s for 30 s and
  leaves each open, idle, for 5 s (as `@kubernetes/client-node` 2.x does) gets every request answered, while
  holding far more connections from its one address than `--max-connections-per-address` (256).
- The official JavaScript client, `@kubernetes/client-node` 2.x on Node 22 at its default settings, sends a
  burst of 400 creates and 400 lists at once (a new TLS connection each): every one succeeds.
- With `--max-requests-inflight 1 --max-mutating-requests-inflight 1`, a request beyond a spent budget gets
  upstream's 429 (plain text, `Retry-After: 1`) for a user outside system:masters; never a watch; never the
  admin (system:masters); and the budget comes back when the request holding it ends. Held in flight: a
  create whose body is still arriving, a get of an aggregated API whose backend has not answered yet.

Traffic goes to 127.0.0.1 only. Waits are hang guards, never speed assertions.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import re
import socket
import ssl
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from liteproc import LiteServer, find_free_port

from tests.helpers import freshconn, jsclient
from tests.helpers.extapi import ExtensionServer

GUARD = 20.0
TOO_MANY = b"Too many requests, please try again later.\n"


def _start(base: Path, *flags: str) -> LiteServer:
    server = LiteServer(base / "data", find_free_port(), extra=flags).start()
    try:
        server.wait_ready(60)
    except BaseException:
        server.kill()
        raise
    return server


@pytest.fixture(scope="module")
def defaults(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiteServer]:
    server = _start(tmp_path_factory.mktemp("defaults"))
    try:
        yield server
    finally:
        assert server.stop() == 0, server.log_tail()


@pytest.fixture(scope="module")
def limited(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiteServer]:
    server = _start(tmp_path_factory.mktemp("limited"), "--max-requests-inflight", "1",
                    "--max-mutating-requests-inflight", "1")
    try:
        yield server
    finally:
        assert server.stop() == 0, server.log_tail()


@pytest.fixture(scope="module")
def user_token(limited: LiteServer) -> str:
    """A ServiceAccount bound to cluster-admin: all rights, but not in system:masters, so limits apply."""
    for path, body in (
        ("/api/v1/namespaces/default/serviceaccounts", {"metadata": {"name": "busy"}}),
        ("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
         {"metadata": {"name": "busy-admin"},
          "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
          "subjects": [{"kind": "ServiceAccount", "name": "busy", "namespace": "default"}]}),
    ):
        code, got = limited.request(path, "POST", body)
        assert code == 201, got
    code, review = limited.request("/api/v1/namespaces/default/serviceaccounts/busy/token", "POST", {"spec": {}})
    assert code == 201, review
    return str(review["status"]["token"])


def _tls(server: LiteServer, rcvbuf: int = 0) -> ssl.SSLSocket:
    raw = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if rcvbuf:
        raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)  # before connect: a small window
    raw.settimeout(GUARD)
    raw.connect(("127.0.0.1", server.port))
    return server.ssl_context().wrap_socket(raw, server_hostname="127.0.0.1")


def _head(sock: ssl.SSLSocket) -> tuple[int, dict[str, str], bytes]:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"closed before an answer: {data!r}"
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:])}
    return int(lines[0].split(" ", 2)[1]), headers, rest


def _answer(sock: ssl.SSLSocket) -> tuple[int, dict[str, str], bytes]:
    code, headers, body = _head(sock)
    chunked = headers.get("transfer-encoding") == "chunked"
    length = int(headers.get("content-length", "0"))
    while (not body.endswith(b"0\r\n\r\n")) if chunked else len(body) < length:
        chunk = sock.recv(1 << 20)
        assert chunk, "closed mid-answer"
        body += chunk
    if chunked:
        out, rest = b"", body
        while (size := int(rest.split(b"\r\n", 1)[0], 16)):
            rest = rest.split(b"\r\n", 1)[1]
            out, rest = out + rest[:size], rest[size + 2:]
        body = out
    return code, headers, body


def _request(method: str, path: str, token: str, body: bytes = b"") -> bytes:
    extra = f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n" if method != "GET" else ""
    return (f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {token}\r\n{extra}\r\n"
            .encode() + body)


def _one(server: LiteServer, method: str, path: str, token: str,
         body: bytes = b"") -> tuple[int, dict[str, str], bytes]:
    sock = _tls(server)
    try:
        sock.sendall(_request(method, path, token, body))
        return _answer(sock)
    finally:
        sock.close()


def _until_429(server: LiteServer, method: str, path: str, token: str,
               body: bytes = b"") -> tuple[dict[str, str], bytes]:
    """The held request reaches its handler soon after it was sent; until then others still pass."""
    deadline = time.monotonic() + GUARD
    while True:
        code, headers, got = _one(server, method, path, token, body)
        if code == 429:
            return headers, got
        assert code in (200, 201), (code, got)
        assert time.monotonic() < deadline, "the held request never held its slot"
        time.sleep(0.05)


def _assert_upstreams_429(headers: dict[str, str], body: bytes) -> None:
    assert body == TOO_MANY
    assert headers["retry-after"] == "1"
    assert headers["content-type"] == "text/plain; charset=utf-8"


def _configmap(name: str, size: int = 10) -> bytes:
    return json.dumps({"metadata": {"generateName" if name.endswith("-") else "name": name},
                       "data": {"a": "x" * size}}).encode()


def test_mutating_budget_answers_429_while_spent(limited: LiteServer, user_token: str) -> None:
    path = "/api/v1/namespaces/default/configmaps"
    body = _configmap("held")
    held = _tls(limited)
    held.sendall(_request("POST", path, user_token, body)[:-5])  # the body's last bytes never come, yet
    headers, got = _until_429(limited, "POST", path, user_token, _configmap("poll-"))
    _assert_upstreams_429(headers, got)
    code, metrics = limited.request("/metrics")
    assert code == 200 and 'apiserver_current_inflight_requests{request_kind="mutating"} 1.0' in metrics
    assert _one(limited, "GET", "/api/v1/namespaces/default", user_token)[0] == 200  # reads: another budget
    code, _, got = _one(limited, "POST", path, limited.token(), _configmap("admin-"))
    assert code == 201, got  # system:masters is served even when the budget is spent
    held.sendall(body[-5:])
    code, _, got = _answer(held)
    held.close()
    assert code == 201, got
    code, _, got = _one(limited, "POST", path, user_token, _configmap("after-"))
    assert code == 201, got  # the slot came back


@pytest.fixture
def extension(limited: LiteServer, tmp_path: Path) -> Iterator[ExtensionServer]:
    """An aggregated API whose `widgets/held` get is answered only when the test says: a read held in flight."""
    ext = ExtensionServer(tmp_path, "ext-api.default.svc").start()
    name = f"v1.{ext.group}"
    try:
        for path, body in (
            ("/api/v1/namespaces/default/services",
             {"metadata": {"name": "ext-api"}, "spec": {"ports": [{"name": "https", "port": 443,
                                                                   "targetPort": ext.port}]}}),
            ("/api/v1/namespaces/default/endpoints",
             {"metadata": {"name": "ext-api"},
              "subsets": [{"addresses": [{"ip": "127.0.0.1"}], "ports": [{"name": "https", "port": ext.port}]}]}),
            ("/apis/apiregistration.k8s.io/v1/apiservices",
             {"metadata": {"name": name},
              "spec": {"group": ext.group, "version": "v1", "groupPriorityMinimum": 1000, "versionPriority": 15,
                       "service": {"namespace": "default", "name": "ext-api", "port": 443},
                       "caBundle": base64.b64encode(ext.ca_pem).decode()}}),
        ):
            code, got = limited.request(path, "POST", body)
            assert code == 201, got
        deadline = time.monotonic() + GUARD
        while True:
            _, got = limited.request(f"/apis/apiregistration.k8s.io/v1/apiservices/{name}")
            if any(c["type"] == "Available" and c["status"] == "True" for c in got.get("status", {}).get(
                    "conditions", [])):
                break
            assert time.monotonic() < deadline, got
            time.sleep(0.2)
        yield ext
    finally:
        ext.stop()
        limited.request(f"/apis/apiregistration.k8s.io/v1/apiservices/{name}", "DELETE")


def test_read_budget_answers_429_while_spent_and_never_to_a_watch(limited: LiteServer, user_token: str,
                                                                   extension: ExtensionServer) -> None:
    held = _tls(limited)
    held.sendall(_request("GET", f"/apis/{extension.group}/v1/namespaces/default/widgets/held", user_token))
    assert extension.held_arrived.wait(GUARD)  # lite is serving it: the one read slot is taken
    code, headers, got = _one(limited, "GET", "/api/v1/namespaces/default", user_token)
    assert code == 429
    _assert_upstreams_429(headers, got)
    code, _, got = _one(limited, "GET", "/api/v1/namespaces/default/configmaps", user_token)
    assert code == 429  # lists too
    watch = _tls(limited)
    watch.sendall(_request("GET", "/api/v1/namespaces/default/configmaps?watch=1", user_token))
    code, _, _ = _head(watch)
    assert code == 200  # long-running: no budget
    watch.close()
    code, _, got = _one(limited, "POST", "/api/v1/namespaces/default/configmaps", user_token,
                        _configmap("while-reading-"))
    assert code == 201, got  # writes: another budget
    code, _, got = _one(limited, "GET", "/api/v1/namespaces/default", limited.token())
    assert code == 200, got  # system:masters
    extension.release()
    code, _, got = _answer(held)
    held.close()
    assert code == 200 and json.loads(got)["metadata"]["name"] == "held"
    code, _, got = _one(limited, "GET", "/api/v1/namespaces/default", user_token)
    assert code == 200, got  # the slot came back


def test_connection_per_request_client_is_always_answered(defaults: LiteServer) -> None:
    ctx = defaults.ssl_context()
    with freshconn.open_files(8192):
        out = asyncio.run(freshconn.run(defaults.port, ctx, defaults.token(), "/api/v1/namespaces/default",
                                        rate=200, seconds=30, linger=5.0))
    assert out.errors == [], f"{len(out.errors)} of {out.ok + len(out.errors)} failed, e.g. {out.errors[:5]}"
    assert out.ok == 6000
    # It did hold far more connections from its one address than the per-address threshold (256).
    assert out.peak_open > 256, out.peak_open
    code, _, _ = _one(defaults, "GET", "/api/v1/namespaces/default", defaults.token())
    assert code == 200
    assert not re.search(r"refused a connection", defaults.log_path.read_text())


def test_javascript_client_burst_at_its_defaults(defaults: LiteServer) -> None:
    if jsclient.js_client() is None:
        if os.environ.get("CI"):
            pytest.fail("@kubernetes/client-node could not be installed with npm")
        pytest.skip("npm cannot install @kubernetes/client-node and Node 22 here")
    assert defaults.request("/api/v1/namespaces", "POST", {"metadata": {"name": "jsburst"}})[0] == 201
    done = jsclient.run("jsburst.mjs", str(defaults.kubeconfig), "jsburst", "400")
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got == {"created": 400, "listed": 400, "failed": 0, "errors": []}, got
