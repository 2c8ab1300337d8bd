"""CronJob controller against the real in-process API with an injected clock."""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import Any

from conftest import EVENT, Kit, pod_template

from lite.objects import controller_of, meta, name_of, parse_time, uid_of
from lite.server.controllers.cronjob import SCHEDULED_ANNOTATION, CronJobController
from lite.server.controllers.runtime import builtin

CJ = builtin("batch", "CronJob")
JOB = builtin("batch", "Job")


class Clock:
    def __init__(self, t: dt.datetime) -> None:
        self.t = t

    def __call__(self) -> dt.datetime:
        return self.t


def cronjob(name: str, schedule: str, **spec: Any) -> dict[str, Any]:
    tpl = pod_template({"app": name})
    tpl["spec"]["restartPolicy"] = "OnFailure"
    return {"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": name, "namespace": "default"},
            "spec": {"schedule": schedule, "jobTemplate": {"metadata": {"labels": {"run": name}},
                                                           "spec": {"template": tpl}}, **spec}}


def boundary(t: dt.datetime, minutes: int) -> dt.datetime:
    """The first multiple of `minutes` strictly after t."""
    base = t.replace(second=0, microsecond=0)
    return base + dt.timedelta(minutes=minutes - base.minute % minutes)


async def setup(kit: Kit, name: str, schedule: str, **spec: Any) -> tuple[CronJobController, Clock, dt.datetime]:
    cj = await kit.api.create(CJ, "default", cronjob(name, schedule, **spec))
    created = parse_time(meta(cj)["creationTimestamp"])
    clock = Clock(created)
    return CronJobController(kit.api, kit.informers, clock=clock), clock, created


async def sync(kit: Kit, c: CronJobController, name: str) -> float | None:
    await kit.settle(c)
    return await c.reconcile(f"default/{name}")


async def jobs(kit: Kit) -> list[dict[str, Any]]:
    return sorted((await kit.api.list(JOB, "default"))["items"], key=name_of)


async def complete(kit: Kit, job: dict[str, Any], at: dt.datetime, ctype: str = "Complete") -> None:
    stamp = at.strftime("%Y-%m-%dT%H:%M:%SZ")
    status: dict[str, Any] = {"startTime": stamp, "conditions": [
        {"type": ctype, "status": "True", "lastTransitionTime": stamp}]}
    if ctype == "Complete":
        status["completionTime"] = stamp
    await kit.api.patch(JOB, "default", name_of(job), {"status": status}, subresource="status")


async def test_creates_jobs_on_schedule(kit: Kit) -> None:
    c, clock, created = await setup(kit, "tick", "*/5 * * * *")
    t1 = boundary(created, 5)
    delay = await sync(kit, c, "tick")
    assert await jobs(kit) == []
    assert delay is not None and abs(delay - ((t1 - created).total_seconds() + 0.1)) < 1e-6
    clock.t = t1
    assert await sync(kit, c, "tick") == 300.1
    [job] = await jobs(kit)
    cj = await kit.api.get(CJ, "default", "tick")
    assert name_of(job) == f"tick-{int(t1.timestamp()) // 60}"
    assert meta(job)["annotations"][SCHEDULED_ANNOTATION] == t1.strftime("%Y-%m-%dT%H:%M:%SZ")
    assert meta(job)["labels"]["run"] == "tick"
    assert (controller_of(job) or {}).get("uid") == uid_of(cj)
    assert [r["name"] for r in cj["status"]["active"]] == [name_of(job)]
    assert cj["status"]["lastScheduleTime"] == t1.strftime("%Y-%m-%dT%H:%M:%SZ")
    await sync(kit, c, "tick")
    assert len(await jobs(kit)) == 1  # the same run is never started twice
    await complete(kit, job, t1 + dt.timedelta(seconds=30))
    clock.t = t1 + dt.timedelta(minutes=1)
    await sync(kit, c, "tick")
    cj = await kit.api.get(CJ, "default", "tick")
    assert "active" not in cj["status"]
    assert cj["status"]["lastSuccessfulTime"] == (t1 + dt.timedelta(seconds=30)).strftime("%Y-%m-%dT%H:%M:%SZ")
    clock.t = t1 + dt.timedelta(minutes=5)
    await sync(kit, c, "tick")
    assert len(await jobs(kit)) == 2
    events = (await kit.api.list(EVENT, "default"))["items"]
    assert {"SuccessfulCreate", "SawCompletedJob"} <= {e["reason"] for e in events}


