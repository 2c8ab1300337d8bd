"""Connection and request limits of a real `lite server` as clients meet them (issue 18, item 8).

- At default settings a client that opens a fresh TLS connection per request at 200 requests/s for 30 s and
  leaves each open, idle, for 5 s (as `@kubernetes/client-node` 2.x does) gets every request answered, while
  holding far more connections from its one address than `--max-connections-per-address` (256).
- The official JavaScript client, `@kubernetes/client-node` 2.x on Node 22 at its default settings, sends a
  burst of 400 creates and 400 lists at once (a new TLS connection each): every one succeeds.
- With `--max-requests-inflight 1 --max-mutating-requests-inflight 1`, a request beyond a spent budget from a
  user outside system:masters waits in its user's queue, as under API Priority and Fairness: it is served when
  the slot comes back, or gets upstream's 429 (plain text, `Retry-After: 1`) once a quarter of its deadline has
  passed (`?timeout=4s`: 1 s); never a watch; never the admin (system:masters). Held in flight: a create whose
  body is still arriving, a get of an aggregated API whose backend has not answered yet. A queued request whose
  client goes away leaves the queue (counted `cancelled`) and is never served. A flood past one user's queue
  (300 waiting) gets 429 at once, while another user's request still queues and is served in its turn, ahead of
  the flood's backlog.
- With `--max-requests-inflight 2 --max-mutating-requests-inflight 2`, a burst of 100 creates and 100 lists at
  once from a ServiceAccount bound to cluster-admin (not system:masters) all succeed, queued; so does the
  JavaScript client's burst of 400 and 400 at default limits as such a ServiceAccount.

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

import aiohttp
import pytest
import yaml
from liteproc import LiteServer, find_free_port

from tests.helpers import freshconn, jsclient
from tests.helpers.extapi import ExtensionServer

FLOW_QUEUE_LIMIT = 300  # lite.server.api.inflight's, APF's hand of 6 queues of 50: what one user may queue

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
def small(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiteServer]:
    server = _start(tmp_path_factory.mktemp("small"), "--max-requests-inflight", "2",
                    "--max-mutating-requests-inflight", "2")
    try:
        yield server
    finally:
        assert server.stop() == 0, server.log_tail()


def _sa_token(server: LiteServer, name: str) -> str:
    """A ServiceAccount bound to cluster-admin: all rights, but not in system:masters, so limits apply."""
    for path, body in (
        ("/api/v1/namespaces/default/serviceaccounts", {"metadata": {"name": name}}),
        ("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
         {"metadata": {"name": f"{name}-admin"},
          "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
          "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": "default"}]}),
    ):
        code, got = server.request(path, "POST", body)
        assert code == 201, got
    code, review = server.request(f"/api/v1/namespaces/default/serviceaccounts/{name}/token", "POST",
                                  {"spec": {"expirationSeconds": 3600}})
    assert code == 201, review
    return str(review["status"]["token"])


@pytest.fixture(scope="module")
def user_token(limited: LiteServer) -> str:
    return _sa_token(limited, "busy")


@pytest.fixture(scope="module")
def other_token(limited: LiteServer) -> str:
    return _sa_token(limited, "other")


def _metrics(server: LiteServer) -> dict[str, float]:
    """The server's /metrics as {'name{labels}': value} (the peak gauges reset at each scrape)."""
    code, text = server.request("/metrics")
    assert code == 200, text
    return {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
            if line and not line.startswith("#")}


def _series(name: str, **labels: str) -> str:
    return name + "{" + ",".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}"


def _metric(server: LiteServer, name: str, **labels: str) -> float:
    series = _series(name, **labels)
    got = _metrics(server)
    assert series in got, f"no {series} in /metrics"
    return got[series]


def _until_metric(server: LiteServer, name: str, at_least: float, **labels: str) -> None:
    deadline = time.monotonic() + GUARD
    while (got := _metric(server, name, **labels)) < at_least:
        assert time.monotonic() < deadline, f"{name}{labels} stayed at {got}, below {at_least}"
        time.sleep(0.05)


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
    """The held request reaches its handler soon after it was sent; until then others still pass. `path` asks
    for a short deadline (`timeout=4s`), so a request queued behind the held one gets its 429 after 1 s."""
    deadline = time.monotonic() + GUARD
    while True:
        code, headers, got = _one(server, method, path, token, body)
        if code == 429:
            return headers, got
        assert code in (200, 201), (code, got)
        assert time.monotonic() < deadline, "the held request never held its slot"
        time.sleep(0.05)


CONFIGMAPS = "/api/v1/namespaces/default/configmaps"


def _hold_mutating(server: LiteServer, token: str, name: str) -> tuple[ssl.SSLSocket, bytes]:
    """A create whose body's last bytes have not come yet holds the one mutating slot: the socket, and the
    bytes that complete it. Returns once it holds the slot (a create with a 4 s deadline gets 429)."""
    body = _configmap(name)
    held = _tls(server)
    held.sendall(_request("POST", CONFIGMAPS, token, body)[:-5])
    headers, got = _until_429(server, "POST", CONFIGMAPS + "?timeout=4s", token, _configmap("poll-"))
    _assert_upstreams_429(headers, got)
    return held, body[-5:]


