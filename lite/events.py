"""EventRecorder: core/v1 Events about objects, written through a `lite.client.Client`.

Used by the controllers, the scheduler and the agent so that `kubectl describe` and `kubectl get events`
show what happened to an object (upstream client-go `record.EventRecorder` with its correlator).

Invariants:
- An Event lives in the involved object's namespace ("default" for cluster-scoped objects), is named
  `<object name>.<hex nanoseconds>` as upstream, and carries involvedObject, reason, message, type, source,
  firstTimestamp, lastTimestamp and count.
- Repeats of the same (object uid, type, reason, message) are aggregated: the recorder remembers the Event it
  wrote and patches `count` and `lastTimestamp` instead of writing a new one. If that Event is gone (deleted,
  expired) a fresh one is created. The memory is a bounded LRU, per recorder instance.
- Recording is best effort: API errors are logged, never raised, so a failing event never fails a reconcile.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from lite.client import Client
from lite.errors import ApiError
from lite.kinds import BUILTIN_KINDS, Kind
from lite.objects import meta, rfc3339

Obj = dict[str, Any]
NORMAL = "Normal"
WARNING = "Warning"

log = logging.getLogger("lite.events")

_CACHE_SIZE = 4096


def _event_kind() -> Kind:
    for k in BUILTIN_KINDS:
        if k.group == "" and k.kind == "Event":
            return k
    raise RuntimeError("core/v1 Event kind missing from BUILTIN_KINDS")


@dataclass
class _Seen:
    namespace: str
    name: str
    count: int


def involved_object(obj: Obj) -> Obj:
    """The ObjectReference an Event points at."""
    m = meta(obj)
    ref: Obj = {"kind": obj.get("kind", ""), "name": m.get("name", ""), "apiVersion": obj.get("apiVersion", "")}
    if m.get("namespace"):
        ref["namespace"] = m["namespace"]
    if m.get("uid"):
        ref["uid"] = m["uid"]
    if m.get("resourceVersion"):
        ref["resourceVersion"] = m["resourceVersion"]
    return ref


class EventRecorder:
    """Writes Events as `component` on `host`. One per component; safe to share between controllers."""

    def __init__(self, client: Client, component: str, host: str = "") -> None:
        self.client = client
        self.component = component
        self.host = host
        self.kind = _event_kind()
        self._seen: OrderedDict[tuple[str, ...], _Seen] = OrderedDict()

    async def event(self, obj: Obj, type: str, reason: str, message: str) -> None:
        """Record that `reason: message` happened to `obj` (type Normal or Warning)."""
        ref = involved_object(obj)
        key = (ref.get("uid", "") or f"{ref.get('namespace', '')}/{ref['name']}", ref["kind"], type, reason,
               message)
        now = rfc3339()
        seen = self._seen.get(key)
        try:
            if seen is not None and await self._bump(seen, now):
                self._seen.move_to_end(key)
                return
            created = await self._create(ref, type, reason, message, now)
        except ApiError as e:
            log.warning("event %s/%s %s for %s/%s not recorded: %s", type, reason, message,
                        ref.get("namespace", ""), ref["name"], e)
            return
        self._seen[key] = _Seen(str(meta(created).get("namespace", "")), str(meta(created).get("name", "")), 1)
        while len(self._seen) > _CACHE_SIZE:
            self._seen.popitem(last=False)

    async def normal(self, obj: Obj, reason: str, message: str) -> None:
        await self.event(obj, NORMAL, reason, message)

    async def warning(self, obj: Obj, reason: str, message: str) -> None:
        await self.event(obj, WARNING, reason, message)

    async def _bump(self, seen: _Seen, now: str) -> bool:
        """Patch the remembered Event's count; False when it no longer exists."""
        seen.count += 1
        try:
            await self.client.patch(self.kind, seen.namespace, seen.name,
                                    {"count": seen.count, "lastTimestamp": now}, patch_type="merge")
        except ApiError as e:
            if e.code == 404:
                return False
            raise
        return True

    async def _create(self, ref: Obj, type: str, reason: str, message: str, now: str) -> Obj:
        ns = ref.get("namespace") or "default"
        source: Obj = {"component": self.component}
        if self.host:
            source["host"] = self.host
        body: Obj = {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": f"{ref['name']}.{time.time_ns():x}", "namespace": ns},
            "involvedObject": ref, "reason": reason, "message": message, "type": type,
            "source": source, "firstTimestamp": now, "lastTimestamp": now, "count": 1,
            "reportingComponent": self.component, "reportingInstance": self.host,
        }
        return await self.client.create(self.kind, ns, body)
