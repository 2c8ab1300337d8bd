"""events.k8s.io/v1 Events as upstream's new recorder makes them (client-go `tools/events`), and its series logic.

Pure: no I/O, the clock is an argument. `lite.events.SeriesRecorder` writes what this module decides.

The event (`new_event`): named `<regarding name>.<hex nanoseconds>` in the regarding object's namespace
("default" when it has none); `eventTime` is the MicroTime of the call; `reportingController`,
`reportingInstance`, `action`, `reason`, `type`, `note`, `regarding` and (when given) `related` are set;
`series` is absent on a singleton; the deprecated core fields (source, first/lastTimestamp, count) never are.

The series (`SeriesCache`, upstream's `eventBroadcasterImpl.eventCache`):
- Two events are isomorphic when type, action, reason, reportingController, reportingInstance, regarding and
  related are equal (`isomorphic_key`; the note is not part of it, as upstream since 1.26).
- The first of its kind is recorded as is (a create) and remembered. The second turns it into a series
  (`series: {count: 2, lastObservedTime}`) and that is recorded at once (a patch of `series` on the first
  event's name, or a create under that name when it is gone). Later ones only count in memory: nothing is
  written until `refresh` (every `REFRESH_SECONDS`: every open series is re-recorded with its count) or
  `finished` (every `FINISH_SECONDS`: a series not observed for `FINISH_SECONDS` is recorded a last time and
  forgotten; a singleton older than that is forgotten).
- Returned events are copies: a caller may change them without touching the cache.
- The cache holds at most `max_entries` keys (least recently observed dropped first); upstream's is unbounded
  between two `finished` sweeps. It keeps each event as its JSON plus the series' count and last observed
  time (a scheduler failing every pod has one entry per pod: ~1 KB each rather than ~2.4 KB decoded), the JSON
  deflated against the first event the cache kept (the events one recorder makes differ in a few names, times
  and ids: ~40 bytes instead of ~550, measured; 4,096 entries ~2 MB less), with a 2 KB window (setting up a
  32 KB one costs ~20 times more than deflating an event).
"""

from __future__ import annotations

import datetime as dt
import zlib
from collections import OrderedDict
from dataclasses import field
from typing import Any

import orjson

from lite.objects import rfc3339_micro
from lite.records import dataclass

Obj = dict[str, Any]
Key = tuple[str, ...]

NORMAL = "Normal"
WARNING = "Warning"
NOTE_LIMIT = 1024  # upstream validation.NoteLengthLimit
FINISH_SECONDS = 6 * 60.0  # upstream finishTime
REFRESH_SECONDS = 30 * 60.0  # upstream refreshTime
_REF_FIELDS = ("kind", "namespace", "name", "uid", "apiVersion", "resourceVersion", "fieldPath")
_WBITS, _MEM_LEVEL = -11, 2  # raw deflate, 2 KB window, small state (see the module doc)


def object_reference(obj: Obj) -> Obj:
    """The ObjectReference upstream's `reference.GetReference` makes of an object (empty fields omitted)."""
    m: Obj = obj.get("metadata") or {}
    ref: Obj = {"kind": obj.get("kind", ""), "namespace": m.get("namespace", ""), "name": m.get("name", ""),
                "uid": m.get("uid", ""), "apiVersion": obj.get("apiVersion", ""),
                "resourceVersion": m.get("resourceVersion", "")}
    return {k: v for k, v in ref.items() if v}


def truncate_note(note: str) -> str:
    """The scheduler's `truncateMessage`: a note longer than NOTE_LIMIT is cut and ends with " ..."."""
    if len(note) <= NOTE_LIMIT:
        return note
    suffix = " ..."
    return note[:NOTE_LIMIT - len(suffix)] + suffix


def new_event(regarding: Obj, related: Obj | None, type_: str, reason: str, action: str, note: str,
              controller: str, instance: str, now: dt.datetime) -> Obj:
    """The events.k8s.io/v1 Event of one call of upstream's `EventRecorder.Eventf` (see the module doc)."""
    if type_ not in (NORMAL, WARNING):
        raise ValueError(f"unsupported event type {type_!r}")
    nanos = int(now.timestamp()) * 1_000_000_000 + now.microsecond * 1000
    ev: Obj = {
        "apiVersion": "events.k8s.io/v1", "kind": "Event",
        "metadata": {"name": f"{regarding.get('name', '')}.{nanos:x}",
                     "namespace": regarding.get("namespace") or "default"},
        "eventTime": rfc3339_micro(now), "reportingController": controller, "reportingInstance": instance,
        "action": action, "reason": reason, "regarding": dict(regarding), "note": note, "type": type_,
    }
    if related is not None:
        ev["related"] = dict(related)
    return ev


