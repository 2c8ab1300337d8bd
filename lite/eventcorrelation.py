"""What upstream's core/v1 event recorder (client-go `tools/record` EventCorrelator) writes for an event: pure.

`lite.events.EventRecorder` asks `Correlator.correlate` before every write; the clock is an argument (seconds,
monotonic). Three steps, in upstream's order:

1. Aggregation (`EventAggregator`, by reason): events that differ only in their message are grouped by
   (source, involved object, type, reason). Once a group has seen `max_events` (10) distinct messages within
   `interval` (600 s) of its last event, each further one is written as the group's single aggregate event
   with the message "(combined from similar events): <message>"; an older group starts afresh.
2. Counting (`eventLogger`): an event whose key (the exact event, or the group for an aggregate) was written
   before is a repeat: the recorder patches that Event's count (the cache counts it, whatever comes next).
3. Spam filter (`EventSourceObjectSpamFilter`): a token bucket per (source, involved object): `burst` (25)
   events, refilled at `qps` (one every 300 s). An event without a token is dropped: nothing is written.

So a ReplicaSet creating 1,000 pods writes 9 "Created pod" Events, one aggregate Event and 15 count patches
of it, then nothing more for that ReplicaSet until tokens refill, as kube-controller-manager does.

Invariants: every cache is a bounded LRU (`cache_size` keys each, least recently used dropped), as upstream's;
`correlate` never raises; `Correlated.previous` is a copy of what the cache held before this event.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import field, replace
from typing import Generic, TypeVar

from lite.records import dataclass

CACHE_SIZE = 4096  # upstream maxLruCacheEntries
AGGREGATE_MAX_EVENTS = 10  # upstream defaultAggregateMaxEvents
AGGREGATE_INTERVAL = 600.0  # upstream defaultAggregateIntervalInSeconds
SPAM_BURST = 25  # upstream defaultSpamBurst
SPAM_QPS = 1.0 / 300.0  # upstream defaultSpamQPS
AGGREGATE_PREFIX = "(combined from similar events): "

Key = tuple[str, ...]
V = TypeVar("V")


class _Lru(Generic[V]):
    def __init__(self, size: int) -> None:
        self.size = size
        self._d: OrderedDict[Key, V] = OrderedDict()

    def get(self, key: Key) -> V | None:
        v = self._d.get(key)
        if v is not None:
            self._d.move_to_end(key)
        return v

    def put(self, key: Key, value: V) -> None:
        self._d[key] = value
        self._d.move_to_end(key)
        while len(self._d) > self.size:
            self._d.popitem(last=False)

    def pop(self, key: Key) -> None:
        self._d.pop(key, None)

    def __len__(self) -> int:
        return len(self._d)


@dataclass
class Recorded:
    """What the counting cache remembers of a written Event: where it is, its count and first timestamp."""

    namespace: str
    name: str
    count: int
    first_timestamp: str


@dataclass(frozen=True)
class Correlated:
    """The event to write: `message` (the aggregate's when aggregated) and, for a repeat, the Event to patch
    (`previous`, whose count becomes `previous.count + 1`); for a first occurrence `previous` is None."""

    key: Key
    message: str
    previous: Recorded | None


@dataclass
class _Group:
    messages: set[str] = field(default_factory=set)
    last: float = 0.0


@dataclass
class _Bucket:
    tokens: float
    last: float


class Correlator:
    """One per recorder (upstream: one per broadcaster). `source` identifies the recorder (component, host)."""

    def __init__(self, *, cache_size: int = CACHE_SIZE, max_events: int = AGGREGATE_MAX_EVENTS,
                 interval: float = AGGREGATE_INTERVAL, burst: int = SPAM_BURST, qps: float = SPAM_QPS) -> None:
        self.max_events, self.interval, self.burst, self.qps = max_events, interval, burst, qps
        self._groups: _Lru[_Group] = _Lru(cache_size)
        self._written: _Lru[Recorded] = _Lru(cache_size)
        self._buckets: _Lru[_Bucket] = _Lru(cache_size)

    def correlate(self, obj_key: Key, type_: str, reason: str, message: str, namespace: str, name: str,
                  timestamp: str, now: float) -> Correlated | None:
        """The write for an event about the object `obj_key` (source and involved object: kind, namespace, name,
        uid, apiVersion), or None when the spam filter drops it. `namespace`/`name`/`timestamp` are those a
        fresh Event would get; the counting cache remembers them (call `written` with the server's answer)."""
        group_key = (*obj_key, type_, reason)
        group = self._groups.get(group_key)
        if group is None or now - group.last > self.interval:
            group = _Group()
        group.messages.add(message)
        group.last = now
        self._groups.put(group_key, group)
        key: Key = (*group_key, message)
        if len(group.messages) >= self.max_events:
            group.messages.pop()  # upstream's PopAny: the set never grows past the limit
            key, message = (*group_key, ""), AGGREGATE_PREFIX + message
        seen = self._written.get(key)
        previous = replace(seen) if seen is not None else None
        if seen is None:
            self._written.put(key, Recorded(namespace, name, 1, timestamp))
        else:
            seen.count += 1
        if not self._allow(obj_key, now):
            return None
        return Correlated(key, message, previous)

    def written(self, key: Key, namespace: str, name: str, count: int, first_timestamp: str) -> None:
        """The server's copy of the Event written for `key` (upstream UpdateState)."""
        self._written.put(key, Recorded(namespace, name, count, first_timestamp))

    def forget(self, key: Key) -> None:
        """The Event for `key` could not be written: the next occurrence is a first one again."""
        self._written.pop(key)

    def _allow(self, obj_key: Key, now: float) -> bool:
        b = self._buckets.get(obj_key)
        if b is None:
            b = _Bucket(float(self.burst), now)
        else:
            b.tokens = min(float(self.burst), b.tokens + (now - b.last) * self.qps)
            b.last = now
        self._buckets.put(obj_key, b)
        if b.tokens < 1.0:
            return False
        b.tokens -= 1.0
        return True
