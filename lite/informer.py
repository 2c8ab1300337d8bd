"""Shared informers: list + watch one kind into an indexed in-memory cache, and tell handlers what changed.

`Informer(client, kind, namespace, label_selector=..., field_selector=..., resync=...)` keeps a cache of the
matching objects, keyed `"namespace/name"` (`"name"` for cluster-scoped objects, as `lite.objects.key_of`).
`run()` is one eternal coroutine for a `TaskGroup`:

    list (paginated) ──► replace cache ──► watch from the list's RV ──► apply events ──┐
        ▲                                       ▲                                        │
        └── 410 Expired / ERROR event ──────────┴──── watch ended or failed: resume ◄────┘
                                                       from the last RV seen

Invariants:
- Who may mutate what: nobody mutates an object an informer hands out. Each event's object is decoded once
  and that one object goes to the cache, every handler and (while remembered, below) every reader (`get`,
  `list`, `by_index`); through `ShareCommonParts` its equal parts are shared with other objects (equal parts
  are one object). Only the informer itself creates objects (at list and watch time, and when it decodes a
  compact entry); handlers and reconcilers that want to change one make their own copy first
  (`lite.objects.deep_copy`, or a shallow copy of exactly the levels they replace) and write that. Indexes
  and handlers' own state hold keys or references to objects, never copies. List items missing
  `apiVersion`/`kind` are cached as shallow copies with both filled in, so cached objects always carry them.
- Compact caches (`compact=True`; `SharedInformers` makes every informer compact): the cache keeps each object
  encoded, not decoded. A client that holds objects' bytes itself (the in-process
  `lite.server.api.resources.Resources`: its store) tells them with `held_encoding(kind, namespace, obj)` (bytes, or
  None when it cannot) and decodes them with `decode_held(bytes)`, which also takes plain JSON: then caching an
  object costs a reference to the store's own bytes of that revision. Otherwise the cache keeps the watch event's
  `raw` JSON, or its own exact-size encoding. What is decoded when: the object of each event, once, for the index
  functions and the handlers (`on_update`'s `old` comes from the remembered objects, else from what `peek` just
  decoded of that same entry, else is decoded again). Objects
  of watch events or read with `get` (decoded through a value-keeping transform) are remembered while in use (those
  of list pages are not, nor those read with `peek`: a restart's relist, or a reader going once over every pod,
  would keep thousands decoded at once, and the heap fragmented after them): until unused
  for `decoded_seconds` (2 s), all of them once none was used for a quarter of a second (`run()` forgets them), at
  most `decoded_limit` (8,192), so a reconciler's `get` of what a handler just saw is that same object, and a
  controller going over the same pods again and again (a ReplicaSet's, during a rollout) decodes them once; at rest
  the cache holds only bytes. 2 s, not 5: during a burst of creates every object remembered is alive at once
  (hundreds of small objects per pod), and the long-lived objects allocated meanwhile (the store's values, the
  scheduler's queue) pin the pymalloc pools they share after the burst (a whole control plane that created
  10,000 pods held 10.3 MB of free blocks in used pools and 4.5 MB of unused pools at rest with 5 s, 3.0 and 0.4
  MB with 1 s). Not 1 s: placing 3,000 pods (bench/scheduler.py --quick) then took ~10 % more server CPU, the
  ReplicaSet's rescans decoding again what they had just seen; 2 s costs none measurable there. `list` and
  `by_index` return remembered objects and decode the others anew without remembering them (fresh objects:
  equal, not identical, to what a handler saw). A handler that keeps what it derived from an object for long
  (the scheduler's queue) keeps `encoded(key)` (and `decode`s it when needed) rather than the object. Plain
  informers (`compact=False`) keep the decoded objects.
- Checking mode: an informer built with `read_only=True` (`SharedInformers(..., read_only=True)`; the test
  kits use it) hands out only `lite.readonly.freeze`d objects (events' and decoded compact entries alike),
  so any in-place change raises `SharedObjectMutated`; a handler that raises it is recorded in `mutations`
  (and logged) for the test to fail on.
- Handlers run synchronously in the informer's task, in event order, and should only turn objects into
  work-queue keys. A failing handler is logged and does not disturb the informer or other handlers.
  `on_add(obj)`, `on_update(old, new)` (also for resyncs, then `old is new`), `on_delete(obj)`.
- A burst of watch events (one commit batch of the in-process store arrives at once) is applied in slices of
  about `SLICE` seconds of work, the informer yielding to the event loop between them: a batch of a few dozen
  creates is never one long stall of the loop, and the writers of that batch answer in between. 5 ms, not 1:
  every yield lets the other tasks (the scheduler, controllers, other informers) run on a smaller share of the
  batch, and with 1 ms slices the placement pipeline lost its batching (bench/scheduler.py --quick: ~10-25 %
  fewer pods bound/s, ~8 % more server CPU) while the paced create p99 did not measurably improve.
- On a relist, objects that disappeared get `on_delete(last_known_state)`: like client-go's
  DeletedFinalStateUnknown, it is the last state this cache saw, not the deleted object's final state.
  Objects whose resourceVersion did not change on a relist produce no event. Each page is applied as it
  arrives (adds and changes), the deletions once the last page is in: only one page of decoded objects is
  alive at a time (a restart on 10,000 pods would otherwise hold them all at once).
- A watch that ends or fails resumes from the last RV seen (the list's, then each event's, bookmarks
  included); only a 410 (watch ERROR event or error answer) or another ERROR event forces a relist.
- `run()` never ends except by cancellation: failures are logged and retried with backoff.
- Late handlers get `on_add` for every object already cached, as client-go's `AddEventHandler` does.
- An optional `transform` maps each listed or watched object before it enters the cache (client-go's
  `SetTransform`); it must return a new object rather than mutate its argument. `strip_managed_fields` is
  client-go's `TransformStripManagedFields` (kube-scheduler and kube-controller-manager use it); it is
  opt-in here because an in-process update built from a stripped object drops the stored managedFields
  (upstream's apiserver keeps them when an update omits them).
- `SharedInformers` applies `ShareCommonParts` by default: equal sub-objects of decoded objects (a pod
  template's containers, tolerations, labels, owner references) become one shared object. That is safe only
  because those objects are never mutated (see above); it keeps what handlers derive from objects (labels,
  selectors) small. It changes no value, so a compact cache still keeps the store's bytes.
"""

