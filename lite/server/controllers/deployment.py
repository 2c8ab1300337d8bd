"""Deployment controller: rolls a Deployment's pod template out through ReplicaSets.

reconcile(namespace/name), as upstream `DeploymentController.syncDeployment`:
    claim ReplicaSets (adopt matching orphans, release non-matching children)
    deleting  → status only
    paused/resumed → Progressing condition DeploymentPaused / DeploymentResumed (Unknown)
    paused or a scaling event (spec.replicas differs from an active RS's desired-replicas annotation)
              → scale (proportionally during a rollout), clean up old RSes, status
    otherwise → the strategy's rollout (`deployment_rollout`): RollingUpdate or Recreate

The new ReplicaSet is the one whose template equals the deployment's (ignoring pod-template-hash); when
missing it is created as `<deployment>-<hash>` with the hash label on its selector, template and itself,
revision = highest old revision + 1, and the deployment's annotations copied.

Invariants:
- Writes only ReplicaSets (scale, annotations) and the deployment's revision annotation and status; pods
  belong to the ReplicaSet controller.
- Level-triggered and idempotent: every decision is recomputed from the caches; the status is written
  once per reconcile, only when it changed.
"""

from __future__ import annotations

import logging
from typing import Any, ClassVar

from lite.client import Client
from lite.events import EventRecorder
from lite.informer import NAMESPACE_INDEX, SharedInformers
from lite.objects import (
    controller_of,
    deep_copy,
    is_deleting,
    labels_of,
    namespace_of,
    now,
    uid_of,
)
from lite.selectors import LabelSelector
from lite.server.controllers import deployment_util as du
from lite.server.controllers.controllerref import adopt, release, still_ours
from lite.server.controllers.deployment_rollout import RolloutMixin
from lite.server.controllers.runtime import Controller, builtin

Obj = dict[str, Any]
log = logging.getLogger("lite.controllers.deployment")


class DeploymentController(RolloutMixin, Controller):
    name: ClassVar[str] = "deployment"
    workers = 4

    def __init__(self, client: Client, informers: SharedInformers, recorder: EventRecorder | None = None) -> None:
        super().__init__(client, informers, recorder or EventRecorder(client, "deployment-controller"))
        self.kind = builtin("apps", "Deployment")
        self.rs_kind = builtin("apps", "ReplicaSet")
        self.deployments = self.informer(self.kind, primary=True)
        self.replicasets = self.informer(self.rs_kind)
        self.pods = self.informer(builtin("", "Pod"))
        self.watch_primary(self.deployments)
        self.replicasets.add_handlers(on_add=self._rs_changed, on_update=self._rs_updated, on_delete=self._rs_changed)
        self.pods.add_handlers(on_delete=self._pod_deleted)

    # -- handlers --

    def _rs_changed(self, rs: Obj) -> None:
        if not self.enqueue_owner(rs, "Deployment", "apps") and controller_of(rs) is None:
            self._enqueue_matching(rs)

    def _rs_updated(self, old: Obj, new: Obj) -> None:
        old_ref, new_ref = controller_of(old), controller_of(new)
        if old_ref is not None and (new_ref is None or old_ref.get("uid") != new_ref.get("uid")):
            self.enqueue_owner(old, "Deployment", "apps")
        if new_ref is not None:
            self.enqueue_owner(new, "Deployment", "apps")
        elif labels_of(old) != labels_of(new) or old_ref is not None:
            self._enqueue_matching(new)

    def _enqueue_matching(self, rs: Obj) -> None:
        for d in self.deployments.by_index(NAMESPACE_INDEX, namespace_of(rs)):
            if LabelSelector.from_dict((d.get("spec") or {}).get("selector")).matches(labels_of(rs)):
                self.enqueue(d)

    def _pod_deleted(self, pod: Obj) -> None:
        # Recreate waits for old pods to be gone: their deletion is what lets it move on.
        ref = controller_of(pod)
        if ref is None or ref.get("kind") != "ReplicaSet":
            return
        rs = self.replicasets.get(f"{namespace_of(pod)}/{ref.get('name', '')}")
        if rs is not None:
            self.enqueue_owner(rs, "Deployment", "apps")

    # -- reconcile --

    async def reconcile(self, key: str) -> float | None:
        cached = self.deployments.get(key)
        if cached is None:
            return None
        d = deep_copy(cached)
        rss = await self._claim(d)
        if is_deleting(d):
            new_rs, old_rss = self.split(d, rss)
            await self.write_status(cached, d, du.calculate_status(d, [*old_rss, *_opt(new_rs)], new_rs, now()))
            return None
        self._paused_condition(d)
        if (d.get("spec") or {}).get("paused") or self._scaling_event(d, rss):
            return await self.sync(cached, d, rss)
        if du.is_rolling(d):
            return await self.rollout_rolling(cached, d, rss)
        return await self.rollout_recreate(cached, d, rss)

    def _paused_condition(self, d: Obj) -> None:
        """Upstream checkPausedConditions, on the working copy's status."""
        if du.progress_deadline(d) is None:
            return
        status = d.setdefault("status", {})
        cond = du.get_condition(status, "Progressing")
        if cond is not None and cond.get("reason") == du.TIMED_OUT:
            return
        paused = bool((d.get("spec") or {}).get("paused"))
        paused_cond = cond is not None and cond.get("reason") == du.PAUSED
        if paused and not paused_cond:
            du.set_condition(status, du.new_condition("Progressing", "Unknown", du.PAUSED, "Deployment is paused",
                                                      now()))
        elif not paused and paused_cond:
            du.set_condition(status, du.new_condition("Progressing", "Unknown", du.RESUMED,
                                                      "Deployment is resumed", now()))

    def _scaling_event(self, d: Obj, rss: list[Obj]) -> bool:
        new_rs, old_rss = self.split(d, rss)
        for rs in du.active([*old_rss, *_opt(new_rs)]):
            desired = du.int_annotation(rs, du.DESIRED_REPLICAS)
            if desired is not None and desired != du.replicas(d):
                return True
        return False

    # -- replica sets of a deployment --

    def split(self, d: Obj, rss: list[Obj]) -> tuple[Obj | None, list[Obj]]:
        """(new RS or None, old RSes): the oldest RS with the deployment's template is the new one."""
        template = (d.get("spec") or {}).get("template") or {}
        new_rs = next((r for r in du.by_creation(rss)
                       if du.equal_ignore_hash((r.get("spec") or {}).get("template") or {}, template)), None)
        return new_rs, [r for r in rss if r is not new_rs]

    async def _claim(self, d: Obj) -> list[Obj]:
        selector = LabelSelector.from_dict((d.get("spec") or {}).get("selector"))
        owned: list[Obj] = []
        checked: bool | None = None
        for rs in self.replicasets.by_index(NAMESPACE_INDEX, namespace_of(d)):
            ref = controller_of(rs)
            matches = selector.matches(labels_of(rs))
            if ref is not None:
                if ref.get("uid") != uid_of(d):
                    continue
                if matches or is_deleting(d):
                    owned.append(rs)
                elif not is_deleting(rs):
                    await release(self.client, self.rs_kind, rs, d)
                continue
            if not matches or is_deleting(rs) or is_deleting(d):
                continue
            if checked is None:
                checked = await still_ours(self.client, self.kind, d)
            if checked:
                adopted = await adopt(self.client, self.rs_kind, rs, d)
                if adopted is not None:
                    owned.append(adopted)
        return owned


def _opt(rs: Obj | None) -> list[Obj]:
    return [rs] if rs is not None else []
