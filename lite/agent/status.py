"""Pod status as kubelet computes it, from the pod runner's per-container records (pure: no I/O).

`ContainerRecord` is the runner's view of one container (current state, last termination, restarts, readiness);
`container_status` renders it as a `ContainerStatus` dict; `pod_phase` follows kubelet's `getPhase` (a container
waiting after a termination counts as stopped, so CrashLoopBackOff under restartPolicy Always stays Running);
`pod_conditions` gives PodScheduled/Initialized/ContainersReady/Ready and keeps `lastTransitionTime` of a condition
whose status did not change. `pod_status` assembles the whole `status` the agent pushes; the caller compares it
with the last one pushed and sends only on change.
"""

from __future__ import annotations

from dataclasses import field
from typing import Any

from lite.objects import parse_time, rfc3339
from lite.records import dataclass

Obj = dict[str, Any]

# waiting reasons
CONTAINER_CREATING = "ContainerCreating"
POD_INITIALIZING = "PodInitializing"
DEADLINE_EXCEEDED = "DeadlineExceeded"
DEADLINE_MESSAGE = "Pod was active on the node longer than the specified deadline"
CRASH_LOOP = "CrashLoopBackOff"
ERR_IMAGE_PULL = "ErrImagePull"
IMAGE_PULL_BACKOFF = "ImagePullBackOff"
# terminated reasons
COMPLETED = "Completed"
ERROR = "Error"
OOM_KILLED = "OOMKilled"


@dataclass
class Terminated:
    exit_code: int
    reason: str
    started_at: str = ""
    finished_at: str = ""
    signal: int | None = None
    message: str = ""
    container_id: str = ""

    def render(self) -> Obj:
        out: Obj = {"exitCode": self.exit_code, "reason": self.reason,
                    "startedAt": self.started_at or None, "finishedAt": self.finished_at or None}
        if self.signal:
            out["signal"] = self.signal
        if self.message:
            out["message"] = self.message
        if self.container_id:
            out["containerID"] = self.container_id
        return out


def terminated_reason(exit_code: int, oom: bool) -> str:
    if oom:
        return OOM_KILLED
    return COMPLETED if exit_code == 0 else ERROR


@dataclass
class ContainerRecord:
    """Mutable runner-side record of one container; only the runner task of its pod writes it."""

    name: str
    image: str
    image_id: str = ""
    container_id: str = ""  # "lite://<id>" once created
    waiting_reason: str = CONTAINER_CREATING
    waiting_message: str = ""
    running_since: str = ""  # set while running
    terminated: Terminated | None = None  # set while terminated (current state)
    last: Terminated | None = None  # lastState
    restart_count: int = 0
    ready: bool = False
    started: bool = False
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def state(self) -> str:
        if self.running_since:
            return "running"
        if self.terminated is not None:
            return "terminated"
        return "waiting"

    def set_waiting(self, reason: str, message: str = "") -> None:
        self.running_since, self.terminated = "", None
        self.waiting_reason, self.waiting_message = reason, message
        self.ready = self.started = False

    def set_running(self, since: str | None = None) -> None:
        self.terminated = None
        self.running_since = since or rfc3339()

    def set_terminated(self, term: Terminated) -> None:
        self.running_since = ""
        self.terminated = term
        self.ready = self.started = False

    def restart(self, reason: str) -> None:
        """The current termination becomes lastState; the container waits (e.g. CrashLoopBackOff)."""
        if self.terminated is not None:
            self.last = self.terminated
        self.restart_count += 1
        self.set_waiting(reason)


def container_status(rec: ContainerRecord) -> Obj:
    state: Obj
    if rec.state == "running":
        state = {"running": {"startedAt": rec.running_since}}
    elif rec.state == "terminated":
        assert rec.terminated is not None
        state = {"terminated": rec.terminated.render()}
    else:
        waiting: Obj = {"reason": rec.waiting_reason}
        if rec.waiting_message:
            waiting["message"] = rec.waiting_message
        state = {"waiting": waiting}
    out: Obj = {
        "name": rec.name, "image": rec.image, "imageID": rec.image_id, "state": state,
        "lastState": {"terminated": rec.last.render()} if rec.last else {},
        "ready": rec.ready, "restartCount": rec.restart_count, "started": rec.started,
    }
    if rec.container_id:
        out["containerID"] = rec.container_id
    return out


def _init_done(rec: ContainerRecord) -> bool:
    return rec.terminated is not None and rec.terminated.exit_code == 0


def _init_failed(rec: ContainerRecord) -> bool:
    term = rec.terminated or (rec.last if rec.state == "waiting" else None)
    return term is not None and term.exit_code != 0


