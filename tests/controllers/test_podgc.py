"""Pod GC against the real in-process API."""

from __future__ import annotations

import pytest
from conftest import POD, Kit, bare_pod

from lite.server.controllers.podgc import PodGCController
from lite.server.controllers.runtime import builtin

NODE = builtin("", "Node")


async def names(kit: Kit) -> list[str]:
    return sorted(p["metadata"]["name"] for p in (await kit.api.list(POD, "default"))["items"])


async def test_orphans_force_deleted(kit: Kit, monkeypatch: pytest.MonkeyPatch) -> None:
    await kit.api.create(NODE, "", {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "alive"}})
    for name, node in (("on-alive", "alive"), ("on-gone", "gone")):
        await kit.make_ready(await kit.api.create(POD, "default", bare_pod(name, {})), node=node)
    await kit.api.create(POD, "default", bare_pod("pending", {}))
    c = PodGCController(kit.api, kit.informers, period=5)
    await kit.settle(c)
    # a pass reads the pods it may act on through indexes: listing every pod decodes every pod (compact cache)
    monkeypatch.setattr(c.pods, "list", lambda: pytest.fail("a podgc pass listed every pod"))
    assert await c.reconcile("podgc") == 5
    assert await names(kit) == ["on-alive", "pending"]


async def test_terminated_over_threshold_oldest_first(kit: Kit) -> None:
    for i in range(4):
        await kit.api.create(POD, "default", bare_pod(f"done-{i}", {}))
        await kit.api.patch(POD, "default", f"done-{i}", {"status": {"phase": "Succeeded"}}, subresource="status")
    await kit.api.create(POD, "default", bare_pod("running", {}))
    c = PodGCController(kit.api, kit.informers, threshold=2)
    await kit.settle(c)
    await c.reconcile("podgc")
    left = [p for p in (await kit.api.list(POD, "default"))["items"] if not p["metadata"].get("deletionTimestamp")]
    # Same-second creation timestamps: ties broken by name, so done-0 and done-1 go.
    assert sorted(p["metadata"]["name"] for p in left) == ["done-2", "done-3", "running"]
    off = PodGCController(kit.api, kit.informers, threshold=0)
    await kit.settle(off)
    await off.reconcile("podgc")
    assert {"done-2", "done-3", "running"} <= set(await names(kit))
