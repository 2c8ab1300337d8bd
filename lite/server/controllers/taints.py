"""Taint-based eviction: delete pods from nodes with NoExecute taints they do not tolerate (upstream
tainteviction, the NoExecuteTaintManager).

reconcile(namespace/name of a pod bound to a node):
    NoExecute taints of its node ──► none: nothing to do
    a taint no toleration matches ──► delete the pod now
    all tolerated ──► the smallest tolerationSeconds among the matching tolerations (none: forever);
                      deadline = taint.timeAdded (or when this controller first saw the taint) + seconds;
                      past it → delete, else requeue for the deadline
    every deletion records TaintManagerEviction "Marking for deletion Pod <ns>/<name>" on the pod.

Invariants: level-triggered (a removed taint simply makes the next reconcile do nothing, which is the
upstream "cancel"); pods already being deleted or terminal are left alone; the clock is injected
(`now() -> datetime`). The default 300 s not-ready/unreachable tolerations come from pod admission.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any, ClassVar

from lite.client import Client
from lite.errors import ApiError
from lite.events import EventRecorder
from lite.informer import SharedInformers
from lite.objects import is_deleting, name_of, namespace_of, parse_time
from lite.objects import now as utc_now
from lite.server.controllers.nodelifecycle import NODE_NAME_INDEX, ensure_node_index
from lite.server.controllers.runtime import Controller, builtin

Obj = dict[str, Any]


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


def toleration_seconds(tols: list[Obj], taints: list[Obj]) -> tuple[bool, float | None]:
    """(every taint tolerated, the smallest tolerationSeconds that applies or None for 'forever')."""
    least: float | None = None
    for taint in taints:
        matching = [t for t in tols if tolerates(t, taint)]
        if not matching:
            return False, None
        for t in matching:
            if t.get("tolerationSeconds") is not None:
                secs = max(0.0, float(t["tolerationSeconds"]))
                least = secs if least is None else min(least, secs)
    return True, least


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
        self.pods.add_handlers(on_add=self._pod, on_update=lambda _o, n: self._pod(n))
        self.nodes.add_handlers(on_add=self._node, on_update=self._node_updated)
        self._first_seen: dict[tuple[str, str, str], dt.datetime] = {}

    def initial_keys(self) -> list[str]:
        # the node index: the keys of bound pods without reading (decoding) every pod
        return sorted(k for node in self.pods.index_values(NODE_NAME_INDEX) if node
                      for k in self.pods.index_keys(NODE_NAME_INDEX, node))

    def on_start(self) -> None:
        self._first_seen = {}

    def _pod(self, pod: Obj) -> None:
        node = (pod.get("spec") or {}).get("nodeName")
        if node and no_execute(self.nodes.get(str(node))):
            self.enqueue(pod)

    def _node(self, node: Obj) -> None:
        if no_execute(node):
            for key in self.pods.index_keys(NODE_NAME_INDEX, name_of(node)):
                self.queue.add(key)

    def _node_updated(self, old: Obj, new: Obj) -> None:
        if old is not new and no_execute(old) != no_execute(new):
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
        node = str((pod.get("spec") or {}).get("nodeName") or "")
        taints = no_execute(self.nodes.get(node)) if node else []
        if not taints:
            return None
        tolerated, seconds = toleration_seconds(list((pod.get("spec") or {}).get("tolerations") or []), taints)
        if tolerated and seconds is None:
            return None
        if tolerated:
            assert seconds is not None
            since = max(self._added_at(node, t) for t in taints)
            left = (since + dt.timedelta(seconds=seconds) - self.now()).total_seconds()
            if left > 0:
                return left
        await self._evict(pod)
        return None

    async def _evict(self, pod: Obj) -> None:
        await self.recorder.normal(pod, "TaintManagerEviction",
                                   f"Marking for deletion Pod {namespace_of(pod)}/{name_of(pod)}")
        try:
            await self.client.delete(self.pod_kind, namespace_of(pod), name_of(pod))
        except ApiError as e:
            if e.code != 404:
                raise
