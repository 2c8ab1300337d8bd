"""Taint-based eviction: delete pods from nodes with NoExecute taints they do not tolerate (upstream
tainteviction, the NoExecuteTaintManager), with lite's per-workload disconnect policy (`lite.lostpolicy`).

reconcile(namespace/name of a pod bound to a node):
    NoExecute taints of its node ──► none: nothing to do
    `eviction_time(tolerations, [(taint, added)], policy)`, per taint, the earliest wins:
        a taint no toleration matches ──► now
        matching tolerations, some with tolerationSeconds ──► added + the smallest of them
        matching tolerations, none with tolerationSeconds ──► never (for this taint)
      the node-lost taints (node.kubernetes.io/unreachable, node.kubernetes.io/not-ready) follow the pod's,
      else the node's, annotations first:
        lite.dev/replace-when-lost "false" ──► never (the pod stays bound to its node, Running on the server's
                                                books as last reported, until the node returns)
        lite.dev/lost-after D ──► added + D, tolerated or not, replacing tolerationSeconds; a pod that
                                   tolerates the taint forever (no tolerationSeconds) still stays forever
    added = taint.timeAdded (or when this controller first saw the taint); past the time → delete, else
    requeue for it. Every deletion records TaintManagerEviction "Marking for deletion Pod <ns>/<name>" on the
    pod; an annotation value the policy cannot read (admission refuses them on pods and nodes; older objects
    may hold one) is ignored and reported once as a Warning event InvalidLostPolicy on its object.

Invariants: level-triggered (a removed taint simply makes the next reconcile do nothing, which is the
upstream "cancel"); pods already being deleted or terminal are left alone; the clock is injected
(`now() -> datetime`). The default 300 s not-ready/unreachable tolerations come from pod admission. An evicted
pod of a lost node stays Terminating (its deletion waits for the node's agent, or a force delete): a
ReplicaSet makes a replacement at once, a StatefulSet does not (the name is still taken).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any, ClassVar

from lite.client import Client
from lite.errors import ApiError
from lite.events import EventRecorder
from lite.informer import SharedInformers
from lite.lostpolicy import ANNOTATIONS, LostPolicy, bad_values, policy
from lite.objects import is_deleting, name_of, namespace_of, parse_time
from lite.objects import now as utc_now
from lite.server.controllers.nodelifecycle import NODE_NAME_INDEX, NOT_READY, UNREACHABLE, ensure_node_index
from lite.server.controllers.runtime import Controller, builtin

Obj = dict[str, Any]
LOST_TAINTS = (UNREACHABLE, NOT_READY)
EVICT_NOW = dt.datetime.min.replace(tzinfo=dt.UTC)


def tolerates(tol: Obj, taint: Obj) -> bool:
    """Upstream Toleration.ToleratesTaint."""
    if tol.get("effect") and tol.get("effect") != taint.get("effect"):
        return False
    if tol.get("key") and tol.get("key") != taint.get("key"):
        return False
    op = tol.get("operator") or "Equal"
    if op == "Exists":
        return True
    return bool(tol.get("key")) and str(tol.get("value") or "") == str(taint.get("value") or "")


def no_execute(node: Obj | None) -> list[Obj]:
    return [t for t in ((node or {}).get("spec") or {}).get("taints") or []
            if isinstance(t, dict) and t.get("effect") == "NoExecute"]


def eviction_time(tolerations: list[Obj], taints: list[tuple[Obj, dt.datetime]],
                  lost: LostPolicy = LostPolicy()) -> dt.datetime | None:
    """When a pod with `tolerations` is evicted from a node with NoExecute `taints` (each with the time it was
    added) under the disconnect policy `lost`: EVICT_NOW, a time (past: now), or None (never). See the module
    docstring."""
    when: dt.datetime | None = None
    for taint, added in taints:
        node_lost = taint.get("key") in LOST_TAINTS
        if node_lost and not lost.replace:
            continue
        matching = [t for t in tolerations if tolerates(t, taint)]
        seconds = [max(0.0, float(t["tolerationSeconds"])) for t in matching if t.get("tolerationSeconds") is not None]
        if matching and not seconds:
            continue  # tolerated forever
        if node_lost and lost.lost_after is not None:
            at = added + dt.timedelta(seconds=lost.lost_after)
        elif not matching:
            return EVICT_NOW
        else:
            at = added + dt.timedelta(seconds=min(seconds))
        when = at if when is None else min(when, at)
    return when


def _policy_annotations(obj: Obj | None) -> dict[str, str]:
    ann = ((obj or {}).get("metadata") or {}).get("annotations") or {}
    return {k: ann[k] for k in ANNOTATIONS if k in ann}


class TaintEvictionController(Controller):
    name: ClassVar[str] = "taint-eviction"
    workers = 4

    def __init__(self, client: Client, informers: SharedInformers, recorder: EventRecorder | None = None, *,
                 now: Callable[[], dt.datetime] = utc_now) -> None:
        super().__init__(client, informers, recorder or EventRecorder(client, "taint-eviction-controller"))
        self.pod_kind = builtin("", "Pod")
        self.now = now
        self.pods = self.informer(self.pod_kind, primary=True)
        self.nodes = self.informer(builtin("", "Node"))
        ensure_node_index(self.pods)
        # Names of the nodes with NoExecute taints, kept by the node handlers: a pod event asks this set, not the
        # node informer (whose `get` would keep every node with pods decoded while pods keep changing).
        self._no_execute: set[str] = set()
        self.pods.add_handlers(on_add=self._pod, on_update=self._pod_updated)
        self.nodes.add_handlers(on_add=self._node_added, on_update=self._node_updated, on_delete=self._node_deleted)
        self._first_seen: dict[tuple[str, str, str], dt.datetime] = {}
        self._reported_bad: set[tuple[str, str]] = set()  # (object uid, its bad values) already reported

    def initial_keys(self) -> list[str]:
        # the node index: the keys of bound pods without reading (decoding) every pod
        return sorted(k for node in self.pods.index_values(NODE_NAME_INDEX) if node
                      for k in self.pods.index_keys(NODE_NAME_INDEX, node))

    def on_start(self) -> None:
        self._first_seen = {}
        self._reported_bad = set()

    def _pod_updated(self, _old: Obj, pod: Obj) -> None:
        self._pod(pod)

    def _pod(self, pod: Obj) -> None:
        node = (pod.get("spec") or {}).get("nodeName")
        if node and str(node) in self._no_execute:
            self.enqueue(pod)

    def _track(self, node: Obj) -> None:
        if no_execute(node):
            self._no_execute.add(name_of(node))
        else:
            self._no_execute.discard(name_of(node))

    def _node_added(self, node: Obj) -> None:
        self._track(node)
        self._node(node)

    def _node_deleted(self, node: Obj) -> None:
        self._no_execute.discard(name_of(node))

    def _node(self, node: Obj) -> None:
        if no_execute(node):
            for key in self.pods.index_keys(NODE_NAME_INDEX, name_of(node)):
                self.queue.add(key)

    def _node_updated(self, old: Obj, new: Obj) -> None:
        self._track(new)
        if old is not new and (no_execute(old) != no_execute(new)
                               or _policy_annotations(old) != _policy_annotations(new)):
            self._node(new)

    def _added_at(self, node: str, taint: Obj) -> dt.datetime:
        if taint.get("timeAdded"):
            return parse_time(str(taint["timeAdded"]))
        k = (node, str(taint.get("key", "")), str(taint.get("value", "")))
        return self._first_seen.setdefault(k, self.now())

    async def reconcile(self, key: str) -> float | None:
        pod = self.pods.get(key)
        if pod is None or is_deleting(pod) or (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            return None
        node_name = str((pod.get("spec") or {}).get("nodeName") or "")
        node = self.nodes.get(node_name) if node_name else None
        taints = no_execute(node)
        if not taints:
            return None
        pod_ann, node_ann = _policy_annotations(pod), _policy_annotations(node)
        if any(t.get("key") in LOST_TAINTS for t in taints):
            await self._report_bad(pod, pod_ann)
            await self._report_bad(node, node_ann)
        when = eviction_time(list((pod.get("spec") or {}).get("tolerations") or []),
                             [(t, self._added_at(node_name, t)) for t in taints], policy(pod_ann, node_ann))
        if when is None:
            return None
        left = (when - self.now()).total_seconds()
        if left > 0:
            return left
        await self._evict(pod)
        return None

    async def _report_bad(self, obj: Obj | None, ann: dict[str, str]) -> None:
        """A Warning event, once per object and set of bad values, for a policy annotation that is ignored."""
        bad = bad_values(ann)
        if obj is None or not bad:
            return
        key = (str((obj.get("metadata") or {}).get("uid") or name_of(obj)), ",".join(bad))
        if key in self._reported_bad:
            return
        self._reported_bad.add(key)
        await self.recorder.warning(obj, "InvalidLostPolicy",
                                    f"not a valid value, ignored (the default applies): {'; '.join(bad)}")

    async def _evict(self, pod: Obj) -> None:
        await self.recorder.normal(pod, "TaintManagerEviction",
                                   f"Marking for deletion Pod {namespace_of(pod)}/{name_of(pod)}")
        try:
            await self.client.delete(self.pod_kind, namespace_of(pod), name_of(pod))
        except ApiError as e:
            if e.code != 404:
                raise
