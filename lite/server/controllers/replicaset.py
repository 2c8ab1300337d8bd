"""ReplicaSet and ReplicationController: keep `spec.replicas` pods of the template alive (shared code).

reconcile(namespace/name), as upstream `ReplicaSetController.syncReplicaSet`:
    active pods of the namespace ──► claim (adopt matching orphans, release non-matching children)
    ──► if expectations are satisfied and the set is not being deleted: create or delete the difference
        (creates in slow-start batches 1, 2, 4, ...; at most `burst` per sync; deletions in upstream order;
        a batch waits for its creates, not for their SuccessfulCreate events, which the sync awaits at its end)
    ──► status (replicas, fullyLabeledReplicas, readyReplicas, availableReplicas, observedGeneration,
        ReplicaFailure condition), written whenever it differs from the cached status

Invariants:
- A sync decodes no pod it only claims or counts: the pod handlers keep a small `PodFacts` per active pod of
  the set's kind or orphan (controller uid, labels, Ready and since when), and claim and status read those.
  A pod is decoded only to be released, adopted, or ranked for deletion (upstream's order, from whole pods).
- Never creates (or deletes) again while earlier creations (deletions) are not yet seen in the pod cache
  (`Expectations`), so a slow informer cannot make it overshoot.
- Pods are created from the template with generateName `<name>-` and one controller ownerReference
  (blockOwnerDeletion true); adoption and release patch ownerReferences with a resourceVersion precondition.
- Handlers only enqueue owners (children via their controllerRef; orphans to every matching set). A child's
  change that can move only the status counts (`counts_only_change`) enqueues its owner `status_delay` later
  (one pending timer per set); every other change (create, delete, deletion started, terminal phase, labels,
  owner) enqueues it at once, so creations, replacements and adoption are never delayed. So does a child's
  add, unless it leaves the set's creations still expected (a sync could then only recount the pods): the
  add that meets the expectations enqueues at once, so the next burst starts as soon as it may.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
from collections.abc import Awaitable, Callable
from sys import intern
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
    labels_of,
    meta,
    name_of,
    namespace_of,
    now,
    owner_ref,
    uid_of,
)
from lite.selectors import LabelSelector
from lite.server.controllers.controllerref import adopt, release, still_ours
from lite.server.controllers.replicaset_pods import (
    CONTROLLER_UID_INDEX,
    ORPHAN_INDEX,
    PodFacts,
    controller_uid_index,
    counts_only_change,
    facts_available,
    is_pod_ready,
    orphan_index,
    pod_facts,
    pods_to_delete,
)
from lite.server.controllers.runtime import Controller, Expectations, builtin

Obj = dict[str, Any]
log = logging.getLogger("lite.controllers.replicaset")

BURST_REPLICAS = 500
# A pod change that can only move the set's status counts (bound, Running, Ready; not its labels, owner,
# activeness or deletion) syncs the set at most this many seconds later, and one sync serves every such change
# in between: a rollout of 1,000 pods then writes the set's status a few times a second instead of once per
# pod event (upstream's kube-controller-manager bounds the same writes with its client's QPS limit).
STATUS_DELAY = 0.2
LABELS_KEPT = 4096  # distinct pod labels the per-pod facts share a dict for (forgotten all at once beyond)


async def slow_start_batch(count: int, initial: int, fn: Callable[[], Awaitable[None]]) -> int:
    """Call `fn` `count` times in growing concurrent batches (1, 2, 4, ...); stop after a failing batch.

    Returns the number of successful calls; the first error is re-raised after the count is known through
    `SlowStartError`.
    """
    done, batch = 0, min(count, initial)
    while batch > 0:
        results = await asyncio.gather(*(fn() for _ in range(batch)), return_exceptions=True)
        errors = [r for r in results if isinstance(r, BaseException)]
        done += batch - len(errors)
        if errors:
            raise SlowStartError(done, errors[0])
        batch = min(2 * batch, count - done)
    return done


class SlowStartError(Exception):
    def __init__(self, succeeded: int, error: BaseException) -> None:
        super().__init__(str(error))
        self.succeeded = succeeded
        self.error = error


def _namespace_terminating(e: BaseException) -> bool:
    return isinstance(e, ApiError) and any(c.reason == "NamespaceTerminating" for c in e.causes)


class ReplicaSetController(Controller):
    """apps/v1 ReplicaSet; `ReplicationControllerController` changes only the kind and selector form."""

    name: ClassVar[str] = "replicaset"
    group: ClassVar[str] = "apps"
    kind_name: ClassVar[str] = "ReplicaSet"
    workers = 5  # kube-controller-manager --concurrent-replicaset-syncs default

    def __init__(self, client: Client, informers: SharedInformers, recorder: EventRecorder | None = None, *,
                 burst: int = BURST_REPLICAS, status_delay: float = STATUS_DELAY) -> None:
        super().__init__(client, informers, recorder or EventRecorder(client, f"{self.name}-controller"))
        self.kind = builtin(self.group, self.kind_name)
        self.pod_kind = builtin("", "Pod")
        self.burst = burst
        self.status_delay = status_delay
        self._counts_due: dict[str, asyncio.TimerHandle] = {}
        self.expectations = Expectations()
        self.sets = self.informer(self.kind, primary=True)
        self.pods = self.informer(self.pod_kind)
        for name, fn in ((CONTROLLER_UID_INDEX, controller_uid_index), (ORPHAN_INDEX, orphan_index)):
            self.pods.ensure_index(name, fn)
        self.watch_primary(self.sets)
        # key -> PodFacts of every active pod this controller may claim (orphans and pods of its kind), kept
        # by these handlers (registered first: they run before the ones that enqueue)
        self._facts: dict[str, PodFacts] = {}
        self._labels: dict[tuple[tuple[str, str], ...], dict[str, str]] = {}  # the facts' labels dicts
        self._unready: dict[tuple[str | None, tuple[tuple[str, str], ...] | None], PodFacts] = {}  # `_note_pod`
        self.pods.add_handlers(on_add=self._note_pod, on_update=self._note_pod_update, on_delete=self._forget_pod)
        self.pods.add_handlers(on_add=self._pod_added, on_update=self._pod_updated, on_delete=self._pod_deleted)

    def on_start(self) -> None:
        self.expectations.clear()
        for handle in self._counts_due.values():
            handle.cancel()
        self._counts_due.clear()

    # -- selector and template (the parts RC does differently) --

    def selector(self, rs: Obj) -> LabelSelector:
        return LabelSelector.from_dict((rs.get("spec") or {}).get("selector"))

    # -- handlers --

    def _note_pod(self, pod: Obj) -> None:
        key = intern(key_of(pod))
        ref = _controller_ref(pod)
        facts = pod_facts(pod) if ref is None or self._is_our_kind(ref) else None
        if facts is None:
            self._facts.pop(key, None)
            return
        labels = facts[1]
        items = None if labels is None else tuple(labels.items())
        unready = self._unready  # (owner uid, labels) -> the one facts tuple of the not-Ready pods with them:
        if facts[2] is None:  # equal facts, so a pending or parked pod costs no tuple of its own
            shared_facts = unready.get((facts[0], items))
            if shared_facts is not None:
                self._facts[key] = shared_facts
                return
        if labels is not None and items is not None:  # one labels dict per distinct labels: less memory, and
            seen = self._labels  # the syncs' per-labels match caching then hits on every pod of a template
            shared = seen.setdefault(items, labels)
            if shared is not labels:
                facts = (facts[0], shared, facts[2])
            elif len(seen) > LABELS_KEPT:
                seen.clear()
        if facts[2] is None:
            if len(unready) >= LABELS_KEPT:
                unready.clear()
            unready[(facts[0], items)] = facts
        self._facts[key] = facts

    def _note_pod_update(self, old: Obj, new: Obj) -> None:
        if old is not new:
            self._note_pod(new)

    def _forget_pod(self, pod: Obj) -> None:
        self._facts.pop(key_of(pod), None)

    def _is_our_kind(self, ref: Obj) -> bool:
        return bool(ref.get("kind") == self.kind_name and
                    str(ref.get("apiVersion", "")).rpartition("/")[0] == self.group)

    def _owner_key(self, pod: Obj) -> str | None:
        ref = controller_of(pod)
        if ref is None or ref.get("kind") != self.kind_name or \
                str(ref.get("apiVersion", "")).rpartition("/")[0] != self.group:
            return None
        return f"{namespace_of(pod)}/{ref.get('name', '')}"

    def _enqueue_matching(self, pod: Obj) -> None:
        labels = labels_of(pod)
        for rs in self.sets.by_index(NAMESPACE_INDEX, namespace_of(pod)):
            if self.selector(rs).matches(labels):
                self.enqueue(rs)

    def _pod_added(self, pod: Obj) -> None:
        if is_deleting(pod):
            self._pod_deleted(pod)
            return
        key = self._owner_key(pod)
        if key is not None:
            self.expectations.creation_observed(key)
            if self.expectations.satisfied(key):
                self.queue.add(key)  # the last of a burst: the next one may start now
            else:
                self._enqueue_counts(key)  # a sync now could only recount: the burst is not all seen yet
        elif controller_of(pod) is None:
            self._enqueue_matching(pod)

    def _pod_updated(self, old: Obj, new: Obj) -> None:
        if old is not new and is_deleting(new) and not is_deleting(old):
            key = self._owner_key(new)
            if key is not None:
                self.expectations.deletion_observed(key, key_of(new))
        old_key, new_key = self._owner_key(old), self._owner_key(new)
        if old_key is not None and old_key != new_key:
            self.queue.add(old_key)
        if new_key is not None:
            ready_seconds = self._min_ready_seconds(new_key)
            if ready_seconds and is_pod_ready(new) and not is_pod_ready(old):
                self.queue.add(new_key)
                self.queue.add_after(new_key, float(ready_seconds))
            elif old_key == new_key and counts_only_change(old, new):
                self._enqueue_counts(new_key)
            else:
                self.queue.add(new_key)
        elif controller_of(new) is None and (labels_of(old) != labels_of(new) or controller_of(old) is not None):
            self._enqueue_matching(new)

    def _enqueue_counts(self, key: str) -> None:
        """Queue `key` `status_delay` seconds from now unless such a queueing is pending already (kept apart
        from the queue's own delayed adds, where an earlier time would swallow a minReadySeconds re-check)."""
        if key in self._counts_due:
            return
        self._counts_due[key] = asyncio.get_running_loop().call_later(self.status_delay, self._counts_fire, key)

    def _counts_fire(self, key: str) -> None:
        self._counts_due.pop(key, None)
        self.queue.add(key)

    def _pod_deleted(self, pod: Obj) -> None:
        key = self._owner_key(pod)
        if key is not None:
            self.expectations.deletion_observed(key, key_of(pod))
            self.queue.add(key)

    def _min_ready_seconds(self, key: str) -> int:
        rs = self.sets.get(key)
        return int((rs or {}).get("spec", {}).get("minReadySeconds") or 0)

    # -- reconcile --

    async def reconcile(self, key: str) -> float | None:
        rs = self.sets.get(key)
        if rs is None:
            self.expectations.delete(key)
            return None
        needs_sync = self.expectations.satisfied(key)
        selector = self.selector(rs)
        pods = await self._claim(rs, selector, self._candidates(rs))  # (key, facts) of each claimed pod
        error: ApiError | SlowStartError | None = None
        if needs_sync and not is_deleting(rs):
            try:
                await self._manage(rs, key, pods)
            except (ApiError, SlowStartError) as e:
                error = e
        status = await self._write_status(rs, pods, error)
        if error is not None:
            raise error.error if isinstance(error, SlowStartError) else error
        min_ready = int((rs.get("spec") or {}).get("minReadySeconds") or 0)
        if min_ready > 0 and status.get("readyReplicas", 0) == status.get("replicas", 0) != \
                status.get("availableReplicas", 0):
            return float(min_ready)
        return None

    # -- adoption and release --

    def _candidates(self, rs: Obj) -> list[tuple[str, PodFacts]]:
        """The active pods `_claim` can take, as (key, facts): those this set controls and the namespace's
        orphans (pods controlled by anything else are skipped by the claim anyway), in key order as a
        namespace scan. No pod is decoded: the handlers keep the facts."""
        prefix = namespace_of(rs) + "/"
        keys = self.pods.index_keys(CONTROLLER_UID_INDEX, uid_of(rs))
        keys |= self.pods.index_keys(ORPHAN_INDEX, prefix[:-1])
        facts = self._facts
        out = []
        for k in sorted(keys):
            f = facts.get(k)  # none: terminal, being deleted, or of another kind
            if f is not None and k.startswith(prefix):
                out.append((k, f))
        return out

    async def _claim(self, rs: Obj, selector: LabelSelector,
                     pods: list[tuple[str, PodFacts]]) -> list[tuple[str, PodFacts]]:
        """Upstream's ClaimPods over active pods: keep the matching children, release the others (decoded
        then), adopt matching orphans unless the set is being deleted (or is no longer the one it was)."""
        claimed: list[tuple[str, PodFacts]] = []
        fresh_checked: bool | None = None
        uid, rs_deleting = uid_of(rs), is_deleting(rs)
        matches_labels = selector.matches
        last_labels: object = None
        matches = False
        for key, facts in pods:
            ref_uid, labels, _ = facts
            if labels is not last_labels:  # pods of one template often share one labels object
                matches, last_labels = matches_labels(labels or {}), labels
            if ref_uid is not None:
                if ref_uid != uid:
                    continue
                if matches or rs_deleting:
                    claimed.append((key, facts))
                else:
                    pod = self.pods.get(key)
                    if pod is not None:
                        await release(self.client, self.pod_kind, pod, rs)
                continue
            if not matches or rs_deleting:
                continue
            if fresh_checked is None:
                fresh_checked = await still_ours(self.client, self.kind, rs)
            if not fresh_checked:
                continue
            pod = self.pods.get(key)
            if pod is None or is_deleting(pod):
                continue
            adopted = await adopt(self.client, self.pod_kind, pod, rs)
            if adopted is not None:  # counted even if it stopped being active meanwhile, as upstream's claim
                claimed.append((key, pod_facts(adopted) or (uid, labels, facts[2])))
        return claimed

    # -- creating and deleting pods --

    async def _manage(self, rs: Obj, key: str, pods: list[tuple[str, PodFacts]]) -> None:
        want = int((rs.get("spec") or {}).get("replicas", 1) or 0)
        diff = len(pods) - want
        if diff < 0:
            n = min(-diff, self.burst)
            self.expectations.expect_creations(key, n)
            recorded: list[asyncio.Task[None]] = []
            try:
                await slow_start_batch(n, 1, lambda: self._create_pod(rs, recorded))
            except SlowStartError as e:
                for _ in range(n - e.succeeded):
                    self.expectations.creation_observed(key)
                if not _namespace_terminating(e.error):
                    raise
            finally:
                await asyncio.gather(*recorded)  # best effort: recording never raises
        elif diff > 0:
            n = min(diff, self.burst)
            # only now are the pods decoded: upstream's deletion ranking reads more than the facts
            decoded = [p for p in map(self.pods.peek, (k for k, _ in pods)) if p is not None]
            victims = pods_to_delete(decoded, decoded, n)
            self.expectations.expect_deletions(key, [key_of(p) for p in victims])
            results = await asyncio.gather(*(self._delete_pod(rs, key, p) for p in victims),
                                           return_exceptions=True)
            failed = [r for r in results if isinstance(r, BaseException)]
            if failed:
                raise failed[0]

    def pod_from_template(self, rs: Obj) -> Obj:
        tpl = deep_copy((rs.get("spec") or {}).get("template") or {})
        tmeta = tpl.get("metadata") or {}
        pod_meta: Obj = {"generateName": f"{name_of(rs)}-", "namespace": namespace_of(rs),
                         "ownerReferences": [owner_ref(rs)]}
        for field in ("labels", "annotations", "finalizers"):
            if tmeta.get(field):
                pod_meta[field] = tmeta[field]
        return {"apiVersion": "v1", "kind": "Pod", "metadata": pod_meta, "spec": tpl.get("spec") or {}}

    async def _create_pod(self, rs: Obj, recorded: list[asyncio.Task[None]]) -> None:
        """Create one pod; its SuccessfulCreate event is written by a task added to `recorded`, so the next
        slow-start batch does not wait for it (upstream's recorder never blocks the sync either)."""
        # The body is fresh (`pod_from_template` copies): an in-process client takes it without a copy of its own
        # (only a client whose own class has `create_owned`: a wrapper that overrides `create` keeps it).
        owned = getattr(type(self.client), "create_owned", None)
        create = self.client.create if owned is None else owned.__get__(self.client)
        try:
            pod = await create(self.pod_kind, namespace_of(rs), self.pod_from_template(rs))
        except ApiError as e:
            if not _namespace_terminating(e):
                await self.recorder.warning(rs, "FailedCreate", f"Error creating: {e.message}")
            raise
        write = self.recorder.post(rs, "Normal", "SuccessfulCreate", f"Created pod: {name_of(pod)}")
        if write is not None:  # none for the burst's events past the correlator's spam limit: no task
            recorded.append(asyncio.create_task(write))

    async def _delete_pod(self, rs: Obj, key: str, pod: Obj) -> None:
        try:
            await self.client.delete(self.pod_kind, namespace_of(pod), name_of(pod),
                                     preconditions={"uid": uid_of(pod)})
        except ApiError as e:
            self.expectations.deletion_observed(key, key_of(pod))
            if e.code in (404, 409):
                return
            await self.recorder.warning(rs, "FailedDelete", f"Error deleting: {e.message}")
            raise
        await self.recorder.normal(rs, "SuccessfulDelete", f"Deleted pod: {name_of(pod)}")

    # -- status --

    def compute_status(self, rs: Obj, pods: list[tuple[str, PodFacts]], error: BaseException | None) -> Obj:
        spec = rs.get("spec") or {}
        tlabels = ((spec.get("template") or {}).get("metadata") or {}).get("labels") or {}
        min_ready = int(spec.get("minReadySeconds") or 0)
        t = now()
        labeled = ready = available = 0
        last_labels: object = None
        has_all = False
        for _, (_, labels, ready_at) in pods:  # one pass over the facts: every sync runs this over every pod
            if labels is not last_labels:  # pods of one template often share one labels object
                has_all, last_labels = _has_all(labels or {}, tlabels), labels
            labeled += has_all
            if ready_at is not None:
                ready += 1
                available += min_ready <= 0 or facts_available(ready_at, min_ready, t)
        status: Obj = {
            "replicas": len(pods),
            "fullyLabeledReplicas": labeled,
            "readyReplicas": ready,
            "availableReplicas": available,
            "observedGeneration": meta(rs).get("generation", 0),
        }
        conditions = [c for c in (rs.get("status") or {}).get("conditions") or [] if c.get("type") != "ReplicaFailure"]
        old_failure = next((c for c in (rs.get("status") or {}).get("conditions") or []
                            if c.get("type") == "ReplicaFailure"), None)
        if error is not None:
            cause = error.error if isinstance(error, SlowStartError) else error
            reason = "FailedCreate" if len(pods) < int(spec.get("replicas", 1) or 0) else "FailedDelete"
            conditions.append(old_failure or {"type": "ReplicaFailure", "status": "True", "reason": reason,
                                              "message": getattr(cause, "message", str(cause)),
                                              "lastTransitionTime": _stamp(t)})
        if conditions:
            status["conditions"] = conditions
        return status

    async def _write_status(self, rs: Obj, pods: list[tuple[str, PodFacts]], error: BaseException | None) -> Obj:
        status = self.compute_status(rs, pods, error)
        old = rs.get("status") or {}
        same = all(old.get(k, 0) == v for k, v in status.items() if k != "conditions")
        if same and (old.get("conditions") or None) == status.get("conditions"):
            return status
        body = {"status": {**status, "conditions": status.get("conditions")}}
        try:
            await self.client.patch(self.kind, namespace_of(rs), name_of(rs), body, subresource="status")
        except ApiError as e:
            if e.code != 404:
                raise
        return status


class ReplicationControllerController(ReplicaSetController):
    """core/v1 ReplicationController: the same controller with a map selector."""

    name: ClassVar[str] = "replicationcontroller"
    group: ClassVar[str] = ""
    kind_name: ClassVar[str] = "ReplicationController"

    def selector(self, rs: Obj) -> LabelSelector:
        sel = (rs.get("spec") or {}).get("selector")
        return LabelSelector.from_dict({"matchLabels": sel} if sel else None)

    def _is_our_kind(self, ref: Obj) -> bool:
        return bool(ref.get("kind") == self.kind_name and ref.get("apiVersion") == "v1")

    def _owner_key(self, pod: Obj) -> str | None:
        ref = controller_of(pod)
        if ref is None or ref.get("kind") != self.kind_name or ref.get("apiVersion") != "v1":
            return None
        return f"{namespace_of(pod)}/{ref.get('name', '')}"


def _controller_ref(pod: Obj) -> Obj | None:
    """`controller_of` without the copy (the claim loop only reads it)."""
    for ref in meta(pod).get("ownerReferences") or ():
        if ref.get("controller"):
            return ref  # type: ignore[no-any-return]
    return None


def _has_all(labels: dict[str, str], want: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in want.items())


def _stamp(t: dt.datetime) -> str:
    return t.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")