async def test_forbid_and_replace(kit: Kit) -> None:
    c, clock, created = await setup(kit, "fb", "* * * * *", concurrencyPolicy="Forbid")
    t1 = boundary(created, 1)
    clock.t = t1
    await sync(kit, c, "fb")
    clock.t = t1 + dt.timedelta(minutes=1)
    await sync(kit, c, "fb")
    assert len(await jobs(kit)) == 1  # the first run is still active
    await kit.api.patch(CJ, "default", "fb", {"spec": {"concurrencyPolicy": "Replace"}})
    await sync(kit, c, "fb")
    left = [j for j in await jobs(kit) if not meta(j).get("deletionTimestamp")]
    assert [name_of(j) for j in left] == [f"fb-{int(clock.t.timestamp()) // 60}"]
    cj = await kit.api.get(CJ, "default", "fb")
    assert [r["name"] for r in cj["status"]["active"]] == [name_of(left[0])]


async def test_starting_deadline_and_too_many_missed(kit: Kit) -> None:
    c, clock, created = await setup(kit, "late", "* * * * *", startingDeadlineSeconds=30)
    clock.t = boundary(created, 1) + dt.timedelta(seconds=45)
    await sync(kit, c, "late")
    assert await jobs(kit) == []  # the run 45 s ago is past the 30 s deadline
    c2, clock2, created2 = await setup(kit, "wedged", "* * * * *")
    clock2.t = created2 + dt.timedelta(days=3)
    await sync(kit, c2, "wedged")
    [job] = await jobs(kit)
    most_recent = clock2.t.replace(second=0, microsecond=0)
    assert name_of(job) == f"wedged-{int(most_recent.timestamp()) // 60}"
    events = (await kit.api.list(EVENT, "default"))["items"]
    assert any(e["reason"] == "TooManyMissedTimes" and e["type"] == "Warning" for e in events)


async def test_suspend_and_bad_schedule(kit: Kit) -> None:
    c, clock, created = await setup(kit, "off", "* * * * *", suspend=True)
    clock.t = created + dt.timedelta(minutes=3)
    assert await sync(kit, c, "off") is None
    assert await jobs(kit) == []
    # The API refuses this schedule (422); a CronJob stored before that check must still only get an event.
    strategy = kit.api.strategies.by_gk["CronJob.batch"]
    kit.api.strategies.register("CronJob.batch", dataclasses.replace(strategy, validate=lambda obj: []))
    await kit.api.patch(CJ, "default", "off", {"spec": {"suspend": False, "schedule": "61 * * * *"}})
    kit.api.strategies.register("CronJob.batch", strategy)
    assert await sync(kit, c, "off") is None
    events = (await kit.api.list(EVENT, "default"))["items"]
    assert any(e["reason"] == "UnparseableSchedule" for e in events)


async def test_history_limits(kit: Kit) -> None:
    c, clock, created = await setup(kit, "hist", "* * * * *", successfulJobsHistoryLimit=1, failedJobsHistoryLimit=0)
    t = boundary(created, 1)
    for i in range(3):
        clock.t = t + dt.timedelta(minutes=i)
        await sync(kit, c, "hist")
        newest = (await jobs(kit))[-1]
        await complete(kit, newest, clock.t + dt.timedelta(seconds=5), "Complete" if i < 2 else "Failed")
    await sync(kit, c, "hist")
    left = [j for j in await jobs(kit) if not meta(j).get("deletionTimestamp")]
    assert [name_of(j) for j in left] == [f"hist-{int((t + dt.timedelta(minutes=1)).timestamp()) // 60}"]


async def test_time_zone_annotation(kit: Kit) -> None:
    c, clock, created = await setup(kit, "tokyo", "0 * * * *", timeZone="Asia/Tokyo")
    clock.t = boundary(created, 60)
    await sync(kit, c, "tokyo")
    [job] = await jobs(kit)
    assert meta(job)["annotations"][SCHEDULED_ANNOTATION] == \
        clock.t.astimezone(dt.timezone(dt.timedelta(hours=9))).strftime("%Y-%m-%dT%H:%M:%S+09:00")