def _send(server: LiteServer, method: str, path: str, token: str, body: bytes = b"") -> ssl.SSLSocket:
    sock = _tls(server)
    sock.sendall(_request(method, path, token, body))
    return sock


def _finish(sock: ssl.SSLSocket) -> tuple[int, bytes]:
    try:
        code, _, got = _answer(sock)
        return code, got
    finally:
        sock.close()


def _assert_upstreams_429(headers: dict[str, str], body: bytes) -> None:
    assert body == TOO_MANY
    assert headers["retry-after"] == "1"
    assert headers["content-type"] == "text/plain; charset=utf-8"


def _configmap(name: str, size: int = 10) -> bytes:
    return json.dumps({"metadata": {"generateName" if name.endswith("-") else "name": name},
                       "data": {"a": "x" * size}}).encode()


def test_mutating_budget_queues_then_answers_429(limited: LiteServer, user_token: str) -> None:
    held, rest = _hold_mutating(limited, user_token, "held")  # a create with a 4 s deadline waited 1 s: 429
    assert _metric(limited, "apiserver_current_inflight_requests", request_kind="mutating") == 1
    assert _metric(limited, "lite_apiserver_rejected_requests_total", request_kind="mutating", reason="time-out") >= 1
    assert _one(limited, "GET", "/api/v1/namespaces/default", user_token)[0] == 200  # reads: another budget
    code, _, got = _one(limited, "POST", CONFIGMAPS, limited.token(), _configmap("admin-"))
    assert code == 201, got  # system:masters is served even when the budget is spent
    queued = _send(limited, "POST", CONFIGMAPS, user_token, _configmap("queued"))  # no deadline of its own: 15 s
    _until_metric(limited, "apiserver_current_inqueue_requests", 1, request_kind="mutating")
    held.sendall(rest)
    code, got = _finish(held)
    assert code == 201, got
    code, got = _finish(queued)
    assert code == 201, got  # it waited for the slot instead of a 429
    code, _, got = _one(limited, "POST", CONFIGMAPS, user_token, _configmap("after-"))
    assert code == 201, got  # the slot came back


def test_a_queued_request_whose_client_left_leaves_the_queue(limited: LiteServer, user_token: str) -> None:
    held, rest = _hold_mutating(limited, user_token, "held-for-gone")
    timed_out, cancelled = (_series("lite_apiserver_rejected_requests_total", request_kind="mutating", reason=r)
                            for r in ("time-out", "cancelled"))
    before = _metrics(limited)
    witness = _send(limited, "POST", CONFIGMAPS, user_token, _configmap("witness"))
    _until_metric(limited, "apiserver_current_inqueue_requests", 1, request_kind="mutating")
    gone = _send(limited, "POST", CONFIGMAPS, user_token, _configmap("gone"))
    _until_metric(limited, "apiserver_current_inqueue_requests", 2, request_kind="mutating")
    gone.close()
    deadline = time.monotonic() + GUARD
    while (now := _metrics(limited))[cancelled] == before[cancelled]:
        assert time.monotonic() < deadline, "the queued request of a client that left was never dropped"
        time.sleep(0.05)
    # It left as soon as its client was gone, not at the end of its wait: the witness, queued before it with
    # the same 15 s wait, has not timed out yet.
    assert now[cancelled] == before[cancelled] + 1 and now[timed_out] == before[timed_out], (before, now)
    held.sendall(rest)
    code, got = _finish(held)
    assert code == 201, got
    code, got = _finish(witness)
    assert code == 201, got
    assert limited.request(CONFIGMAPS + "/gone")[0] == 404  # the slot never went to it


def test_a_flood_past_its_queue_gets_429_while_another_user_is_served_in_turn(
        limited: LiteServer, user_token: str, other_token: str) -> None:
    held, rest = _hold_mutating(limited, user_token, "held-for-flood")
    full = _metric(limited, "lite_apiserver_rejected_requests_total", request_kind="mutating", reason="queue-full")
    flood: list[ssl.SSLSocket] = []
    with freshconn.open_files(4096):
        try:
            for i in range(FLOW_QUEUE_LIMIT):
                flood.append(_send(limited, "POST", CONFIGMAPS, user_token, _configmap(f"flood-{i}")))
            _until_metric(limited, "apiserver_current_inqueue_requests", FLOW_QUEUE_LIMIT, request_kind="mutating")
            code, headers, got = _one(limited, "POST", CONFIGMAPS, user_token, _configmap("flood-over"))
            assert code == 429  # that user's queue is full: at once, not after a wait
            _assert_upstreams_429(headers, got)
            assert _metric(limited, "lite_apiserver_rejected_requests_total", request_kind="mutating",
                           reason="queue-full") == full + 1
            other = _send(limited, "POST", CONFIGMAPS, other_token, _configmap("other-user"))  # queued, not 429
            _until_metric(limited, "apiserver_current_inqueue_requests", FLOW_QUEUE_LIMIT + 1,
                          request_kind="mutating")
            code, _, got = _one(limited, "POST", CONFIGMAPS, limited.token(), _configmap("admin-"))
            assert code == 201, got  # system:masters
            held.sendall(rest)
            code, got = _finish(held)
            assert code == 201, got
            code, other_got = _finish(other)
            assert code == 201, other_got
            answers = [_finish(sock) for sock in flood]
        finally:
            for sock in flood:
                sock.close()
    assert [code for code, _ in answers] == [201] * FLOW_QUEUE_LIMIT, [got for code, got in answers if code != 201]
    # One slot: creates are stored in the order served. The users took turns: the flood's first, the other
    # user's, then the rest of the flood's backlog.
    version = {name: int(json.loads(got)["metadata"]["resourceVersion"]) for name, got in
               (("other-user", other_got), ("flood-0", answers[0][1]), ("flood-1", answers[1][1]))}
    assert version["flood-0"] < version["other-user"] < version["flood-1"], version


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


