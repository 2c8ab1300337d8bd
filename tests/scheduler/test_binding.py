"""Binding failures: the assumption is dropped, the pod is retried after its backoff, and the rejection is
reported. The API is the real one; only the first binding answer is replaced by a server error (fault
injection, as an apiserver timing out would answer)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from conftest import NODE, POD, Kit, node, pod

from lite import errors
from lite.client import Obj
from lite.kinds import KindRegistry
from lite.server.api.resources import Resources
from lite.server.api.strategies import default_strategies
from lite.server.scheduler.scheduler import build_scheduler
from lite.server.store.store import Store


class FirstBindFails:
    """The real API, except that the first pods/binding call answers 500."""

    def __init__(self, api: Resources) -> None:
        self.api = api
        self.failed = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.api, name)

    async def create(self, kind: Any, namespace: str, obj: Obj, **kw: Any) -> Obj:
        if kw.get("subresource") == "binding" and not self.failed:
            self.failed += 1
            raise errors.internal("etcdserver: request timed out")
        return await self.api.create(kind, namespace, obj, **kw)


async def test_failed_binding_is_forgotten_and_retried(tmp_path: Path) -> None:
    store = await Store.open(str(tmp_path / "state.db"))
    api = Resources(store, KindRegistry(), default_strategies())
    try:
        await api.start()
        kit = Kit(api)
        flaky = FirstBindFails(api)
        sched = build_scheduler(flaky, kit.informers)
        async with asyncio.TaskGroup() as tg:
            tasks = [tg.create_task(kit.informers.run()), tg.create_task(sched.run())]
            try:
                await api.create(NODE, "", node("a", cpu="1"))
                await api.create(POD, "default", pod("p", cpu="1"))
                ev = await kit.until(lambda: kit.events("p", "FailedScheduling"))
                assert ev[0]["message"] == "Binding rejected: etcdserver: request timed out"
                assert await kit.bound("p") == "a"
                assert flaky.failed == 1
                # the forgotten assumption did not leave a phantom pod behind on the node
                assert [x.name for x in sched.cache.snapshot().by_name["a"].pods] == ["p"]
            finally:
                for t in tasks:
                    t.cancel()
    finally:
        await store.close()
