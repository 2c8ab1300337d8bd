"""StatefulSet controller: pods with stable identities and storage (upstream `pkg/controller/statefulset`).

reconcile(namespace/name), as upstream `defaultStatefulSetControl.updateStatefulSet`:
    revisions: the template's ControllerRevision (updateRevision, created when new) and status.currentRevision
    ──► replicas, in ordinal order (start = spec.ordinals.start): missing → create its PVCs, then the pod
        `<set>-<ordinal>`; Failed/Succeeded → delete (re-created next sync). OrderedReady stops at the first
        pod it created or that is not yet Running+Ready (+minReadySeconds); Parallel does not wait
    ──► condemned pods (ordinals past the end), highest first: OrderedReady one at a time, only when every
        pod before it is healthy; Parallel all at once
    ──► RollingUpdate: the highest ordinal >= partition whose revision is not updateRevision is deleted (one at
        a time, waiting for health); OnDelete: nothing (deleted pods come back at updateRevision)
    ──► status; when every pod is updated and ready, currentRevision = updateRevision; history truncated

Pods carry the template labels plus `statefulset.kubernetes.io/pod-name`, `apps.kubernetes.io/pod-index`
and `controller-revision-hash: <revision name>`, hostname = pod name, subdomain = serviceName, and a
`persistentVolumeClaim` volume per volumeClaimTemplate (claim `<template>-<set>-<ordinal>`). Pods below the
partition are created from the current revision, the rest from the update revision.

Invariants: level-triggered; pods are owned by the set (controller ref); PVCs are never deleted here
(retention policy Retain).
"""

from __future__ import annotations

import logging
from typing import Any, ClassVar

from lite.client import Client
from lite.errors import ApiError
from lite.events import EventRecorder
from lite.informer import NAMESPACE_INDEX, SharedInformers
from lite.objects import controller_of, deep_copy, is_deleting, meta, name_of, namespace_of, now, owner_ref, uid_of
from lite.server.controllers import history
from lite.server.controllers.replicaset_pods import is_pod_available, is_pod_ready, ready_since
from lite.server.controllers.runtime import Controller, builtin
from lite.server.controllers.statefulset_claims import claim_owner_refs, refs_differ

Obj = dict[str, Any]
log = logging.getLogger("lite.controllers.statefulset")

POD_NAME_LABEL = "statefulset.kubernetes.io/pod-name"
POD_INDEX_LABEL = "apps.kubernetes.io/pod-index"


def _phase(pod: Obj) -> str:
    return str((pod.get("status") or {}).get("phase") or "")


def running_ready(pod: Obj) -> bool:
    return _phase(pod) == "Running" and is_pod_ready(pod)


