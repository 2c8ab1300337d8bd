"""Job controller: run pods of a template until enough succeed, or give up (upstream `pkg/controller/job`).

reconcile(namespace/name), as upstream `syncJob` (1.32, pod-replacement and delayed terminal conditions on):
    finished (Complete/Failed) → strip leftover tracking finalizers; ttlSecondsAfterFinished: delete the Job
    owned pods ──► count terminal/terminating pods that still carry `batch.kubernetes.io/job-tracking`:
        record their uids in status.uncountedTerminatedPods ──► remove the finalizers ──► fold them into
        status.succeeded / failed / completedIndexes (never counted twice: the finalizer is the token)
    ──► FailureTarget (BackoffLimitExceeded: failed > backoffLimit; DeadlineExceeded: activeDeadlineSeconds
        past startTime) or SuccessCriteriaMet (completions reached) → delete the active pods; the terminal
        condition (Failed / Complete, completionTime) follows once no pod is still terminating
    ──► suspend: delete active pods, condition Suspended (JobSuspended / JobResumed, startTime reset)
    ──► otherwise create or delete pods towards min(parallelism, remaining completions), re-creating after
        failures only once the backoff (10 s doubling, 6 min cap) since the last failure has passed
    ──► status (active, ready, terminating, startTime, ...) written when it changed

Pods: template labels plus `batch.kubernetes.io/controller-uid`/`job-name` (and legacy `controller-uid`,
`job-name`), the tracking finalizer, a controller ownerReference; Indexed mode adds the annotation and label
`batch.kubernetes.io/job-completion-index`, hostname `<job>-<index>`, generateName `<job>-<index>-` and env
JOB_COMPLETION_INDEX (fieldRef on the annotation).

Invariants: level-triggered; `clock` is injectable; creations wait for earlier ones to be seen (Expectations).
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable
from typing import Any, ClassVar

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
from lite.server.controllers.job_claim import claim_pods, job_selector
from lite.server.controllers.job_status import (
    INDEX_KEY,
    JobState,
    failure_reason,
    finished_condition,
    format_indexes,
    parse_indexes,
    set_condition,
)
from lite.server.controllers.replicaset import SlowStartError, slow_start_batch
from lite.server.controllers.replicaset_pods import pods_to_delete
from lite.server.controllers.runtime import Controller, Expectations, builtin

Obj = dict[str, Any]
log = logging.getLogger("lite.controllers.job")

TRACKING_FINALIZER = "batch.kubernetes.io/job-tracking"
BACKOFF_BASE = 10.0
BACKOFF_MAX = 360.0
BURST = 500


def stamp(t: dt.datetime) -> str:
    return t.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class JobController(Controller):
    name: ClassVar[str] = "job"
    workers = 4

    def __init__(self, client: Client, informers: SharedInformers, recorder: EventRecorder | None = None, *,
                 clock: Callable[[], dt.datetime] = now, backoff_base: float = BACKOFF_BASE,
                 backoff_max: float = BACKOFF_MAX) -> None:
        super().__init__(client, informers, recorder or EventRecorder(client, "job-controller"))
        self.kind = builtin("batch", "Job")
        self.pod_kind = builtin("", "Pod")
        self.clock = clock
        self.backoff_base = backoff_base
        self.backoff_max = backoff_max
        self.expectations = Expectations()
        # Per job key: (failures since the last success, time of the last failure), as upstream backoffRecord.
        self.backoff: dict[str, tuple[int, dt.datetime]] = {}
        # Per job key: pods whose finalizer removal was sent but is not yet in the cache. Until it is, the
        # cache still shows them as uncounted; counting them again would count them twice.
        self.stripped: dict[str, set[str]] = {}
        self.jobs = self.informer(self.kind, primary=True)
        self.pods = self.informer(self.pod_kind)
        self.watch_primary(self.jobs)
        self.pods.add_handlers(on_add=self._pod_added, on_update=lambda old, new: self._pod_changed(new),
                               on_delete=self._pod_changed)

    def on_start(self) -> None:
        self.expectations.clear()
        self.backoff.clear()
        self.stripped.clear()

    def _pod_added(self, pod: Obj) -> None:
        if self.enqueue_owner(pod, "Job", "batch"):
            ref = controller_of(pod) or {}
            self.expectations.creation_observed(f"{namespace_of(pod)}/{ref.get('name', '')}")
        elif controller_of(pod) is None:
            self._enqueue_matching(pod)

    def _pod_changed(self, pod: Obj) -> None:
        if not self.enqueue_owner(pod, "Job", "batch") and controller_of(pod) is None:
            self._enqueue_matching(pod)

    def _enqueue_matching(self, pod: Obj) -> None:
        """An orphan: every Job of its namespace whose selector matches may adopt it."""
        labels = meta(pod).get("labels") or {}
        for job in self.jobs.by_index(NAMESPACE_INDEX, namespace_of(pod)):
            sel = job_selector(job)
            if sel is not None and sel.matches(labels):
                self.enqueue(job)

    # -- reconcile --

    async def reconcile(self, key: str) -> float | None:
        job = self.jobs.get(key)
        if job is None:
            self.expectations.delete(key)
            self.backoff.pop(key, None)
            self.stripped.pop(key, None)
            await self._release_orphans(key)
            return None
        uid = uid_of(job)
        candidates = [p for p in self.pods.by_index(NAMESPACE_INDEX, namespace_of(job))
                      if (ref := controller_of(p)) is None or ref.get("uid") == uid]
        if finished_condition(job) is not None or is_deleting(job):
            # Nothing will count these pods any more: their finalizers must not keep them alive.
            await self._strip_finalizers([p for p in candidates if controller_of(p) is not None], lambda p: True)
            return None if is_deleting(job) else await self._ttl(job)
        pods = await claim_pods(self.client, self.kind, self.pod_kind, job, candidates, TRACKING_FINALIZER)
        st = JobState(job, pods, self.clock(), in_flight=self._in_flight(key, pods))
        await self._count(job, key, st)
        delay = await self._decide(job, key, st)
        await self._write_status(job, st)
        if st.finished_now is not None:
            return await self._ttl_from(job, st)
        return delay

    # -- counting terminated pods (finalizer protocol) --

    def _in_flight(self, key: str, pods: list[Obj]) -> set[str]:
        """Uids whose finalizer removal the cache has not caught up with yet."""
        holding = {uid_of(p) for p in pods if TRACKING_FINALIZER in (meta(p).get("finalizers") or [])}
        left = self.stripped.get(key, set()) & holding
        self.stripped[key] = left
        return left

    async def _count(self, job: Obj, key: str, st: JobState) -> None:
        newly = st.collect_uncounted()
        if newly:
            # The resourceVersion precondition makes a reconcile working from a stale Job fail (409, retried)
            # instead of overwriting newer counts.
            await self._patch_status(job, st, {"uncountedTerminatedPods": st.uncounted_dict()})
        done = await self._strip_finalizers(st.pods, lambda p: uid_of(p) in st.uncounted_uids())
        self.stripped.setdefault(key, set()).update(done)
        failures = st.fold_uncounted()
        if st.new_successes:
            self.backoff.pop(key, None)
        if failures:
            count, _ = self.backoff.get(key, (0, st.now))
            self.backoff[key] = (count + len(failures), max(failures))

    async def _release_orphans(self, key: str) -> None:
        """The Job is gone: drop the tracking finalizer from pods it left behind (upstream orphan cleanup)."""
        ns, name = key.split("/", 1)
        orphans = [p for p in self.pods.by_index(NAMESPACE_INDEX, ns)
                   if (ref := controller_of(p)) is not None and ref.get("kind") == "Job"
                   and ref.get("name") == name and str(ref.get("apiVersion", "")).startswith("batch/")]
        await self._strip_finalizers(orphans, lambda p: True)

    async def _strip_finalizers(self, pods: list[Obj], which: Callable[[Obj], bool]) -> set[str]:
        """Remove the tracking finalizer from the chosen pods; the uids it was removed from (or gone)."""
        done: set[str] = set()
        for pod in pods:
            if TRACKING_FINALIZER in (meta(pod).get("finalizers") or []) and which(pod):
                await self._strip_one(pod)
                done.add(uid_of(pod))
        return done

    async def _strip_one(self, pod: Obj) -> None:
        uid = uid_of(pod)
        for _ in range(3):
            fins = list(meta(pod).get("finalizers") or [])
            if TRACKING_FINALIZER not in fins:
                return
            i = fins.index(TRACKING_FINALIZER)
            # The test op pins the index: a list changed meanwhile fails (422) and is re-read.
            ops = [{"op": "test", "path": f"/metadata/finalizers/{i}", "value": TRACKING_FINALIZER},
                   {"op": "remove", "path": f"/metadata/finalizers/{i}"}]
            try:
                await self.client.patch(self.pod_kind, namespace_of(pod), name_of(pod), ops, patch_type="json")
                return
            except ApiError as e:
                if e.code == 404:
                    return
                if e.code != 422:
                    raise
            try:
                pod = await self.client.get(self.pod_kind, namespace_of(pod), name_of(pod))
            except ApiError as e:
                if e.code == 404:
                    return
                raise
            if uid_of(pod) != uid:
                return  # a new pod of the same name: not ours to touch
        raise RuntimeError(f"could not remove {TRACKING_FINALIZER} from pod {name_of(pod)}")

    # -- deciding what to do --

    async def _decide(self, job: Obj, key: str, st: JobState) -> float | None:
        spec = job.get("spec") or {}
        if st.target is None:
            reason = failure_reason(job, st)
            if reason is not None:
                st.set_target("FailureTarget", *reason)
            elif st.complete():
                st.set_target("SuccessCriteriaMet", "CompletionsReached", "Reached expected number of succeeded pods")
        if st.target is not None:
            deleted = bool(st.active)
            await self._delete_pods(job, key, st.active)
            st.active = []
            # The terminal condition waits until no pod of the Job is still running or terminating.
            if st.terminating == 0 and not deleted:
                await self._finish(job, st)
            return None
        if spec.get("suspend"):
            await self._suspend(job, key, st)
            return None
        if set_condition(st.conditions, "Suspended", "False", "JobResumed", "Job resumed", st.now):
            st.start_time = stamp(st.now)
            await self.recorder.normal(job, "Resumed", "Job resumed")
        if st.start_time is None:
            st.start_time = stamp(st.now)
        return await self._manage(job, key, st)

    async def _finish(self, job: Obj, st: JobState) -> None:
        assert st.target is not None
        ctype, reason, message = st.target
        final = "Failed" if ctype == "FailureTarget" else "Complete"
        set_condition(st.conditions, final, "True", reason, message, st.now)
        st.finished_now = st.now
        if final == "Complete":
            st.completion_time = stamp(st.now)
            await self.recorder.normal(job, "Completed", "Job completed")
        else:
            await self.recorder.warning(job, reason, message)

    async def _suspend(self, job: Obj, key: str, st: JobState) -> None:
        await self._delete_pods(job, key, st.active)
        st.active = []
        if set_condition(st.conditions, "Suspended", "True", "JobSuspended", "Job suspended", st.now):
            await self.recorder.normal(job, "Suspended", "Job suspended")

    def _backoff_remaining(self, key: str, t: dt.datetime) -> float:
        failures, last = self.backoff.get(key, (0, t))
        if failures <= 0:
            return 0.0
        delay = min(self.backoff_base * 2 ** min(failures - 1, 30), self.backoff_max)
        return max(0.0, (last + dt.timedelta(seconds=delay) - t).total_seconds())

    async def _manage(self, job: Obj, key: str, st: JobState) -> float | None:
        if not self.expectations.satisfied(key):
            return None
        excess = st.excess_pods()
        if excess:
            await self._delete_pods(job, key, excess)
            st.active = [p for p in st.active if all(p is not e for e in excess)]
            return None
        want = st.want_active()
        diff = want - len(st.active)
        if diff <= 0:
            return self._deadline_delay(job, st)
        wait = self._backoff_remaining(key, st.now)
        if wait > 0:
            return wait
        indexes = st.free_indexes(diff) if st.indexed else [None] * diff
        n = min(len(indexes), BURST)
        if n == 0:
            return self._deadline_delay(job, st)
        self.expectations.expect_creations(key, n)
        todo = iter(indexes[:n])
        try:
            await slow_start_batch(n, 1, lambda: self._create_pod(job, next(todo)))
        except SlowStartError as e:
            for _ in range(n - e.succeeded):
                self.expectations.creation_observed(key)
            raise e.error from None
        st.created += n
        return self._deadline_delay(job, st)

    def _deadline_delay(self, job: Obj, st: JobState) -> float | None:
        ads = (job.get("spec") or {}).get("activeDeadlineSeconds")
        if ads is None or st.start_time is None:
            return None
        end = parse_time(st.start_time) + dt.timedelta(seconds=int(ads))
        return max(0.0, (end - st.now).total_seconds())

    # -- pods --

    def pod_from_template(self, job: Obj, index: int | None) -> Obj:
        tpl = deep_copy((job.get("spec") or {}).get("template") or {})
        tmeta = tpl.get("metadata") or {}
        labels = dict(tmeta.get("labels") or {})
        labels.update({"batch.kubernetes.io/controller-uid": uid_of(job), "batch.kubernetes.io/job-name": name_of(job),
                       "controller-uid": uid_of(job), "job-name": name_of(job)})
        annotations = dict(tmeta.get("annotations") or {})
        spec = tpl.get("spec") or {}
        gen = f"{name_of(job)}-"
        if index is not None:
            labels[INDEX_KEY] = annotations[INDEX_KEY] = str(index)
            gen = f"{name_of(job)}-{index}-"
            spec["hostname"] = f"{name_of(job)}-{index}"
            env_ref = {"name": "JOB_COMPLETION_INDEX", "valueFrom": {"fieldRef": {
                "fieldPath": f"metadata.annotations['{INDEX_KEY}']"}}}
            for c in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
                c["env"] = [e for e in c.get("env") or [] if e.get("name") != "JOB_COMPLETION_INDEX"] + [env_ref]
        pod_meta: Obj = {"generateName": gen, "namespace": namespace_of(job), "labels": labels,
                         "finalizers": [*(tmeta.get("finalizers") or []), TRACKING_FINALIZER],
                         "ownerReferences": [owner_ref(job)]}
        if annotations:
            pod_meta["annotations"] = annotations
        return {"apiVersion": "v1", "kind": "Pod", "metadata": pod_meta, "spec": spec}

    async def _create_pod(self, job: Obj, index: int | None) -> None:
        try:
            pod = await self.client.create(self.pod_kind, namespace_of(job), self.pod_from_template(job, index))
        except ApiError as e:
            await self.recorder.warning(job, "FailedCreate", f"Error creating: {e.message}")
            raise
        await self.recorder.normal(job, "SuccessfulCreate", f"Created pod: {name_of(pod)}")

    async def _delete_pods(self, job: Obj, key: str, pods: list[Obj]) -> None:
        for pod in pods_to_delete(pods, pods, len(pods)):
            try:
                await self.client.delete(self.pod_kind, namespace_of(pod), name_of(pod),
                                         preconditions={"uid": uid_of(pod)})
            except ApiError as e:
                if e.code not in (404, 409):
                    await self.recorder.warning(job, "FailedDelete", f"Error deleting: {e.message}")
                    raise
                continue
            await self.recorder.normal(job, "SuccessfulDelete", f"Deleted pod: {name_of(pod)}")

    # -- status and TTL --

    async def _patch_status(self, job: Obj, st: JobState, status: Obj) -> None:
        body = {"metadata": {"resourceVersion": st.rv}, "status": status}
        try:
            new = await self.client.patch(self.kind, namespace_of(job), name_of(job), body, subresource="status")
        except ApiError as e:
            if e.code != 404:
                raise
            return
        st.rv = rv_of(new)

    async def _write_status(self, job: Obj, st: JobState) -> None:
        status = st.status()
        old = job.get("status") or {}
        if any(_clean(old.get(k)) != _clean(v) for k, v in status.items()):
            if not status["uncountedTerminatedPods"]:
                status["uncountedTerminatedPods"] = {"succeeded": None, "failed": None}
            await self._patch_status(job, st, status)

    async def _ttl(self, job: Obj) -> float | None:
        cond = finished_condition(job)
        if cond is None:
            return None
        done = (job.get("status") or {}).get("completionTime") or cond.get("lastTransitionTime")
        return await self._expire(job, parse_time(str(done)) if done else self.clock())

    async def _ttl_from(self, job: Obj, st: JobState) -> float | None:
        assert st.finished_now is not None
        return await self._expire(job, st.finished_now)

    async def _expire(self, job: Obj, finished: dt.datetime) -> float | None:
        ttl = (job.get("spec") or {}).get("ttlSecondsAfterFinished")
        if ttl is None:
            return None
        left = (finished + dt.timedelta(seconds=int(ttl)) - self.clock()).total_seconds()
        if left > 0:
            return left
        try:
            await self.client.delete(self.kind, namespace_of(job), name_of(job), propagation_policy="Background",
                                     preconditions={"uid": uid_of(job)})
        except ApiError as e:
            if e.code not in (404, 409):
                raise
        return None


def _clean(v: Any) -> Any:
    """Drop None and empty values so a cached status compares equal to the one about to be written."""
    if isinstance(v, dict):
        d = {k: c for k, x in v.items() if (c := _clean(x)) not in (None, {}, [])}
        return d or None
    if isinstance(v, list):
        return [_clean(x) for x in v] or None
    return v


__all__ = ["TRACKING_FINALIZER", "JobController", "format_indexes", "parse_indexes"]
