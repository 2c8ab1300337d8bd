"""Errors raised by the store.

These are storage-level facts, not Kubernetes errors: the API layer (`lite/server/api/resources.py`) maps them
to `ApiError`s (KeyExists -> 409 AlreadyExists, KeyNotFound -> 404, RevMismatch -> 409 Conflict,
Compacted -> 410 Gone, WatchDropped -> the consumer re-watches from its last revision, StoreFull -> 507,
CommitFailed -> 500, StoreClosed -> 503; see `lite/server/api/storefaults.py`). StoreCorrupt is raised by
`Store.open` only and ends start-up (the CLI prints it; see `lite/server/store/faults.py`).
"""

from __future__ import annotations


class StoreError(Exception):
    """Base of every store error."""


class KeyExists(StoreError):
    """create() of a key that currently exists (committed or pending)."""

    def __init__(self, key: str) -> None:
        super().__init__(f"key exists: {key}")
        self.key = key


class KeyNotFound(StoreError):
    """update()/delete() of a key that does not exist (committed or pending)."""

    def __init__(self, key: str) -> None:
        super().__init__(f"key not found: {key}")
        self.key = key


class RevMismatch(StoreError):
    """expected_rev differs from the key's latest revision, which is carried as `current_rev`."""

    def __init__(self, key: str, current_rev: int) -> None:
        super().__init__(f"revision mismatch on {key}: current is {current_rev}")
        self.key = key
        self.current_rev = current_rev


class Compacted(StoreError):
    """watch() from a revision older than the in-memory event window; `oldest_rev` is the oldest kept."""

    def __init__(self, oldest_rev: int) -> None:
        super().__init__(f"revision compacted: oldest watchable is {oldest_rev}")
        self.oldest_rev = oldest_rev


class WatchDropped(StoreError):
    """A watcher fell more than its queue bound behind and was ended; re-watch from the last rev seen."""

    def __init__(self, last_rev: int) -> None:
        super().__init__(f"watch dropped (too slow); last delivered rev {last_rev}")
        self.last_rev = last_rev


class CommitFailed(StoreError):
    """The transaction holding this write failed (disk full, file locked, ...); nothing of it was written.

    Writes queued behind it fail too, since their conflict checks assumed it would land; callers retry.
    """


class StoreFull(CommitFailed):
    """The commit failed because the disk (or file system quota) holding the store is full.

    Nothing of the batch was written; reads and watches go on from memory, and writes succeed again by
    themselves once space is freed (each batch simply tries again).
    """


class StoreCorrupt(StoreError):
    """The store file is damaged or is not a lite store (raised by `Store.open`; nothing was changed)."""

    def __init__(self, path: str, detail: str) -> None:
        super().__init__(f"{path}: {detail}")
        self.path = path
        self.detail = detail


class StoreClosed(StoreError):
    """A write was submitted after close() began, or the writer failed permanently."""
