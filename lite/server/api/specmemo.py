"""What a create computes from an object's `spec` alone, remembered per spec: its validation causes and the
FieldsV1 subtree a field manager owns under it (`SpecMemo`), and that its body's spec type-checked clean
(`Bounded`, used by `fieldvalidation`), what create defaulting made of a spec (`CreateDefaults`), and the whole
FieldsV1 of a create per (spec, metadata field set) (`CreateFields`).

Role: controllers (ReplicaSet, Job, StatefulSet, DaemonSet) and bulk clients create many objects whose specs
are identical, and validating a pod spec and walking it for managedFields were the two largest costs of a pod
create. For a kind whose strategy declares `Strategy.spec_validation` (its `validate(obj)` reads nothing but
`obj["spec"]`), `WriteMixin.create_object` keys this memo by the spec's JSON encoding after defaulting and
create preparation (the spec that is validated and recorded) and reuses both results for an equal spec.

Invariants:
- The key holds the strategy's validate function (re-registering a strategy never reuses the results of the
  one it replaced) and the exact orjson encoding of the spec, so equal keys mean equal values with equal key order:
  pure functions of the spec give equal results (validation reports its causes in walk order, so order
  matters and is part of the key).
- Entries are immutable to their users: causes are a tuple of frozen `Cause`s, FieldsV1 is kept as bytes and
  decoded afresh for every object it goes into (objects are mutable and leave the registry).
- Bounded: at most `size` entries, the oldest evicted first; per-registry state, no module state.
- A validation that raises (a quantity that does not parse) caches nothing.
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import Any, Generic, TypeVar

import orjson

from lite.errors import Cause
from lite.records import dataclass

K = TypeVar("K")
V = TypeVar("V")


class Bounded(Generic[K, V]):
    """A dict of at most `size` entries that evicts its oldest entry first."""

    def __init__(self, size: int = 256) -> None:
        self.size = size
        self._entries: dict[K, V] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: K) -> V | None:
        return self._entries.get(key)

    def put(self, key: K, value: V) -> None:
        entries = self._entries
        if key not in entries and len(entries) >= self.size:
            del entries[next(iter(entries))]  # dicts keep insertion order: the oldest goes
        entries[key] = value


@dataclass(frozen=True, slots=True)
class SpecResult:
    """The remembered results for one spec."""

    causes: tuple[Cause, ...]
    fields: bytes | None  # the `f:spec` FieldsV1 subtree, encoded; None until a create with a manager saw it

    def fields_v1(self) -> dict[str, Any] | None:
        """A fresh copy of the remembered `f:spec` subtree (None when none was remembered)."""
        return orjson.loads(self.fields) if self.fields is not None else None


# The current request's body spec and its orjson encoding, as the body check made it (`fieldvalidation`) for a spec
# it found clean (and so left untouched): create defaulting (`WriteMixin._default_for_create`) takes the encoding
# instead of making it again when handed that very dict, and clears it. Nothing changes a body's spec between the
# two (the create path touches only metadata before defaulting, custom objects aside, which never take it).
BODY_SPEC: ContextVar[tuple[dict[str, Any], bytes] | None] = ContextVar("lite_body_spec", default=None)

Key = tuple[str, object, bytes]  # (kind's group-kind, its validate function, the spec's encoding)
Created = tuple[bytes, bytes | None]  # (the spec's encoding after create defaulting, the status's or None)


class SpecMemo:
    """Bounded map from (kind, spec encoding) to `SpecResult` (see the module docstring)."""

    def __init__(self, size: int = 256) -> None:
        self._entries: Bounded[Key, SpecResult] = Bounded(size)

    def __len__(self) -> int:
        return len(self._entries)

    @staticmethod
    def key(gk: str, validate: object, spec: Any) -> Key | None:
        """The memo key of `spec` for kind `gk` validated by `validate` (a strategy registered anew, such as a
        CRD's, brings its own function: results of the old one are never reused); None when the spec is not a
        non-empty JSON object (never remembered)."""
        if not isinstance(spec, dict) or not spec:
            return None
        try:
            return gk, validate, orjson.dumps(spec)
        except TypeError:  # not JSON-encodable as it is: the shape checks refuse it elsewhere
            return None

    def get(self, key: Key) -> SpecResult | None:
        return self._entries.get(key)

    def put(self, key: Key, causes: list[Cause], fields: dict[str, Any] | None) -> None:
        """Remember the results for `key` (replacing an entry that had no FieldsV1 yet)."""
        self._entries.put(key, SpecResult(tuple(causes), orjson.dumps(fields) if fields is not None else None))


class CreateDefaults:
    """Bounded map from (kind, the default function, a body's spec encoding) to what create defaulting made of that
    spec: the spec's and the status's encodings, for a strategy with `spec_create` (its `default` then
    `prepare_create` read nothing but `obj["spec"]` and write nothing but it and `obj["status"]`). The results are
    decoded afresh for every object they go into."""

    def __init__(self, size: int = 256) -> None:
        self._entries: Bounded[Key, Created] = Bounded(size)

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: Key) -> Created | None:
        return self._entries.get(key)

    def put(self, key: Key, spec: bytes, status: bytes | None) -> None:
        self._entries.put(key, (spec, status))


_TOP = frozenset({"apiVersion", "kind", "metadata", "spec", "status"})
_SCALARS = frozenset({str, int, float, bool, type(None)})
MetaShape = tuple["str | tuple[str, tuple[str, ...]]", ...]


def encoded_size(obj: dict[str, Any], field: str, encoded: bytes) -> int | None:
    """`len(orjson.dumps(obj))` when `encoded` is `orjson.dumps(obj[field])` (`obj` holds `field`), without
    encoding that field again: the object's other members, then the field's bytes, its quoted name, its colon
    and a comma. None when the others are not plain JSON (the caller measures the whole object its own way)."""
    rest = {k: v for k, v in obj.items() if k != field}
    try:
        others = len(orjson.dumps(rest))
    except orjson.JSONEncodeError:
        return None
    return others + len(orjson.dumps(field)) + 1 + len(encoded) + (1 if rest else 0)


def meta_shape(obj: Any) -> MetaShape | None:
    """What a create's FieldsV1 depends on besides its spec, when that is no more than the set of metadata fields and
    the keys of its flat maps (labels, annotations: every value a string): each metadata key in order, a map's as
    (key, its keys in order); None when the object has anything else (another top-level field, a list in metadata
    such as ownerReferences or finalizers, a map holding a non-string): such objects are walked. Objects of equal
    shape, equal kind and equal spec have equal FieldsV1 (apiVersion, kind and status are never owned; a scalar, a
    null and a flat map's values are all leaves)."""
    if type(obj) is not dict or not _TOP.issuperset(obj):
        return None
    meta = obj.get("metadata")
    if type(meta) is not dict:
        return None
    out: list[str | tuple[str, tuple[str, ...]]] = []
    for k, v in meta.items():
        t = type(v)
        if t is dict:
            for x in v.values():
                if type(x) is not str:
                    return None
            out.append((k, tuple(v)))
        elif t in _SCALARS:
            out.append(k)
        else:
            return None
    return tuple(out)


class FieldsResult:
    """One remembered FieldsV1: `shared` is read-only to everyone (an object that goes into a request's answer and
    nowhere else may hold it); `fresh()` a copy of one's own."""

    __slots__ = ("encoded", "shared")

    def __init__(self, fields: dict[str, Any]) -> None:
        self.encoded = orjson.dumps(fields)
        self.shared: dict[str, Any] = orjson.loads(self.encoded)

    def fresh(self) -> dict[str, Any]:
        out: dict[str, Any] = orjson.loads(self.encoded)
        return out


class CreateFields:
    """Bounded map from (a `SpecMemo` key, the object's `meta_shape`) to the whole FieldsV1 a create with a field
    manager records (`FieldsResult`), for creates in the stored version of kinds with `Strategy.spec_validation`."""

    def __init__(self, size: int = 256) -> None:
        self._entries: Bounded[tuple[Key, MetaShape], FieldsResult] = Bounded(size)

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: tuple[Key, MetaShape]) -> FieldsResult | None:
        return self._entries.get(key)

    def put(self, key: tuple[Key, MetaShape], fields: dict[str, Any]) -> None:
        self._entries.put(key, FieldsResult(fields))
