"""The Deployment controller's write side: new-RS creation and revisions, scaling, the two rollout strategies,
history cleanup and status (upstream `sync.go`, `rolling.go`, `recreate.go`, `progress.go`).

RollingUpdate: scale the new RS up within maxSurge; scale old RSes down — first their unavailable pods, then
available ones while the total available stays at or above `replicas - maxUnavailable`.
Recreate: scale every old RS to 0, wait until none of their pods is left running, then scale the new RS to
`replicas`.

Invariants:
- Every RS write carries the cached resourceVersion (409 → the key is retried on fresh caches), so a
  decision is never applied to an RS that changed since it was made.
- RS scale writes also stamp desired-replicas / max-replicas annotations, which later tell a scaling event
  from a rollout and give each RS its proportion.
"""

from __future__ import annotations

from typing import Any

from lite.client import Client
from lite.errors import ApiError
from lite.events import EventRecorder
from lite.informer import NAMESPACE_INDEX, Informer
from lite.kinds import Kind
from lite.objects import (
    controller_of,
    deep_copy,
    is_deleting,
    meta,
    name_of,
    namespace_of,
    now,
    owner_ref,
    uid_of,
)
from lite.server.controllers import deployment_util as du
from lite.server.controllers.deployment_progress import rollout_status, stuck_requeue

Obj = dict[str, Any]
_TERMINATING = "NamespaceTerminating"