from __future__ import annotations

import asyncio
import builtins
import logging
import random
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Hashable, Iterable, Iterator
from sys import intern
from typing import Any

import orjson
from orjson import dumps as _dumps

from lite.client import Client, Obj, WatchEvent
from lite.controllerkit import Backoff
from lite.errors import ApiError
from lite.kinds import Kind
from lite.objects import key_of, namespace_of, rv_of
from lite.readonly import SharedObjectMutated, freeze
from lite.records import dataclass

log = logging.getLogger("lite.informer")

IndexFunc = Callable[[Obj], Iterable[str]]
Transform = Callable[[Obj], Obj]
NAMESPACE_INDEX = "namespace"
SLICE = 0.005  # seconds of event handling between yields to the loop (see the module docstring)
DECODED_SECONDS = 2.0  # a compact informer forgets a decoded object not used for this long,
DECODED_IDLE = 0.25  # and every decoded object once none was used for this long (at rest)
DECODED_LIMIT = 8192  # and keeps at most this many (past it, the longest remembered go first)
PEEKED_LIMIT = 16  # objects `peek` decoded kept for their key's next event (`Informer._replaced`)
FIELD_SET_DEPTH = 3  # ShareCommonParts: levels of a managed field set below its root whose subtrees are shared


@dataclass(frozen=True)
class Handlers:
    on_add: Callable[[Obj], None] | None = None
    on_update: Callable[[Obj, Obj], None] | None = None
    on_delete: Callable[[Obj], None] | None = None


def namespace_index(obj: Obj) -> list[str]:
    return [namespace_of(obj)]


def strip_managed_fields(obj: Obj) -> Obj:
    """client-go's `TransformStripManagedFields`: the object without `metadata.managedFields` (a shallow
    copy when there were any; the argument is never mutated)."""
    m = obj.get("metadata")
    if not isinstance(m, dict) or "managedFields" not in m:
        return obj
    return {**obj, "metadata": {k: v for k, v in m.items() if k != "managedFields"}}


