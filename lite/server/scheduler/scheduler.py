"""The scheduler: informers → queue → cycle (filter/score/select) → assume → bind, with preemption.

    pods informer ──(pending, ours)──► SchedulingQueue ──pop──► Algorithm.schedule(snapshot)
         │ (assigned)                                              │ fits             │ fits nowhere
         ▼                                                         ▼                  ▼
       Cache ◄──────────────── assume ─────────────────── bind task (concurrent)   preemption, status,
       (nodes, pods, nominations)       forget on bind failure ◄─┘                  FailedScheduling event

Invariants:
- The loop never awaits the API for a pod it scheduled: binding, status updates, events and victim
  deletion run as tasks of the scheduler's TaskGroup (binding bounded by `bind_concurrency`), so the next
  cycle starts while earlier pods are still being written. The assumed pod holds its node's room meanwhile.
- Events are posted (`SeriesRecorder.post`: decided at once, written by the recorder's own few writers, as
  upstream's broadcaster does), so no bind or report waits for an event write.
- An unschedulable pod's report (PodScheduled=False with the message, then a FailedScheduling event) is
  queued per pod and written by `report_concurrency` writers, oldest first: a burst or a restart with
  thousands of pending pods costs at most that many writes in flight, so API clients keep their share of the
  loop. A pod that fails again before its report is written gets one report, with the latest message (as
  kube-scheduler, which writes one status per attempt and backs off, never one per retry storm); a pod bound,
  deleted or gone by then gets none. While the API is serving clients (`api_busy`, wired by the control
  plane; busy until none was seen for BUSY_LINGER, so the gaps between busy clients' requests do not count),
  reports go out at most `busy_reports_per_s` (50: kube-scheduler's default client QPS, the rate its
  status writes reach an apiserver at) for all writers together; once it is idle, at once. A burst of creates
  of pods that fit nowhere thus pays for its reports mostly after the burst, not in its middle.
- A pod is scheduled only by the profile whose schedulerName it names; pods being deleted are skipped.
- Priority is `spec.priority`, or the value of its PriorityClass when admission left it unset.
- Any API failure on the way is logged and the pod goes back to the queue with backoff; the loop survives.
- Every attempt ends in exactly one `on_attempt(result, seconds)` call (when set): "scheduled" once bound,
  "unschedulable" when it fits nowhere, "error" when the cycle or the binding failed (upstream's results).
- Reads only through informers; writes only through the `lite.client.Client` (never the store).
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable
from sys import intern
from typing import Any

from lite.client import Client, Obj
from lite.errors import ApiError
from lite.events import SeriesRecorder
from lite.eventseries import NORMAL, WARNING, truncate_note
from lite.informer import NAMESPACE_INDEX, SharedInformers
from lite.kinds import BUILTIN_KINDS, Kind
from lite.objects import rfc3339
from lite.selectors import EQUALS, LabelSelector, Requirement
from lite.server.scheduler.cycle import Algorithm, Result, fit_error_message
from lite.server.scheduler.plugins.interpodaffinity import NAME as INTERPOD
from lite.server.scheduler.plugins.podtopologyspread import NAME as SPREAD
from lite.server.scheduler.plugins.podtopologyspread import system_default_constraints
from lite.server.scheduler.plugins.volumebinding import NAME as VOLUME_BINDING
from lite.server.scheduler.plugins.volumebinding import Plan
from lite.server.scheduler.podinfo import (
    PodInfo,
    SharedParts,
    SpreadConstraint,
    facts_of,
    pod_info,
    reparse,
    same_facts,
)
from lite.server.scheduler.preemption import Budget, Outcome, preempt
from lite.server.scheduler.queue import SchedulingQueue
from lite.server.scheduler.registry import Profile, plugins_for
from lite.server.scheduler.snapshot import Cache
from lite.server.scheduler.volumebinder import InformerVolumes, VolumeBinder, VolumeBindingError

log = logging.getLogger("lite.scheduler")

TERMINAL = ("Succeeded", "Failed")
POD_EVENTS_PLUGINS = frozenset((INTERPOD, SPREAD))
NO_PLUGINS: frozenset[str] = frozenset()
BUSY_REPORTS_PER_S = 50.0  # kube-scheduler's default clientConnection.qps
BUSY_RECHECK = 0.05  # seconds: how often a paced report writer looks whether the API went idle
BUSY_LINGER = 0.1  # seconds without a request in flight before the API counts as idle
SPREAD_MEMO_SIZE = 1024  # distinct (namespace, labels) sets whose default spreading is remembered


def _kind(group: str, kind: str) -> Kind:
    for k in BUILTIN_KINDS:
        if k.group == group and k.kind == kind:
            return k
    raise KeyError(f"{kind}.{group}")


def _node_sched_fields(node: Obj) -> Any:
    m, st = node.get("metadata") or {}, node.get("status") or {}
    return (m.get("labels"), node.get("spec"), st.get("allocatable"), st.get("images"))


class Scheduler:
    """One profile's scheduler. Build it with `build_scheduler`; run `run()` in the server's TaskGroup."""

    def __init__(self, client: Client, informers: SharedInformers, profile: Profile, *,
                 bind_concurrency: int = 128, report_concurrency: int = 4, scheduled_events: bool = True,
                 busy_reports_per_s: float = BUSY_REPORTS_PER_S, rng: random.Random | None = None) -> None:
        self.client = client
        # a fresh body (a Binding) handed over: an in-process client then takes it without copying it first
        # (only a client whose own class has `create_owned`: a wrapper that overrides `create` keeps it)
        owned = getattr(type(client), "create_owned", None)
        self._create_owned: Callable[..., Any] = client.create if owned is None else owned.__get__(client)
        self.profile = profile
        self.pod_kind, self.node_kind = _kind("", "Pod"), _kind("", "Node")
        self.pods = informers.informer(self.pod_kind)
        self._decode_pod = self.pods.decode  # one bound method for every PodInfo that keeps a pod's bytes
        self._parts = SharedParts()  # equal parsed parts of the PodInfos kept (queue, cache) are one object
        self.nodes = informers.informer(self.node_kind)
        self.namespaces = informers.informer(_kind("", "Namespace"))
        self.priority_classes = informers.informer(_kind("scheduling.k8s.io", "PriorityClass"))
        self.pdbs = informers.informer(_kind("policy", "PodDisruptionBudget"))
        # What selects a pod, for the default spreading of pods without constraints.
        self.selecting = tuple(informers.informer(_kind(g, k)) for g, k in (
            ("", "Service"), ("", "ReplicationController"), ("apps", "ReplicaSet"), ("apps", "StatefulSet")))
        self.cache = Cache()
        self.claims = informers.informer(_kind("", "PersistentVolumeClaim"))
        self.pvs = informers.informer(_kind("", "PersistentVolume"))
        self.storage_classes = informers.informer(_kind("storage.k8s.io", "StorageClass"))
        self.cache.volumes = InformerVolumes(self.claims, self.pvs, self.storage_classes)
        self.volume_binder = VolumeBinder(client, self.claims, self.pvs)
        self.queue = SchedulingQueue(rebuild=self._rebuild)
        self.rng = rng or random.Random()
        self.algorithm = Algorithm(plugins_for(profile), profile, self.rng)
        self.recorder = SeriesRecorder(client, profile.scheduler_name)  # as kube-scheduler: events.k8s.io
        self.scheduled_events = scheduled_events
        self._bind_slots = asyncio.Semaphore(bind_concurrency)
        self.report_concurrency = report_concurrency
        # pod key -> (uid, message, nominated node): no PodInfo, so a parked pod's waiting report keeps none
        self._reports: dict[str, tuple[str, str, str]] = {}
        self._report_ready = asyncio.Event()
        # whether the API is serving clients now (None: never); reports are paced meanwhile (module doc)
        self.api_busy: Callable[[], bool] | None = None
        self.busy_reports_per_s = busy_reports_per_s
        self._next_busy_report = 0.0  # loop time of the next report allowed while the API is busy
        self._busy_at = float("-inf")  # loop time `api_busy` was last seen true
        self._tg: asyncio.TaskGroup | None = None
        self._registered = False
        self._terms = 0  # leadership terms begun (`lead`)
        # namespace and labels -> default spreading; cleared when a selecting object's selector may have changed
        self._spread_memo: dict[tuple[str, frozenset[tuple[str, str]]], tuple[SpreadConstraint, ...]] = {}
        self.bound = 0
        self.on_attempt: Callable[[str, float], None] | None = None  # (result, seconds): see the module doc

    # -- running --

    async def run(self) -> None:
        """Wait for the caches, then schedule until cancelled (no leader election: tests and benchmarks; the
        server runs `start` once and `lead` per leadership term of the Lease kube-system/kube-scheduler)."""
        await self.start()
        await self.lead()

    async def start(self) -> None:
        """Register the informer handlers (once) and wait for every cache to sync. The handlers keep the cache
        and the queue current from then on, leading or not, so a standby takes over warm."""
        if not self._registered:
            self._registered = True
            self._register()
        for inf in (self.nodes, self.pods, self.namespaces, self.priority_classes, self.pdbs, *self.selecting,
                    self.claims, self.pvs, self.storage_classes):
            await inf.wait_synced()

    async def lead(self) -> None:
        """One leadership term: schedule until cancelled. Every term after the first starts afresh (`_new_term`)."""
        if self._terms:
            self._new_term()
        self._terms += 1
        try:
            async with asyncio.TaskGroup() as tg:
                self._tg = tg
                tg.create_task(self._guarded(self.recorder.run()))
                for _ in range(self.report_concurrency):
                    tg.create_task(self._report_writer())
                while True:
                    info = await self.queue.pop()
                    start = time.perf_counter()
                    try:
                        await self.schedule_one(info, start)
                    except Exception:
                        log.exception("scheduling %s failed", info.key)
                        self.queue.requeue(info.key, unschedulable=False)
                        self._attempted("error", start)
        finally:
            self._tg = None
            self.queue.close()

    def _new_term(self) -> None:
        """Forget what the last term left in flight and queue every pending pod the informer holds now.

        Binds cancelled with the last term may or may not have happened: their assumed pods are forgotten, and
        the informer (a bound pod's nodeName) says which. Unwritten reports are dropped (the pods are decided
        again). Another server may have led in between, so nothing the queue learnt (backoff, parked pods) is
        kept: a fresh queue gets every pending pod, as at start-up."""
        for key in self.cache.assumed():
            self.cache.forget(key)
        self._reports.clear()
        self.queue = SchedulingQueue(rebuild=self._rebuild)
        for pod in self.pods.list():
            if not (pod.get("spec") or {}).get("nodeName"):
                self._pod_set(pod)

    def _spawn(self, coro: Any) -> None:
        assert self._tg is not None
        self._tg.create_task(self._guarded(coro))

    @staticmethod
    async def _guarded(coro: Any) -> None:
        try:
            await coro
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("scheduler task failed")

    # -- one pod --

    def _attempted(self, result: str, start: float) -> None:
        if self.on_attempt is not None:
            self.on_attempt(result, time.perf_counter() - start)

    async def schedule_one(self, info: PodInfo, start: float | None = None) -> None:
        start = time.perf_counter() if start is None else start
        snap = self.cache.snapshot()
        res = self.algorithm.schedule(info, snap)
        if res.node:
            volumes = self.volume_binder.reserve(info.obj, snap.by_name[res.node], self.cache.volumes) \
                if info.claims else None
            self.cache.assume(info, res.node)
            self.cache.clear_nomination(info.key)
            await self._bind_slots.acquire()
            self._spawn(self._bind(info, res.node, start, volumes))
            return
        self._failed(info, res)
        self._attempted("unschedulable", start)
        await asyncio.sleep(0)  # a failing pod costs a full scan: let binds and informers run

    def _failed(self, info: PodInfo, res: Result) -> None:
        post = ""
        outcome = Outcome()
        if res.num_nodes:
            budgets = [b for b in (_budget(o) for o in self.pdbs.list()) if b is not None]
            outcome = preempt(self.algorithm, info, self.cache.snapshot(), res.statuses, budgets, self.rng)
            if not outcome.node:
                post = f"preemption: {outcome.message}"
        msg = fit_error_message(res.num_nodes, res.statuses, post)
        plugins = frozenset(f.plugin for f in res.statuses.values()) or NO_PLUGINS  # not one empty set per pod
        self.queue.requeue(info.key, unschedulable=True, plugins=plugins)
        if outcome.node:
            self.cache.nominate(info, outcome.node)
            for v in outcome.victims:
                self._spawn(self._evict(info, v, outcome.node))
        self._reports.pop(info.key, None)  # re-queued at the end: writers take the oldest first
        self._reports[info.key] = (info.uid, msg, outcome.node)
        self._report_ready.set()

    async def _bind(self, info: PodInfo, node: str, start: float, volumes: Plan | None = None) -> None:
        try:
            if volumes is not None:
                await self.volume_binder.pre_bind(info.obj, node, volumes)
            body = {"apiVersion": "v1", "kind": "Binding",
                    "metadata": {"name": info.name, "namespace": info.namespace, "uid": info.uid},
                    "target": {"apiVersion": "v1", "kind": "Node", "name": node}}
            await self._create_owned(self.pod_kind, info.namespace, body, name=info.name, subresource="binding")
        except VolumeBindingError as e:
            self.cache.forget(info.key)
            self.queue.requeue(info.key, unschedulable=False)
            self._attempted("error", start)
            self._failed_event(info.obj, str(e))
            return
        except ApiError as e:
            self.cache.forget(info.key)
            if e.code == 404:
                self.queue.delete(info.key)
                return
            log.info("binding %s to %s failed: %s", info.key, node, e)
            self.queue.requeue(info.key, unschedulable=False)
            self._attempted("error", start)
            self._failed_event(info.obj, f"Binding rejected: {e.message}")
            return
        finally:
            self._bind_slots.release()
        self.queue.done(info.key)
        self.bound += 1
        self._attempted("scheduled", start)
        if self.scheduled_events:
            self.recorder.post(info.obj, None, NORMAL, "Scheduled", "Binding",
                               f"Successfully assigned {info.key} to {node}")

    async def _report_writer(self) -> None:
        """One of the writers of queued unschedulable reports (see the module doc), until cancelled."""
        while True:
            while not self._reports:
                self._report_ready.clear()
                await self._report_ready.wait()
            await self._pace_report()
            if not self._reports:
                continue  # taken by another writer, or moot, meanwhile
            key = next(iter(self._reports))
            uid, msg, nominated = self._reports.pop(key)
            if not self._reports:  # a dict keeps the size it grew to (a burst of 10,000 reports: ~0.3 MB)
                self._reports = {}
            current = self.pods.peek(key)  # not kept decoded: after a restart a burst goes over every pod
            if current is None or (current.get("metadata") or {}).get("uid") != uid \
                    or (current.get("spec") or {}).get("nodeName") or self.cache.is_assumed(key):
                continue  # gone, replaced, bound or being bound meanwhile: nothing to report
            await self._guarded(self._report_unschedulable(key, msg, nominated, current))

    async def _pace_report(self) -> None:
        """Return when the next report may be written: at once while the API is idle (not busy for BUSY_LINGER:
        the gaps between the requests of busy clients are not idleness), else at its turn of
        `busy_reports_per_s` (all writers together), or as soon as the API goes idle."""
        loop = asyncio.get_running_loop()
        while (busy := self.api_busy) is not None:
            now = loop.time()
            if busy():
                self._busy_at = now
            elif now - self._busy_at >= BUSY_LINGER:
                return
            if now >= self._next_busy_report:
                self._next_busy_report = now + 1.0 / self.busy_reports_per_s
                return
            await asyncio.sleep(min(self._next_busy_report - now, BUSY_RECHECK))

    async def _report_unschedulable(self, key: str, msg: str, nominated: str, current: Obj) -> None:
        """The condition and the event, both from `current` (the cached pod, decoded for this report)."""
        await self._set_unschedulable(key, msg, nominated, current)
        self._failed_event(current, msg)

    def _failed_event(self, pod: Obj, msg: str) -> None:
        self.recorder.post(pod, None, WARNING, "FailedScheduling", "Scheduling", truncate_note(msg))

    async def _set_unschedulable(self, key: str, msg: str, nominated: str, current: Obj) -> None:
        """PodScheduled=False/Unschedulable with the message (and the nomination), unless already so; its
        lastTransitionTime kept when it was False already (upstream `UpdatePodCondition`). Written as the whole
        status of the revision at hand (`replace_status`, when the client has it: an in-process status write
        without a patch to merge), or, when the pod changed meanwhile (409), as a strategic merge patch."""
        namespace, _, name = key.partition("/")
        status = current.get("status") or {}
        conditions = status.get("conditions") or []
        cond = next((c for c in conditions if c.get("type") == "PodScheduled"), None)
        same = cond is not None and cond.get("status") == "False" and cond.get("reason") == "Unschedulable" \
            and cond.get("message") == msg
        if same and (not nominated or status.get("nominatedNodeName") == nominated):
            return
        was_false = cond is not None and cond.get("status") == "False" and cond.get("lastTransitionTime")
        new: Obj = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": msg,
                    "lastTransitionTime": cond["lastTransitionTime"] if was_false and cond else rfc3339()}
        replace = getattr(self.client, "replace_status", None)
        rv = str((current.get("metadata") or {}).get("resourceVersion") or "")
        if replace is not None and rv:
            whole: Obj = {**status, "conditions": [new if c is cond else c for c in conditions] + ([new] if cond is None
                                                                                                  else [])}
            if nominated:
                whole["nominatedNodeName"] = nominated
            try:
                await replace(self.pod_kind, namespace, name, rv, whole)
                return
            except ApiError as e:
                if e.code == 404:
                    return
                if e.code != 409:
                    log.info("status of %s not updated: %s", key, e)
                    return
        patch: Obj = {"status": {"conditions": [{**new, "lastProbeTime": None}]}}
        if nominated:
            patch["status"]["nominatedNodeName"] = nominated
        try:
            await self.client.patch(self.pod_kind, namespace, name, patch, patch_type="strategic",
                                    subresource="status")
        except ApiError as e:
            if e.code != 404:
                log.info("status of %s not updated: %s", key, e)

    async def _evict(self, preemptor: PodInfo, victim: PodInfo, node: str) -> None:
        cond = {"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler",
                "message": f"{self.profile.scheduler_name}: preempting to accommodate a higher priority pod",
                "lastTransitionTime": rfc3339()}
        try:
            await self.client.patch(self.pod_kind, victim.namespace, victim.name,
                                    {"status": {"conditions": [cond]}}, patch_type="strategic",
                                    subresource="status")
            await self.client.delete(self.pod_kind, victim.namespace, victim.name)
        except ApiError as e:
            if e.code != 404:
                log.warning("preempting %s failed: %s", victim.key, e)
            return
        self.recorder.post(victim.obj, preemptor.obj, NORMAL, "Preempted", "Preempting",
                           f"Preempted by pod {preemptor.uid} on node {node}")

    # -- informer events --

    def _register(self) -> None:
        self.nodes.add_handlers(on_add=self._node_added, on_update=self._node_updated,
                                on_delete=lambda n: self.cache.remove_node(str((n.get("metadata") or {})["name"])))
        self.namespaces.add_handlers(
            on_add=self._namespace_set, on_update=lambda _o, n: self._namespace_set(n),
            on_delete=lambda n: self.cache.set_namespace(str((n.get("metadata") or {}).get("name")), None))
        self.pods.add_handlers(on_add=self._pod_set, on_update=lambda _o, n: self._pod_set(n),
                               on_delete=self._pod_deleted)
        for inf in self.selecting:  # what `_default_spread` remembers comes from their selectors
            inf.add_handlers(on_add=self._selecting_changed, on_update=self._selecting_updated,
                             on_delete=self._selecting_changed)
        for inf in (self.claims, self.pvs, self.storage_classes):  # VolumeBinding's inputs
            inf.add_handlers(on_add=self._volumes_changed, on_update=lambda _o, n: self._volumes_changed(n),
                             on_delete=self._volumes_changed)

    def _selecting_changed(self, _obj: Obj) -> None:
        self._spread_memo.clear()

    def _selecting_updated(self, old: Obj, new: Obj) -> None:
        if (old.get("spec") or {}).get("selector") != (new.get("spec") or {}).get("selector"):
            self._spread_memo.clear()  # status writes (most updates) keep the selector: the memo stays

    def _volumes_changed(self, _obj: Obj) -> None:
        self.volume_binder.changed()
        self.queue.move_all(frozenset((VOLUME_BINDING,)))

    def _node_added(self, node: Obj) -> None:
        self.cache.set_node(node)
        self.queue.move_all()

    def _node_updated(self, old: Obj, new: Obj) -> None:
        self.cache.set_node(new)
        if old is not new and _node_sched_fields(old) != _node_sched_fields(new):
            self.queue.move_all()

    def _namespace_set(self, ns: Obj) -> None:
        m = ns.get("metadata") or {}
        self.cache.set_namespace(str(m.get("name", "")), m.get("labels") or {})

    def _priority(self, pod: Obj) -> int | None:
        spec = pod.get("spec") or {}
        if spec.get("priority") is not None or not spec.get("priorityClassName"):
            return None
        pc = self.priority_classes.get(str(spec["priorityClassName"]))
        return int(pc.get("value") or 0) if pc is not None else 0

    def _pod_set(self, pod: Obj) -> None:
        m, spec = pod.get("metadata") or {}, pod.get("spec") or {}
        key = f"{m.get('namespace', '')}/{m.get('name', '')}"
        node = spec.get("nodeName")
        if node:
            self.queue.delete(key)
            if (pod.get("status") or {}).get("phase") in TERMINAL:
                self._pod_deleted(pod)
                return
            self.cache.add_pod(reparse(self.cache.info_of(key), pod, self._priority(pod), self.pods.encoded(key),
                                       self._decode_pod, self._parts), str(node))
            self.queue.move_all(POD_EVENTS_PLUGINS)
            return
        if spec.get("schedulerName", "default-scheduler") != self.profile.scheduler_name \
                or self.cache.is_assumed(key):
            return
        if m.get("deletionTimestamp") or spec.get("schedulingGates") \
                or (pod.get("status") or {}).get("phase") in TERMINAL:
            self.queue.delete(key)  # not schedulable (upstream skips these before the queue)
            return
        priority, queued = self._priority(pod), self.queue.info(key)
        if queued is None and self.queue.rebuild is not None \
                and not (pod.get("status") or {}).get("nominatedNodeName"):
            # new, or waiting without its PodInfo (parked): parsed only when its turn comes (queue module doc)
            bare = self.queue.unparsed(key)
            facts = facts_of(spec, m.get("labels") or {})
            effective = int(spec.get("priority") or 0) if priority is None else priority
            if bare is None and key not in self.queue:
                self.cache.clear_nomination(key)
                self.queue.add_unparsed(intern(key), effective, facts)  # one key string, as a PodInfo's
                return
            if bare == (facts, effective):  # a status update (our own report): nothing to parse
                self.cache.clear_nomination(key)
                return
        if queued is not None and same_facts(queued, pod, priority):
            # a status update (our own report): nothing to parse again
            info = reparse(queued, pod, priority, self.pods.encoded(key), self._decode_pod, self._parts)
        else:
            info = pod_info(pod, priority, self._default_spread(pod), self.pods.encoded(key), self._decode_pod,
                            self._parts)
        if info.nominated_node:
            self.cache.nominate(info, info.nominated_node)
        else:
            self.cache.clear_nomination(key)
        self.queue.add(info)

    def _rebuild(self, key: str) -> PodInfo | None:
        """The PodInfo of a pod the queue holds without one (new, or parked), from the pod as the informer has it
        now (decoded for this parse, not kept); None when it is no longer a pod to schedule (`_pod_set` drops
        those too)."""
        pod = self.pods.peek(key)
        if pod is None:
            return None
        m, spec = pod.get("metadata") or {}, pod.get("spec") or {}
        if spec.get("nodeName") or m.get("deletionTimestamp") or spec.get("schedulingGates") \
                or spec.get("schedulerName", "default-scheduler") != self.profile.scheduler_name \
                or (pod.get("status") or {}).get("phase") in TERMINAL:
            return None
        try:  # a parse that fails must not stop the loop's `pop`
            return pod_info(pod, self._priority(pod), self._default_spread(pod), self.pods.encoded(key),
                            self._decode_pod, self._parts)
        except Exception:
            log.exception("parsing %s again failed: it waits for its next update", key)
            return None

    def _default_spread(self, pod: Obj) -> tuple[SpreadConstraint, ...]:
        """Upstream `DefaultSelector`: the requirements of every Service, RC, ReplicaSet and StatefulSet in
        the pod's namespace that selects it, ANDed; no constraints when nothing selects the pod."""
        if (pod.get("spec") or {}).get("topologySpreadConstraints"):
            return ()
        m = pod.get("metadata") or {}
        labels: dict[str, str] = m.get("labels") or {}
        if not labels:
            return ()
        ns = str(m.get("namespace", ""))
        memo_key = (ns, frozenset(labels.items()))
        known = self._spread_memo.get(memo_key)
        if known is None:
            if len(self._spread_memo) >= SPREAD_MEMO_SIZE:
                self._spread_memo.clear()
            known = self._spread_memo[memo_key] = self._selecting_constraints(ns, labels)
        return known

    def _selecting_constraints(self, ns: str, labels: dict[str, str]) -> tuple[SpreadConstraint, ...]:
        reqs: set[Requirement] = set()
        for inf in self.selecting:
            for owner in inf.by_index(NAMESPACE_INDEX, ns):
                reqs |= _selecting_requirements(inf.kind.kind, owner, labels)
        if not reqs:
            return ()
        return system_default_constraints(LabelSelector(tuple(sorted(reqs, key=lambda r: (r.key, r.op, r.values)))))

    def _pod_deleted(self, pod: Obj) -> None:
        m = pod.get("metadata") or {}
        key = f"{m.get('namespace', '')}/{m.get('name', '')}"
        self.queue.delete(key)
        self._reports.pop(key, None)
        self.cache.clear_nomination(key)
        if self.cache.node_of(key) is not None:
            self.cache.remove_pod(key)
            self.queue.move_all()


def _selecting_requirements(kind: str, owner: Obj, labels: dict[str, str]) -> set[Requirement]:
    selector = (owner.get("spec") or {}).get("selector")
    if not selector:
        return set()
    if kind in ("Service", "ReplicationController"):  # plain label maps
        if all(labels.get(k) == v for k, v in selector.items()):
            return {Requirement(str(k), EQUALS, (str(v),)) for k, v in selector.items()}
        return set()
    try:
        sel = LabelSelector.from_dict(selector)
    except ApiError:
        return set()
    return set(sel.requirements) if not sel.empty and sel.matches(labels) else set()


def _budget(pdb: Obj) -> Budget | None:
    try:
        sel = LabelSelector.from_dict((pdb.get("spec") or {}).get("selector"))
    except ApiError:
        return None
    return Budget(str((pdb.get("metadata") or {}).get("namespace", "")), sel,
                  int((pdb.get("status") or {}).get("disruptionsAllowed") or 0))


def build_scheduler(client: Client, informers: SharedInformers, *, profile: Profile | None = None,
                    **options: Any) -> Scheduler:
    """The scheduler for `profile` (default: default-scheduler, LeastAllocated). Run `await s.run()`."""
    return Scheduler(client, informers, profile or Profile(), **options)
