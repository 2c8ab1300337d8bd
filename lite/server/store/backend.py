"""The contract between lite's store and a datastore that several servers may share (PostgreSQL, etcd).

The default store (`Store`, an SQLite file owned by one process) assigns revisions itself and needs none of
this. A shared datastore cannot work that way: other servers write to it too, so revisions, conflicts and the
order of changes are the datastore's to decide. `MirrorStore` gives the API the same interface as `Store` over
any `Backend`: it keeps an in-memory mirror (index and watch window) fed only by the backend's change stream,
sends writes to the backend, and answers a write once the mirror has applied its revision (so an acknowledged
write is readable and on watches on this server, as with `Store`).

A `Backend` promises:
- **Revisions.** Every committed write has one revision, an integer > 0, unique across the datastore; a later
  commit has a higher revision. Revisions need not be contiguous (etcd counts writes to keys outside lite's
  prefix; a failed PostgreSQL transaction may or may not consume one): consumers never do arithmetic on them.
- **Conditional writes** (`commit`). Each `Write` says what it expects: a create that the key does not exist; an
  update or delete that it exists and, when `expected_rev` is not 0, that its mod revision is `expected_rev`.
  The backend checks that atomically with the write, against everything committed before it (by any server).
  A batch is a group commit, not a transaction: each write succeeds or fails on its own, and the result list
  says which, in order. Writes of one batch to the same key are applied in list order.
- **Values.** Stored as given (`Write.value`): lite's JSON of the object, whose `metadata.resourceVersion` the
  backend neither reads nor maintains (the mirror sets it from the change's revision). A delete keeps `value` as
  the key's final state: it is what the DELETED event carries.
- **Snapshot** (`snapshot`). Every live key under a prefix, as of one revision, which it also returns.
- **Changes** (`changes`). Every committed write with revision > `after_rev`, in revision order, each exactly
  once, none skipped (a slow transaction that commits a lower revision after a higher one has been reported would
  break this; the backend must prevent it, not wait and skip as kine does). The stream is pushed, not polled, and
  survives a lost connection: it reconnects with backoff and resumes after the last revision it delivered; if
  that revision was compacted meanwhile it raises `Compacted` and the mirror reloads. It ends (StopAsyncIteration)
  only when the backend is closed.
- **History** (optional, `HasHistory.history`). The newest retained changes up to a revision, with the values they
  replaced: what a mirror seeds its watch window with at (re)load.
- **Compaction** (`compact`). History at or below `rev` may go; the live value of every key stays. `changes`
  from below the compacted revision raises `Compacted`.
- **Failures.** `commit` raises `CommitFailed` when the datastore cannot be reached or refuses the whole batch
  (the outcome of its writes is then unknown: they may have happened, and will then show on the change stream);
  `StoreClosed` after `close`.

All methods run on the event loop; a backend owns its connections and tasks, started by its `open` classmethod
(implementations: `pgbackend.PgBackend`, `etcdbackend.EtcdBackend`, `sqlitebackend.SqliteBackend`) and ended by
`close`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Literal, Protocol, runtime_checkable

from lite.records import dataclass
from lite.server.store.errors import StoreError

Op = Literal["create", "update", "delete"]


@dataclass(frozen=True, slots=True)
class Write:
    """One conditional write (see the module docstring for what each `op` expects)."""

    op: Op
    key: str
    value: bytes  # the object's JSON; for a delete, the key's final state
    expected_rev: int = 0  # update/delete: the mod revision the key must have; 0 = any (the key must exist)


@dataclass(frozen=True, slots=True)
class Change:
    """One committed write, as the change stream reports it."""

    rev: int
    key: str
    value: bytes  # as written; for a delete, the final state
    created: bool  # the write created the key (it did not exist before)
    deleted: bool
    # Only `HasHistory.history` fills these (streams leave them): the key's value before this write and its mod
    # revision, or None / 0 for a create or when compaction removed that value.
    prev: bytes | None = None
    prev_rev: int = 0


# A write's outcome: its new revision, or KeyExists / KeyNotFound / RevMismatch.
Outcome = int | StoreError


class Backend(Protocol):
    """A shared datastore; see the module docstring for the contract."""

    async def commit(self, writes: Sequence[Write]) -> list[Outcome]:
        """Apply each write whose condition holds; one outcome per write, in order."""
        ...

    async def snapshot(self, prefix: str = "") -> tuple[int, list[tuple[str, int, bytes]]]:
        """(revision, [(key, mod_rev, value)] of every live key under `prefix`, sorted by key) at that revision."""
        ...

    def changes(self, after_rev: int, prefix: str = "") -> AsyncIterator[list[Change]]:
        """Batches of committed changes under `prefix` with rev > after_rev, in revision order, until close."""
        ...

    async def current_rev(self) -> int:
        """The datastore's newest committed revision (a fresh read, not a cached one)."""
        ...

    async def compact(self, rev: int) -> None:
        """Let history at or below `rev` go (live values stay)."""
        ...

    async def close(self) -> None:
        """End the change streams and close every connection. Idempotent."""
        ...


@runtime_checkable
class HasHistory(Protocol):
    """What a backend may add to the contract (all three do): its retained history, so that a mirror (re)started
    on it seeds its watch window and a watch from just before a server restart resumes instead of getting 410."""

    async def history(self, upto_rev: int, limit: int) -> tuple[int, list[Change]]:
        """(floor, changes): the newest committed changes with rev <= upto_rev (at most `limit`, in revision
        order, each with `prev`/`prev_rev`), such that every change with floor < rev <= upto_rev is among them.
        floor is at least the compacted revision (history at or below it may be gone); floor == upto_rev and no
        changes when nothing is retained."""
        ...