def pod_phase(restart_policy: str, inits: list[ContainerRecord], apps: list[ContainerRecord]) -> str:
    """kubelet getPhase."""
    if any(not _init_done(r) for r in inits):
        if restart_policy == "Never" and any(_init_failed(r) for r in inits):
            return "Failed"
        return "Pending"
    running = waiting = stopped = succeeded = 0
    for r in apps:
        if r.state == "running":
            running += 1
        elif r.state == "terminated":
            stopped += 1
            succeeded += r.terminated is not None and r.terminated.exit_code == 0
        elif r.last is not None:
            stopped += 1
        else:
            waiting += 1
    if waiting:
        return "Pending"
    if running:
        return "Running"
    if stopped == len(apps) and apps:
        if restart_policy == "Always":
            return "Running"
        if stopped == succeeded:
            return "Succeeded"
        if restart_policy == "Never":
            return "Failed"
        return "Running"
    return "Pending"


def _cond(ctype: str, ok: bool, reason: str = "", message: str = "") -> Obj:
    c: Obj = {"type": ctype, "status": "True" if ok else "False", "lastProbeTime": None}
    if not ok and reason:
        c["reason"] = reason
        c["message"] = message
    return c


def pod_conditions(phase: str, inits: list[ContainerRecord], apps: list[ContainerRecord],
                   previous: list[Obj], now: str | None = None) -> list[Obj]:
    pending_init = [r.name for r in inits if not _init_done(r)]
    unready = [r.name for r in apps if not r.ready]
    conds = [_cond("PodScheduled", True)]
    if phase == "Succeeded" and not pending_init:
        conds.append(_cond("Initialized", True, ))
    else:
        conds.append(_cond("Initialized", not pending_init, "ContainersNotInitialized",
                           f"containers with incomplete status: [{' '.join(pending_init)}]"))
    if phase in ("Succeeded", "Failed"):
        conds.append(_cond("ContainersReady", False, "PodCompleted", ""))
        conds.append(_cond("Ready", False, "PodCompleted", ""))
    else:
        msg = f"containers with unready status: [{' '.join(unready)}]"
        conds.append(_cond("ContainersReady", not unready, "ContainersNotReady", msg))
        conds.append(_cond("Ready", not unready, "ContainersNotReady", msg))
    prev = {c.get("type"): c for c in previous}
    stamp = now or rfc3339()
    for c in conds:
        old = prev.get(c["type"])
        same = old is not None and old.get("status") == c["status"] and old.get("lastTransitionTime")
        c["lastTransitionTime"] = old["lastTransitionTime"] if same and old else stamp
    return conds


def qos_class(pod: Obj) -> str:
    """Guaranteed / Burstable / BestEffort from requests and limits (kubelet's GetPodQOS, cpu and memory)."""
    spec = pod.get("spec") or {}
    containers = (spec.get("containers") or []) + (spec.get("initContainers") or [])
    any_set = False
    guaranteed = True
    for c in containers:
        res = c.get("resources") or {}
        limits, requests = res.get("limits") or {}, res.get("requests") or {}
        for r in ("cpu", "memory"):
            if r in limits or r in requests:
                any_set = True
            lim, req = limits.get(r), requests.get(r, limits.get(r))
            if lim is None or str(req) != str(lim):
                guaranteed = False
    if not any_set:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"


@dataclass
class PodView:
    """Pod-level facts the status needs besides the container records."""

    host_ip: str = ""
    pod_ip: str = ""
    start_time: str = ""
    restart_policy: str = "Always"
    qos: str = "BestEffort"
    previous_conditions: list[Obj] = field(default_factory=list)
    message: str = ""
    reason: str = ""
    failed: bool = False  # the pod as a whole failed (active deadline), whatever its containers say


def deadline_remaining(spec: Obj, start_time: str, now: float) -> float | None:
    """Seconds left before `spec.activeDeadlineSeconds` counted from the pod's startTime (<= 0: past);
    None when the pod has no deadline or has not started."""
    secs = spec.get("activeDeadlineSeconds")
    if secs is None or not start_time or isinstance(secs, bool) or not isinstance(secs, int | float):
        return None
    try:
        started = parse_time(start_time).timestamp()
    except ValueError:
        return None
    return started + float(secs) - now


def pod_status(view: PodView, inits: list[ContainerRecord], apps: list[ContainerRecord]) -> Obj:
    phase = "Failed" if view.failed else pod_phase(view.restart_policy, inits, apps)
    status: Obj = {
        "phase": phase,
        "conditions": pod_conditions(phase, inits, apps, view.previous_conditions),
        "hostIP": view.host_ip or None,
        "hostIPs": [{"ip": view.host_ip}] if view.host_ip else None,
        "podIP": view.pod_ip or None,
        "podIPs": [{"ip": view.pod_ip}] if view.pod_ip else None,
        "startTime": view.start_time or None,
        "containerStatuses": [container_status(r) for r in apps],
        "qosClass": view.qos,
    }
    if inits:
        # kubelet: a completed init container is ready
        status["initContainerStatuses"] = [{**container_status(r), "ready": r.ready or _init_done(r)}
                                           for r in inits]
    if view.reason:
        status["reason"], status["message"] = view.reason, view.message
    return {k: v for k, v in status.items() if v is not None}


def without_times(status: Obj) -> Obj:
    """The status with condition transition times dropped: what "changed" compares."""
    out = dict(status)
    out["conditions"] = [{k: v for k, v in c.items() if k != "lastTransitionTime"}
                         for c in status.get("conditions") or []]
    return out
