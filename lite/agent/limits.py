"""Whether this node enforces pods' resource limits, and what its Node says about it.

Role: pure translation, table-tested. `decide(runtime, cgroups_problem, allow_no_limits)`: what the agent found
(None when a cgroup hierarchy is usable, else why not) and how it was started → `Limits`:

    cgroups usable                                   → enforced
    no cgroups, runtime "process"                    → unenforced, allowed (reason ProcessRuntime): that runtime
                                                       is itself the opt-out (host processes, no isolation at
                                                       all; what a non-root `lite server` runs)
    no cgroups, --allow-no-resource-limits           → unenforced, allowed (reason AllowNoResourceLimits)
    no cgroups, otherwise                            → refused (reason CgroupsUnavailable): the Node reports
                                                       Ready=False, no pod is started

A refused node stays up (k3s users expect `kubectl describe node` to say why a node is NotReady, rather than an
agent crash-looping on a machine they may not reach) and keeps reporting: node lifecycle taints it not-ready,
so nothing is scheduled there; pods bound to it anyway stay Pending with a Warning event.

`conditions(limits, ready)` rewrites the Ready condition of a refused node (Ready=False with the reason and
message) and adds a `ResourceLimitsUnenforced` condition (True) when pods run without limits; `annotation`
is the Node annotation `lite.dev/resource-limits` ("enforced" / "unenforced" / "refused"), machine-readable.

Invariants: no I/O; an enforced node's conditions are unchanged (kubelet's four).
"""

from __future__ import annotations

from typing import Any

from lite.records import dataclass

Obj = dict[str, Any]
ANNOTATION = "lite.dev/resource-limits"
CONDITION = "ResourceLimitsUnenforced"
FLAG = "--allow-no-resource-limits"
REFUSED_REASON = "CgroupsUnavailable"


@dataclass(frozen=True)
class Limits:
    enforced: bool
    refused: bool = False
    reason: str = ""  # why limits are not enforced ("" when they are)
    message: str = ""

    @property
    def annotation(self) -> str:
        return "enforced" if self.enforced else "refused" if self.refused else "unenforced"


ENFORCED = Limits(enforced=True)


def decide(runtime: str, cgroups_problem: str | None, allow_no_limits: bool) -> Limits:
    """See the module docstring's table."""
    if cgroups_problem is None:
        return ENFORCED
    if runtime == "process":
        return Limits(False, False, "ProcessRuntime",
                      f"pods run as plain host processes (--runtime process) without CPU, memory and PID limits: "
                      f"{cgroups_problem}")
    if allow_no_limits:
        return Limits(False, False, "AllowNoResourceLimits",
                      f"pods run without CPU, memory and PID limits ({FLAG}; for test clusters): {cgroups_problem}")
    return Limits(False, True, REFUSED_REASON,
                  f"resource limits cannot be enforced ({cgroups_problem}), so no pod is started; fix the "
                  f"node's cgroups, or restart the agent with {FLAG} (test clusters only)")


def conditions(limits: Limits, conds: list[Obj]) -> list[Obj]:
    """The node's conditions (kubelet's, with Ready) as `limits` makes them; a new list, same dicts otherwise."""
    if limits.enforced:
        return conds
    out: list[Obj] = []
    for c in conds:
        if c.get("type") == "Ready" and limits.refused:
            c = {**c, "status": "False", "reason": limits.reason, "message": limits.message}
        if c.get("type") == "Ready" and not limits.refused:
            out.append({"type": CONDITION, "status": "True", "reason": limits.reason, "message": limits.message})
        out.append(c)
    return out


def pod_refusal(limits: Limits, node: str) -> str:
    """The Warning event message for a pod this node does not start ("" when it starts pods)."""
    if not limits.refused:
        return ""
    return f"node {node} cannot enforce resource limits, so the pod is not started: {limits.message}"
