"""Dormant controllers in the real controller manager: built on the first object of their kind (or a child
naming that kind as its controller), and then acting on it as if they had been built at start."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

from conftest import DEPLOY, POD, Kit, bare_pod, pod_template

from lite.server.controllers.dormant import Dormant
from lite.server.controllers.manager import build_controller_manager
from lite.server.controllers.runtime import ControllerManager

FAST = {"lease_duration": 1.0, "renew_interval": 0.1, "renew_deadline": 0.5, "retry_period": 0.05}
TRACKING = "batch.kubernetes.io/job-tracking"


@contextlib.asynccontextmanager
async def leading(kit: Kit) -> AsyncIterator[ControllerManager]:
    m = build_controller_manager(kit.api, kinds=kit.kinds, identity="a", **FAST)
    task = asyncio.create_task(m.run())
    try:
        await kit.until(lambda: m.is_leader)
        yield m
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def deployment(name: str, replicas: int) -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": "default"},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                     "template": pod_template({"app": name})}}


async def _pods(kit: Kit, n: int) -> bool:
    return len((await kit.api.list(POD, "default"))["items"]) == n


async def test_first_deployment_is_rolled_out_by_a_controller_built_for_it(kit: Kit) -> None:
    async with leading(kit) as m:
        await kit.until(lambda: m.synced.is_set())
        for name in ("deployment", "daemonset", "statefulset", "job", "cronjob", "horizontalpodautoscaling"):
            assert isinstance(m.controller(name), Dormant), name  # nothing of their kinds: not built
        await kit.api.create(DEPLOY, "default", deployment("web", 2))
        await kit.until(lambda: _pods(kit, 2))
        assert type(m.controller("deployment")).__name__ == "DeploymentController"
        assert isinstance(m.controller("job"), Dormant)


async def test_deployment_stored_before_the_manager_starts_is_rolled_out(kit: Kit) -> None:
    await kit.api.create(DEPLOY, "default", deployment("early", 1))
    async with leading(kit):
        await kit.until(lambda: _pods(kit, 1))


async def test_pod_of_a_deleted_job_wakes_the_job_controller_which_releases_it(kit: Kit) -> None:
    """No Job exists, only a pod left by one with the tracking finalizer: the garbage collector deletes it
    (its owner is gone) and the Job controller must release it, as a controller built at start would, or
    the pod stays Terminating forever."""
    pod = bare_pod("left", {"app": "gone"})
    pod["metadata"]["finalizers"] = [TRACKING]
    pod["metadata"]["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job", "name": "gone",
                                           "uid": "0b5e5c5e-0000-4000-8000-000000000001", "controller": True}]
    await kit.api.create(POD, "default", pod)
    async with leading(kit) as m:
        await kit.until(lambda: _pods(kit, 0))
        assert not isinstance(m.controller("job"), Dormant)
