"""The Job controller's bookkeeping: one reconcile's view of a Job and its pods, and the status it writes.

`JobState(job, pods, now)` sorts the owned pods (active, terminating, terminal with the tracking finalizer),
carries the counters of the Job's status forward (succeeded, failed, completedIndexes,
uncountedTerminatedPods) and renders the new status. Pure: no I/O; `job.py` does the writes.

Invariants: a pod is counted once — only while it still carries the tracking finalizer, and through the
uids recorded in `uncountedTerminatedPods` first — and Indexed successes count distinct indexes only.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from lite.objects import deep_copy, is_deleting, meta, parse_time, uid_of
from lite.server.controllers.replicaset_pods import is_pod_ready, pods_to_delete

Obj = dict[str, Any]
INDEX_KEY = "batch.kubernetes.io/job-completion-index"
TRACKING = "batch.kubernetes.io/job-tracking"


def _stamp(t: dt.datetime) -> str:
    return t.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def format_indexes(ix: set[int]) -> str:
    """`{0,1,2,4}` → `"0-2,4"` (the completedIndexes form)."""
    out: list[str] = []
    for i in sorted(ix):
        if out and out[-1].split("-")[-1] == str(i - 1):
            out[-1] = f"{out[-1].split('-')[0]}-{i}"
        else:
            out.append(str(i))
    return ",".join(out)


def parse_indexes(s: str) -> set[int]:
    out: set[int] = set()
    for part in filter(None, (s or "").split(",")):
        lo, _, hi = part.partition("-")
        out.update(range(int(lo), int(hi or lo) + 1))
    return out


def pod_index(pod: Obj) -> int | None:
    raw = (meta(pod).get("annotations") or {}).get(INDEX_KEY) or (meta(pod).get("labels") or {}).get(INDEX_KEY)
    try:
        return int(raw) if raw is not None else None
    except ValueError:
        return None


def _phase(pod: Obj) -> str:
    return str((pod.get("status") or {}).get("phase") or "")


def _finished_at(pod: Obj, fallback: dt.datetime) -> dt.datetime:
    """When the pod ended: the latest container termination (upstream getFinishedTime), else `fallback`."""
    times = [parse_time(str(t)) for s in (pod.get("status") or {}).get("containerStatuses") or []
             if (t := ((s.get("state") or {}).get("terminated") or {}).get("finishedAt"))]
    return max(times) if times else fallback


def set_condition(conds: list[Obj], ctype: str, status: str, reason: str, message: str, t: dt.datetime) -> bool:
    """Upstream ensureJobConditionStatus: add or flip a condition; a False one is not added. True if changed."""
    for c in conds:
        if c.get("type") == ctype:
            if c.get("status") == status:
                return False
            c.update(status=status, reason=reason, message=message, lastProbeTime=_stamp(t),
                     lastTransitionTime=_stamp(t))
            return True
    if status == "False":
        return False
    conds.append({"type": ctype, "status": status, "lastProbeTime": _stamp(t), "lastTransitionTime": _stamp(t),
                  "reason": reason, "message": message})
    return True


def finished_condition(job: Obj) -> Obj | None:
    for c in (job.get("status") or {}).get("conditions") or []:
        if c.get("type") in ("Complete", "Failed") and c.get("status") == "True":
            return dict(c)
    return None


def failure_reason(job: Obj, st: JobState) -> tuple[str, str] | None:
    spec = job.get("spec") or {}
    if st.failed > int(spec.get("backoffLimit", 6)):
        return "BackoffLimitExceeded", "Job has reached the specified backoff limit"
    ads = spec.get("activeDeadlineSeconds")
    if ads is not None and st.start_time is not None and \
            (st.now - parse_time(st.start_time)).total_seconds() >= int(ads):
        return "DeadlineExceeded", "Job was active longer than specified deadline"
    return None


class JobState:
    def __init__(self, job: Obj, pods: list[Obj], t: dt.datetime, *, in_flight: set[str] | None = None) -> None:
        spec = job.get("spec") or {}
        status = job.get("status") or {}
        self.now = t
        self.pods = pods
        self.rv = str(meta(job).get("resourceVersion", ""))
        self.in_flight = in_flight or set()
        self.completions: int | None = spec.get("completions")
        self.parallelism = int(spec.get("parallelism", 1) or 0)
        self.indexed = spec.get("completionMode") == "Indexed" and self.completions is not None
        self.succeeded = int(status.get("succeeded") or 0)
        self.failed = int(status.get("failed") or 0)
        self.completed = parse_indexes(str(status.get("completedIndexes") or ""))
        unc = status.get("uncountedTerminatedPods") or {}
        self.unc_succeeded: set[str] = set(unc.get("succeeded") or [])
        self.unc_failed: set[str] = set(unc.get("failed") or [])
        self.strip: set[str] = set()
        self.conditions: list[Obj] = deep_copy({"c": status.get("conditions") or []})["c"]
        self.start_time: str | None = status.get("startTime")
        self.completion_time: str | None = status.get("completionTime")
        self.active = [p for p in pods if _phase(p) not in ("Succeeded", "Failed") and not is_deleting(p)]
        self.terminating = sum(1 for p in pods if is_deleting(p) and _phase(p) not in ("Succeeded", "Failed"))
        self.target: tuple[str, str, str] | None = None
        for c in self.conditions:
            if c.get("type") in ("FailureTarget", "SuccessCriteriaMet") and c.get("status") == "True":
                self.target = (str(c["type"]), str(c.get("reason", "")), str(c.get("message", "")))
        self.finished_now: dt.datetime | None = None
        self.new_successes = False
        self.created = 0
        self._fail_times: dict[str, dt.datetime] = {}

    # -- counting --

    def collect_uncounted(self) -> bool:
        """Note terminal or terminating pods still holding the finalizer; True if status must be flushed."""
        changed = False
        for pod in self.pods:
            uid = uid_of(pod)
            if TRACKING not in (meta(pod).get("finalizers") or []) or uid in self.in_flight:
                continue
            phase = _phase(pod)
            if phase == "Succeeded" and uid not in self.unc_failed:
                self.strip.add(uid)
                ix = pod_index(pod)
                if self.indexed:
                    if ix is not None and ix < (self.completions or 0) and ix not in self.completed:
                        self.completed.add(ix)
                        self.new_successes = changed = True
                elif uid not in self.unc_succeeded:
                    self.unc_succeeded.add(uid)
                    changed = True
            elif (phase == "Failed" or is_deleting(pod)) and uid not in self.unc_succeeded | self.unc_failed:
                self.unc_failed.add(uid)
                self._fail_times[uid] = _finished_at(pod, self.now)
                changed = True
        return changed

    def uncounted_uids(self) -> set[str]:
        return self.unc_succeeded | self.unc_failed | self.strip

    def uncounted_dict(self) -> Obj:
        return {"succeeded": sorted(self.unc_succeeded) or None, "failed": sorted(self.unc_failed) or None}

    def fold_uncounted(self) -> list[dt.datetime]:
        """Move uncounted uids into the counters (their finalizers are gone); the new failures' times."""
        self.succeeded += len(self.unc_succeeded)
        self.new_successes = self.new_successes or bool(self.unc_succeeded)
        if self.indexed:
            self.succeeded = len(self.completed)
        self.failed += len(self.unc_failed)
        times = [self._fail_times.get(u, self.now) for u in self.unc_failed]
        self.unc_succeeded.clear()
        self.unc_failed.clear()
        return times

    # -- decisions --

    def set_target(self, ctype: str, reason: str, message: str) -> None:
        set_condition(self.conditions, ctype, "True", reason, message, self.now)
        self.target = (ctype, reason, message)

    def complete(self) -> bool:
        if self.completions is None:
            return self.succeeded > 0 and not self.active
        if self.indexed:
            return len(self.completed) >= self.completions
        return self.succeeded >= self.completions

    def want_active(self) -> int:
        if self.completions is None:
            return len(self.active) if self.succeeded > 0 else self.parallelism
        done = len(self.completed) if self.indexed else self.succeeded
        return max(0, min(self.parallelism, self.completions - done))

    def excess_pods(self) -> list[Obj]:
        if not self.indexed:
            extra = len(self.active) - self.want_active()
            return pods_to_delete(self.active, self.active, extra) if extra > 0 else []
        seen: set[int] = set()
        out: list[Obj] = []
        for pod in sorted(self.active, key=lambda p: str(meta(p).get("creationTimestamp", ""))):
            ix = pod_index(pod)
            if ix is None or ix >= (self.completions or 0) or ix in self.completed or ix in seen:
                out.append(pod)
            else:
                seen.add(ix)
        return out

    def free_indexes(self, n: int) -> list[int | None]:
        busy = {pod_index(p) for p in self.active}
        free = [i for i in range(self.completions or 0) if i not in self.completed and i not in busy]
        return list(free[:n])

    # -- rendering --

    def status(self) -> Obj:
        out: Obj = {
            "active": len(self.active) + self.created,
            "ready": sum(1 for p in self.active if is_pod_ready(p)),
            "terminating": self.terminating,
            "succeeded": self.succeeded,
            "failed": self.failed,
            "startTime": self.start_time,
            "completionTime": self.completion_time,
            "conditions": self.conditions or None,
            "uncountedTerminatedPods": {},
        }
        if self.indexed:
            out["completedIndexes"] = format_indexes(self.completed)
        return out
