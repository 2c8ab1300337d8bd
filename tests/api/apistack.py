"""The API over the real stack for HTTP-level tests: Store (SQLite in a directory) → Resources →
`build_api_app` → aiohttp TestClient, with a one-token authenticator. Not a test module, and not a conftest
(several test directories have one; their names would clash in one pytest run)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from lite.kinds import KindRegistry
from lite.server.api.http import build_api_app
from lite.server.api.resources import Resources
from lite.server.api.strategies import default_strategies
from lite.server.store import Store

Client = TestClient[web.Request, web.Application]


@contextlib.asynccontextmanager
async def api_client(db_dir: Path, authorization: str, *, window: int = 10000) -> AsyncIterator[tuple[Client, Store]]:
    """A started stack whose only accepted credential is the `Authorization` header value given (`window`: the
    store's watch window, in events)."""

    def auth(request: web.Request) -> str | None:
        return "admin" if request.headers.get("Authorization") == authorization else None

    store = await Store.open(str(db_dir / "lite.db"), window=window)
    try:
        kinds = KindRegistry()
        resources = Resources(store, kinds, default_strategies())
        await resources.start()
        async with TestClient(TestServer(build_api_app(resources, kinds, auth))) as client:
            yield client, store
    finally:
        await store.close()
