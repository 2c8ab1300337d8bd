"""HTTP reads on one server of two sharing a datastore: get, list and watch wait for the mirror to catch up
(`ReadMixin.freshen`, `MirrorStore.fresh`), and an RV that never comes is 504 after the wait.

Two real API stacks (MirrorStore → Resources → `build_api_app` → aiohttp TestClient) over one real
SqliteBackend; server b sees the backend through a gate that holds its change stream back (a slow network),
so that b's read certainly arrives before the change does."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from lite.kinds import KindRegistry
from lite.server.api.http import build_api_app
from lite.server.api.resources import Resources
from lite.server.api.strategies import default_strategies
from lite.server.store.mirror import MirrorStore
from lite.server.store.sqlitebackend import SqliteBackend
from tests.helpers.gatedbackend import GatedBackend as Gated

Client = TestClient[web.Request, web.Application]
AUTH = {"Authorization": "Bearer fresh-test"}
CMS = "/api/v1/namespaces/default/configmaps"


@contextlib.asynccontextmanager
async def server(backend: Any) -> AsyncIterator[tuple[Client, MirrorStore]]:
    def auth(request: web.Request) -> str | None:
        return "admin" if request.headers.get("Authorization") == AUTH["Authorization"] else None

    store = await MirrorStore.open(backend)
    try:
        kinds = KindRegistry()
        resources = Resources(store, kinds, default_strategies())
        await resources.start()
        async with TestClient(TestServer(build_api_app(resources, kinds, auth))) as client:
            yield client, store
    finally:
        await store.close()


@pytest.fixture
async def two(tmp_path: Path) -> AsyncIterator[tuple[Client, Client, MirrorStore, Gated]]:
    backend = await SqliteBackend.open(str(tmp_path / "db.sqlite"))
    gated = Gated(backend)
    try:
        async with server(backend) as (a, _), server(gated) as (b, store_b):
            yield a, b, store_b, gated
            gated.gate.set()
    finally:
        await backend.close()


async def settle() -> None:
    for _ in range(50):
        await asyncio.sleep(0)


async def test_a_write_through_a_is_read_through_b_at_once(two: tuple[Client, Client, MirrorStore, Gated]) -> None:
    a, b, store_b, gated = two
    gated.gate.clear()
    resp = await a.post(CMS, json={"metadata": {"name": "x"}, "data": {"k": "1"}}, headers=AUTH)
    assert resp.status == 201
    created = await resp.json()
    get = asyncio.ensure_future(b.get(f"{CMS}/x", headers=AUTH))
    listed = asyncio.ensure_future(b.get(CMS, headers=AUTH))
    await asyncio.sleep(0.05)
    assert not get.done() and not listed.done()  # b waits for its mirror instead of answering 404 / an empty list
    gated.gate.set()
    got = await asyncio.wait_for(get, 5)
    assert got.status == 200 and (await got.json())["metadata"]["uid"] == created["metadata"]["uid"]
    body = await (await asyncio.wait_for(listed, 5)).json()
    assert [i["metadata"]["name"] for i in body["items"]] == ["x"]
    assert int(body["metadata"]["resourceVersion"]) >= int(created["metadata"]["resourceVersion"])
    # resourceVersion=0 reads whatever b has mirrored: no wait, no request to the datastore
    requests = store_b.rev_requests
    assert (await b.get(f"{CMS}?resourceVersion=0", headers=AUTH)).status == 200
    assert store_b.rev_requests == requests


async def test_an_rv_from_a_newer_than_b_is_waited_for(two: tuple[Client, Client, MirrorStore, Gated]) -> None:
    a, b, store_b, gated = two
    gated.gate.clear()
    resp = await a.post(CMS, json={"metadata": {"name": "y"}}, headers=AUTH)
    rv = (await resp.json())["metadata"]["resourceVersion"]
    assert store_b.current_rev < int(rv)
    reads = [asyncio.ensure_future(b.get(path, headers=AUTH)) for path in (
        f"{CMS}/y?resourceVersion={rv}", f"{CMS}?resourceVersion={rv}&resourceVersionMatch=NotOlderThan",
        f"{CMS}?resourceVersion={rv}&limit=1")]
    watch = asyncio.ensure_future(b.get(f"{CMS}?watch=1&resourceVersion={rv}&timeoutSeconds=1", headers=AUTH))
    await settle()
    assert not any(r.done() for r in [*reads, watch])
    gated.gate.set()
    for r in await asyncio.wait_for(asyncio.gather(*reads), 5):
        assert r.status == 200, await r.text()
    w = await asyncio.wait_for(watch, 5)
    assert w.status == 200  # a stream after the RV (it ends at timeoutSeconds), not 504
    await w.read()


async def test_an_rv_that_never_comes_is_too_large_after_the_wait(
        two: tuple[Client, Client, MirrorStore, Gated]) -> None:
    _, b, store_b, _ = two
    store_b.fresh_timeout = 0.05
    far = store_b.current_rev + 1000
    for path in (f"{CMS}/z?resourceVersion={far}", f"{CMS}?resourceVersion={far}",
                 f"{CMS}?watch=1&resourceVersion={far}"):
        resp = await b.get(path, headers=AUTH)
        assert resp.status == 504, path
        status = orjson.loads(await resp.read())
        assert status["reason"] == "Timeout" and "Too large resource version" in status["message"]


async def test_a_subresource_read_on_b_waits_too(two: tuple[Client, Client, MirrorStore, Gated]) -> None:
    a, b, _, gated = two
    gated.gate.clear()
    dep = {"metadata": {"name": "d"}, "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "d"}},
                                               "template": {"metadata": {"labels": {"app": "d"}},
                                                            "spec": {"containers": [{"name": "c", "image": "i"}]}}}}
    resp = await a.post("/apis/apps/v1/namespaces/default/deployments", json=dep, headers=AUTH)
    assert resp.status == 201, await resp.text()
    scale = asyncio.ensure_future(b.get("/apis/apps/v1/namespaces/default/deployments/d/scale", headers=AUTH))
    await asyncio.sleep(0.05)
    assert not scale.done()
    gated.gate.set()
    got = await asyncio.wait_for(scale, 5)
    assert got.status == 200 and (await got.json())["spec"]["replicas"] == 3


async def test_a_continue_token_from_a_newer_than_b_is_waited_for(
        two: tuple[Client, Client, MirrorStore, Gated]) -> None:
    a, b, store_b, gated = two
    gated.gate.clear()
    for name in ("c1", "c2", "c3"):
        assert (await a.post(CMS, json={"metadata": {"name": name}}, headers=AUTH)).status == 201
    first = await (await a.get(f"{CMS}?limit=1", headers=AUTH)).json()
    token = first["metadata"]["continue"]
    assert store_b.current_rev < int(first["metadata"]["resourceVersion"])
    rest = asyncio.ensure_future(b.get(f"{CMS}?limit=5&continue={token}", headers=AUTH))
    await asyncio.sleep(0.05)
    assert not rest.done()  # not 504: b waits for the token's revision
    gated.gate.set()
    got = await asyncio.wait_for(rest, 5)
    assert got.status == 200, await got.text()
    assert [i["metadata"]["name"] for i in (await got.json())["items"]] == ["c2", "c3"]