class RolloutMixin:
    client: Client
    kind: Kind
    rs_kind: Kind
    recorder: EventRecorder
    replicasets: Informer
    pods: Informer

    def split(self, d: Obj, rss: list[Obj]) -> tuple[Obj | None, list[Obj]]:
        raise NotImplementedError

    # -- the three entry points --

    async def sync(self, cached: Obj, d: Obj, rss: list[Obj]) -> float | None:
        """Scaling only (paused deployments and scaling events)."""
        new_rs, old_rss = await self.new_and_old(d, rss, create=False)
        await self.scale(d, new_rs, old_rss)
        new_rs, old_rss = self._refresh(d, new_rs, old_rss)
        if (d.get("spec") or {}).get("paused"):
            await self.cleanup(d, old_rss)
        await self.write_status(cached, d, du.calculate_status(d, [*old_rss, *_opt(new_rs)], new_rs, now()))
        return None

    async def rollout_rolling(self, cached: Obj, d: Obj, rss: list[Obj]) -> float | None:
        new_rs, old_rss = await self.new_and_old(d, rss, create=True)
        assert new_rs is not None
        all_rss = [*old_rss, new_rs]
        changed = await self._reconcile_new(d, all_rss, new_rs) or \
            await self._reconcile_old(d, all_rss, old_rss, new_rs)
        if not changed and du.complete(d, d.get("status") or {}):
            await self.cleanup(d, old_rss)
        new_rs, old_rss = self._refresh(d, new_rs, old_rss)
        return await self.sync_rollout_status(cached, d, [*old_rss, *_opt(new_rs)], new_rs)

    async def rollout_recreate(self, cached: Obj, d: Obj, rss: list[Obj]) -> float | None:
        new_rs, old_rss = await self.new_and_old(d, rss, create=False)
        scaled = False
        for rs in du.active(old_rss):
            changed, _ = await self.scale_rs(d, rs, 0)
            scaled = scaled or changed
        if not scaled and not self._old_pods_running(new_rs, old_rss):
            if new_rs is None:
                new_rs, old_rss = await self.new_and_old(d, rss, create=True)
            assert new_rs is not None
            await self.scale_rs(d, new_rs, du.replicas(d))
            if du.complete(d, d.get("status") or {}):
                await self.cleanup(d, old_rss)
        new_rs, old_rss = self._refresh(d, new_rs, old_rss)
        return await self.sync_rollout_status(cached, d, [*old_rss, *_opt(new_rs)], new_rs)

    def _refresh(self, d: Obj, new_rs: Obj | None, old_rss: list[Obj]) -> tuple[Obj | None, list[Obj]]:
        """Re-read the RSes from the cache when it is newer (writes above return fresh objects anyway)."""
        def fresh(rs: Obj) -> Obj:
            cached = self.replicasets.get(f"{namespace_of(rs)}/{name_of(rs)}")
            if cached is not None and uid_of(cached) == uid_of(rs) and \
                    int(meta(cached).get("resourceVersion") or 0) > int(meta(rs).get("resourceVersion") or 0):
                return cached
            return rs
        return (fresh(new_rs) if new_rs is not None else None), [fresh(r) for r in old_rss]

    # -- the new replica set and revisions --

    async def new_and_old(self, d: Obj, rss: list[Obj], *, create: bool) -> tuple[Obj | None, list[Obj]]:
        """Upstream getAllReplicaSetsAndSyncRevision: the new RS (created if asked) with its revision synced."""
        new_rs, old_rss = self.split(d, rss)
        revision = str(max((du.revision(r) for r in old_rss), default=0) + 1)
        status = d.setdefault("status", {})
        if new_rs is not None:
            new_rs = await self._sync_new_rs_annotations(d, new_rs, revision)
            await self._set_revision(d, du.annotations_of(new_rs).get(du.REVISION, revision))
            if du.progress_deadline(d) is not None and du.get_condition(status, "Progressing") is None:
                du.set_condition(status, du.new_condition("Progressing", "True", du.FOUND_NEW_RS,
                                                          f'Found new replica set "{name_of(new_rs)}"', now()))
            return new_rs, old_rss
        if not create:
            return None, old_rss
        new_rs = await self._create_new_rs(d, old_rss, revision)
        return new_rs, old_rss

    async def _sync_new_rs_annotations(self, d: Obj, rs: Obj, revision: str) -> Obj:
        ann = dict(du.annotations_of(rs))
        want = {**ann, **du.copied_annotations(d)}
        old_rev = ann.get(du.REVISION)
        if du.revision(rs) < int(revision):
            want[du.REVISION] = revision
            if old_rev:
                history = [h for h in ann.get(du.REVISION_HISTORY, "").split(",") if h]
                want[du.REVISION_HISTORY] = ",".join([*history, old_rev])
        min_ready = (d.get("spec") or {}).get("minReadySeconds") or 0
        if want == ann and ((rs.get("spec") or {}).get("minReadySeconds") or 0) == min_ready:
            return rs
        patch = {"metadata": {"resourceVersion": meta(rs).get("resourceVersion"), "annotations": want},
                 "spec": {"minReadySeconds": min_ready}}
        return await self.client.patch(self.rs_kind, namespace_of(rs), name_of(rs), patch)

    async def _set_revision(self, d: Obj, revision: str) -> None:
        if du.annotations_of(d).get(du.REVISION) == revision:
            return
        # Through status, as upstream's controller does (UpdateStatus): the annotation is no spec change, so the
        # generation kubectl apply created stays 1.
        patched = await self.client.patch(self.kind, namespace_of(d), name_of(d),
                                          {"metadata": {"annotations": {du.REVISION: revision}}}, subresource="status")
        m = d.setdefault("metadata", {})
        m.setdefault("annotations", {})[du.REVISION] = revision
        m["generation"] = meta(patched).get("generation", m.get("generation"))

    def _new_rs_body(self, d: Obj, old_rss: list[Obj], revision: str) -> Obj:
        spec = d.get("spec") or {}
        template = deep_copy(spec.get("template") or {})
        collisions = (d.get("status") or {}).get("collisionCount")
        h = du.pod_template_hash(template, collisions)
        tmeta = template.setdefault("metadata", {})
        tmeta["labels"] = {**(tmeta.get("labels") or {}), du.HASH_LABEL: h}
        selector = deep_copy(spec.get("selector") or {})
        selector["matchLabels"] = {**(selector.get("matchLabels") or {}), du.HASH_LABEL: h}
        rs: Obj = {"apiVersion": "apps/v1", "kind": "ReplicaSet",
                   "metadata": {"name": f"{name_of(d)}-{h}", "namespace": namespace_of(d),
                                "labels": dict(tmeta["labels"]), "ownerReferences": [owner_ref(d)],
                                "annotations": {**du.copied_annotations(d), du.REVISION: revision,
                                                **du.replica_annotations(d)}},
                   "spec": {"replicas": 0, "minReadySeconds": spec.get("minReadySeconds") or 0,
                            "selector": selector, "template": template}}
        rs["spec"]["replicas"] = du.new_rs_replicas(d, [*old_rss, rs], rs)
        return rs

    async def _create_new_rs(self, d: Obj, old_rss: list[Obj], revision: str) -> Obj:
        body = self._new_rs_body(d, old_rss, revision)
        status = d.setdefault("status", {})
        try:
            created = await self.client.create(self.rs_kind, namespace_of(d), body)
        except ApiError as e:
            if e.code == 409 and e.reason == "AlreadyExists":
                return await self._existing_or_collision(d, body)
            if any(c.reason == _TERMINATING for c in e.causes):
                raise
            msg = f'Failed to create new replica set "{name_of(body)}": {e.message}'
            if du.progress_deadline(d) is not None:
                du.set_condition(status, du.new_condition("Progressing", "False", du.FAILED_RS_CREATE, msg, now()))
                await self.write_status(None, d, status)
            await self.recorder.warning(d, du.FAILED_RS_CREATE, msg)
            raise
        n = du.replicas(created)
        if n > 0:
            await self.recorder.normal(d, "ScalingReplicaSet",
                                       f"Scaled up replica set {name_of(created)} to {n} from 0")
        await self._set_revision(d, revision)
        if du.progress_deadline(d) is not None:
            du.set_condition(status, du.new_condition("Progressing", "True", du.NEW_RS_CREATED,
                                                      f'Created new replica set "{name_of(created)}"', now()))
        return created

    async def _existing_or_collision(self, d: Obj, body: Obj) -> Obj:
        rs = await self.client.get(self.rs_kind, namespace_of(d), name_of(body))
        ref = controller_of(rs)
        template = (d.get("spec") or {}).get("template") or {}
        if ref is not None and ref.get("uid") == uid_of(d) and \
                du.equal_ignore_hash((rs.get("spec") or {}).get("template") or {}, template):
            return rs  # our own creation, not yet in the cache
        status = d.setdefault("status", {})
        status["collisionCount"] = int(status.get("collisionCount") or 0) + 1
        await self.write_status(None, d, status)
        raise ApiError(f'hash collision for ReplicaSet "{name_of(body)}"; retrying with collisionCount '
                       f"{status['collisionCount']}", 409, "AlreadyExists")

    # -- scaling --

    async def scale_rs(self, d: Obj, rs: Obj, n: int) -> tuple[bool, Obj]:
        """Upstream scaleReplicaSetAndRecordEvent: no-op at the right size."""
        if du.replicas(rs) == n:
            return False, rs
        return await self._scale(d, rs, n, "up" if du.replicas(rs) < n else "down")

    async def _scale(self, d: Obj, rs: Obj, n: int, operation: str) -> tuple[bool, Obj]:
        old = du.replicas(rs)
        ann = du.replica_annotations(d)
        if old == n and all(du.annotations_of(rs).get(k) == v for k, v in ann.items()):
            return False, rs
        patch = {"metadata": {"resourceVersion": meta(rs).get("resourceVersion"), "annotations": ann},
                 "spec": {"replicas": n}}
        updated = await self.client.patch(self.rs_kind, namespace_of(rs), name_of(rs), patch)
        if old != n:
            await self.recorder.normal(d, "ScalingReplicaSet",
                                       f"Scaled {operation} replica set {name_of(rs)} to {n} from {old}")
        return old != n, updated

    async def scale(self, d: Obj, new_rs: Obj | None, old_rss: list[Obj]) -> None:
        """Upstream scale(): one active RS takes everything; otherwise share a scaling event proportionally."""
        target = du.find_active_or_latest(new_rs, old_rss)
        if target is not None:
            await self.scale_rs(d, target, du.replicas(d))
            return
        if du.is_saturated(d, new_rs):
            for rs in du.active(old_rss):
                await self.scale_rs(d, rs, 0)
            return
        if not du.is_rolling(d):
            return
        rss = du.active([*old_rss, *_opt(new_rs)])
        allowed = du.replicas(d) + du.max_surge(d) if du.replicas(d) > 0 else 0
        to_add = allowed - du.total_spec(rss)
        if to_add > 0:  # larger first; newer first among equals
            rss.sort(key=lambda r: (-du.replicas(r), -du.created(r)))
        elif to_add < 0:  # larger first; older first among equals
            rss.sort(key=lambda r: (-du.replicas(r), du.created(r)))
        sizes, added = [], 0
        for rs in rss:
            share = du.proportion(d, rs, to_add, added) if to_add else 0
            sizes.append(du.replicas(rs) + share)
            added += share
        if rss and to_add:
            sizes[0] = max(0, sizes[0] + to_add - added)
        operation = "up" if to_add > 0 else "down"
        for rs, size in zip(rss, sizes, strict=True):
            await self._scale(d, rs, size, operation)

    # -- rolling update --

    async def _reconcile_new(self, d: Obj, all_rss: list[Obj], new_rs: Obj) -> bool:
        want = du.replicas(d)
        if du.replicas(new_rs) == want:
            return False
        target = want if du.replicas(new_rs) > want else du.new_rs_replicas(d, all_rss, new_rs)
        scaled, _ = await self.scale_rs(d, new_rs, target)
        return scaled

    async def _reconcile_old(self, d: Obj, all_rss: list[Obj], old_rss: list[Obj], new_rs: Obj) -> bool:
        if du.total_spec(old_rss) == 0:
            return False
        min_available = du.replicas(d) - du.max_unavailable(d)
        new_unavailable = du.replicas(new_rs) - du.status_int(new_rs, "availableReplicas")
        max_scaled_down = du.total_spec(all_rss) - min_available - new_unavailable
        if max_scaled_down <= 0:
            return False
        old_rss, cleaned = await self._cleanup_unhealthy(d, du.active(old_rss), max_scaled_down)
        scaled = await self._scale_down_old(d, [*old_rss, new_rs], old_rss)
        return cleaned + scaled > 0

    async def _cleanup_unhealthy(self, d: Obj, old_rss: list[Obj], budget: int) -> tuple[list[Obj], int]:
        out, total = [], 0
        for rs in du.by_creation(old_rss):
            unhealthy = du.replicas(rs) - du.status_int(rs, "availableReplicas")
            if total >= budget or du.replicas(rs) == 0 or unhealthy <= 0:
                out.append(rs)
                continue
            n = min(budget - total, unhealthy)
            _, rs = await self.scale_rs(d, rs, du.replicas(rs) - n)
            total += n
            out.append(rs)
        return out, total

    async def _scale_down_old(self, d: Obj, all_rss: list[Obj], old_rss: list[Obj]) -> int:
        min_available = du.replicas(d) - du.max_unavailable(d)
        available = sum(du.status_int(r, "availableReplicas") for r in all_rss)
        if available <= min_available:
            return 0
        budget, total = available - min_available, 0
        for rs in du.by_creation(old_rss):
            if total >= budget:
                break
            if du.replicas(rs) == 0:
                continue
            n = min(du.replicas(rs), budget - total)
            await self.scale_rs(d, rs, du.replicas(rs) - n)
            total += n
        return total

    # -- recreate --

    def _old_pods_running(self, new_rs: Obj | None, old_rss: list[Obj]) -> bool:
        if sum(du.status_int(r, "replicas") for r in old_rss) > 0:
            return True
        old_uids = {uid_of(r) for r in old_rss}
        if new_rs is not None:
            old_uids.discard(uid_of(new_rs))
        for rs in old_rss:
            for pod in self.pods.by_index(NAMESPACE_INDEX, namespace_of(rs)):
                ref = controller_of(pod)
                if ref is not None and ref.get("uid") in old_uids and \
                        (pod.get("status") or {}).get("phase") not in ("Failed", "Succeeded"):
                    return True
            break  # every old RS lives in the deployment's namespace: one pass is enough
        return False

    # -- history cleanup --

    async def cleanup(self, d: Obj, old_rss: list[Obj]) -> None:
        """Delete the oldest idle RSes beyond revisionHistoryLimit (upstream cleanupDeployment)."""
        limit = (d.get("spec") or {}).get("revisionHistoryLimit")
        if limit is None:
            return
        alive = sorted((r for r in old_rss if not is_deleting(r)), key=lambda r: (du.revision(r), du.created(r)))
        for rs in alive[:max(0, len(alive) - int(limit))]:
            if du.status_int(rs, "replicas") or du.replicas(rs) or \
                    int(meta(rs).get("generation") or 0) > du.status_int(rs, "observedGeneration"):
                continue
            try:
                await self.client.delete(self.rs_kind, namespace_of(rs), name_of(rs), preconditions={"uid": uid_of(rs)})
            except ApiError as e:
                if e.code not in (404, 409):
                    raise

    # -- status --

    async def sync_rollout_status(self, cached: Obj, d: Obj, all_rss: list[Obj], new_rs: Obj | None) -> float | None:
        """Upstream syncRolloutStatus: write the computed status; the delay is when to look again."""
        t = now()
        status = rollout_status(d, all_rss, new_rs, t)
        await self.write_status(cached, d, status)
        return stuck_requeue(d, status, t)

    async def write_status(self, cached: Obj | None, d: Obj, status: Obj) -> None:
        old = (cached or {}).get("status") or {}
        if cached is not None and old == status:
            return
        body = {k: None for k in old if k not in status}
        body.update(status)
        try:
            await self.client.patch(self.kind, namespace_of(d), name_of(d), {"status": body}, subresource="status")
        except ApiError as e:
            if e.code != 404:
                raise
        d["status"] = status


def _opt(rs: Obj | None) -> list[Obj]:
    return [rs] if rs is not None else []
