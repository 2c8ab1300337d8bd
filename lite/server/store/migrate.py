"""Copying a datastore into another through the `Backend` contract (`lite datastore migrate`, a server's
`--datastore-migrate-from`, and PostgreSQL snapshots, which are a copy into an SQLite file).

`copy_store(source, target)`:
- reads one `snapshot` of the source (every live key at one revision: a consistent cut even if something
  still writes to it) and refuses a target that holds any live key (`TargetNotEmpty`, naming how many and a
  few of them); the source's own import marker is not copied;
- writes the import marker `MARKER` (`{"complete": false, ...}`) first, then every live key as a `create` in
  the source's mod-revision order, then sets the marker complete. New revisions are the target's, so the
  order of resourceVersions survives (not their numbers); uids and values are carried as stored (sealed
  Secrets stay sealed: lite's AES-GCM binds a ciphertext to the lite key, which is the same on every backend),
  except that `strip_rv` drops `metadata.resourceVersion` from plain JSON values (for PostgreSQL and etcd,
  which hold objects without it, as MirrorStore and kube-apiserver write them; SQLite sets it itself);
- a source without any key is refused (`MigrationError`: most likely the wrong datastore) unless `allow_empty`;
- `ordered_batches`: the target assigns a batch's revisions in list order (SQLite, PostgreSQL): writes go
  `batch` at a time; otherwise (etcd: a batch's writes are in flight together) one at a time. Either way the
  returned revisions are checked to increase, and any refused create (someone else writes to the target)
  stops the copy with `MigrationError`.
A copy that stops half way leaves the marker incomplete: `import_state` reads it, and `lite server
--datastore-migrate-from` refuses to start on such a datastore instead of taking it as imported.

Invariants: the source is only read; nothing is written to the target before it was found empty; no key is
written twice.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import orjson

from lite.records import dataclass
from lite.server.store.backend import Backend, Write
from lite.server.store.errors import StoreError

MARKER = "lite/migrations/import"  # group `lite` is no API group: never served, mapped by every backend
BATCH = 500
SAMPLE = 5


class MigrationError(StoreError):
    """A copy that cannot start or did not finish; the message says why."""


class TargetNotEmpty(MigrationError):
    """The target holds live keys; `count` of them, `sample` a few."""

    def __init__(self, where: str, count: int, sample: list[str], marker: dict[str, object] | None) -> None:
        self.count, self.sample, self.marker = count, sample, marker
        shown = ", ".join(sample) + (", ..." if count > len(sample) else "")
        note = ""
        if marker is not None and not marker.get("complete"):
            note = f" (an import from {marker.get('source', '?')} into it did not finish)"
        super().__init__(f"{where} is not empty: it holds {count} key(s) ({shown}){note}; migrate into an empty "
                         "datastore (a new SQLite file, an empty PostgreSQL database, an etcd without lite's keys)")


@dataclass(frozen=True)
class Report:
    """What a copy did: keys copied, the source's revision, the target's first and last new revisions."""

    keys: int
    bytes: int
    source_rev: int
    first_rev: int
    last_rev: int
    seconds: float


def _marker(source: str, *, complete: bool, keys: int = 0, source_rev: int = 0) -> bytes:
    return orjson.dumps({"source": source, "complete": complete, "keys": keys, "sourceRevision": source_rev,
                         "time": int(time.time())})


async def import_state(backend: Backend) -> dict[str, object] | None:
    """The target's import marker (`{"source", "complete", "keys", ...}`), or None when it has none."""
    _, items = await backend.snapshot(MARKER)
    for key, _, value in items:
        if key == MARKER:
            try:
                doc = orjson.loads(value)
            except orjson.JSONDecodeError:
                return {"complete": False, "source": "?"}
            return doc if isinstance(doc, dict) else {"complete": False, "source": "?"}
    return None


async def live_keys(backend: Backend) -> tuple[int, list[str]]:
    """(how many live keys, the first few of them) in `backend`."""
    _, items = await backend.snapshot("")
    return len(items), [key for key, _, _ in items[:SAMPLE]]


async def copy_store(source: Backend, target: Backend, *, source_name: str, target_name: str,
                     ordered_batches: bool, batch: int = BATCH, strip_rv: bool = False, allow_empty: bool = False,
                     check: Callable[[list[tuple[str, int, bytes]]], None] | None = None) -> Report:
    """Copy every live key of `source` into the empty `target` (see the module docstring). `check(items)` may
    refuse the items (raise MigrationError) before anything is written, e.g. sealed values it cannot reseal."""
    started = time.monotonic()
    source_rev, items = await source.snapshot("")
    items = sorted((item for item in items if item[0] != MARKER), key=lambda item: item[1])
    if not items and not allow_empty:
        raise MigrationError(f"{source_name} holds no objects (is it the right datastore?); nothing to copy")
    count, sample = await live_keys(target)
    if count:
        raise TargetNotEmpty(target_name, count, sample, await import_state(target))
    if check is not None:
        check(items)
    marker_rev = _one(await target.commit([Write("create", MARKER, _marker(source_name, complete=False))]),
                      MARKER)
    step = max(1, batch) if ordered_batches else 1
    last = first = marker_rev
    size = 0
    for at in range(0, len(items), step):
        chunk = items[at:at + step]
        outcomes = await target.commit([Write("create", key, without_rv(value) if strip_rv else value)
                                        for key, _, value in chunk])
        for (key, _, value), outcome in zip(chunk, outcomes, strict=True):
            rev = _one([outcome], key)
            if rev <= last:
                raise MigrationError(f"{target_name} gave {key} revision {rev}, not above the previous write's "
                                     f"{last}: the order of resourceVersions would not survive")
            if first == marker_rev:
                first = rev
            last = rev
            size += len(value)
    _one(await target.commit([Write("update", MARKER, _marker(source_name, complete=True, keys=len(items),
                                                               source_rev=source_rev), marker_rev)]), MARKER)
    return Report(len(items), size, source_rev, first if items else 0, last if items else 0,
                  time.monotonic() - started)


def without_rv(value: bytes) -> bytes:
    """`value` without metadata.resourceVersion when it is a JSON object that has one; otherwise as is."""
    if not value.startswith(b"{"):
        return value
    try:
        doc = orjson.loads(value)
    except orjson.JSONDecodeError:
        return value
    meta = doc.get("metadata") if isinstance(doc, dict) else None
    if not isinstance(meta, dict) or "resourceVersion" not in meta:
        return value
    del meta["resourceVersion"]
    return orjson.dumps(doc)


def _one(outcomes: list[int | StoreError], key: str) -> int:
    (outcome,) = outcomes
    if isinstance(outcome, StoreError):
        raise MigrationError(f"writing {key} into the target failed ({type(outcome).__name__}: {outcome}): "
                             "something else writes to it; stop it and migrate into an empty datastore again")
    return outcome