class ShareCommonParts:
    """A transform that makes equal parts of objects one shared object, and equal short strings one string.

    Parts are looked up by their JSON encoding among the last `limit` distinct parts used that were seen at
    least twice (least recently used forgotten first; a part seen once waits, without a copy of its key,
    among the last `limit` first sightings, and is the one shared when seen again): each dict or list value
    of `spec` and `status`, when that list is new each of its elements and, when that element is new, each of
    its values (a pod's volumes differ by name but share
    their `projected` sources; container statuses differ by container id but share their state);
    `metadata.labels`, `annotations`, `ownerReferences` and each `managedFields` entry's `fieldsV1` (the same
    template gives the same field set, the largest part of a decoded pod) and, when that set is new, its
    subtrees `FIELD_SET_DEPTH` levels down (a Running pod's status set differs from others only under its
    `f:podIPs`). Short scalar strings of `spec`, `status` and a
    few `metadata` fields (`namespace`, `creationTimestamp`, a managed field entry's manager, time and
    versions) are interned. Objects are rebuilt shallowly; the argument is never mutated.

    `limit` (1,024): the table is a fixed cost, and most parts are seen once: every pod has its own
    service account token volume, so its volume, each container (by its `volumeMounts`) and that list are
    parts seen once (~1 KB of key and value each; now only their value waits among the first sightings, and
    keeping them no longer costs a key copy, ~3 us per pod event). At 4,096 the table held ~3.9 MB (measured with 10,000
    pending pods: 0.4 KB per stored pod; 1.3 KB per pod with 3,000); the parts worth sharing (a template's)
    are used by every object made from it and stay at the recently used end either way.
    """

    keeps_value = True  # the result equals the argument: its JSON is the argument's (compact informers)
    META_PARTS = frozenset(("labels", "annotations", "ownerReferences"))
    META_WORDS = frozenset(("namespace", "creationTimestamp", "generateName"))
    WORD_MAX = 64  # longer strings are rarely equal across objects (and interning them buys little)

    def __init__(self, limit: int = 1024) -> None:
        self.limit = limit
        self._seen: OrderedDict[bytes, Any] = OrderedDict()
        self._door: dict[int, Any] = {}  # parts seen once: their key's hash -> the part (`_keep`)
        self._empty: Obj = {}  # the one empty dict of rebuilt parts (never mutated: the shared-object rule)

    def __len__(self) -> int:
        return len(self._seen)

    def word(self, v: Any) -> Any:
        """The one string equal to `v` (any other value is returned as it is)."""
        # CPython's interned strings are freed with their last user: no table here to bound
        return intern(v) if type(v) is str and len(v) <= self.WORD_MAX else v

    def share(self, v: Any, depth: int = 0) -> Any:
        """The shared part equal to `v`; on a miss (and `depth` > 0) `v` rebuilt from shared children."""
        try:
            key = _dumps(v)
        except TypeError:
            return v
        seen = self._seen
        got = seen.get(key)
        if got is not None:
            seen.move_to_end(key)
            return got
        if depth > 0:
            if isinstance(v, dict):
                v = {k: self._child(x, depth - 1) for k, x in v.items()}
            elif isinstance(v, list):
                v = [self._child(x, depth - 1) for x in v]
        return self._keep(key, v)

    def _keep(self, key: bytes, v: Any) -> Any:
        """`v` (a missed part, `key` its JSON) for the table: a part seen for the first time only waits, by its
        key's hash, among the last `limit` first sightings; seen again, that first object becomes the table's
        (both objects are then one). Most parts seen once (a pod's own token volume and containers) thus
        never fill the table, nor cost a copy of their key."""
        door = self._door
        h = hash(key)
        first = door.pop(h, None)
        if first is None:
            door[h] = v
            if len(door) > self.limit:
                del door[next(iter(door))]
            return v
        if _dumps(first) == key:  # not merely the same hash
            v = first
        seen = self._seen
        # orjson's result keeps its growth buffer: keep an exact-size copy
        seen[memoryview(key).tobytes()] = v
        if len(seen) > self.limit:
            seen.popitem(last=False)
        return v

    def _child(self, x: Any, depth: int) -> Any:
        """A value inside a part rebuilt on a miss: shared, an empty dict the one empty dict (managed field
        sets are trees of them: ~100 per set, 64 bytes each), a short string interned."""
        if isinstance(x, (dict, list)):
            if x:
                return self.share(x, depth)
            return self._empty if type(x) is dict else x
        return self.word(x)

    def _spec_part(self, v: Any) -> Any:
        """A dict or list value of `spec` or `status`, shared."""
        if isinstance(v, list) and v:
            # the list (a pod's tolerations, its node's hostIPs), else each element, and on a miss its values
            # (a volume's `projected` sources, a container's env)
            return self.share(v, 2)
        if type(v) is dict:
            return self.share(v) if v else self._empty  # `securityContext: {}` on every pod: one dict
        return self.word(v)

    def _entry(self, e: Any) -> Any:
        if not isinstance(e, dict):
            return e
        return {k: self._field_set(x) if k == "fieldsV1" and isinstance(x, dict) else self.word(x)
                for k, x in e.items()}

    def _field_set(self, v: Obj, depth: int = FIELD_SET_DEPTH) -> Any:
        """A managed field set, shared; on a miss (a kubelet's status entry names the pod's own IPs and so is
        one of a kind) rebuilt with interned keys, the one empty dict for its leaves (a set is a tree of
        ~100 `"f:name": {}`: 64 bytes of dict and ~55 of key each, when decoded apart) and, `depth` levels
        down, its subtrees shared in turn: the `f:conditions` of every Running pod's status set are one tree
        (~1.2 KB of dicts per decoded pod otherwise), as are the `{".": {}, "f:ip": {}}` under its own
        `k:{"ip":...}` key: only the few dicts on the way to the pod's IPs are the pod's own."""
        try:
            key = _dumps(v)
        except TypeError:
            return v
        got = self._seen.get(key)
        if got is not None:
            self._seen.move_to_end(key)
            return got
        if depth <= 0:
            return self._keep(key, self._leaves(v))
        return self._keep(key, {self.word(k): self._field_set(x, depth - 1) if type(x) is dict and x
                                else self._leaves(x) for k, x in v.items()})

    def _leaves(self, v: Any) -> Any:
        if type(v) is dict:
            return {self.word(k): self._leaves(x) for k, x in v.items()} if v else self._empty
        return v

    def _metadata(self, m: Obj) -> Obj:
        out: Obj = {}
        parts, words, word_max = self.META_PARTS, self.META_WORDS, self.WORD_MAX
        for k, v in m.items():
            if k in parts:
                if v:
                    v = self.share(v)
            elif k in words:
                if type(v) is str and len(v) <= word_max:
                    v = intern(v)
            elif k == "managedFields" and isinstance(v, list):
                v = [self._entry(e) for e in v]
            out[k] = v
        return out

    def _parts(self, d: Obj, one_empty: bool) -> Obj:
        """`spec` or `status` rebuilt: each non-empty list or dict value shared (`_spec_part`), short strings
        interned, an empty dict the one empty dict when `one_empty` (spec); `_spec_part` and `word` inlined (a
        pod's spec has ~15 values, and this runs for every event)."""
        out: Obj = {}
        share, word_max, empty = self.share, self.WORD_MAX, self._empty
        for k, v in d.items():
            t = type(v)
            if t is str:
                if len(v) <= word_max:
                    v = intern(v)
            elif t is list:
                if v:
                    v = share(v, 2)
            elif t is dict:
                if v:
                    v = share(v)
                elif one_empty:
                    v = empty
            out[k] = v
        return out

    def __call__(self, obj: Obj) -> Obj:
        out = {k: self.word(v) for k, v in obj.items()}
        spec = obj.get("spec")
        if isinstance(spec, dict):
            out["spec"] = self._parts(spec, True)
        m = obj.get("metadata")
        if isinstance(m, dict):
            out["metadata"] = self._metadata(m)
        status = obj.get("status")
        if isinstance(status, dict):
            # conditions written in the same second are equal across many objects; container statuses differ
            # by container id but share their state, image and ports
            out["status"] = self._parts(status, False)
        return out


