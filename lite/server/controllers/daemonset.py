"""DaemonSet controller: one pod of the template on every eligible node (upstream `pkg/controller/daemon`).

reconcile(namespace/name), as upstream `DaemonSetsController.syncDaemonSet`:
    the template's ControllerRevision (hash label `controller-revision-hash`) ──► per node
    (`daemon_nodes.should_run`: template nodeName, nodeSelector, required node affinity, NoSchedule/NoExecute
    taints against the pod's tolerations plus the DaemonSet defaults):
        should run, no pod → create one, placed THROUGH THE SCHEDULER: required node affinity
            `matchFields metadata.name In [<node>]`, never spec.nodeName
        failed pod → delete it (FailedDaemonPod), re-created on the next sync
        more than one pod → keep the oldest (with maxSurge: the oldest old and the oldest new)
        must not keep running (or the node is gone) → delete its pods
    ──► RollingUpdate: maxUnavailable (old pods deleted, unavailable ones first, within the budget) or maxSurge
        (new pod next to the old one, the old one deleted once the new one is available); OnDelete: nothing
    ──► status (desired/current/misscheduled/ready/available/updated/unavailable, observedGeneration)

Invariants: level-triggered; no second create/delete round while earlier ones are unseen (Expectations);
a daemon pod's node is `spec.nodeName` once bound, else the node its affinity pins it to.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable
from typing import Any, ClassVar

from lite.client import Client
from lite.errors import ApiError
from lite.events import EventRecorder
from lite.informer import NAMESPACE_INDEX, SharedInformers
from lite.objects import (
    controller_of,
    deep_copy,
    is_deleting,
    key_of,
    meta,
    name_of,
    namespace_of,
    now,
    owner_ref,
    uid_of,
)
from lite.server.controllers import history
from lite.server.controllers.daemon_nodes import daemon_pod_node, pin_to_node, should_run, with_daemon_tolerations
from lite.server.controllers.replicaset_pods import is_pod_available, is_pod_ready
from lite.server.controllers.runtime import Controller, Expectations, builtin

Obj = dict[str, Any]
log = logging.getLogger("lite.controllers.daemonset")
GENERATION_LABEL = "pod-template-generation"


def scaled(value: Any, total: int) -> int:
    """An int-or-percent against `total`, rounded up (upstream GetScaledValueFromIntOrPercent(.., true))."""
    if isinstance(value, str) and value.endswith("%"):
        return math.ceil(int(value[:-1]) * total / 100)
    return int(value or 0)


def _created(pod: Obj) -> str:
    return str(meta(pod).get("creationTimestamp", ""))


class DaemonSetController(Controller):
    name: ClassVar[str] = "daemonset"
    workers = 2

    def __init__(self, client: Client, informers: SharedInformers, recorder: EventRecorder | None = None) -> None:
        super().__init__(client, informers, recorder or EventRecorder(client, "daemonset-controller"))
        self.kind = builtin("apps", "DaemonSet")
        self.pod_kind = builtin("", "Pod")
        # Creations and deletions are tracked apart: one sync may do both (manage, then a rolling update).
        self.creating = Expectations()
        self.deleting = Expectations()
        self.sets = self.informer(self.kind, primary=True)
        self.pods = self.informer(self.pod_kind)
        self.nodes = self.informer(builtin("", "Node"))
        self.revisions = self.informer(history.CR_KIND)
        self.watch_primary(self.sets)
        self.pods.add_handlers(on_add=self._pod_added, on_update=lambda old, new: self._pod_changed(old, new),
                               on_delete=self._pod_deleted)
        self.nodes.add_handlers(on_add=self._all, on_update=lambda old, new: self._all(new), on_delete=self._all)
        self.revisions.add_handlers(on_add=self._owner, on_delete=self._owner)

    def on_start(self) -> None:
        self.creating.clear()
        self.deleting.clear()

    # -- handlers --

    def _owner(self, obj: Obj) -> None:
        self.enqueue_owner(obj, "DaemonSet", "apps")

    def _owner_key(self, pod: Obj) -> str | None:
        ref = controller_of(pod)
        if ref is None or ref.get("kind") != "DaemonSet" or not str(ref.get("apiVersion", "")).startswith("apps/"):
            return None
        return f"{namespace_of(pod)}/{ref.get('name', '')}"

    def _pod_added(self, pod: Obj) -> None:
        key = self._owner_key(pod)
        if key is not None:
            self.creating.creation_observed(key)
            self.queue.add(key)

    def _pod_changed(self, old: Obj, new: Obj) -> None:
        key = self._owner_key(new)
        if key is not None:
            if is_deleting(new) and not is_deleting(old):
                self.deleting.deletion_observed(key, key_of(new))
            self.queue.add(key)

    def _pod_deleted(self, pod: Obj) -> None:
        key = self._owner_key(pod)
        if key is not None:
            self.deleting.deletion_observed(key, key_of(pod))
            self.queue.add(key)

    def _all(self, _node: Obj) -> None:
        for ds in self.sets.list():
            self.enqueue(ds)

    # -- reconcile --

    async def reconcile(self, key: str) -> float | None:
        ds = self.sets.get(key)
        if ds is None:
            self.creating.delete(key)
            self.deleting.delete(key)
            return None
        revisions = history.owned_revisions(self.revisions, ds)
        current, collisions = await history.sync_revisions(self.client, ds, revisions)
        hash_ = str((meta(current).get("labels") or {}).get(history.HASH_LABEL, ""))
        pods = [p for p in self.pods.by_index(NAMESPACE_INDEX, namespace_of(ds))
                if (controller_of(p) or {}).get("uid") == uid_of(ds)
                and (p.get("status") or {}).get("phase") != "Succeeded"]
        by_node: dict[str, list[Obj]] = {}
        for p in sorted(pods, key=_created):
            by_node.setdefault(daemon_pod_node(p), []).append(p)
        nodes = {name_of(n): n for n in self.nodes.list()}
        plan = {name: should_run(ds, node) for name, node in nodes.items()}
        if self.creating.satisfied(key) and self.deleting.satisfied(key) and not is_deleting(ds):
            creates, deletes = self._manage(ds, by_node, nodes, plan)
            if not creates and not deletes:
                creates, deletes = self._rolling_update(ds, by_node, plan, hash_)
            await self._apply(ds, key, creates, deletes, hash_)
        await self._write_status(ds, by_node, plan, hash_, collisions)
        live = {str((meta(p).get("labels") or {}).get(history.HASH_LABEL, "")) for p in pods}
        keep = {name_of(r) for r in revisions
                if (meta(r).get("labels") or {}).get(history.HASH_LABEL) in live} | {name_of(current)}
        await history.truncate(self.client, ds, history.owned_revisions(self.revisions, ds), keep,
                               int((ds.get("spec") or {}).get("revisionHistoryLimit", 10)))
        return self._min_ready_requeue(ds, by_node)

    def _surge(self, ds: Obj) -> bool:
        us = (ds.get("spec") or {}).get("updateStrategy") or {}
        return us.get("type", "RollingUpdate") == "RollingUpdate" and \
            bool(scaled((us.get("rollingUpdate") or {}).get("maxSurge"), 1))

    def _manage(self, ds: Obj, by_node: dict[str, list[Obj]], nodes: dict[str, Obj],
                plan: dict[str, tuple[bool, bool]]) -> tuple[list[str], list[Obj]]:
        creates: list[str] = []
        deletes: list[Obj] = []
        for node_name, pods in by_node.items():
            if node_name not in nodes:
                deletes += pods
        for node_name in sorted(nodes):
            run, keep = plan[node_name]
            pods = by_node.get(node_name, [])
            # A node whose pod is still terminating gets its new pod once the old one is gone (upstream).
            live = [p for p in pods if not is_deleting(p)]
            failed = [p for p in live if (p.get("status") or {}).get("phase") == "Failed"]
            if run and not pods:
                creates.append(node_name)
            elif keep:
                deletes += failed
                deletes += self._extras(ds, [p for p in live if p not in failed])
            else:
                deletes += live
        return creates, deletes

    def _extras(self, ds: Obj, alive: list[Obj]) -> list[Obj]:
        """Pods beyond the oldest on one node; with surge one per revision may stay (old and new)."""
        if len(alive) <= 1:
            return []
        if not self._surge(ds):
            return alive[1:]
        seen: set[str] = set()
        extra = []
        for p in alive:
            h = str((meta(p).get("labels") or {}).get(history.HASH_LABEL, ""))
            if h in seen or len(seen) >= 2:
                extra.append(p)
            seen.add(h)
        return extra

    def _rolling_update(self, ds: Obj, by_node: dict[str, list[Obj]], plan: dict[str, tuple[bool, bool]],
                        hash_: str) -> tuple[list[str], list[Obj]]:
        spec = ds.get("spec") or {}
        us = spec.get("updateStrategy") or {}
        if us.get("type", "RollingUpdate") != "RollingUpdate":
            return [], []
        ru = us.get("rollingUpdate") or {}
        desired = sum(1 for run, _ in plan.values() if run)
        max_surge = scaled(ru.get("maxSurge"), desired)
        max_unavailable = scaled(ru.get("maxUnavailable", 1), desired)
        if max_surge == 0 and max_unavailable == 0:
            max_unavailable = 1
        min_ready = int(spec.get("minReadySeconds") or 0)
        t = now()

        def available(p: Obj) -> bool:
            return is_pod_available(p, min_ready, t)
        new: dict[str, Obj] = {}
        old: dict[str, Obj] = {}
        for node_name, pods in by_node.items():
            if not plan.get(node_name, (False, False))[0]:
                continue
            for p in pods:
                if is_deleting(p):
                    continue
                target = new if (meta(p).get("labels") or {}).get(history.HASH_LABEL) == hash_ else old
                target.setdefault(node_name, p)
        if max_surge == 0:
            unavailable = sum(1 for n, (run, _) in plan.items() if run and n not in new and n not in old)
            unavailable += sum(1 for p in new.values() if not available(p))
            allowed = [p for n, p in sorted(old.items()) if n not in new and not available(p)]
            unavailable += len(allowed)
            candidates = [p for n, p in sorted(old.items()) if n not in new and available(p)]
            return [], allowed + candidates[:max(0, max_unavailable - unavailable)]
        surging = sum(1 for n, p in new.items() if n in old and not available(p))
        deletes = [old[n] for n, p in new.items() if n in old and available(p)]
        allowed_nodes = [n for n, p in sorted(old.items()) if n not in new and not available(p)]
        candidate_nodes = [n for n, p in sorted(old.items()) if n not in new and available(p)]
        return allowed_nodes + candidate_nodes[:max(0, max_surge - surging)], deletes

    # -- writes --

    def pod_for(self, ds: Obj, node_name: str, hash_: str) -> Obj:
        tpl = deep_copy((ds.get("spec") or {}).get("template") or {})
        tmeta = tpl.get("metadata") or {}
        labels = {**(tmeta.get("labels") or {}), history.HASH_LABEL: hash_,
                  GENERATION_LABEL: str(meta(ds).get("generation", 1))}
        pod_meta: Obj = {"generateName": f"{name_of(ds)}-", "namespace": namespace_of(ds), "labels": labels,
                         "ownerReferences": [owner_ref(ds)]}
        if tmeta.get("annotations"):
            pod_meta["annotations"] = tmeta["annotations"]
        spec = with_daemon_tolerations(tpl.get("spec") or {})
        pin_to_node(spec, node_name)
        return {"apiVersion": "v1", "kind": "Pod", "metadata": pod_meta, "spec": spec}

    async def _apply(self, ds: Obj, key: str, creates: list[str], deletes: list[Obj], hash_: str) -> None:
        deletes = list({uid_of(p): p for p in deletes if not is_deleting(p)}.values())
        if creates:
            self.creating.expect_creations(key, len(creates))
        if deletes:
            self.deleting.expect_deletions(key, [key_of(p) for p in deletes])
        errors: list[ApiError] = []
        for node_name in creates:
            try:
                pod = await self.client.create(self.pod_kind, namespace_of(ds), self.pod_for(ds, node_name, hash_))
                await self.recorder.normal(ds, "SuccessfulCreate", f"Created pod: {name_of(pod)}")
            except ApiError as e:
                self.creating.creation_observed(key)
                await self.recorder.warning(ds, "FailedCreate", f"Error creating: {e.message}")
                errors.append(e)
        for pod in deletes:
            if (pod.get("status") or {}).get("phase") == "Failed":
                await self.recorder.warning(ds, "FailedDaemonPod", f"Found failed daemon pod {key_of(pod)} on node "
                                            f"{daemon_pod_node(pod)}, will try to kill it")
            try:
                await self.client.delete(self.pod_kind, namespace_of(pod), name_of(pod),
                                         preconditions={"uid": uid_of(pod)})
                await self.recorder.normal(ds, "SuccessfulDelete", f"Deleted pod: {name_of(pod)}")
            except ApiError as e:
                self.deleting.deletion_observed(key, key_of(pod))
                if e.code not in (404, 409):
                    errors.append(e)
        if errors:
            raise errors[0]

    async def _write_status(self, ds: Obj, by_node: dict[str, list[Obj]], plan: dict[str, tuple[bool, bool]],
                            hash_: str, collisions: int) -> None:
        min_ready = int((ds.get("spec") or {}).get("minReadySeconds") or 0)
        t = now()
        desired = current = misscheduled = ready = available = updated = 0
        for node_name, (run, _) in plan.items():
            pods = [p for p in by_node.get(node_name, []) if not is_deleting(p)]
            if run:
                desired += 1
            if not pods:
                continue
            if not run:
                misscheduled += 1
                continue
            current += 1
            oldest = pods[0]
            if is_pod_ready(oldest):
                ready += 1
                available += is_pod_available(oldest, min_ready, t)
            updated += (meta(oldest).get("labels") or {}).get(history.HASH_LABEL) == hash_
        status: Obj = {"desiredNumberScheduled": desired, "currentNumberScheduled": current,
                       "numberMisscheduled": misscheduled, "numberReady": ready, "numberAvailable": available,
                       "updatedNumberScheduled": updated, "numberUnavailable": desired - available,
                       "observedGeneration": meta(ds).get("generation", 0), "collisionCount": collisions}
        old = ds.get("status") or {}
        if all(old.get(k, 0) == v for k, v in status.items()):
            return
        try:
            await self.client.patch(self.kind, namespace_of(ds), name_of(ds), {"status": status},
                                    subresource="status")
        except ApiError as e:
            if e.code != 404:
                raise

    def _min_ready_requeue(self, ds: Obj, by_node: dict[str, list[Obj]]) -> float | None:
        min_ready = int((ds.get("spec") or {}).get("minReadySeconds") or 0)
        if min_ready <= 0:
            return None
        pending: Iterable[Obj] = (p for pods in by_node.values() for p in pods
                                  if is_pod_ready(p) and not is_pod_available(p, min_ready, now()))
        return float(min_ready) if any(True for _ in pending) else None
