"""A Deployment's rollout status and Progressing condition (upstream `progress.go`), as pure functions.

`rollout_status(d, all_rss, new_rs, now)` is the status the controller writes after a rollout step:
counts and Available from `deployment_util.calculate_status`, then Progressing:
- complete (all replicas updated and available enough, generation observed) → True NewReplicaSetAvailable;
- progress since the last status (more updated or available, fewer old) → True ReplicaSetUpdated with a
  fresh lastUpdateTime (the progress deadline counts from it);
- no progress for progressDeadlineSeconds → False ProgressDeadlineExceeded;
and the first ReplicaSet's ReplicaFailure condition mirrored on the deployment.

Invariants: pure (time passed in); `d["status"]` is the status before this step, conditions included.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from lite.objects import name_of, parse_time
from lite.server.controllers import deployment_util as du

Obj = dict[str, Any]


def rollout_status(d: Obj, all_rss: list[Obj], new_rs: Obj | None, t: dt.datetime) -> Obj:
    status = du.calculate_status(d, all_rss, new_rs, t)
    deadline = du.progress_deadline(d)
    if deadline is None:
        du.remove_condition(status, "Progressing")
    current = du.get_condition(d.get("status") or {}, "Progressing")
    what = f'ReplicaSet "{name_of(new_rs)}"' if new_rs is not None else "Deployment"
    done = status["replicas"] == status["updatedReplicas"] and current is not None and \
        current.get("reason") == du.NEW_RS_AVAILABLE
    if deadline is not None and not done:
        if du.complete(d, status):
            du.set_condition(status, du.new_condition("Progressing", "True", du.NEW_RS_AVAILABLE,
                                                      f"{what} has successfully progressed.", t))
        elif du.progressing(d, status):
            cond = du.new_condition("Progressing", "True", du.RS_UPDATED, f"{what} is progressing.", t)
            if current is not None and current.get("status") == "True":
                cond["lastTransitionTime"] = current.get("lastTransitionTime")
            du.remove_condition(status, "Progressing")
            du.set_condition(status, cond)
        elif du.timed_out(d, status, t):
            du.set_condition(status, du.new_condition("Progressing", "False", du.TIMED_OUT,
                                                      f"{what} has timed out progressing.", t))
    _mirror_replica_failure(status, [*([new_rs] if new_rs is not None else []), *all_rss])
    return status


def _mirror_replica_failure(status: Obj, rss: list[Obj]) -> None:
    failure = next((c for r in rss for c in (r.get("status") or {}).get("conditions") or []
                    if c.get("type") == "ReplicaFailure" and c.get("status") == "True"), None)
    if failure is None:
        du.remove_condition(status, "ReplicaFailure")
        return
    du.set_condition(status, {"type": "ReplicaFailure", "status": "True", "reason": failure.get("reason"),
                              "message": failure.get("message"),
                              "lastUpdateTime": failure.get("lastTransitionTime"),
                              "lastTransitionTime": failure.get("lastTransitionTime")})


def stuck_requeue(d: Obj, status: Obj, t: dt.datetime) -> float | None:
    """While a rollout is progressing, when to look again so a missed deadline gets noticed."""
    deadline = du.progress_deadline(d)
    cond = du.get_condition(status, "Progressing")
    if deadline is None or cond is None or cond.get("reason") in (du.NEW_RS_AVAILABLE, du.TIMED_OUT) or \
            du.complete(d, status) or not cond.get("lastUpdateTime"):
        return None
    since = parse_time(str(cond["lastUpdateTime"]))
    return max(1.0, (since + dt.timedelta(seconds=deadline) - t).total_seconds())