def test_read_budget_queues_then_answers_429_and_never_to_a_watch(limited: LiteServer, user_token: str,
                                                                    extension: ExtensionServer) -> None:
    held = _tls(limited)
    held.sendall(_request("GET", f"/apis/{extension.group}/v1/namespaces/default/widgets/held", user_token))
    assert extension.held_arrived.wait(GUARD)  # lite is serving it: the one read slot is taken
    code, headers, got = _one(limited, "GET", "/api/v1/namespaces/default?timeout=4s", user_token)
    assert code == 429  # waited a quarter of its 4 s deadline
    _assert_upstreams_429(headers, got)
    code, _, got = _one(limited, "GET", CONFIGMAPS + "?timeout=2s", user_token)
    assert code == 429  # lists too
    queued = _send(limited, "GET", CONFIGMAPS, user_token)
    _until_metric(limited, "apiserver_current_inqueue_requests", 1, request_kind="readOnly")
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
    code, got = _finish(queued)
    assert code == 200 and json.loads(got)["kind"] == "ConfigMapList", got  # it waited for the slot
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


async def _burst(server: LiteServer, token: str, namespace: str, count: int) -> list[str]:
    """`count` creates and `count` lists at once, each on a fresh TLS connection; the failures."""
    headers = {"Authorization": f"Bearer {token}"}
    path = f"{server.url}/api/v1/namespaces/{namespace}/configmaps"
    timeout = aiohttp.ClientTimeout(total=freshconn.GUARD)
    connector = aiohttp.TCPConnector(ssl=server.ssl_context(), force_close=True, limit=0)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout, headers=headers) as session:
        async def create(i: int) -> str:
            async with session.post(path, json={"metadata": {"name": f"burst-{i}"}, "data": {"i": str(i)}}) as r:
                return "" if r.status == 201 else f"create {i}: {r.status} {(await r.text())[:200]}"

        async def list_(i: int) -> str:
            async with session.get(path) as r:
                return "" if r.status == 200 else f"list {i}: {r.status} {(await r.text())[:200]}"

        got = await asyncio.gather(*(create(i) for i in range(count)), *(list_(i) for i in range(count)),
                                   return_exceptions=True)
    return [str(e) for e in got if e]


def test_a_burst_from_a_user_outside_system_masters_is_queued_not_refused(small: LiteServer) -> None:
    token = _sa_token(small, "bursty")
    assert small.request("/api/v1/namespaces", "POST", {"metadata": {"name": "burst"}})[0] == 201
    _metric(small, "apiserver_current_inqueue_requests", request_kind="mutating")  # the peaks start afresh
    with freshconn.open_files(4096):
        failures = asyncio.run(_burst(small, token, "burst", 100))
    assert failures == [], f"{len(failures)} of 200 failed, e.g. {failures[:5]}"
    # Far more than 2 at once: they did wait in the queues.
    assert _metric(small, "apiserver_current_inqueue_requests", request_kind="mutating") > 0
    code, got = small.request("/api/v1/namespaces/burst/configmaps")
    assert code == 200 and sum(cm["metadata"]["name"].startswith("burst-") for cm in got["items"]) == 100


def test_javascript_client_burst_as_a_service_account(defaults: LiteServer, tmp_path: Path) -> None:
    """At default limits (400 reads, 200 writes), 400 creates and 400 lists at once from a user outside
    system:masters: the creates past 200 wait for a slot, and the client, which never retries a 429, sees none."""
    if jsclient.js_client() is None:
        if os.environ.get("CI"):
            pytest.fail("@kubernetes/client-node could not be installed with npm")
        pytest.skip("npm cannot install @kubernetes/client-node and Node 22 here")
    token = _sa_token(defaults, "jsburst")
    assert defaults.request("/api/v1/namespaces", "POST", {"metadata": {"name": "jsburst-sa"}})[0] == 201
    config = defaults.config()
    config["users"][0]["user"] = {"token": token}
    kubeconfig = tmp_path / "kubeconfig.yaml"
    kubeconfig.write_text(yaml.safe_dump(config))
    done = jsclient.run("jsburst.mjs", str(kubeconfig), "jsburst-sa", "400")
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got == {"created": 400, "listed": 400, "failed": 0, "errors": []}, got