def _ref_key(ref: Any) -> str:
    if not isinstance(ref, dict):
        return ""
    return "\x1f".join(str(ref.get(f) or "") for f in _REF_FIELDS)


def isomorphic_key(ev: Obj) -> Key:
    """upstream `getKey`: what makes two events one series."""
    return (str(ev.get("type") or ""), str(ev.get("action") or ""), str(ev.get("reason") or ""),
            str(ev.get("reportingController") or ""), str(ev.get("reportingInstance") or ""),
            _ref_key(ev.get("regarding")), _ref_key(ev.get("related")))


def series_patch(ev: Obj) -> Obj:
    """The strategic merge patch upstream sends for a series (the two-way diff of the event without and with
    its `series`): only `series`."""
    return {"series": dict(ev["series"])}


def _observed_stamp(ev: Obj) -> Any:
    series = ev.get("series")
    return series["lastObservedTime"] if isinstance(series, dict) else ev["eventTime"]


def _parse_stamp(stamp: str) -> dt.datetime:
    return dt.datetime.fromisoformat(stamp.replace("Z", "+00:00"))


@dataclass(slots=True)
class _Entry:
    """One cached event: its JSON as first recorded (no `series`), deflated (`SeriesCache._pack`), and the
    series so far."""

    packed: bytes
    observed: str  # the event's eventTime, then its series' lastObservedTime
    count: int = 1  # 1: a singleton; more: a series of that many

    def series(self) -> Obj | None:
        return {"count": self.count, "lastObservedTime": self.observed} if self.count > 1 else None


@dataclass
class SeriesCache:
    """upstream's isomorphic-event cache (see the module doc). Not thread-safe; one per recorder."""

    finish_seconds: float = FINISH_SECONDS
    max_entries: int = 4096
    _events: OrderedDict[Key, _Entry] = field(default_factory=OrderedDict)
    _zdict: bytes = b""  # the JSON of the first event kept: the preset dictionary of every entry's deflate

    def __len__(self) -> int:
        return len(self._events)

    def _pack(self, raw: bytes) -> bytes:
        if not self._zdict:
            self._zdict = memoryview(raw).tobytes()  # orjson's result keeps its growth buffer
        c = zlib.compressobj(6, zlib.DEFLATED, _WBITS, _MEM_LEVEL, zlib.Z_DEFAULT_STRATEGY, self._zdict)
        return c.compress(raw) + c.flush()

    def _event(self, e: _Entry) -> Obj:
        """The event as it is to be recorded: a new object each time."""
        d = zlib.decompressobj(_WBITS, self._zdict)
        ev: Obj = orjson.loads(d.decompress(e.packed) + d.flush())
        series = e.series()
        if series is not None:
            ev["series"] = series
        return ev

    def observe(self, ev: Obj, now: dt.datetime, key: Key | None = None) -> Obj | None:
        """One more event: what to record now (a copy), or None when it only counts in an open series. `key` is
        `isomorphic_key(ev)` when the caller has it already (the recorder keeps it with the write it queues:
        then the cache and the queue hold one key, not two equal ones)."""
        if key is None:
            key = isomorphic_key(ev)
        cached = self._events.get(key)
        if cached is None:
            packed = self._pack(orjson.dumps({k: v for k, v in ev.items() if k != "series"}))
            self._events[key] = entry = _Entry(packed, str(_observed_stamp(ev)))
            if "series" in ev:  # a caller's event with a series of its own: keep counting from it
                entry.count = max(int(ev["series"].get("count") or 1), 1)
            while len(self._events) > self.max_entries:
                self._events.popitem(last=False)
            return self._event(entry)
        self._events.move_to_end(key)
        cached.observed = rfc3339_micro(now)
        cached.count += 1
        return self._event(cached) if cached.count == 2 else None

    def refresh(self) -> list[tuple[Key, Obj]]:
        """Every open series, to be re-recorded with its current count (upstream every 30 minutes)."""
        return [(k, self._event(e)) for k, e in self._events.items() if e.count > 1]

    def finished(self, now: dt.datetime) -> list[tuple[Key, Obj]]:
        """Forget singletons not seen for `finish_seconds`; return the series not observed for that long, to
        be recorded a last time and then `forget`-ten (kept when that write should be retried)."""
        cutoff = now - dt.timedelta(seconds=self.finish_seconds)
        out: list[tuple[Key, Obj]] = []
        for key, e in list(self._events.items()):
            if _parse_stamp(e.observed) >= cutoff:
                continue
            if e.count > 1:
                out.append((key, self._event(e)))
            else:
                del self._events[key]
        return out

    def forget(self, key: Key, written: Obj | None = None) -> None:
        """Drop `key`; with `written` (what `finished` returned), only if the series has not moved since."""
        cached = self._events.get(key)
        if cached is not None and (written is None or cached.series() == written.get("series")):
            del self._events[key]
