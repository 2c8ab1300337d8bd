"""core/v1 ComponentStatus (`kubectl get componentstatuses`, deprecated upstream but served by 1.32).

Upstream probes the scheduler, the controller manager and each etcd server. In lite the scheduler and the
controllers run in the server that holds the Lease `kube-system/lite-controller-manager`, and the store is
the server's own: so `scheduler` and `controller-manager` are healthy while that Lease is held and not
expired, and `etcd-0` (upstream's name, kept for scripts that look for it; it stands for lite's store) is
healthy when the store answered the Lease read.

Invariants: `statuses` is pure (the Lease and the time are given); names and condition shape are upstream's
(`type: Healthy`, `status`, `message`, `error`); nothing is stored.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from lite.objects import parse_time

Obj = dict[str, Any]
LEASE_NAMESPACE, LEASE_NAME = "kube-system", "lite-controller-manager"
NAMES = ("controller-manager", "etcd-0", "scheduler")


def _leader_problem(lease: Obj | None, now: dt.datetime) -> str:
    """"" when some server holds the controller Lease now, else why not."""
    if lease is None:
        return f"no server has taken the Lease {LEASE_NAMESPACE}/{LEASE_NAME} yet"
    spec = lease.get("spec") or {}
    holder, renewed = spec.get("holderIdentity"), spec.get("renewTime")
    if not holder or not isinstance(renewed, str):
        return f"the Lease {LEASE_NAMESPACE}/{LEASE_NAME} has no holder"
    try:
        expiry = parse_time(renewed) + dt.timedelta(seconds=float(spec.get("leaseDurationSeconds") or 0))
    except ValueError:
        return f"the Lease {LEASE_NAMESPACE}/{LEASE_NAME} has an unreadable renewTime {renewed!r}"
    if expiry < now:
        return f"the Lease {LEASE_NAMESPACE}/{LEASE_NAME} held by {holder} expired at {renewed}"
    return ""


def _status(name: str, problem: str, ok_message: str) -> Obj:
    cond: Obj = {"type": "Healthy", "status": "False" if problem else "True"}
    if problem:
        cond["error"] = problem
    else:
        cond["message"] = ok_message
    return {"kind": "ComponentStatus", "apiVersion": "v1", "metadata": {"name": name}, "conditions": [cond]}


def statuses(lease: Obj | None, store_error: str, now: dt.datetime) -> list[Obj]:
    """The three ComponentStatuses, by name."""
    leader = store_error or _leader_problem(lease, now)
    return [_status("controller-manager", leader, "ok"),
            _status("etcd-0", store_error, '{"health":"true","reason":""}'),
            _status("scheduler", leader, "ok")]
