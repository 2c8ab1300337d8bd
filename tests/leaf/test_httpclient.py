"""HttpClient against the real API: `build_api_app` over `Resources` over a SQLite Store, served with TLS
on 127.0.0.1 with the server's own credentials and kubeconfig. Errors over HTTP must equal the in-process
ones, so both clients run the same failing calls.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml
from aiohttp import web
from liteproc import LiteServer

from lite.client import Client, Obj, WatchEvent
from lite.errors import ApiError, too_many_requests
from lite.httpclient import HttpClient, parse_watch_line
from lite.informer import Informer
from lite.kinds import KindRegistry
from lite.objects import deep_copy, name_of
from lite.server.api.http import build_api_app
from lite.server.certs import Credentials, ensure_credentials, server_ssl_context, write_kubeconfig
from lite.server.config import ServerConfig
from lite.server.store.store import Store


async def new_resources(store: Store, kinds: KindRegistry) -> Any:
    """The real in-process API registry (`Resources`) over `store`, started (system namespaces exist)."""
    mod = pytest.importorskip("lite.server.api.resources", reason="lite.server.api.resources not landed yet")
    strategies = pytest.importorskip("lite.server.api.strategies")
    resources = mod.Resources(store, kinds, strategies.default_strategies())
    await resources.start()
    return resources

KINDS = KindRegistry()
CM = KINDS.by_gvk("", "v1", "ConfigMap")
NS = KINDS.by_gvk("", "v1", "Namespace")
DEPLOY = KINDS.by_gvk("apps", "v1", "Deployment")
assert CM is not None and NS is not None and DEPLOY is not None

GUARD = 10.0  # a hang guard, never a speed assertion
KUBECTL = "/usr/bin/kubectl"


# -- pure: watch line parsing --

@pytest.mark.parametrize(("line", "etype", "raw"), [
    (b'{"type":"ADDED","object":{"kind":"Pod","metadata":{"name":"a"}}}',
     "ADDED", b'{"kind":"Pod","metadata":{"name":"a"}}'),
    (b'{"type":"DELETED","object":{"metadata":{"name":"x}"}}}\n', "DELETED", b'{"metadata":{"name":"x}"}}'),
    # Other layouts still parse; only the exact bytes are not kept.
    (b'{"object": {"metadata": {"name": "a"}}, "type": "MODIFIED"}', "MODIFIED", None),
    (b'{ "type": "ADDED", "object": {"metadata": {}} }', "ADDED", None),
    (b'{"type":"ADDED","object":{"metadata":{}},"extra":1}', "ADDED", None),
])
def test_parse_watch_line(line: bytes, etype: str, raw: bytes | None) -> None:
    ev = parse_watch_line(line)
    assert ev.type == etype
    assert ev.raw == raw
    assert ev.object == orjson.loads(line)["object"]
    if raw is not None:
        assert orjson.loads(ev.encoded()) == ev.object


@pytest.mark.parametrize("line", [b"[1,2]", b'{"type":"ADDED"}', b'{"type":"ADDED","object":3}'])
def test_parse_watch_line_rejects_non_events(line: bytes) -> None:
    with pytest.raises(ApiError):
        parse_watch_line(line)


# -- against a served API --

@dataclass
class Served:
    resources: Any
    store: Store
    http: HttpClient
    kubeconfig: Path
    creds: Credentials
    url: str


def _auth_for(token: str) -> Callable[[web.Request], str | None]:
    def authenticate(request: web.Request) -> str | None:
        return "admin" if request.headers.get("Authorization") == f"Bearer {token}" else None
    return authenticate


@contextlib.asynccontextmanager
async def serve_api(tmp_path: Path, port: int, *, window: int = 10000) -> AsyncIterator[Served]:
    pytest.importorskip("lite.server.api.resources", reason="lite.server.api.resources not landed yet")
    cfg = ServerConfig.create(tmp_path / "data", bind_address="127.0.0.1", port=port)
    creds = await asyncio.to_thread(ensure_credentials, cfg)
    kubeconfig = await asyncio.to_thread(write_kubeconfig, cfg, creds)
    store = await Store.open(str(tmp_path / "state.db"), window=window)
    resources = await new_resources(store, KINDS)
    app = build_api_app(resources, KINDS, _auth_for(creds.admin_token))
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", port, ssl_context=server_ssl_context(creds))
    await site.start()
    http = HttpClient.from_kubeconfig(str(kubeconfig))
    try:
        yield Served(resources, store, http, kubeconfig, creds, cfg.server_url)
    finally:
        await http.close()
        await runner.cleanup()
        await store.close()


@pytest.fixture
async def served(tmp_path: Path, free_port: int) -> AsyncIterator[Served]:
    async with serve_api(tmp_path, free_port) as s:
        yield s


def cm(name: str, labels: dict[str, str] | None = None, **data: str) -> Obj:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "labels": labels or {}},
            "data": data}


async def test_kubeconfig_tls_and_token(served: Served) -> None:
    created = await served.http.create(CM, "default", cm("hello", a="1"))
    assert created["metadata"]["namespace"] == "default"
    assert created["metadata"]["uid"]
    assert (await served.http.get(CM, "default", "hello"))["data"] == {"a": "1"}

    async with HttpClient(served.url, token="wrong", ca_data=served.creds.ca_pem) as bad:
        with pytest.raises(ApiError) as e:
            await bad.get(CM, "default", "hello")
        assert (e.value.code, e.value.reason) == (401, "Unauthorized")
    # Without the cluster CA the server's certificate is not trusted.
    async with HttpClient(served.url, token=served.creds.admin_token) as untrusted:
        with pytest.raises(ApiError) as e:
            await untrusted.get(CM, "default", "hello")
        assert e.value.code == 503 and "connection to server failed" in e.value.message
    async with HttpClient(served.url, token=served.creds.admin_token, insecure=True) as insecure:
        assert name_of(await insecure.get(CM, "default", "hello")) == "hello"
    async with HttpClient(served.url, token=served.creds.admin_token,
                          ca_file=str(served.creds.ca_cert)) as by_file:
        assert name_of(await by_file.get(CM, "default", "hello")) == "hello"


async def test_crud_list_pages_patches_and_deletes(served: Served) -> None:
    h = served.http
    for i in range(5):
        await h.create(CM, "default", cm(f"c{i}", labels={"batch": "yes" if i % 2 else "no"}, v=str(i)))
    page = await h.list(CM, "default", limit=2)
    names = [name_of(o) for o in page["items"]]
    rv = page["metadata"]["resourceVersion"]
    while page["metadata"].get("continue"):
        page = await h.list(CM, "default", limit=2, continue_=page["metadata"]["continue"])
        names += [name_of(o) for o in page["items"]]
    assert names == [f"c{i}" for i in range(5)]
    assert rv
    selected = await h.list(CM, "default", label_selector="batch=yes")
    assert [name_of(o) for o in selected["items"]] == ["c1", "c3"]

    cur = deep_copy(await h.get(CM, "default", "c0"))
    cur["data"] = {"v": "updated"}
    updated = await h.update(CM, "default", "c0", cur)
    assert updated["data"] == {"v": "updated"}
    assert (await h.patch(CM, "default", "c0", {"data": {"m": "1"}}))["data"] == {"v": "updated", "m": "1"}
    assert (await h.patch(CM, "default", "c0", [{"op": "remove", "path": "/data/v"}],
                          patch_type="json"))["data"] == {"m": "1"}
    assert (await h.patch(CM, "default", "c0", {"data": {"s": "2"}}, patch_type="strategic"))["data"] == \
        {"m": "1", "s": "2"}
    applied = await h.patch(CM, "default", "applied", cm("applied", k="v"), patch_type="apply",
                            field_manager="test")
    assert applied["data"] == {"k": "v"}

    dry = await h.create(CM, "default", cm("dry"), dry_run=True)
    assert name_of(dry) == "dry"
    with pytest.raises(ApiError) as e:
        await h.get(CM, "default", "dry")
    assert e.value.reason == "NotFound"

    await h.delete(CM, "default", "c0")
    gone = await h.delete_collection(CM, "default", label_selector="batch=yes")
    assert sorted(name_of(o) for o in gone["items"]) == ["c1", "c3"]
    left = await h.list(CM, "default")
    assert sorted(name_of(o) for o in left["items"]) == ["applied", "c2", "c4"]


async def _failures(client: Client) -> list[dict[str, Any]]:
    """Failing calls whose Status must be identical in process and over HTTP."""
    calls: list[Callable[[], Awaitable[Any]]] = [
        lambda: client.get(CM, "default", "missing"),
        lambda: client.create(CM, "default", cm("dup")),
        lambda: client.create(CM, "default", cm("Bad_Name")),
        lambda: client.update(CM, "default", "dup", {**cm("dup"), "metadata": {
            "name": "dup", "resourceVersion": "999999"}}),
        lambda: client.delete(CM, "default", "missing"),
        lambda: client.patch(CM, "default", "missing", {"data": {}}),
    ]
    out = []
    for call in calls:
        with pytest.raises(ApiError) as e:
            await call()
        out.append(e.value.status())
    return out


async def test_errors_match_in_process_errors(served: Served) -> None:
    await served.resources.create(CM, "default", cm("dup"))
    over_http = await _failures(served.http)
    in_process = await _failures(served.resources)
    assert over_http == in_process
    reasons = [(s["code"], s["reason"]) for s in over_http]
    assert reasons == [(404, "NotFound"), (409, "AlreadyExists"), (422, "Invalid"), (409, "Conflict"),
                       (404, "NotFound"), (404, "NotFound")]
    assert over_http[0]["details"] == {"name": "missing", "kind": "configmaps"}
    assert over_http[2]["details"]["causes"]


async def test_watch_streams_events_with_exact_bytes(served: Served) -> None:
    h = served.http
    await h.create(CM, "default", cm("before"))
    events: list[WatchEvent] = []
    async with asyncio.timeout(GUARD), contextlib.aclosing(h.watch(CM, "default")) as stream:
        async for ev in stream:
            events.append(ev)
            if len(events) == 1:  # the watch is established: now change things
                await h.create(CM, "default", cm("big", blob="x" * 900_000))  # spans many chunks
                await h.delete(CM, "default", "before")
            if len(events) == 3:
                break
    assert [(e.type, name_of(e.object)) for e in events] == [("ADDED", "before"), ("ADDED", "big"),
                                                             ("DELETED", "before")]
    for e in events:
        assert e.raw is not None and orjson.loads(e.raw) == e.object
    assert len(events[1].object["data"]["blob"]) == 900_000


async def test_watch_from_expired_rv_yields_one_410_error(tmp_path: Path, free_port: int) -> None:
    async with serve_api(tmp_path, free_port, window=2) as s:
        first = await s.http.create(CM, "default", cm("a"))
        for i in range(5):
            await s.http.create(CM, "default", cm(f"n{i}"))
        async with asyncio.timeout(GUARD):
            events = [ev async for ev in s.http.watch(CM, "default",
                                                      resource_version=first["metadata"]["resourceVersion"])]
        assert [e.type for e in events] == ["ERROR"]
        assert events[0].object["code"] == 410
        assert events[0].object["reason"] in ("Expired", "Gone")


async def test_watch_timeout_ends_stream(served: Served) -> None:
    await served.http.create(CM, "default", cm("a"))
    listed = await served.http.list(CM, "default")
    async with asyncio.timeout(GUARD):
        events = [ev async for ev in served.http.watch(
            CM, "default", resource_version=listed["metadata"]["resourceVersion"], timeout_seconds=1)]
    assert events == []


async def test_informer_over_http(served: Served) -> None:
    await served.http.create(CM, "default", cm("a"))
    inf = Informer(served.http, CM, "default")
    seen: list[str] = []
    inf.add_handlers(on_add=lambda o: seen.append(name_of(o)), on_delete=lambda o: seen.append("-" + name_of(o)))
    task = asyncio.create_task(inf.run())
    try:
        async with asyncio.timeout(GUARD):
            await inf.wait_synced()
            await served.http.create(CM, "default", cm("b"))
            await served.http.delete(CM, "default", "a")
            while len(seen) < 3:
                await asyncio.sleep(0.005)
        assert seen == ["a", "b", "-a"]
        assert inf.keys() == ["default/b"]
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_unreachable_server_is_503(free_port: int) -> None:
    async with HttpClient(f"http://127.0.0.1:{free_port}", token="t") as h:
        with pytest.raises(ApiError) as e:
            await h.list(CM)
        assert (e.value.code, e.value.reason) == (503, "ServiceUnavailable")


@pytest.mark.e2e
async def test_against_real_lite_server_with_kubectl(tmp_path: Path, free_port: int) -> None:
    """A real `lite server` process: objects kubectl writes reach an informer running over HttpClient."""
    if not os.access(KUBECTL, os.X_OK):
        pytest.skip(f"{KUBECTL} not installed")
    server = LiteServer(tmp_path / "data", free_port).start()
    try:
        await asyncio.to_thread(server.wait_ready, 60)
        async with HttpClient.from_kubeconfig(str(server.kubeconfig)) as h:
            inf = Informer(h, CM, "default", label_selector="from=kubectl")
            seen: list[str] = []
            inf.add_handlers(on_add=lambda o: seen.append(name_of(o)),
                             on_delete=lambda o: seen.append("-" + name_of(o)))
            task = asyncio.create_task(inf.run())
            try:
                async with asyncio.timeout(GUARD):
                    await inf.wait_synced()
                await kubectl(server.kubeconfig, "create", "configmap", "via-kubectl", "--from-literal=k=v")
                await kubectl(server.kubeconfig, "label", "configmap", "via-kubectl", "from=kubectl")
                async with asyncio.timeout(GUARD):
                    while "via-kubectl" not in seen:
                        await asyncio.sleep(0.01)
                got = await h.get(CM, "default", "via-kubectl")
                assert got["data"] == {"k": "v"}
                await kubectl(server.kubeconfig, "delete", "configmap", "via-kubectl")
                async with asyncio.timeout(GUARD):
                    while "-via-kubectl" not in seen:
                        await asyncio.sleep(0.01)
                assert seen == ["via-kubectl", "-via-kubectl"]
            finally:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
    finally:
        code = await asyncio.to_thread(server.stop)
        assert code == 0, server.log_tail()


async def kubectl(kubeconfig: Path, *args: str) -> str:
    proc = await asyncio.create_subprocess_exec(
        KUBECTL, "--kubeconfig", str(kubeconfig), "-n", "default", *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await proc.communicate()
    assert proc.returncode == 0, f"kubectl {' '.join(args)}: {err.decode()}"
    return out.decode()


async def test_retry_after_429_and_non_status_errors(free_port: int) -> None:
    """Answers lite itself never gives but proxies and busy servers do: 429 + Retry-After, plain-text errors."""
    hits: list[str] = []

    async def busy_then_ok(request: web.Request) -> web.Response:
        hits.append(request.path)
        if len(hits) < 3:
            return web.json_response(too_many_requests("busy", retry_after=0).status(), status=429,
                                     headers={"Retry-After": "0"})
        return web.json_response({"kind": "ConfigMap", "apiVersion": "v1", "metadata": {"name": "x"}})

    async def bad_gateway(request: web.Request) -> web.Response:
        return web.Response(status=502, text="upstream connect error")

    app = web.Application()
    app.router.add_get("/api/v1/namespaces/default/configmaps/x", busy_then_ok)
    app.router.add_get("/api/v1/namespaces/default/configmaps/y", bad_gateway)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", free_port).start()
    try:
        async with HttpClient(f"http://127.0.0.1:{free_port}") as h:
            assert name_of(await h.get(CM, "default", "x")) == "x"
            assert len(hits) == 3
            with pytest.raises(ApiError) as e:
                await h.get(CM, "default", "y")
            assert (e.value.code, e.value.message) == (502, "upstream connect error")
            with pytest.raises(ApiError) as e:
                await h.get(CM, "default", "z")  # aiohttp's own text 404
            assert (e.value.code, e.value.reason) == (404, "NotFound")
    finally:
        await runner.cleanup()


async def test_kubeconfig_token_file_ca_file_and_named_context(served: Served, tmp_path: Path) -> None:
    kdir = tmp_path / "kube"
    kdir.mkdir()
    (kdir / "ca.crt").write_bytes(served.creds.ca_pem)
    (kdir / "token").write_text(served.creds.admin_token + "\n")
    config = {
        "apiVersion": "v1", "kind": "Config", "current-context": "broken",
        "clusters": [{"name": "lite", "cluster": {"server": served.url, "certificate-authority": "ca.crt"}}],
        "users": [{"name": "file-user", "user": {"tokenFile": "token"}},
                  {"name": "cert-user", "user": {"client-certificate-data": "eA==", "client-key-data": "eA=="}}],
        "contexts": [{"name": "by-files", "context": {"cluster": "lite", "user": "file-user"}},
                     {"name": "certs", "context": {"cluster": "lite", "user": "cert-user"}}],
    }
    path = kdir / "config"
    path.write_text(yaml.safe_dump(config))
    await served.http.create(CM, "default", cm("k"))
    async with HttpClient.from_kubeconfig(str(path), context="by-files") as h:
        assert name_of(await h.get(CM, "default", "k")) == "k"
    with pytest.raises(ValueError, match="no context named 'broken'"):
        HttpClient.from_kubeconfig(str(path))
    with pytest.raises(ValueError, match="client certificate and key cannot be loaded"):
        HttpClient.from_kubeconfig(str(path), context="certs")  # not a PEM certificate
