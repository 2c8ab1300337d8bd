"""lite's storage layer: one SQLite revision log, an in-memory index, group commit, watch fan-out.

Used only by `lite/server/api/resources.py`; see docs/internals.md for the contract.
"""

from lite.server.store.errors import (
    CommitFailed,
    Compacted,
    KeyExists,
    KeyNotFound,
    RevMismatch,
    StoreClosed,
    StoreCorrupt,
    StoreError,
    StoreFull,
    WatchDropped,
)
from lite.server.store.store import Store, compactor
from lite.server.store.watch import StoreEvent, Watch

__all__ = [
    "CommitFailed",
    "Compacted",
    "KeyExists",
    "KeyNotFound",
    "RevMismatch",
    "Store",
    "StoreClosed",
    "StoreCorrupt",
    "StoreError",
    "StoreEvent",
    "StoreFull",
    "Watch",
    "WatchDropped",
    "compactor",
]