class StatefulSetController(Controller):
    name: ClassVar[str] = "statefulset"
    workers = 2

    def __init__(self, client: Client, informers: SharedInformers, recorder: EventRecorder | None = None) -> None:
        super().__init__(client, informers, recorder or EventRecorder(client, "statefulset-controller"))
        self.kind = builtin("apps", "StatefulSet")
        self.pod_kind = builtin("", "Pod")
        self.pvc_kind = builtin("", "PersistentVolumeClaim")
        self.sets = self.informer(self.kind, primary=True)
        self.pods = self.informer(self.pod_kind)
        self.revisions = self.informer(history.CR_KIND)
        self.claims = self.informer(self.pvc_kind)
        self.watch_primary(self.sets)
        self.pods.add_handlers(on_add=self._child, on_update=lambda old, new: self._child(new), on_delete=self._child)
        self.revisions.add_handlers(on_add=self._child, on_delete=self._child)

    def _child(self, obj: Obj) -> None:
        self.enqueue_owner(obj, "StatefulSet", "apps")

    # -- reconcile --

    async def reconcile(self, key: str) -> float | None:
        sts = self.sets.get(key)
        if sts is None:
            return None
        spec = sts.get("spec") or {}
        pods = {name_of(p): p for p in self.pods.by_index(NAMESPACE_INDEX, namespace_of(sts))
                if (controller_of(p) or {}).get("uid") == uid_of(sts)}
        revisions = history.owned_revisions(self.revisions, sts)
        update_rev, collisions = await history.sync_revisions(self.client, sts, revisions)
        current_name = (sts.get("status") or {}).get("currentRevision")
        current_rev = next((r for r in revisions if name_of(r) == current_name), update_rev)
        wait: float | None = None
        if not is_deleting(sts):
            await self._sync_claim_owners(sts, pods)
            wait = await self._sync_pods(sts, pods, current_rev, update_rev)
        await self._write_status(sts, list(pods.values()), current_rev, update_rev, collisions)
        live = {(meta(p).get("labels") or {}).get(history.HASH_LABEL, "") for p in pods.values()}
        await history.truncate(self.client, sts, history.owned_revisions(self.revisions, sts),
                               live | {name_of(current_rev), name_of(update_rev)},
                               int(spec.get("revisionHistoryLimit", 10)))
        return wait

    def _ordinals(self, sts: Obj) -> range:
        spec = sts.get("spec") or {}
        start = int((spec.get("ordinals") or {}).get("start") or 0)
        return range(start, start + int(spec.get("replicas", 1) or 0))

    def _ordinal_of(self, sts: Obj, pod: Obj) -> int | None:
        prefix, _, ordinal = name_of(pod).rpartition("-")
        return int(ordinal) if prefix == name_of(sts) and ordinal.isdigit() else None

    def _healthy(self, sts: Obj, pod: Obj) -> tuple[bool, float | None]:
        """Running, Ready and available for minReadySeconds; else (False, seconds until it may be)."""
        min_ready = int((sts.get("spec") or {}).get("minReadySeconds") or 0)
        if not running_ready(pod) or is_deleting(pod):
            return False, None
        t = now()
        if is_pod_available(pod, min_ready, t):
            return True, None
        since = ready_since(pod)
        return False, (max(0.0, min_ready - (t - since).total_seconds()) if since else float(min_ready))

    async def _sync_pods(self, sts: Obj, pods: dict[str, Obj], current: Obj, update: Obj) -> float | None:
        spec = sts.get("spec") or {}
        monotonic = spec.get("podManagementPolicy", "OrderedReady") != "Parallel"
        wanted = self._ordinals(sts)
        for ordinal in wanted:
            name = f"{name_of(sts)}-{ordinal}"
            pod = pods.get(name)
            if pod is not None and _phase(pod) in ("Failed", "Succeeded") and not is_deleting(pod):
                await self._delete_pod(sts, pod)
                pods.pop(name)
                if monotonic:
                    return None
                continue
            if pod is None:
                pods[name] = await self._create_pod(sts, ordinal, self._revision_for(sts, ordinal, current, update))
                if monotonic:
                    return None
                continue
            healthy, wait = self._healthy(sts, pod)
            if monotonic and not healthy:
                return wait
        condemned = sorted((p for p in pods.values() if (o := self._ordinal_of(sts, p)) is None or o not in wanted),
                           key=lambda p: -(self._ordinal_of(sts, p) or 0))
        for pod in condemned:
            if is_deleting(pod):
                if monotonic:
                    return None
                continue
            await self._delete_pod(sts, pod)
            if monotonic:
                return None
        if (spec.get("updateStrategy") or {}).get("type", "RollingUpdate") == "RollingUpdate":
            return await self._rolling_update(sts, pods, update)
        return None

    def _partition(self, sts: Obj) -> int:
        us = (sts.get("spec") or {}).get("updateStrategy") or {}
        return int((us.get("rollingUpdate") or {}).get("partition") or 0)

    def _revision_for(self, sts: Obj, ordinal: int, current: Obj, update: Obj) -> Obj:
        us = (sts.get("spec") or {}).get("updateStrategy") or {}
        if us.get("type", "RollingUpdate") == "RollingUpdate" and ordinal < self._partition(sts):
            return current
        return update

    async def _rolling_update(self, sts: Obj, pods: dict[str, Obj], update: Obj) -> float | None:
        partition = self._partition(sts)
        for ordinal in reversed(self._ordinals(sts)):
            if ordinal < partition:
                break
            pod = pods.get(f"{name_of(sts)}-{ordinal}")
            if pod is None:
                return None
            if (meta(pod).get("labels") or {}).get(history.HASH_LABEL) != name_of(update):
                if not is_deleting(pod):
                    await self._delete_pod(sts, pod)
                return None
            healthy, wait = self._healthy(sts, pod)
            if not healthy:
                return wait
        return None

    # -- pods and claims --

    def claims_for(self, sts: Obj, ordinal: int) -> list[Obj]:
        sel = ((sts.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
        out = []
        for tpl in (sts.get("spec") or {}).get("volumeClaimTemplates") or []:
            claim = deep_copy(tpl)
            cmeta = claim.setdefault("metadata", {})
            cmeta["name"] = f"{cmeta.get('name', '')}-{name_of(sts)}-{ordinal}"
            cmeta["namespace"] = namespace_of(sts)
            cmeta["labels"] = {**(cmeta.get("labels") or {}), **sel}
            for k in ("uid", "resourceVersion", "creationTimestamp"):
                cmeta.pop(k, None)
            claim.update(apiVersion="v1", kind="PersistentVolumeClaim")
            claim.pop("status", None)
            out.append(claim)
        return out

    def pod_for(self, sts: Obj, ordinal: int, revision: Obj) -> Obj:
        tpl = history.template_of(revision)
        tmeta = tpl.get("metadata") or {}
        name = f"{name_of(sts)}-{ordinal}"
        labels = {**(tmeta.get("labels") or {}), POD_NAME_LABEL: name, POD_INDEX_LABEL: str(ordinal),
                  history.HASH_LABEL: name_of(revision)}
        pod_meta: Obj = {"name": name, "namespace": namespace_of(sts), "labels": labels,
                         "ownerReferences": [owner_ref(sts)]}
        if tmeta.get("annotations"):
            pod_meta["annotations"] = tmeta["annotations"]
        spec = tpl.get("spec") or {}
        spec["hostname"] = name
        if (sts.get("spec") or {}).get("serviceName"):
            spec["subdomain"] = sts["spec"]["serviceName"]
        claims = {str((t.get("metadata") or {}).get("name", "")): c["metadata"]["name"]
                  for t, c in zip((sts.get("spec") or {}).get("volumeClaimTemplates") or [],
                                  self.claims_for(sts, ordinal), strict=True)}
        volumes = [v for v in spec.get("volumes") or [] if v.get("name") not in claims]
        volumes += [{"name": vol, "persistentVolumeClaim": {"claimName": claim}} for vol, claim in claims.items()]
        if volumes:
            spec["volumes"] = volumes
        return {"apiVersion": "v1", "kind": "Pod", "metadata": pod_meta, "spec": spec}

    async def _sync_claim_owners(self, sts: Obj, pods: dict[str, Obj]) -> None:
        """persistentVolumeClaimRetentionPolicy (`statefulset_claims`): fix the owner references of the claims
        of every existing replica, condemned ones included, before any of them is deleted."""
        wanted = self._ordinals(sts)
        for pod in pods.values():
            ordinal = self._ordinal_of(sts, pod)
            if ordinal is None:
                continue
            for tpl in self.claims_for(sts, ordinal):
                claim = self.claims.get(f"{namespace_of(sts)}/{name_of(tpl)}")
                if claim is None or is_deleting(claim):
                    continue
                refs = claim_owner_refs(claim, sts, pod, ordinal not in wanted)
                if refs_differ(claim, refs):
                    body = deep_copy(claim)
                    body["metadata"]["ownerReferences"] = refs
                    try:
                        await self.client.update(self.pvc_kind, namespace_of(claim), name_of(claim), body)
                    except ApiError as e:
                        if e.code != 404:
                            raise

    async def _create_claims(self, sts: Obj, ordinal: int, pod_name: str) -> None:
        for claim in self.claims_for(sts, ordinal):
            if self.claims.get(f"{namespace_of(sts)}/{name_of(claim)}") is not None:
                continue
            refs = claim_owner_refs(claim, sts, None, False)
            if refs:
                claim["metadata"]["ownerReferences"] = refs
            try:
                await self.client.create(self.pvc_kind, namespace_of(sts), claim)
            except ApiError as e:
                if e.code == 409 and e.reason == "AlreadyExists":
                    continue
                await self.recorder.warning(sts, "FailedCreate", f"create Claim {name_of(claim)} for Pod "
                                            f"{pod_name} in StatefulSet {name_of(sts)} failed error: {e.message}")
                raise
            await self.recorder.normal(sts, "SuccessfulCreate", f"create Claim {name_of(claim)} Pod {pod_name} "
                                       f"in StatefulSet {name_of(sts)} success")

    async def _create_pod(self, sts: Obj, ordinal: int, revision: Obj) -> Obj:
        body = self.pod_for(sts, ordinal, revision)
        await self._create_claims(sts, ordinal, name_of(body))
        try:
            pod = await self.client.create(self.pod_kind, namespace_of(sts), body)
        except ApiError as e:
            if e.code == 409 and e.reason == "AlreadyExists":
                return body  # the cache is behind; the next sync sees it
            await self.recorder.warning(sts, "FailedCreate", f"create Pod {name_of(body)} in StatefulSet "
                                        f"{name_of(sts)} failed error: {e.message}")
            raise
        await self.recorder.normal(sts, "SuccessfulCreate", f"create Pod {name_of(pod)} in StatefulSet "
                                   f"{name_of(sts)} successful")
        return pod

    async def _delete_pod(self, sts: Obj, pod: Obj) -> None:
        try:
            await self.client.delete(self.pod_kind, namespace_of(pod), name_of(pod),
                                     preconditions={"uid": uid_of(pod)})
        except ApiError as e:
            if e.code in (404, 409):
                return
            await self.recorder.warning(sts, "FailedDelete", f"delete Pod {name_of(pod)} in StatefulSet "
                                        f"{name_of(sts)} failed error: {e.message}")
            raise
        await self.recorder.normal(sts, "SuccessfulDelete", f"delete Pod {name_of(pod)} in StatefulSet "
                                   f"{name_of(sts)} successful")

    # -- status --

    async def _write_status(self, sts: Obj, pods: list[Obj], current: Obj, update: Obj, collisions: int) -> None:
        spec = sts.get("spec") or {}
        min_ready = int(spec.get("minReadySeconds") or 0)
        t = now()
        existing = [p for p in pods if meta(p).get("uid")]

        def rev(p: Obj) -> str:
            return str((meta(p).get("labels") or {}).get(history.HASH_LABEL, ""))
        status: Obj = {
            "observedGeneration": meta(sts).get("generation", 0),
            "replicas": len(existing),
            "readyReplicas": sum(1 for p in existing if running_ready(p)),
            "availableReplicas": sum(1 for p in existing if running_ready(p) and is_pod_available(p, min_ready, t)),
            "currentReplicas": sum(1 for p in existing if rev(p) == name_of(current)),
            "updatedReplicas": sum(1 for p in existing if rev(p) == name_of(update)),
            "currentRevision": name_of(current),
            "updateRevision": name_of(update),
            "collisionCount": collisions,
        }
        rolling = (spec.get("updateStrategy") or {}).get("type", "RollingUpdate") == "RollingUpdate"
        if rolling and status["updatedReplicas"] == status["replicas"] == status["readyReplicas"]:
            status["currentRevision"] = status["updateRevision"]
            status["currentReplicas"] = status["updatedReplicas"]
        old = sts.get("status") or {}
        if all(old.get(k) == v for k, v in status.items()):
            return
        try:
            await self.client.patch(self.kind, namespace_of(sts), name_of(sts), {"status": status},
                                    subresource="status")
        except ApiError as e:
            if e.code != 404:
                raise