class _Relist(Exception):
    """The watch cannot resume: list again."""


class Informer:
    """List+watch cache of one kind (optionally one namespace and selectors). See the module docstring."""

    def __init__(self, client: Client, kind: Kind, namespace: str = "", *, label_selector: str = "",
                 field_selector: str = "", resync: float = 0.0, page_size: int = 500,
                 watch_timeout: tuple[float, float] = (300.0, 600.0), transform: Transform | None = None,
                 read_only: bool = False, compact: bool = False, decoded_limit: int = DECODED_LIMIT,
                 decoded_seconds: float = DECODED_SECONDS) -> None:
        self.client = client
        self.transform = transform
        self.read_only = read_only
        # compact: the cache holds each object's JSON (the store's own bytes when the client hands them over)
        # and the decoded objects used (written, or read with `get`) in the last `decoded_seconds`, at most
        # `decoded_limit` of them
        self.compact = compact
        self.decoded_limit = decoded_limit
        self.decoded_seconds = decoded_seconds
        self._decoded: dict[str, Obj] = {}
        self._used: dict[str, float] = {}  # when each of them was last used (`_clock`)
        self._clock = time.monotonic()  # a coarse clock: set by `_forget_loop` every DECODED_IDLE seconds
        self._in_use = False  # whether any was used since the last `_forget_loop` pass
        # key -> (cache entry, the object `peek` decoded from it), until that key's next event, at most
        # PEEKED_LIMIT, all forgotten every DECODED_IDLE (`_replaced`)
        self._peeked: dict[str, tuple[Any, Obj]] = {}
        self._raw_is_cached = transform is None or bool(getattr(transform, "keeps_value", False))
        self._decode_held: Callable[[bytes], Obj] = getattr(client, "decode_held", None) or orjson.loads
        # handlers caught changing a shared object in place (read_only mode), as "<handler>: <error>"
        self.mutations: builtins.list[str] = []
        self.kind = kind
        self.namespace = namespace if kind.namespaced else ""
        self.label_selector = label_selector
        self.field_selector = field_selector
        self.resync = resync
        self.page_size = page_size
        self.watch_timeout = watch_timeout
        self.backoff = Backoff()
        self._cache: dict[str, Any] = {}  # key -> the object, or (compact) its JSON
        self._indexers: dict[str, IndexFunc] = {NAMESPACE_INDEX: namespace_index}
        # index -> value -> its keys, as a dict with None values: a set of 10,000 keys (one namespace's pods)
        # takes 512 KB, such a dict 200 KB
        self._indices: dict[str, dict[str, dict[str, None]]] = {NAMESPACE_INDEX: {}}
        self._handlers: list[Handlers] = []
        # each kind of handler apart, in the order added (a new tuple when one is added: a dispatch under way
        # goes on over the handlers it started with, as it did over a copy of the list)
        self._on_add: tuple[Callable[[Obj], None], ...] = ()
        self._on_update: tuple[Callable[[Obj, Obj], None], ...] = ()
        self._synced = asyncio.Event()
        self._resync_changed = asyncio.Event()
        self._rv = ""
        self._listed_at = 0.0
        self._running = False

    def __repr__(self) -> str:
        sel = ",".join(s for s in (self.label_selector, self.field_selector) if s)
        return f"Informer({self.kind.resource}, ns={self.namespace or '*'}{', ' + sel if sel else ''})"

    # -- reading the cache --

    @property
    def has_synced(self) -> bool:
        """True once the first list has been loaded into the cache."""
        return self._synced.is_set()

    async def wait_synced(self) -> None:
        await self._synced.wait()

    @property
    def last_sync_resource_version(self) -> str:
        return self._rv

    def get(self, key: str) -> Obj | None:
        entry = self._cache.get(key)
        if entry is None or not self.compact:
            return entry
        obj = self._decoded.get(key)
        if obj is None:
            return self._remember(key, self._decode_kept(entry))
        self._used[key] = self._clock
        self._in_use = True
        return obj

    def peek(self, key: str) -> Obj | None:
        """`get` without remembering (compact): the remembered object if there is one, else one decoded anew
        and not kept, as `list` gives them: for a reader that goes once over many objects in a burst (the
        scheduler's reports of 10,000 unschedulable pods after a restart), which would otherwise keep up to
        `decoded_limit` of them decoded at once. A peeked object is held apart, at most PEEKED_LIMIT of them
        and for at most DECODED_IDLE, only as the replaced object of its key's next event (`on_update`'s `old`):
        a reader that peeks and then writes the object (the scheduler's report) does not make that event decode
        it again."""
        entry = self._cache.get(key)
        if entry is None or not self.compact:
            return entry
        obj = self._decoded.get(key)
        if obj is not None:
            return obj
        obj = self.decode(entry)
        # kept apart, briefly, only as the replaced object of this key's next event (`_replaced`): a peek is
        # often followed by a write of that object (the scheduler's report), and its event would decode it again
        peeked = self._peeked
        peeked[key] = (entry, obj)
        if len(peeked) > PEEKED_LIMIT:
            del peeked[next(iter(peeked))]
        return obj

    def list(self) -> builtins.list[Obj]:
        if not self.compact:
            return builtins.list(self._cache.values())
        return [self._value(k, e) for k, e in self._cache.items()]

    def iter_objects(self) -> Iterator[Obj]:
        """Every cached object, one at a time: `list` without holding them all at once (a compact cache
        decodes each anew unless remembered, and 10,000 decoded pods at once are ~200 MB)."""
        if not self.compact:
            yield from builtins.list(self._cache.values())
            return
        for key, entry in builtins.list(self._cache.items()):
            yield self._value(key, entry)

    def encoded(self, key: str) -> bytes | None:
        """The cached object's bytes (compact informers; None otherwise or when there is no such object), which
        `decode` turns back into the object: for a handler that keeps a long-lived reference to what it
        derived from an object, instead of the object."""
        entry = self._cache.get(key)
        return entry if type(entry) is bytes else None

    def decode(self, raw: bytes) -> Obj:
        """The object of bytes from `encoded` (a new object on every call; read-only in checking mode)."""
        obj: Obj = self._decode_held(raw)
        return freeze(obj) if self.read_only else obj

    def _decode_kept(self, raw: bytes) -> Obj:
        """`decode`, through a value-keeping transform (`ShareCommonParts`): for an object to be remembered."""
        obj: Obj = self._decode_held(raw)
        if self.transform is not None and self._raw_is_cached:
            obj = self.transform(obj)
        return freeze(obj) if self.read_only else obj

    def keys(self) -> builtins.list[str]:
        return list(self._cache)

    def __len__(self) -> int:
        return len(self._cache)

    def add_index(self, name: str, fn: IndexFunc) -> None:
        """Index every object (present and future) under each value `fn(obj)` returns."""
        if name in self._indexers:
            raise ValueError(f"index {name!r} already exists")
        self._indexers[name] = fn
        self._indices[name] = {}
        for key, entry in self._cache.items():
            self._index_one(name, key, self._value(key, entry))

    def ensure_index(self, name: str, fn: IndexFunc) -> None:
        """`add_index` unless an index of that name exists already (controllers sharing an informer)."""
        if name not in self._indexers:
            self.add_index(name, fn)

    def by_index(self, name: str, value: str) -> builtins.list[Obj]:
        if name not in self._indices:
            raise KeyError(f"no index {name!r}")
        keys = self._indices[name].get(value)
        if not keys:
            return []  # the common answer of handlers' lookups (no Service, PDB, quota in the namespace)
        return [self._value(k, self._cache[k]) for k in sorted(keys)]

    def index_values(self, name: str) -> builtins.list[str]:
        """The values under which index `name` holds at least one object."""
        if name not in self._indices:
            raise KeyError(f"no index {name!r}")
        return builtins.list(self._indices[name])

    def index_keys(self, name: str, value: str) -> set[str]:
        if name not in self._indices:
            raise KeyError(f"no index {name!r}")
        return set(self._indices[name].get(value, ()))

    # -- handlers --

    def add_handlers(self, *, on_add: Callable[[Obj], None] | None = None,
                     on_update: Callable[[Obj, Obj], None] | None = None,
                     on_delete: Callable[[Obj], None] | None = None) -> None:
        h = Handlers(on_add, on_update, on_delete)
        self._handlers.append(h)
        self._on_add = tuple(x.on_add for x in self._handlers if x.on_add is not None)
        self._on_update = tuple(x.on_update for x in self._handlers if x.on_update is not None)
        if on_add is not None:
            for obj in self.list():
                self._call(on_add, obj)

    def set_resync(self, seconds: float) -> None:
        self.resync = seconds
        self._resync_changed.set()

    # -- the cache --

    def _index_one(self, name: str, key: str, obj: Obj) -> None:
        index = self._indices[name]
        for value in self._indexers[name](obj):
            index.setdefault(value, {})[key] = None

    def _unindex_one(self, name: str, key: str, obj: Obj) -> None:
        index = self._indices[name]
        for value in self._indexers[name](obj):
            keys = index.get(value)
            if keys is not None:
                keys.pop(key, None)
                if not keys:
                    del index[value]

    def _value(self, key: str, entry: Any) -> Obj:
        """The object of a cache entry: itself, or (compact) its decoded object, remembered or decoded anew
        (then not remembered: `list` and `by_index` would push out the objects `get` keeps finding)."""
        if not self.compact:
            return entry  # type: ignore[no-any-return]
        obj = self._decoded.get(key)
        return obj if obj is not None else self.decode(entry)

    def _remember(self, key: str, obj: Obj) -> Obj:
        decoded = self._decoded
        decoded[key] = obj
        self._used[key] = self._clock
        self._in_use = True
        if len(decoded) > self.decoded_limit:  # the first remembered goes
            first = next(iter(decoded))
            del decoded[first], self._used[first]
        return obj

    def forget_unused(self, before: float) -> int:
        """Forget the decoded objects last used before `before` (monotonic); how many. `run()` does it every
        DECODED_IDLE seconds, for those unused for `decoded_seconds`, or for all once none was used for
        DECODED_IDLE: at rest a compact cache holds only bytes (and new, small tables: a dict keeps the size
        it grew to, ~0.6 MB for these two after a burst of 8,192)."""
        used = self._used
        stale = [key for key, t in used.items() if t < before]
        for key in stale:
            del self._decoded[key]
            del used[key]
        if stale and not used:
            self._decoded, self._used = {}, {}
        return len(stale)

    async def _forget_loop(self) -> None:
        while True:
            await asyncio.sleep(DECODED_IDLE)
            self._clock = now = time.monotonic()
            if self._peeked:
                self._peeked = {}
            if self._decoded:
                self.forget_unused(now if not self._in_use else now - self.decoded_seconds)
            self._in_use = False

    def _entry(self, obj: Obj, raw: bytes | None) -> Any:
        """What the cache keeps of `obj`: itself, or (compact) its JSON: `raw` (the bytes it was decoded from,
        shared with the store for the in-process API) when the cached object is exactly what they encode, the
        store's bytes of its revision when the client can tell them (lists), else a new encoding."""
        if not self.compact:
            return obj
        if self._raw_is_cached:
            held = getattr(self.client, "held_encoding", None)
            if held is not None:
                got = held(self.kind, namespace_of(obj), obj)
                if type(got) is bytes:
                    return got
            if raw is not None:
                return raw
        # orjson's result keeps its growth buffer: keep an exact-size copy
        return memoryview(_dumps(obj)).tobytes()

    def _put(self, key: str, obj: Obj, entry: Any, remember: bool = True) -> Obj | None:
        """Cache `obj` (as `entry`, from `_entry`) under `key`, indexed; returns the object it replaces.
        `remember` (compact): keep `obj` as the key's decoded object (watch events; not list pages).
        The replaced object is the remembered one, else the one `peek` decoded from that same entry (see
        `peek`), else decoded anew. An index whose values did not change is left as it is."""
        key = intern(key)  # one string for the cache, the indexes and the decoded objects
        prev = self._cache.get(key)
        old = None if prev is None else self._replaced(key, prev)
        indices = self._indices
        for name, fn in self._indexers.items():
            values = fn(obj)
            if old is not None:
                was = fn(old)
                if was == values:
                    continue  # most updates (status writes) keep every index value
                index = indices[name]
                for value in was:
                    keys = index.get(value)
                    if keys is not None:
                        keys.pop(key, None)
                        if not keys:
                            del index[value]
            index = indices[name]
            for value in values:
                index.setdefault(value, {})[key] = None
        self._cache[key] = entry
        if self.compact:
            if remember:
                self._remember(key, obj)
            elif self._decoded.pop(key, None) is not None:  # an older revision's
                del self._used[key]
        return old

    def _replaced(self, key: str, entry: Any) -> Obj:
        """The object of the entry about to be replaced or removed: `_value`, or the object `peek` decoded from
        that very entry (a reader that peeks and then writes: the scheduler's report)."""
        if self._peeked:
            got = self._peeked.pop(key, None)
            if got is not None and got[0] is entry and key not in self._decoded:
                return got[1]
        return self._value(key, entry)

    def _pop(self, key: str) -> Obj | None:
        entry = self._cache.pop(key, None)
        if entry is None:
            return None
        old = self._replaced(key, entry)
        if self._decoded.pop(key, None) is not None:
            del self._used[key]
        for name in self._indexers:
            self._unindex_one(name, key, old)
        return old

    def _call(self, fn: Callable[..., None], *args: Obj) -> None:
        try:
            fn(*args)
        except Exception as e:
            self._failed(fn, e)

    def _failed(self, fn: Callable[..., None], e: Exception) -> None:
        """A handler raised `e` (called in its `except` block: logged with its traceback)."""
        if isinstance(e, SharedObjectMutated):
            self.mutations.append(f"{fn!r}: {e}")
            log.exception("%r: event handler %r changed a shared object", self, fn)
        else:
            log.exception("%r: event handler %r failed", self, fn)

    def _added_or_updated(self, old: Obj | None, new: Obj) -> None:
        # `_call` inlined: a pod event goes to some twenty handlers
        if old is None:
            for add in self._on_add:
                try:
                    add(new)
                except Exception as e:
                    self._failed(add, e)
        else:
            for update in self._on_update:
                try:
                    update(old, new)
                except Exception as e:
                    self._failed(update, e)

    def _deleted(self, obj: Obj) -> None:
        for h in list(self._handlers):
            if h.on_delete is not None:
                self._call(h.on_delete, obj)

    def _with_type(self, obj: Obj) -> Obj:
        if self.transform is not None:
            obj = self.transform(obj)
        if "kind" not in obj or "apiVersion" not in obj:
            obj = {"apiVersion": self.kind.api_version, "kind": self.kind.kind, **obj}
        return freeze(obj) if self.read_only else obj

    # -- list and watch --

    async def run(self) -> None:
        """List, watch, and keep doing so until cancelled. Run it once, as a TaskGroup child."""
        if self._running:
            raise RuntimeError(f"{self!r} is already running")
        self._running = True
        try:
            async with asyncio.TaskGroup() as tg:
                tg.create_task(self._resync_loop())
                if self.compact:
                    tg.create_task(self._forget_loop())
                await self._list_watch_loop()
        finally:
            self._running = False

    async def _list_watch_loop(self) -> None:
        need_list = True
        while True:
            try:
                if need_list:
                    await self._relist()
                    need_list = False
                if not await self._watch_once():
                    await asyncio.sleep(self.backoff.next())  # an empty, short watch: do not spin
            except _Relist:
                need_list = True
                await self._pause_if_relisting_fast()
            except asyncio.CancelledError:
                raise
            except Exception as e:
                if isinstance(e, ApiError) and e.code == 410:
                    log.info("%r: %s; relisting", self, e)
                    need_list = True
                    await self._pause_if_relisting_fast()
                    continue
                log.warning("%r: %s failed: %s", self, "list" if need_list else "watch", e,
                            exc_info=not isinstance(e, ApiError))
                await asyncio.sleep(self.backoff.next())

    async def _pause_if_relisting_fast(self) -> None:
        # A server that expires every fresh watch would otherwise make this a busy loop of lists.
        if time.monotonic() - self._listed_at < 1.0:
            await asyncio.sleep(self.backoff.next())

    async def _relist(self) -> None:
        """List every page, applying each as it arrives (adds and changes), then drop what was not listed."""
        listed: set[str] = set()
        cont, rv, limit = "", "", self.page_size
        while True:
            try:
                page = await self.client.list(self.kind, self.namespace, label_selector=self.label_selector,
                                              field_selector=self.field_selector, limit=limit, continue_=cont)
            except ApiError as e:
                if e.code != 410 or not cont:
                    raise
                # The continue token expired between pages: take one unpaginated, consistent list.
                listed, cont, limit = set(), "", 0
                continue
            meta = page.get("metadata") or {}
            rv = rv or str(meta.get("resourceVersion", ""))
            for item in page.get("items") or []:
                obj = self._with_type(item)
                key = key_of(obj)
                listed.add(key)
                self._listed(key, obj)
            del page
            cont = str(meta.get("continue") or "")
            if not cont:
                break
        for key in [k for k in self._cache if k not in listed]:
            old = self._pop(key)
            if old is not None:
                self._deleted(old)
        self._rv = rv
        self._listed_at = time.monotonic()
        self._synced.set()

    def _listed(self, key: str, obj: Obj) -> None:
        entry = self._cache.get(key)
        new = self._entry(obj, None)
        if entry is not None and ((self.compact and entry == new) or rv_of(self._value(key, entry)) == rv_of(obj)):
            return  # the same revision (compact: the same bytes are, without decoding them)
        old = self._put(key, obj, new, remember=False)
        self._added_or_updated(old, obj)

    async def _watch_once(self) -> bool:
        """Watch from the last RV until the stream ends. True when it made progress (events or a long life)."""
        started = time.monotonic()
        events = 0
        stream = self.client.watch(self.kind, self.namespace, resource_version=self._rv,
                                   label_selector=self.label_selector, field_selector=self.field_selector,
                                   allow_bookmarks=True, timeout_seconds=random.uniform(*self.watch_timeout))
        spent = 0.0  # seconds of handling since the last yield to the loop
        try:
            async for ev in stream:
                t0 = time.perf_counter()
                self._apply(ev)
                events += 1
                spent += time.perf_counter() - t0
                if spent >= SLICE:
                    await asyncio.sleep(0)
                    spent = 0.0
        finally:
            await _close(stream)
        if events:
            self.backoff.reset()
        return events > 0 or time.monotonic() - started > 1.0

    def _apply(self, ev: WatchEvent) -> None:
        if ev.type == "ERROR":
            status = ev.object
            if status.get("code") == 410:
                log.info("%r: watch expired (%s); relisting", self, status.get("message"))
            else:
                log.warning("%r: watch error %s; relisting", self, status)
            raise _Relist()
        obj = ev.object
        rv = rv_of(obj)
        if ev.type == "BOOKMARK":
            self._rv = rv or self._rv
            return
        typed = "kind" in obj and "apiVersion" in obj
        obj = self._with_type(obj)
        key = key_of(obj)
        if ev.type == "DELETED":
            self._pop(key)
            self._rv = rv or self._rv
            self._deleted(obj)
            return
        old = self._put(key, obj, self._entry(obj, ev.raw if typed else None))
        self._rv = rv or self._rv
        self._added_or_updated(old, obj)

    async def _resync_loop(self) -> None:
        while True:
            if self.resync <= 0:
                self._resync_changed.clear()
                await self._resync_changed.wait()
                continue
            await asyncio.sleep(self.resync)
            if self.has_synced:
                for obj in self.list():
                    for h in list(self._handlers):
                        if h.on_update is not None:
                            self._call(h.on_update, obj, obj)


