"""Disruption controller and the eviction check against the real in-process API (Resources wired with it)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from conftest import POD, RS, Kit, bare_pod, open_kit, replicaset

from lite.errors import ApiError
from lite.objects import owner_ref
from lite.server.controllers.disruption import DisruptionController, EvictionCheck, scaled_value
from lite.server.controllers.runtime import builtin

PDB = builtin("policy", "PodDisruptionBudget")
Obj = dict[str, Any]


@pytest.fixture
async def ekit(tmp_path: Path) -> AsyncIterator[Kit]:
    """The kit, with Resources' eviction_check wired to the PDB check as the server does."""
    async with open_kit(tmp_path) as k:
        k.api.eviction_check = EvictionCheck(k.api)
        task = asyncio.create_task(k.informers.run())
        try:
            yield k
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


def pdb(name: str, **spec: Any) -> Obj:
    return {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": name,
                                                                                  "namespace": "default"},
            "spec": {"selector": {"matchLabels": {"app": "web"}}, **spec}}


async def ready_pods(kit: Kit, n: int, owner: Obj | None = None) -> None:
    for i in range(n):
        pod = bare_pod(f"web-{i}", {"app": "web"})
        if owner is not None:
            pod["metadata"]["ownerReferences"] = [owner_ref(owner)]
        await kit.make_ready(await kit.api.create(POD, "default", pod))


def test_scaled_value() -> None:
    assert scaled_value(2, 10, True) == 2
    assert scaled_value("50%", 3, True) == 2
    assert scaled_value("50%", 3, False) == 1


async def test_min_available_status_and_eviction(ekit: Kit) -> None:
    await ready_pods(ekit, 3)
    await ekit.api.create(PDB, "default", pdb("web", minAvailable=2))
    c = DisruptionController(ekit.api, ekit.informers)
    await ekit.settle(c)
    await c.reconcile("default/web")
    st = (await ekit.api.get(PDB, "default", "web"))["status"]
    assert (st["expectedPods"], st["currentHealthy"], st["desiredHealthy"], st["disruptionsAllowed"]) == (3, 3, 2, 1)
    assert st["observedGeneration"] == 1
    [cond] = st["conditions"]
    assert (cond["type"], cond["status"], cond["reason"]) == ("DisruptionAllowed", "True", "SufficientPods")
    eviction = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "web-0"}}
    await ekit.api.create(POD, "default", eviction, name="web-0", subresource="eviction")
    st = (await ekit.api.get(PDB, "default", "web"))["status"]
    assert st["disruptionsAllowed"] == 0 and "web-0" in st["disruptedPods"]
    with pytest.raises(ApiError) as e:
        await ekit.api.create(POD, "default", {**eviction, "metadata": {"name": "web-1"}}, name="web-1",
                              subresource="eviction")
    assert e.value.code == 429
    assert e.value.message == "Cannot evict pod as it would violate the pod's disruption budget."
    assert "needs 2 healthy pods and has 3 currently" in e.value.causes[0].message
    await ekit.settle(c)
    await c.reconcile("default/web")
    st = (await ekit.api.get(PDB, "default", "web"))["status"]
    assert (st["currentHealthy"], st["disruptionsAllowed"]) == (2, 0)
    assert st["conditions"][0]["reason"] == "InsufficientPods"
    assert "disruptedPods" not in st  # web-0 is being deleted (or gone): no longer counted as disrupted


async def test_max_unavailable_uses_controller_scale(ekit: Kit) -> None:
    rs = await ekit.api.create(RS, "default", replicaset("web", 4))
    await ready_pods(ekit, 3, owner=rs)
    await ekit.api.create(PDB, "default", pdb("web", maxUnavailable="25%"))
    c = DisruptionController(ekit.api, ekit.informers)
    await ekit.settle(c)
    await c.reconcile("default/web")
    st = (await ekit.api.get(PDB, "default", "web"))["status"]
    assert (st["expectedPods"], st["desiredHealthy"], st["currentHealthy"], st["disruptionsAllowed"]) == (4, 3, 3, 0)


async def test_orphan_pods_with_max_unavailable_fail_safe(ekit: Kit) -> None:
    await ready_pods(ekit, 2)
    await ekit.api.create(PDB, "default", pdb("web", maxUnavailable=1))
    c = DisruptionController(ekit.api, ekit.informers)
    await ekit.settle(c)
    await c.reconcile("default/web")
    st = (await ekit.api.get(PDB, "default", "web"))["status"]
    assert st["disruptionsAllowed"] == 0 and st["conditions"][0]["reason"] == "SyncFailed"


async def test_unprocessed_budget_refuses_and_no_budget_allows(ekit: Kit) -> None:
    await ready_pods(ekit, 2)
    other = bare_pod("lonely", {"app": "other"})
    await ekit.make_ready(await ekit.api.create(POD, "default", other))
    await ekit.api.create(PDB, "default", pdb("web", minAvailable=1))
    with pytest.raises(ApiError) as e:
        await ekit.api.create(POD, "default", {"metadata": {"name": "web-0"}}, name="web-0", subresource="eviction")
    assert e.value.code == 429 and "still being processed" in e.value.causes[0].message
    await ekit.api.create(POD, "default", {"metadata": {"name": "lonely"}}, name="lonely", subresource="eviction")
    assert (await ekit.api.get(POD, "default", "lonely"))["metadata"].get("deletionTimestamp")
