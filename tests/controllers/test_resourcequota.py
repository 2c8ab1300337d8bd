"""The ResourceQuota controller over the real in-process API and informers (client-go style)."""

from __future__ import annotations

import asyncio
import datetime as dt
from fractions import Fraction
from typing import Any

from conftest import DEPLOY, POD, Kit, bare_pod, running

from lite.server.admission.quota.admission import QuotaAdmission
from lite.server.controllers.resourcequota import ResourceQuotaController, recount, tally
from lite.server.controllers.runtime import builtin

RQ, SVC = builtin("", "ResourceQuota"), builtin("", "Service")
NOW = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def quota(name: str, hard: dict[str, str], **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "default"}, "spec": {"hard": hard, **spec}}


def cpu_pod(name: str, cpu: str, ns: str = "default") -> dict[str, Any]:
    p = bare_pod(name, {"a": "b"}, ns)
    p["spec"]["containers"][0]["resources"] = {"requests": {"cpu": cpu}, "limits": {"cpu": cpu}}
    return p


def test_tally_and_recount_are_pure() -> None:
    q = quota("q", {"pods": "5", "requests.cpu": "2", "count/pods": "9"}, scopes=["NotBestEffort"])
    pods = [cpu_pod("a", "500m"), cpu_pod("b", "250m"), bare_pod("be", {})]
    counted = tally(q, POD, pods, NOW)
    assert counted == {"pods": 2, "requests.cpu": Fraction(3, 4), "count/pods": 2}
    assert recount(q, counted, {}, keep_higher=False) == {
        "hard": q["spec"]["hard"], "used": {"pods": "2", "requests.cpu": "750m", "count/pods": "2"}}
    assert recount(q, counted, {"pods": Fraction(3)}, keep_higher=True)["used"]["pods"] == "3"


async def test_status_follows_creates_and_deletes(kit: Kit) -> None:
    c = ResourceQuotaController(kit.api, kit.informers, kit.kinds)
    await kit.api.create(RQ, "default", quota("q", {"pods": "10", "requests.cpu": "4", "services": "3",
                                                    "count/deployments.apps": "2"}))
    await kit.api.create(POD, "default", cpu_pod("a", "1"))
    await kit.api.create(POD, "default", cpu_pod("b", "500m"))
    await kit.api.create(POD, "kube-system", cpu_pod("elsewhere", "1", "kube-system"))
    await kit.api.create(SVC, "default", {"metadata": {"name": "s"}, "spec": {"ports": [{"port": 80}]}})
    await kit.api.create(DEPLOY, "default", {"metadata": {"name": "d"}, "spec": {
        "selector": {"matchLabels": {"a": "b"}},
        "template": {"metadata": {"labels": {"a": "b"}}, "spec": {"containers": [{"name": "c", "image": "x"}]}}}})
    await kit.settle(c)
    await c.reconcile("default/q")
    got = (await kit.api.get(RQ, "default", "q"))["status"]
    assert got["hard"] == {"pods": "10", "requests.cpu": "4", "services": "3", "count/deployments.apps": "2"}
    assert got["used"] == {"pods": "2", "requests.cpu": "1500m", "services": "1", "count/deployments.apps": "1"}
    rv = (await kit.api.get(RQ, "default", "q"))["metadata"]["resourceVersion"]
    await c.reconcile("default/q")  # nothing changed: no write
    assert (await kit.api.get(RQ, "default", "q"))["metadata"]["resourceVersion"] == rv

    # deletes (pods through the informer, the Deployment through the removed-hook) requeue the quota
    kit.api.strategies.add_removed_hook(c.removed)
    async with running(c):
        await kit.api.delete(POD, "default", "a", grace_period_seconds=0)
        await kit.api.delete(DEPLOY, "default", "d")
        async with asyncio.timeout(10):
            while (await kit.api.get(RQ, "default", "q"))["status"]["used"] != {
                    "pods": "1", "requests.cpu": "500m", "services": "1", "count/deployments.apps": "0"}:
                await asyncio.sleep(0.01)


async def test_recount_does_not_lower_usage_while_admission_is_charging(kit: Kit) -> None:
    charged = {"default": 0.0}
    admission = QuotaAdmission(kit.api, RQ)
    admission.last_charge = lambda ns: charged[ns]  # type: ignore[method-assign]
    c = ResourceQuotaController(kit.api, kit.informers, kit.kinds, admission=admission, settle=30)
    await kit.api.create(RQ, "default", quota("q", {"pods": "5"}))
    body = await kit.api.get(RQ, "default", "q")
    body["status"] = {"hard": {"pods": "5"}, "used": {"pods": "2"}}  # two pods paid for, not yet stored
    await kit.api.update(RQ, "default", "q", body, subresource="status")
    charged["default"] = asyncio.get_running_loop().time()
    await kit.settle(c)
    delay = await c.reconcile("default/q")
    assert (await kit.api.get(RQ, "default", "q"))["status"]["used"] == {"pods": "2"}
    assert delay is not None and 0 < delay <= 30
    charged["default"] = 0.0
    await c.reconcile("default/q")
    assert (await kit.api.get(RQ, "default", "q"))["status"]["used"] == {"pods": "0"}
