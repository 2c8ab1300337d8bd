"""Event recorders: what happened to an object, written through a `lite.client.Client` as upstream's two do.

- `EventRecorder` (upstream client-go `tools/record`, the core/v1 recorder with its correlator, used by
  kube-controller-manager and the kubelet): the controllers and the addon manifests record through it. Its
  events have no `eventTime`, as upstream's; the agents' (kubelet) events, which the server writes for them
  (`lite.server.join.intake`), have the same shape.
- `SeriesRecorder` (upstream `tools/events`, the events.k8s.io/v1 recorder kube-scheduler uses): the scheduler
  records through it. Its events have `eventTime`, `reportingController`, `reportingInstance`, `action`, and
  `series` for repeats; the shape and the series logic are `lite.eventseries` (pure).

Invariants of `EventRecorder`:
- An Event lives in the involved object's namespace ("default" for cluster-scoped objects), is named
  `<object name>.<hex nanoseconds>` as upstream, and carries involvedObject, reason, message, type, source,
  firstTimestamp, lastTimestamp and count.
- What is written is upstream's correlator's decision (`lite.eventcorrelation`, pure): a repeat of the same
  (object, type, reason, message) patches the remembered Event's `count`, `lastTimestamp` (and `message`)
  instead of writing a new one, and a fresh one is created under the remembered name if that Event is gone;
  the 10th and later distinct messages for one (object, type, reason) within 10 minutes go to one aggregate
  Event ("(combined from similar events): ..."); an object gets at most 25 events from one recorder, then
  one per 5 minutes (the rest are dropped). The memory is bounded LRUs, per recorder instance.
- Recording is best effort: API errors are logged, never raised, so a failing event never fails a reconcile.
- Writes for one correlation key are serialised, in call order (upstream's broadcaster writes one event at a
  time): a repeat's count patch waits for the create of the Event it patches, so concurrent callers (controller
  workers) never both create it. A create under a remembered name answered 409 AlreadyExists (written meanwhile
  by someone else) is retried as that repeat's count patch.

Invariants of `SeriesRecorder`:
- Writes only through events.k8s.io/v1 (so upstream's strict event validation applies): a create per new
  event, a strategic merge patch of `series` (a create under the first event's name when it is gone) per series
  write. Writes for one isomorphic key are serialised (a series patch never overtakes the create it patches).
- `run()` does upstream's periodic sweeps (`finish_series` every FINISH_SECONDS, `refresh_series` every
  REFRESH_SECONDS); without it a series' later counts stay in memory. Best effort as above.
- `post` is `eventf` that does not wait for the write (upstream's recorder never does): the decision is taken
  at the call, the write is queued and done by `run()`'s POST_WRITERS writers in call order; past MAX_QUEUED
  waiting writes an event is dropped with a warning. Without `run()` posted events are never written.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import socket
import time
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

import orjson

from lite import eventseries
from lite.client import Client
from lite.errors import ApiError
from lite.eventcorrelation import Correlated, Correlator, Recorded
from lite.eventseries import FINISH_SECONDS, REFRESH_SECONDS, Key, SeriesCache
from lite.kinds import BUILTIN_KINDS, Kind
from lite.objects import meta, rfc3339
from lite.objects import now as utc_now

Obj = dict[str, Any]
POST_WRITERS = 4  # SeriesRecorder.post: writes in flight at most
MAX_QUEUED = 10_000  # SeriesRecorder.post: waiting writes at most (upstream's broadcaster queue: 1,000)
NORMAL = "Normal"
WARNING = "Warning"

log = logging.getLogger("lite.events")



def _event_kind(group: str = "") -> Kind:
    for k in BUILTIN_KINDS:
        if k.group == group and k.kind == "Event":
            return k
    raise RuntimeError(f"Event kind of group {group!r} missing from BUILTIN_KINDS")


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
    """Writes Events as `component` on `host`. One per component; safe to share between controllers.
    What is written for each call is `lite.eventcorrelation` (upstream's correlator); `clock` is monotonic."""

    def __init__(self, client: Client, component: str, host: str = "", *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.client = client
        self.component = component
        self.host = host
        self.kind = _event_kind()
        self.clock = clock
        self.correlator = Correlator()
        self._writing: dict[Key, tuple[asyncio.Lock, list[int]]] = {}  # key -> (its writes' lock, users)

    async def event(self, obj: Obj, type: str, reason: str, message: str) -> None:
        """Record that `reason: message` happened to `obj` (type Normal or Warning). Decided before the first
        await: a repeat patches the remembered Event's count, a spammed object's event is dropped."""
        ref = involved_object(obj)
        ns = ref.get("namespace") or "default"
        obj_key = (self.component, self.host, str(ref.get("kind", "")), str(ref.get("namespace", "")),
                   str(ref.get("name", "")), str(ref.get("uid", "")), str(ref.get("apiVersion", "")))
        now = rfc3339()
        fresh = f"{ref['name']}.{time.time_ns():x}"  # a first occurrence's name, which the correlator remembers
        out = self.correlator.correlate(obj_key, type, reason, message, ns, fresh, now, self.clock())
        if out is None:
            return
        # One write at a time per key, in call order (upstream's broadcaster writes one event at a time): a
        # repeat's patch must not overtake the create of the Event it patches, else both create it and one
        # gets 409 AlreadyExists (an aggregate during a ReplicaSet's slow start).
        lock, users = self._writing.setdefault(out.key, (asyncio.Lock(), [0]))
        users[0] += 1
        try:
            async with lock:
                created = await self._write(out, ref, type, reason, now, fresh)
        except ApiError as e:
            self.correlator.forget(out.key)
            log.warning("event %s/%s %s for %s/%s not recorded: %s", type, reason, message,
                        ref.get("namespace", ""), ref["name"], e)
            return
        finally:
            users[0] -= 1
            if not users[0]:
                self._writing.pop(out.key, None)
        if created is not None:
            m = meta(created)
            self.correlator.written(out.key, str(m.get("namespace", "")), str(m.get("name", "")),
                                    int(created.get("count") or 1), str(created.get("firstTimestamp") or now))

    async def _write(self, out: Correlated, ref: Obj, type: str, reason: str, now: str, fresh: str) -> Obj | None:
        """The create or count patch `out` asks for; the created Event, or None when an existing one was
        patched. A create under a remembered name that exists meanwhile (another writer's) is a repeat."""
        prev = out.previous
        if prev is not None and await self._bump(prev, out.message, now):
            return None
        name, count, first = (prev.name, prev.count + 1, prev.first_timestamp) if prev is not None else \
            (fresh, 1, now)
        try:
            return await self._create(ref, type, reason, out.message, now, name=name, count=count, first=first)
        except ApiError as e:
            if e.code != 409 or prev is None or not await self._bump(prev, out.message, now):
                raise
            return None

    async def normal(self, obj: Obj, reason: str, message: str) -> None:
        await self.event(obj, NORMAL, reason, message)

    async def warning(self, obj: Obj, reason: str, message: str) -> None:
        await self.event(obj, WARNING, reason, message)

    async def _bump(self, prev: Recorded, message: str, now: str) -> bool:
        """Patch the remembered Event's count (and message: an aggregate's changes); False when it is gone."""
        try:
            await self.client.patch(self.kind, prev.namespace, prev.name,
                                    {"count": prev.count + 1, "lastTimestamp": now, "message": message},
                                    patch_type="merge")
        except ApiError as e:
            if e.code == 404:
                return False
            raise
        return True

    async def _create(self, ref: Obj, type: str, reason: str, message: str, now: str, *, name: str | None,
                      count: int, first: str) -> Obj:
        ns = ref.get("namespace") or "default"
        source: Obj = {"component": self.component}
        if self.host:
            source["host"] = self.host
        body: Obj = {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": name or f"{ref['name']}.{time.time_ns():x}", "namespace": ns},
            "involvedObject": ref, "reason": reason, "message": message, "type": type,
            "source": source, "firstTimestamp": first, "lastTimestamp": now, "count": count,
            "reportingComponent": self.component, "reportingInstance": self.host,
        }
        return await self.client.create(self.kind, ns, body)


class SeriesRecorder:
    """Writes events.k8s.io/v1 Events as `controller` (instance `<controller>-<hostname>` unless given), the
    way upstream's `tools/events` recorder does; see the module doc. One per reporting controller."""

    def __init__(self, client: Client, controller: str, instance: str | None = None, *,
                 clock: Callable[[], dt.datetime] = utc_now, finish_seconds: float = FINISH_SECONDS,
                 refresh_seconds: float = REFRESH_SECONDS, writers: int = POST_WRITERS,
                 max_queued: int = MAX_QUEUED) -> None:
        self.client = client
        self.writers, self.max_queued = writers, max_queued
        self._posted: deque[tuple[Key, bytes]] = deque()  # JSON: a third of the memory of the dicts
        self._posted_ready = asyncio.Event()
        self.controller = controller
        self.instance = instance if instance is not None else f"{controller}-{socket.gethostname()}"
        self.kind = _event_kind("events.k8s.io")
        self.clock = clock
        self.finish_seconds, self.refresh_seconds = finish_seconds, refresh_seconds
        self.cache = SeriesCache(finish_seconds)
        self._writing: dict[Key, tuple[asyncio.Lock, list[int]]] = {}

    async def eventf(self, regarding: Obj, related: Obj | None, type: str, reason: str, action: str,
                     note: str) -> None:
        """Record that `action` led to `reason: note` about `regarding` (upstream `Eventf(regarding, related,
        eventtype, reason, action, note)`). The decision is taken before the first await, in call order."""
        now = self.clock()
        ev = eventseries.new_event(eventseries.object_reference(regarding),
                                   eventseries.object_reference(related) if related is not None else None,
                                   type, reason, action, note, self.controller, self.instance, now)
        key = eventseries.isomorphic_key(ev)
        out = self.cache.observe(ev, now, key)
        if out is not None:
            await self._record(key, out)

    def post(self, regarding: Obj, related: Obj | None, type: str, reason: str, action: str, note: str) -> None:
        """`eventf` without waiting for the write, as upstream's recorder (its broadcaster queues the event for
        the sink's goroutine): decided now, written by `run()`'s `writers` in call order. Past `max_queued`
        waiting writes the event is dropped (logged), as upstream drops past its queue."""
        now = self.clock()
        ev = eventseries.new_event(eventseries.object_reference(regarding),
                                   eventseries.object_reference(related) if related is not None else None,
                                   type, reason, action, note, self.controller, self.instance, now)
        key = eventseries.isomorphic_key(ev)
        out = self.cache.observe(ev, now, key)
        if out is None:
            return
        if len(self._posted) >= self.max_queued:
            log.warning("event %s/%s for %s dropped: %d events waiting to be written", type, reason,
                        ev["regarding"].get("name", ""), len(self._posted))
            return
        self._posted.append((key, memoryview(orjson.dumps(out)).tobytes()))
        self._posted_ready.set()

    async def run(self) -> None:
        """upstream's sweeps, until cancelled: finished series written and forgotten, open ones refreshed; and
        the writers of `post`ed events."""
        async with asyncio.TaskGroup() as tg:
            tg.create_task(self._every(self.finish_seconds, self.finish_series))
            tg.create_task(self._every(self.refresh_seconds, self.refresh_series))
            for _ in range(self.writers):
                tg.create_task(self._write_posted())

    async def _write_posted(self) -> None:
        while True:
            while not self._posted:
                self._posted_ready.clear()
                await self._posted_ready.wait()
            key, raw = self._posted.popleft()
            try:
                await self._record(key, orjson.loads(raw))
            except Exception:
                log.exception("event write failed")

    async def finish_series(self) -> None:
        for key, ev in self.cache.finished(self.clock()):
            if await self._record(key, ev):
                self.cache.forget(key, ev)

    async def refresh_series(self) -> None:
        for key, ev in self.cache.refresh():
            await self._record(key, ev)

    @staticmethod
    async def _every(seconds: float, sweep: Callable[[], Awaitable[None]]) -> None:
        while True:
            await asyncio.sleep(seconds)
            try:
                await sweep()
            except Exception:
                log.exception("event series sweep failed")

    async def _record(self, key: Key, ev: Obj) -> bool:
        """Write `ev`; False when the failure is worth retrying at the next sweep (429, 5xx)."""
        lock, users = self._writing.setdefault(key, (asyncio.Lock(), [0]))
        users[0] += 1
        try:
            async with lock:
                await self._write(ev)
        except ApiError as e:
            m = ev["metadata"]
            log.warning("event %s/%s %s for %s not recorded: %s", ev["type"], ev["reason"], ev.get("note", ""),
                        f"{m['namespace']}/{ev['regarding'].get('name', '')}", e)
            return not (e.code == 429 or e.code >= 500)
        finally:
            users[0] -= 1
            if not users[0]:
                self._writing.pop(key, None)
        return True

    async def _write(self, ev: Obj) -> None:
        ns, name = ev["metadata"]["namespace"], ev["metadata"]["name"]
        if "series" in ev:
            try:
                await self.client.patch(self.kind, ns, name, eventseries.series_patch(ev), patch_type="strategic")
                return
            except ApiError as e:
                if e.code != 404:
                    raise
        try:
            await self.client.create(self.kind, ns, ev)
        except ApiError as e:
            if e.code != 409 or "series" not in ev:
                raise
            # created meanwhile by someone else under this name: upstream retries, which patches
            await self.client.patch(self.kind, ns, name, eventseries.series_patch(ev), patch_type="strategic")
