"""The official Python client over HTTP against the real API stack with a small watch window: a continue token
whose revision left the window is 410 Expired, and the token in that Status goes on with the rest of the list."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable
from pathlib import Path
from typing import Any

import pytest
from apistack import api_client
from kubernetes import client
from kubernetes.client.exceptions import ApiException

TOKEN = "Bearer snapshot-test"


async def test_expired_continue_token_offers_the_inconsistent_one(tmp_path: Path) -> None:
    async with api_client(tmp_path, TOKEN, window=8) as (http, _store):
        cfg = client.Configuration(host=str(http.make_url("")).rstrip("/"))
        cfg.api_key = {"BearerToken": TOKEN}
        with client.ApiClient(cfg) as api:
            v1 = client.CoreV1Api(api)

            def call(fn: str, *args: Any, **kw: Any) -> Awaitable[Any]:  # the client blocks: off the loop
                return asyncio.to_thread(getattr(v1, fn), *args, **kw)

            for i in range(4):
                await call("create_namespaced_config_map", "default", client.V1ConfigMap(
                    metadata=client.V1ObjectMeta(name=f"c{i}")))
            first = await call("list_namespaced_config_map", "default", limit=2)
            assert [i.metadata.name for i in first.items] == ["c0", "c1"]
            for i in range(10):  # the window (8 events) no longer reaches back to the first page
                await call("create_namespaced_config_map", "default", client.V1ConfigMap(
                    metadata=client.V1ObjectMeta(name=f"d{i}")))
            with pytest.raises(ApiException) as e:
                await call("list_namespaced_config_map", "default", limit=2, _continue=first.metadata.var_continue)
            assert e.value.status == 410
            status = json.loads(e.value.body)
            assert status["reason"] == "Expired" and "use the continue token in this response" in status["message"]
            rest = await call("list_namespaced_config_map", "default", limit=3,
                              _continue=status["metadata"]["continue"])
            assert [i.metadata.name for i in rest.items] == ["c2", "c3", "d0"]
            assert rest.metadata.remaining_item_count == 9
