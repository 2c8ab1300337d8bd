"""CronJob controller: create Jobs on a cron schedule (upstream `pkg/controller/cronjob`, controller v2).

reconcile(namespace/name), as upstream `syncCronJob`:
    owned Jobs ──► status.active: add unexpected running children, drop finished (SawCompletedJob) and
        vanished (MissingJob) ones; lastSuccessfulTime from completed children
    ──► deleting, bad timeZone (UnknownTimeZone), suspended or unparseable schedule (UnparseableSchedule):
        status only
    ──► the most recent unmet schedule time since lastScheduleTime (or creation), bounded below by
        now - startingDeadlineSeconds; > 100 missed → TooManyMissedTimes warning; past the deadline →
        MissSchedule warning; already started → nothing
    ──► concurrencyPolicy: Forbid skips while a child runs; Replace deletes the running children first
    ──► create Job `<cronjob>-<scheduled unix time in minutes>` from jobTemplate, annotated with
        `batch.kubernetes.io/cronjob-scheduled-timestamp` (RFC 3339 in the schedule's zone), owned by the
        CronJob; lastScheduleTime, active; then finished children beyond the history limits are deleted
    ──► return the delay until the next schedule time (the runtime re-queues: no polling)

Invariants: `clock` is injectable; the Job name is a function of the scheduled time, so a retried or
concurrent create of the same run meets AlreadyExists instead of running twice.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable
from typing import Any, ClassVar

from lite import cron
from lite.client import Client
from lite.errors import ApiError
from lite.events import EventRecorder
from lite.informer import NAMESPACE_INDEX, SharedInformers
from lite.objects import (
    controller_of,
    deep_copy,
    is_deleting,
    meta,
    name_of,
    namespace_of,
    now,
    owner_ref,
    parse_time,
    rv_of,
    uid_of,
)
from lite.server.controllers.job_status import finished_condition
from lite.server.controllers.runtime import Controller, builtin

Obj = dict[str, Any]
log = logging.getLogger("lite.controllers.cronjob")

SCHEDULED_ANNOTATION = "batch.kubernetes.io/cronjob-scheduled-timestamp"
MANY_MISSED = 100
_NEXT_SLACK = 0.1  # upstream adds 100 ms so the requeue lands just after the schedule time


def _stamp(t: dt.datetime) -> str:
    return t.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _go_rfc3339(t: dt.datetime) -> str:
    s = t.replace(microsecond=0).isoformat()
    return s[:-6] + "Z" if s.endswith("+00:00") else s


def most_recent_schedule(cj: Obj, t: dt.datetime, sched: cron.Schedule) -> tuple[dt.datetime | None, int]:
    """The latest schedule time in (earliest, t] and an estimate of how many were missed (upstream
    `mostRecentScheduleTime`, including its interval arithmetic so decades of misses cost no CPU)."""
    m = meta(cj)
    status = cj.get("status") or {}
    earliest = parse_time(str(status.get("lastScheduleTime") or m.get("creationTimestamp") or _stamp(t)))
    sds = (cj.get("spec") or {}).get("startingDeadlineSeconds")
    if sds is not None:
        earliest = max(earliest, t - dt.timedelta(seconds=int(sds)))
    t1 = sched.next(earliest)
    if t1 is None or t < t1:
        return None, 0
    t2 = sched.next(t1)
    if t2 is None or t < t2:
        return t1, 1
    between = round((t2 - t1).total_seconds())
    if between < 1:
        raise ValueError("time difference between two schedules is less than 1 second")
    missed = int((t - t1).total_seconds()) // between + 1
    cursor: dt.datetime | None = t1 + dt.timedelta(seconds=(missed - 2) * between)
    recent: dt.datetime | None = None
    while cursor is not None:
        cursor = sched.next(cursor)
        if cursor is None or cursor > t:
            break
        recent = cursor
    return recent, missed


def job_ref(job: Obj) -> Obj:
    return {"kind": "Job", "namespace": namespace_of(job), "name": name_of(job), "uid": uid_of(job),
            "apiVersion": "batch/v1", "resourceVersion": meta(job).get("resourceVersion", "")}


class CronJobController(Controller):
    name: ClassVar[str] = "cronjob"
    workers = 2

    def __init__(self, client: Client, informers: SharedInformers, recorder: EventRecorder | None = None, *,
                 clock: Callable[[], dt.datetime] = now) -> None:
        super().__init__(client, informers, recorder or EventRecorder(client, "cronjob-controller"))
        self.kind = builtin("batch", "CronJob")
        self.job_kind = builtin("batch", "Job")
        self.clock = clock
        self.cronjobs = self.informer(self.kind, primary=True)
        self.jobs = self.informer(self.job_kind)
        self.watch_primary(self.cronjobs)
        self.jobs.add_handlers(on_add=self._job_changed, on_update=lambda old, new: self._job_changed(new),
                               on_delete=self._job_changed)

    def _job_changed(self, job: Obj) -> None:
        self.enqueue_owner(job, "CronJob", "batch")

    async def reconcile(self, key: str) -> float | None:
        cj = self.cronjobs.get(key)
        if cj is None:
            return None
        t = self.clock()
        jobs = [j for j in self.jobs.by_index(NAMESPACE_INDEX, namespace_of(cj))
                if (controller_of(j) or {}).get("uid") == uid_of(cj)]
        status = deep_copy({k: v for k, v in (cj.get("status") or {}).items()
                            if k in ("active", "lastScheduleTime", "lastSuccessfulTime")})
        await self._track_children(cj, jobs, status)
        delay = await self._schedule(cj, jobs, status, t)
        await self._write_status(cj, status)
        if not is_deleting(cj):
            await self._cleanup(cj, jobs)
        return delay

    # -- children --

    async def _track_children(self, cj: Obj, jobs: list[Obj], status: Obj) -> None:
        active: list[Obj] = list(status.get("active") or [])
        for j in jobs:
            found = any(r.get("uid") == uid_of(j) for r in active)
            done = finished_condition(j)
            if not found and done is None:
                await self.recorder.warning(cj, "UnexpectedJob",
                                            f"Saw a job that the controller did not create or forgot: {name_of(j)}")
                active.append(job_ref(j))
            elif found and done is not None:
                active = [r for r in active if r.get("uid") != uid_of(j)]
                await self.recorder.normal(cj, "SawCompletedJob",
                                           f"Saw completed job: {name_of(j)}, condition: {done.get('type')}")
            if done is not None and done.get("type") == "Complete":
                completed = (j.get("status") or {}).get("completionTime")
                last = status.get("lastSuccessfulTime")
                if completed and (not last or parse_time(str(completed)) > parse_time(str(last))):
                    status["lastSuccessfulTime"] = completed
        live = {uid_of(j) for j in jobs}
        for ref in [r for r in active if r.get("uid") not in live]:
            if not await self._still_exists(ref):
                active.remove(ref)
                await self.recorder.normal(cj, "MissingJob", f"Active job went missing: {ref.get('name')}")
        status["active"] = active

    async def _still_exists(self, ref: Obj) -> bool:
        try:
            got = await self.client.get(self.job_kind, str(ref.get("namespace", "")), str(ref.get("name", "")))
        except ApiError as e:
            if e.code == 404:
                return False
            raise
        return uid_of(got) == ref.get("uid")

    # -- scheduling --

    async def _schedule(self, cj: Obj, jobs: list[Obj], status: Obj, t: dt.datetime) -> float | None:
        spec = cj.get("spec") or {}
        if is_deleting(cj):
            return None
        tz = spec.get("timeZone")
        try:
            cron.load_zone(tz or "")
        except ValueError as e:
            await self.recorder.warning(cj, "UnknownTimeZone", f"invalid timeZone: {tz!r}: {e}")
            return None
        if spec.get("suspend"):
            return None
        try:
            sched = cron.parse(str(spec.get("schedule", "")), tz)
            scheduled, missed = most_recent_schedule({**cj, "status": status}, t, sched)
        except ValueError as e:
            await self.recorder.warning(cj, "UnparseableSchedule",
                                        f"unparseable schedule: {spec.get('schedule')!r} : {e}")
            return None
        if missed > MANY_MISSED:
            await self.recorder.warning(cj, "TooManyMissedTimes", "too many missed start times. Set or decrease "
                                        ".spec.startingDeadlineSeconds or check clock skew")
        delay = _until_next(sched, t)
        if scheduled is None:
            return delay
        sds = spec.get("startingDeadlineSeconds")
        if sds is not None and scheduled + dt.timedelta(seconds=int(sds)) < t:
            await self.recorder.warning(cj, "MissSchedule", "Missed scheduled time to start a job: "
                                        f"{scheduled.strftime('%a, %d %b %Y %H:%M:%S +0000')}")
            return delay
        job_name = f"{name_of(cj)}-{int(scheduled.timestamp()) // 60}"
        active: list[Obj] = status["active"]
        if any(r.get("name") == job_name for r in active):
            return delay
        policy = spec.get("concurrencyPolicy", "Allow")
        if policy == "Forbid" and active:
            log.info("cronjob %s: not starting %s: prior run still active (Forbid)", name_of(cj), job_name)
            return delay
        if policy == "Replace":
            for ref in list(active):
                await self._delete_job(cj, str(ref.get("name", "")))
                active.remove(ref)
        created = await self._create_job(cj, job_name, scheduled, sched)
        if created is None:
            return delay
        active.append(job_ref(created))
        status["lastScheduleTime"] = _stamp(scheduled)
        return delay

    def job_from_template(self, cj: Obj, job_name: str, scheduled: dt.datetime, sched: cron.Schedule) -> Obj:
        jt = deep_copy((cj.get("spec") or {}).get("jobTemplate") or {})
        jmeta = jt.get("metadata") or {}
        annotations = dict(jmeta.get("annotations") or {})
        annotations[SCHEDULED_ANNOTATION] = _go_rfc3339(scheduled.astimezone(sched.zone))
        job_meta: Obj = {"name": job_name, "namespace": namespace_of(cj), "annotations": annotations,
                         "ownerReferences": [owner_ref(cj)]}
        if jmeta.get("labels"):
            job_meta["labels"] = jmeta["labels"]
        return {"apiVersion": "batch/v1", "kind": "Job", "metadata": job_meta, "spec": jt.get("spec") or {}}

    async def _create_job(self, cj: Obj, job_name: str, scheduled: dt.datetime, sched: cron.Schedule) -> Obj | None:
        body = self.job_from_template(cj, job_name, scheduled, sched)
        try:
            job = await self.client.create(self.job_kind, namespace_of(cj), body)
        except ApiError as e:
            if e.code == 409 and e.reason == "AlreadyExists":
                job = await self.client.get(self.job_kind, namespace_of(cj), job_name)
                # Our own earlier create whose status write was lost: adopt the result, do not run twice.
                return job if (controller_of(job) or {}).get("uid") == uid_of(cj) else None
            await self.recorder.warning(cj, "FailedCreate", f"Error creating job: {e.message}")
            raise
        await self.recorder.normal(cj, "SuccessfulCreate", f"Created job {job_name}")
        return job

    async def _delete_job(self, cj: Obj, job_name: str) -> None:
        try:
            await self.client.delete(self.job_kind, namespace_of(cj), job_name, propagation_policy="Background")
        except ApiError as e:
            if e.code != 404:
                await self.recorder.warning(cj, "FailedDelete", f"Deleted job: {e.message}")
                raise
            return
        await self.recorder.normal(cj, "SuccessfulDelete", f"Deleted job {job_name}")

    # -- status and history --

    async def _write_status(self, cj: Obj, status: Obj) -> None:
        old = cj.get("status") or {}
        body = {"active": status.get("active") or None, "lastScheduleTime": status.get("lastScheduleTime"),
                "lastSuccessfulTime": status.get("lastSuccessfulTime")}
        if all((old.get(k) or None) == v for k, v in body.items()):
            return
        try:
            # Precondition on the cached resourceVersion: a stale view must not roll lastScheduleTime back.
            await self.client.patch(self.kind, namespace_of(cj), name_of(cj),
                                    {"metadata": {"resourceVersion": rv_of(cj)}, "status": body},
                                    subresource="status")
        except ApiError as e:
            if e.code != 404:
                raise

    async def _cleanup(self, cj: Obj, jobs: list[Obj]) -> None:
        spec = cj.get("spec") or {}
        for ctype, field in (("Complete", "successfulJobsHistoryLimit"), ("Failed", "failedJobsHistoryLimit")):
            limit = spec.get(field)
            if limit is None:
                continue
            done = [j for j in jobs if (finished_condition(j) or {}).get("type") == ctype]
            done.sort(key=_start_key)
            for j in done[:max(0, len(done) - int(limit))]:
                await self._delete_job(cj, name_of(j))


def _start_key(job: Obj) -> tuple[int, str]:
    start = (job.get("status") or {}).get("startTime")
    return (0, str(start)) if start else (1, str(meta(job).get("creationTimestamp", "")))


def _until_next(sched: cron.Schedule, t: dt.datetime) -> float | None:
    nxt = sched.next(t)
    return None if nxt is None else (nxt - t).total_seconds() + _NEXT_SLACK
