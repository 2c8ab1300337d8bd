"""Disruption controller (PodDisruptionBudget status) and the pods/eviction check it backs.

reconcile(namespace/name), as upstream pkg/controller/disruption `trySync`:
    pods of the namespace matching spec.selector (policy/v1: an empty selector matches every pod)
    ──► expectedPods / desiredHealthy:
          maxUnavailable (int or %)  → expected = sum of the scales of the pods' controllers
                                       (a Deployment's scale for its ReplicaSets), desired = expected - max
          minAvailable int           → expected = number of pods, desired = minAvailable
          minAvailable %             → expected = controllers' scale, desired = ceil(% of expected)
    ──► currentHealthy = Ready pods not being deleted and not in status.disruptedPods
    ──► disruptionsAllowed = max(0, currentHealthy - desiredHealthy) (0 when expected is 0)
    ──► condition DisruptionAllowed (SufficientPods / InsufficientPods; SyncFailed when a controller's
        scale cannot be found), observedGeneration; disruptedPods entries drop once the pod is gone,
        being deleted, or after `deletion_timeout` (2 min).

`EvictionCheck(client)`: `Resources(eviction_check=...)` calls `check(pod, eviction)` before deleting an
evicted pod: no budget → allowed; more than one → 500; a budget not yet observed or with
disruptionsAllowed 0 → 429 "Cannot evict pod as it would violate the pod's disruption budget."; otherwise
disruptionsAllowed is decremented and the pod recorded in disruptedPods (status write with a
resourceVersion precondition, so two concurrent evictions cannot both spend the last disruption).
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

from lite import errors
from lite.client import Client
from lite.errors import ApiError, Cause
from lite.events import EventRecorder
from lite.informer import NAMESPACE_INDEX, SharedInformers
from lite.objects import (
    controller_of,
    deep_copy,
    is_deleting,
    labels_of,
    meta,
    name_of,
    namespace_of,
    now,
    parse_time,
    rfc3339,
)
from lite.selectors import LabelSelector
from lite.server.controllers.runtime import Controller, builtin

Obj = dict[str, Any]
DELETION_TIMEOUT = 120.0
EVICT_REFUSED = "Cannot evict pod as it would violate the pod's disruption budget."
SCALE_KINDS = {("apps", "ReplicaSet"), ("apps", "Deployment"), ("apps", "StatefulSet"), ("", "ReplicationController")}


def pod_ready(pod: Obj) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (pod.get("status") or {}).get("conditions") or [])


def pdb_selector(pdb: Obj) -> LabelSelector | None:
    sel = (pdb.get("spec") or {}).get("selector")
    return None if sel is None else LabelSelector.from_dict(sel)


def scaled_value(v: Any, total: int, round_up: bool) -> int:
    """Upstream intstr.GetScaledValueFromIntOrPercent."""
    if isinstance(v, int):
        return v
    text = str(v)
    if text.endswith("%"):
        pct = int(text[:-1])
        return math.ceil(pct * total / 100) if round_up else math.floor(pct * total / 100)
    return int(text)


def _group(api_version: str) -> str:
    return api_version.rpartition("/")[0]


class DisruptionController(Controller):
    name: ClassVar[str] = "disruption"

    def __init__(self, client: Client, informers: SharedInformers, recorder: EventRecorder | None = None, *,
                 deletion_timeout: float = DELETION_TIMEOUT) -> None:
        super().__init__(client, informers, recorder or EventRecorder(client, "controllermanager"))
        self.kind = builtin("policy", "PodDisruptionBudget")
        self.deletion_timeout = deletion_timeout
        self.pdbs = self.informer(self.kind, primary=True)
        self.pods = self.informer(builtin("", "Pod"))
        self.watch_primary(self.pdbs)
        self.pods.add_handlers(on_add=self._pod_changed, on_update=self._pod_updated, on_delete=self._pod_changed)

    def _pod_changed(self, pod: Obj) -> None:
        for pdb in self.pdbs.by_index(NAMESPACE_INDEX, namespace_of(pod)):
            sel = pdb_selector(pdb)
            if sel is not None and sel.matches(labels_of(pod)):
                self.enqueue(pdb)

    def _pod_updated(self, old: Obj, new: Obj) -> None:
        self._pod_changed(new)
        if old is not new and labels_of(old) != labels_of(new):
            self._pod_changed(old)

    async def reconcile(self, key: str) -> float | None:
        pdb = self.pdbs.get(key)
        if pdb is None:
            return None
        sel = pdb_selector(pdb)
        pods = [p for p in self.pods.by_index(NAMESPACE_INDEX, namespace_of(pdb))
                if sel is not None and sel.matches(labels_of(p))]
        try:
            expected, desired = await self._expected(pdb, pods)
        except ApiError as e:
            if e.code != 404:
                raise
            await self._write(pdb, self._failsafe(pdb, str(e.message)))
            return None
        disrupted, recheck = self._disrupted(pdb, pods)
        healthy = sum(1 for p in pods if pod_ready(p) and not is_deleting(p) and name_of(p) not in disrupted)
        allowed = healthy - desired if expected > 0 and healthy - desired > 0 else 0
        status: Obj = {"observedGeneration": meta(pdb).get("generation", 1), "expectedPods": expected,
                       "currentHealthy": healthy, "desiredHealthy": desired, "disruptionsAllowed": allowed}
        if disrupted:
            status["disruptedPods"] = disrupted
        status["conditions"] = [self._condition(pdb, "True" if allowed > 0 else "False",
                                                "SufficientPods" if allowed > 0 else "InsufficientPods", "")]
        await self._write(pdb, status)
        return recheck

    def _failsafe(self, pdb: Obj, message: str) -> Obj:
        old = pdb.get("status") or {}
        return {**{k: v for k, v in old.items() if k != "conditions"},
                "observedGeneration": meta(pdb).get("generation", 1), "disruptionsAllowed": 0,
                "conditions": [self._condition(pdb, "False", "SyncFailed", message)]}

    @staticmethod
    def _condition(pdb: Obj, status: str, reason: str, message: str) -> Obj:
        for c in (pdb.get("status") or {}).get("conditions") or []:
            if c.get("type") == "DisruptionAllowed" and c.get("status") == status and c.get("reason") == reason \
                    and c.get("message", "") == message:
                return dict(c)
        return {"type": "DisruptionAllowed", "status": status, "reason": reason, "message": message,
                "lastTransitionTime": rfc3339(), "observedGeneration": meta(pdb).get("generation", 1)}

    def _disrupted(self, pdb: Obj, pods: list[Obj]) -> tuple[dict[str, str], float | None]:
        """Entries of status.disruptedPods still in effect, and when the next one expires."""
        by_name = {name_of(p): p for p in pods}
        kept: dict[str, str] = {}
        recheck: float | None = None
        t = now()
        for name, stamp in ((pdb.get("status") or {}).get("disruptedPods") or {}).items():
            pod = by_name.get(name)
            if pod is None or is_deleting(pod):
                continue
            left = self.deletion_timeout - (t - parse_time(stamp)).total_seconds()
            if left <= 0:
                continue
            kept[name] = stamp
            recheck = left if recheck is None else min(recheck, left)
        return kept, recheck

    async def _expected(self, pdb: Obj, pods: list[Obj]) -> tuple[int, int]:
        spec = pdb.get("spec") or {}
        if spec.get("maxUnavailable") is not None:
            expected = await self._scale(pods)
            return expected, max(0, expected - scaled_value(spec["maxUnavailable"], expected, True))
        min_avail = spec.get("minAvailable")
        if min_avail is None:
            return 0, 0
        if isinstance(min_avail, int) or not str(min_avail).endswith("%"):
            return len(pods), scaled_value(min_avail, len(pods), True)
        expected = await self._scale(pods)
        return expected, scaled_value(min_avail, expected, True)

    async def _scale(self, pods: list[Obj]) -> int:
        """Sum of spec.replicas of the distinct controllers of `pods` (404 when a pod has none we know)."""
        seen: dict[str, int] = {}
        for pod in pods:
            ref = controller_of(pod)
            if ref is None or (_group(str(ref.get("apiVersion", ""))), ref.get("kind")) not in SCALE_KINDS:
                raise errors.not_found("controllers", f"found no controllers for pod {name_of(pod)!r}")
            uid = str(ref.get("uid", ""))
            if uid in seen:
                continue
            seen[uid] = await self._replicas(namespace_of(pod), ref)
        return sum(seen.values())

    async def _replicas(self, ns: str, ref: Obj) -> int:
        kind = builtin(_group(str(ref["apiVersion"])), str(ref["kind"]))
        obj = await self.client.get(kind, ns, str(ref["name"]))
        if ref["kind"] == "ReplicaSet":
            owner = controller_of(obj)
            if owner is not None and owner.get("kind") == "Deployment":
                return await self._replicas(ns, owner)
        return int((obj.get("spec") or {}).get("replicas", 1))

    async def _write(self, pdb: Obj, status: Obj) -> None:
        if pdb.get("status") == status:
            return
        new = deep_copy(pdb)
        new["status"] = status
        await self.client.update(self.kind, namespace_of(pdb), name_of(pdb), new, subresource="status")


class EvictionCheck:
    """The `eviction_check` hook of `Resources`: the PDB check of upstream's eviction REST handler."""

    def __init__(self, client: Client | None = None, *, attempts: int = 5) -> None:
        self.client = client  # set after construction when the client is the Resources taking this hook
        self.kind = builtin("policy", "PodDisruptionBudget")
        self.attempts = attempts

    async def __call__(self, pod: Obj, eviction: Obj) -> None:
        await self.check(pod, eviction)

    async def check(self, pod: Obj, eviction: Obj) -> None:
        assert self.client is not None, "EvictionCheck.client is not set"
        dry_run = "All" in (((eviction or {}).get("deleteOptions") or {}).get("dryRun") or [])
        for _ in range(self.attempts):
            pdbs = [p for p in (await self.client.list(self.kind, namespace_of(pod)))["items"]
                    if (s := pdb_selector(p)) is not None and s.matches(labels_of(pod))]
            if not pdbs:
                return
            if len(pdbs) > 1:
                raise errors.internal("This pod has more than one PodDisruptionBudget, which the eviction "
                                      "subresource does not support.")
            try:
                await self._spend(pdbs[0], pod, dry_run)
                return
            except ApiError as e:
                if e.code != 409:
                    raise
        raise errors.too_many_requests(EVICT_REFUSED + " (too many concurrent evictions)", 1)

    async def _spend(self, pdb: Obj, pod: Obj, dry_run: bool) -> None:
        status = pdb.get("status") or {}
        name = name_of(pdb)
        if int(status.get("observedGeneration") or 0) < int(meta(pdb).get("generation") or 1):
            raise _refused(f"The disruption budget {name} is still being processed by the server.")
        policy = (pdb.get("spec") or {}).get("unhealthyPodEvictionPolicy") or "IfHealthyBudget"
        healthy, desired = int(status.get("currentHealthy") or 0), int(status.get("desiredHealthy") or 0)
        if not pod_ready(pod) and (policy == "AlwaysAllow" or (healthy >= desired and desired > 0)):
            return  # an unhealthy pod does not spend the budget
        allowed = int(status.get("disruptionsAllowed") or 0)
        if allowed < 0:
            raise errors.forbidden("pdb disruptions allowed is negative")
        if allowed == 0:
            raise _refused(f"The disruption budget {name} needs {desired} healthy pods and has {healthy} "
                           "currently")
        if dry_run:
            return
        new = deep_copy(pdb)
        new["status"]["disruptionsAllowed"] = allowed - 1
        new["status"].setdefault("disruptedPods", {})[name_of(pod)] = rfc3339(now())
        assert self.client is not None
        await self.client.update(self.kind, namespace_of(pdb), name, new, subresource="status")


def _refused(cause: str) -> ApiError:
    return ApiError(EVICT_REFUSED, 429, "TooManyRequests", causes=[Cause("DisruptionBudget", cause)])

