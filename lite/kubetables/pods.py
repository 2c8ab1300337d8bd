"""The pod Table row, as kubectl's pod printer computes it (Ready, Status reason, Restarts, wide columns).

The Status cell follows upstream's precedence: the phase (or `status.reason`), then SchedulingGated, then
init-container progress (`Init:1/2`, `Init:CrashLoopBackOff`, `Init:ExitCode:1`), then the last regular
container's waiting/terminated reason (`ContainerCreating`, `CrashLoopBackOff`, `Completed`, `Error`,
`ExitCode:2`), then `Terminating` (or `Unknown` for NodeLost) once deletion started.
Restarts reads `N (5m ago)` when a last termination time is known. Null-safe on partial pods.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from lite.kubetables.format import Obj, dct, get, human_duration, i, lst, or_none, s, since, when

SUCCEEDED_CONDITIONS = [{"type": "Completed", "status": "True", "reason": "Succeeded",
                         "message": "The pod has completed successfully."}]
FAILED_CONDITIONS = [{"type": "Completed", "status": "True", "reason": "Failed", "message": "The pod failed."}]


def _restartable_init(spec: Obj) -> set[str]:
    """Names of sidecar (restartPolicy: Always) init containers."""
    return {s(c, "name") for c in lst(spec, "initContainers") if s(c, "restartPolicy") == "Always"}


def _has_condition(status: Obj, ctype: str) -> bool:
    return any(s(c, "type") == ctype and s(c, "status") == "True" for c in lst(status, "conditions"))


class _Tally:
    """Running totals while walking container statuses (ready count, restarts, last restart time)."""

    def __init__(self) -> None:
        self.ready = 0
        self.restarts = 0
        self.last: dt.datetime | None = None
        self.sidecar_restarts = 0
        self.sidecar_last: dt.datetime | None = None

    def terminated_at(self, cs: Obj) -> dt.datetime | None:
        return when(get(cs, "lastState", "terminated", "finishedAt"))

    def count(self, cs: Obj, sidecar: bool) -> None:
        self.restarts += i(cs, "restartCount")
        t = self.terminated_at(cs)
        if t is not None and (self.last is None or t > self.last):
            self.last = t
        if sidecar:
            self.sidecar_restarts += i(cs, "restartCount")
            if t is not None and (self.sidecar_last is None or t > self.sidecar_last):
                self.sidecar_last = t


def _init_reason(pod: Obj, tally: _Tally, reason: str) -> tuple[str, bool]:
    """Walk init container statuses; (reason, initializing)."""
    spec, status = dct(pod, "spec"), dct(pod, "status")
    sidecars = _restartable_init(spec)
    n_init = len(lst(spec, "initContainers"))
    for idx, cs in enumerate(lst(status, "initContainerStatuses")):
        sidecar = s(cs, "name") in sidecars
        tally.count(cs, sidecar)
        term, wait = get(cs, "state", "terminated"), get(cs, "state", "waiting")
        if isinstance(term, dict) and i(term, "exitCode") == 0:
            continue
        if sidecar and get(cs, "started") is True:
            if get(cs, "ready") is True:
                tally.ready += 1
            continue
        if isinstance(term, dict):
            if s(term, "reason"):
                return "Init:" + s(term, "reason"), True
            if i(term, "signal"):
                return f"Init:Signal:{i(term, 'signal')}", True
            return f"Init:ExitCode:{i(term, 'exitCode')}", True
        if isinstance(wait, dict) and s(wait, "reason") and s(wait, "reason") != "PodInitializing":
            return "Init:" + s(wait, "reason"), True
        return f"Init:{idx}/{n_init}", True
    return reason, False


def _container_reason(pod: Obj, tally: _Tally, reason: str) -> str:
    status = dct(pod, "status")
    tally.restarts, tally.last = tally.sidecar_restarts, tally.sidecar_last
    has_running = False
    for cs in reversed(lst(status, "containerStatuses")):
        tally.count(cs, False)
        wait, term = get(cs, "state", "waiting"), get(cs, "state", "terminated")
        if isinstance(wait, dict) and s(wait, "reason"):
            reason = s(wait, "reason")
        elif isinstance(term, dict) and s(term, "reason"):
            reason = s(term, "reason")
        elif isinstance(term, dict):
            reason = f"Signal:{i(term, 'signal')}" if i(term, "signal") else f"ExitCode:{i(term, 'exitCode')}"
        elif get(cs, "ready") is True and isinstance(get(cs, "state", "running"), dict):
            has_running = True
            tally.ready += 1
    if reason == "Completed" and has_running:
        reason = "Running" if _has_condition(status, "Ready") else "NotReady"
    return reason


def pod_row(pod: Obj, now: dt.datetime) -> tuple[list[Any], list[Obj]]:
    """(cells, row conditions) of one pod."""
    spec, status = dct(pod, "spec"), dct(pod, "status")
    phase = s(status, "phase")
    reason = s(status, "reason") or phase
    for c in lst(status, "conditions"):
        if s(c, "type") == "PodScheduled" and s(c, "reason") == "SchedulingGated":
            reason = "SchedulingGated"
    conditions = SUCCEEDED_CONDITIONS if phase == "Succeeded" else FAILED_CONDITIONS if phase == "Failed" else []
    total = len(lst(spec, "containers")) + len(_restartable_init(spec))
    tally = _Tally()
    reason, initializing = _init_reason(pod, tally, reason)
    if not initializing or _has_condition(status, "Initialized"):
        reason = _container_reason(pod, tally, reason)
    if get(pod, "metadata", "deletionTimestamp"):
        if s(status, "reason") == "NodeLost":
            reason = "Unknown"
        elif phase not in ("Succeeded", "Failed"):
            reason = "Terminating"
    restarts = str(tally.restarts)
    if tally.restarts and tally.last is not None:
        restarts = f"{tally.restarts} ({human_duration(now - tally.last)} ago)"
    ips = lst(status, "podIPs")
    ip = s(ips[0], "ip") if ips else s(status, "podIP")  # podIP: writers that set only the singular field
    cells: list[Any] = [s(pod, "metadata", "name"), f"{tally.ready}/{total}", reason, restarts,
                        since(get(pod, "metadata", "creationTimestamp"), now), or_none(ip),
                        or_none(s(spec, "nodeName")), or_none(s(status, "nominatedNodeName")),
                        _readiness_gates(spec, status)]
    return cells, conditions


def _readiness_gates(spec: Obj, status: Obj) -> str:
    gates = lst(spec, "readinessGates")
    if not gates:
        return "<none>"
    conds = {s(c, "type"): s(c, "status") for c in reversed(lst(status, "conditions"))}
    true = sum(1 for g in gates if conds.get(s(g, "conditionType")) == "True")
    return f"{true}/{len(gates)}"