async def _close(stream: AsyncIterator[Any]) -> None:
    aclose = getattr(stream, "aclose", None)
    if aclose is not None:
        await aclose()


class SharedInformers:
    """One informer per (kind, namespace, label selector, field selector), shared by every controller.

    `informer(...)` returns the existing informer for those arguments or creates it; `run()` runs every
    informer created so far and any created later, until cancelled. A smaller non-zero `resync` asked by a
    later caller lowers the shared informer's resync period. `transform` applies to every informer: by
    default a `ShareCommonParts` (memory), None for the client's objects as they are.
    """

    def __init__(self, client: Client, *, page_size: int = 500, transform: Transform | bool | None = True,
                 read_only: bool = False, compact: bool = True) -> None:
        self.client = client
        self.page_size = page_size
        self.read_only = read_only
        self.compact = compact
        self.transform: Transform | None = ShareCommonParts() if transform is True else \
            None if transform is False else transform
        self._informers: dict[tuple[Hashable, ...], Informer] = {}
        self._changed = asyncio.Event()

    def informer(self, kind: Kind, namespace: str = "", *, label_selector: str = "", field_selector: str = "",
                 resync: float = 0.0) -> Informer:
        key = (kind, namespace if kind.namespaced else "", label_selector, field_selector)
        inf = self._informers.get(key)
        if inf is None:
            inf = Informer(self.client, kind, namespace, label_selector=label_selector,
                           field_selector=field_selector, resync=resync, page_size=self.page_size,
                           transform=self.transform, read_only=self.read_only, compact=self.compact)
            self._informers[key] = inf
            self._changed.set()
        elif resync > 0 and (inf.resync <= 0 or resync < inf.resync):
            inf.set_resync(resync)
        return inf

    def __iter__(self) -> Iterator[Informer]:
        return iter(list(self._informers.values()))

    async def run(self) -> None:
        """Run all informers (present and future) as children of one TaskGroup. Never returns."""
        started: set[int] = set()
        async with asyncio.TaskGroup() as tg:
            while True:
                self._changed.clear()
                for inf in list(self._informers.values()):
                    if id(inf) not in started:
                        started.add(id(inf))
                        tg.create_task(inf.run(), name=repr(inf))
                await self._changed.wait()

    async def wait_synced(self) -> None:
        """Wait until every informer created so far has synced."""
        for inf in list(self._informers.values()):
            await inf.wait_synced()

    def mutations(self) -> builtins.list[str]:
        """Every informer's `mutations` (read_only mode): a test kit asserts this is empty at teardown."""
        return [f"{inf!r}: {m}" for inf in self._informers.values() for m in inf.mutations]
