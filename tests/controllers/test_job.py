"""Job controller against the real in-process API: the test plays the node by writing pod phases."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from conftest import EVENT, POD, Kit, pod_template
from conftest import running as workers

from lite.errors import ApiError
from lite.objects import condition, controller_of, meta, name_of, uid_of
from lite.server.controllers.job import TRACKING_FINALIZER, JobController
from lite.server.controllers.job_status import format_indexes, parse_indexes
from lite.server.controllers.runtime import builtin

JOB = builtin("batch", "Job")
T0 = dt.datetime(2026, 1, 1, 12, 0, tzinfo=dt.UTC)


class Clock:
    def __init__(self) -> None:
        self.t = T0

    def __call__(self) -> dt.datetime:
        return self.t


def job(name: str, **spec: Any) -> dict[str, Any]:
    tpl = pod_template({"app": name})
    tpl["spec"]["restartPolicy"] = "Never"
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "namespace": "default"},
            "spec": {"template": tpl, **spec}}


async def sync(kit: Kit, c: JobController, name: str) -> float | None:
    await kit.settle(c)
    return await c.reconcile(f"default/{name}")


async def finish(kit: Kit, pod: dict[str, Any], phase: str) -> None:
    await kit.api.patch(POD, "default", name_of(pod), {"status": {"phase": phase}}, subresource="status")


async def running(kit: Kit) -> list[dict[str, Any]]:
    return [p for p in await kit.pods() if (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")]


async def test_completions_with_parallelism(kit: Kit) -> None:
    j = await kit.api.create(JOB, "default", job("pi", completions=5, parallelism=2))
    c = JobController(kit.api, kit.informers, clock=Clock())
    seen: set[str] = set()
    for _ in range(10):
        await sync(kit, c, "pi")
        active = await running(kit)
        assert len(active) <= 2
        for p in active:
            assert (controller_of(p) or {}).get("uid") == uid_of(j)
            assert TRACKING_FINALIZER in meta(p)["finalizers"]
            labels = meta(p)["labels"]
            assert labels["batch.kubernetes.io/job-name"] == "pi" and labels["job-name"] == "pi"
            assert labels["batch.kubernetes.io/controller-uid"] == uid_of(j) == labels["controller-uid"]
            seen.add(name_of(p))
            await finish(kit, p, "Succeeded")
        if condition(await kit.api.get(JOB, "default", "pi"), "Complete"):
            break
    got = await kit.api.get(JOB, "default", "pi")
    st = got["status"]
    assert (st["succeeded"], st["failed"], st.get("active", 0)) == (5, 0, 0)
    assert len(seen) == 5
    assert (condition(got, "SuccessCriteriaMet") or {}).get("reason") == "CompletionsReached"
    assert (condition(got, "Complete") or {}).get("status") == "True"
    assert st["completionTime"] and st["startTime"]
    assert all(TRACKING_FINALIZER not in (meta(p).get("finalizers") or []) for p in await kit.pods())
    events = (await kit.api.list(EVENT, "default"))["items"]
    assert any(e["reason"] == "Completed" for e in events)


async def test_backoff_limit_stops_the_job(kit: Kit) -> None:
    await kit.api.create(JOB, "default", job("bad", backoffLimit=2))
    c = JobController(kit.api, kit.informers, clock=Clock(), backoff_base=0.0)
    created: set[str] = set()
    for _ in range(10):
        await sync(kit, c, "bad")
        for p in await running(kit):
            created.add(name_of(p))
            await finish(kit, p, "Failed")
        if condition(await kit.api.get(JOB, "default", "bad"), "Failed"):
            break
    got = await kit.api.get(JOB, "default", "bad")
    assert got["status"]["failed"] == 3 and len(created) == 3
    assert (condition(got, "FailureTarget") or {}).get("reason") == "BackoffLimitExceeded"
    failed = condition(got, "Failed") or {}
    assert (failed.get("status"), failed.get("reason")) == ("True", "BackoffLimitExceeded")
    assert failed.get("message") == "Job has reached the specified backoff limit"
    await sync(kit, c, "bad")
    assert await running(kit) == []  # no more pods once failed


async def test_failed_pods_are_recreated_after_exponential_backoff(kit: Kit) -> None:
    clock = Clock()
    await kit.api.create(JOB, "default", job("flaky"))
    c = JobController(kit.api, kit.informers, clock=clock)
    await sync(kit, c, "flaky")
    [p] = await running(kit)
    await finish(kit, p, "Failed")
    assert await sync(kit, c, "flaky") == 10.0
    assert await running(kit) == []
    clock.t += dt.timedelta(seconds=10)
    await sync(kit, c, "flaky")
    [p] = await running(kit)
    await finish(kit, p, "Failed")
    assert await sync(kit, c, "flaky") == 20.0  # doubled
    assert (await kit.api.get(JOB, "default", "flaky"))["status"]["failed"] == 2


async def test_indexed_job(kit: Kit) -> None:
    await kit.api.create(JOB, "default", job("ix", completions=3, parallelism=3, completionMode="Indexed"))
    c = JobController(kit.api, kit.informers, clock=Clock())
    await sync(kit, c, "ix")
    pods = await running(kit)
    by_index = {meta(p)["annotations"]["batch.kubernetes.io/job-completion-index"]: p for p in pods}
    assert sorted(by_index) == ["0", "1", "2"]
    for ix, p in by_index.items():
        assert meta(p)["labels"]["batch.kubernetes.io/job-completion-index"] == ix
        assert name_of(p).startswith(f"ix-{ix}-")
        assert p["spec"]["hostname"] == f"ix-{ix}"
        env = p["spec"]["containers"][0]["env"]
        assert {"name": "JOB_COMPLETION_INDEX", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath":
                "metadata.annotations['batch.kubernetes.io/job-completion-index']"}}} in env
    await finish(kit, by_index["1"], "Succeeded")
    await sync(kit, c, "ix")
    assert (await kit.api.get(JOB, "default", "ix"))["status"]["completedIndexes"] == "1"
    await finish(kit, by_index["0"], "Succeeded")
    await finish(kit, by_index["2"], "Succeeded")
    await sync(kit, c, "ix")
    await sync(kit, c, "ix")
    got = await kit.api.get(JOB, "default", "ix")
    assert got["status"]["completedIndexes"] == "0-2" and got["status"]["succeeded"] == 3
    assert condition(got, "Complete") is not None


async def test_active_deadline(kit: Kit) -> None:
    clock = Clock()
    await kit.api.create(JOB, "default", job("slow", activeDeadlineSeconds=30, parallelism=2, completions=4))
    c = JobController(kit.api, kit.informers, clock=clock)
    assert await sync(kit, c, "slow") == 30.0
    assert len(await running(kit)) == 2
    clock.t += dt.timedelta(seconds=31)
    await sync(kit, c, "slow")
    got = await kit.api.get(JOB, "default", "slow")
    assert (condition(got, "FailureTarget") or {}).get("reason") == "DeadlineExceeded"
    assert condition(got, "Failed") is None  # its pods are still terminating
    await sync(kit, c, "slow")  # counts the deleted pods, drops their finalizers
    await sync(kit, c, "slow")
    got = await kit.api.get(JOB, "default", "slow")
    failed = condition(got, "Failed") or {}
    assert (failed.get("reason"), failed.get("message")) == ("DeadlineExceeded",
                                                             "Job was active longer than specified deadline")
    assert await kit.pods() == []


async def test_suspend_and_resume(kit: Kit) -> None:
    clock = Clock()
    await kit.api.create(JOB, "default", job("sus", suspend=True))
    c = JobController(kit.api, kit.informers, clock=clock)
    await sync(kit, c, "sus")
    got = await kit.api.get(JOB, "default", "sus")
    assert await kit.pods() == []
    assert (condition(got, "Suspended") or {}).get("reason") == "JobSuspended"
    assert "startTime" not in got["status"]
    clock.t += dt.timedelta(seconds=5)
    await kit.api.patch(JOB, "default", "sus", {"spec": {"suspend": False}})
    await sync(kit, c, "sus")
    got = await kit.api.get(JOB, "default", "sus")
    cond = condition(got, "Suspended") or {}
    assert (cond.get("status"), cond.get("reason")) == ("False", "JobResumed")
    assert got["status"]["startTime"] == "2026-01-01T12:00:05Z"
    assert len(await running(kit)) == 1


async def test_ttl_after_finished_deletes_the_job(kit: Kit) -> None:
    clock = Clock()
    await kit.api.create(JOB, "default", job("once", ttlSecondsAfterFinished=60))
    c = JobController(kit.api, kit.informers, clock=clock)
    await sync(kit, c, "once")
    [p] = await running(kit)
    await finish(kit, p, "Succeeded")
    await sync(kit, c, "once")
    assert await sync(kit, c, "once") == 60.0
    clock.t += dt.timedelta(seconds=60)
    await sync(kit, c, "once")
    with pytest.raises(ApiError) as e:
        await kit.api.get(JOB, "default", "once")
    assert e.value.code == 404


def test_index_intervals() -> None:
    assert format_indexes({0, 1, 2, 4, 6, 7}) == "0-2,4,6-7"
    assert parse_indexes("0-2,4,6-7") == {0, 1, 2, 4, 6, 7}
    assert format_indexes(set()) == "" and parse_indexes("") == set()


async def test_deleted_job_releases_its_pods(kit: Kit) -> None:
    await kit.api.create(JOB, "default", job("gone", parallelism=2, completions=2))
    c = JobController(kit.api, kit.informers, clock=Clock())
    await sync(kit, c, "gone")
    assert len(await running(kit)) == 2
    await kit.api.delete(JOB, "default", "gone")  # batch/v1 default: orphan the pods
    await sync(kit, c, "gone")
    pods = await kit.pods()
    assert len(pods) == 2 and all(TRACKING_FINALIZER not in (meta(p).get("finalizers") or []) for p in pods)


async def test_completes_under_its_own_workers(kit: Kit) -> None:
    """Handlers map pod events to the Job, so the live controller drives it to Complete by itself."""
    c = JobController(kit.api, kit.informers, clock=Clock())
    await kit.settle(c)
    async with workers(c):
        await kit.api.create(JOB, "default", job("live", completions=3, parallelism=2))
        await kit.until(lambda: _finish_running_until_complete(kit, "live"))
    assert (await kit.api.get(JOB, "default", "live"))["status"]["succeeded"] == 3


async def _finish_running_until_complete(kit: Kit, name: str) -> bool:
    for p in await running(kit):
        await finish(kit, p, "Succeeded")
    return condition(await kit.api.get(JOB, "default", name), "Complete") is not None


async def test_adopts_a_matching_orphan_and_releases_a_pod_that_stops_matching(kit: Kit) -> None:
    """Upstream getPodsForJob claims pods: matching orphans are adopted (controllerRef and the tracking
    finalizer added); owned pods whose labels stop matching the selector are released (both removed)."""
    j = await kit.api.create(JOB, "default", job("claim", completions=2, parallelism=2))
    labels = j["spec"]["template"]["metadata"]["labels"]
    c = JobController(kit.api, kit.informers, clock=Clock())
    orphan = await kit.api.create(POD, "default", {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "stray", "labels": dict(labels)},
        "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}})
    await sync(kit, c, "claim")
    adopted = await kit.api.get(POD, "default", "stray")
    assert (controller_of(adopted) or {}).get("uid") == uid_of(j)
    assert TRACKING_FINALIZER in meta(adopted)["finalizers"]
    assert len(await kit.pods()) == 2  # the adopted pod counts: only one more was created
    assert uid_of(adopted) == uid_of(orphan)

    await kit.api.patch(POD, "default", "stray", {"metadata": {"labels": {"batch.kubernetes.io/controller-uid": None,
                                                                          "controller-uid": None}}})
    await sync(kit, c, "claim")
    released = await kit.api.get(POD, "default", "stray")
    assert controller_of(released) is None
    assert TRACKING_FINALIZER not in (meta(released).get("finalizers") or [])
    owned = [p for p in await kit.pods() if (controller_of(p) or {}).get("uid") == uid_of(j)]
    assert len(owned) == 2  # a replacement for the released pod
