"""core/v1 ComponentStatus (`kubectl get componentstatuses`, deprecated upstream but served by 1.32).

Upstream probes the scheduler, the controller manager and each etcd server. In lite the controllers run in the
server that holds the Lease `kube-system/kube-controller-manager` and the scheduler in the one that holds
`kube-system/kube-scheduler` (`lite.server.leaderelection`, which owns these names): so `controller-manager`
and `scheduler` are healthy while their Lease is held and not expired, and `etcd-0` (upstream's name, kept for
scripts that look for it; it stands for lite's store) is healthy when the store answered the Lease reads.

Invariants: `statuses` is pure (the Leases and the time are given); names and condition shape are upstream's
(`type: Healthy`, `status`, `message`, `error`); nothing is stored.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from lite.objects import parse_time

Obj = dict[str, Any]
LEASE_NAMESPACE = "kube-system"
CONTROLLER_MANAGER_LEASE, SCHEDULER_LEASE = "kube-controller-manager", "kube-scheduler"  # = leaderelection's
NAMES = ("controller-manager", "etcd-0", "scheduler")


def _leader_problem(name: str, lease: Obj | None, now: dt.datetime) -> str:
    """"" when some server holds the Lease `name` now, else why not."""
    where = f"{LEASE_NAMESPACE}/{name}"
    if lease is None:
        return f"no server has taken the Lease {where} yet"
    spec = lease.get("spec") or {}
    holder, renewed = spec.get("holderIdentity"), spec.get("renewTime")
    if not holder or not isinstance(renewed, str):
        return f"the Lease {where} has no holder"
    try:
        expiry = parse_time(renewed) + dt.timedelta(seconds=float(spec.get("leaseDurationSeconds") or 0))
    except ValueError:
        return f"the Lease {where} has an unreadable renewTime {renewed!r}"
    if expiry < now:
        return f"the Lease {where} held by {holder} expired at {renewed}"
    return ""


def _status(name: str, problem: str, ok_message: str) -> Obj:
    cond: Obj = {"type": "Healthy", "status": "False" if problem else "True"}
    if problem:
        cond["error"] = problem
    else:
        cond["message"] = ok_message
    return {"kind": "ComponentStatus", "apiVersion": "v1", "metadata": {"name": name}, "conditions": [cond]}


def statuses(controller_lease: Obj | None, scheduler_lease: Obj | None, store_error: str,
             now: dt.datetime) -> list[Obj]:
    """The three ComponentStatuses, by name."""
    return [_status("controller-manager",
                    store_error or _leader_problem(CONTROLLER_MANAGER_LEASE, controller_lease, now), "ok"),
            _status("etcd-0", store_error, '{"health":"true","reason":""}'),
            _status("scheduler", store_error or _leader_problem(SCHEDULER_LEASE, scheduler_lease, now), "ok")]
