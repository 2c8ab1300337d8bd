"""lite's storage layer: one SQLite revision log, an in-memory index, group commit, watch fan-out (`Store`);
the same interface over a datastore several servers share (`mirror.MirrorStore` over a `backend.Backend`,
imported from its module only where a shared datastore is used).

Used only by `lite/server/api/resources.py` and the composition (`main.py`); see docs/internals.md for the
contract (`StoreLike` is it as a typing Protocol).
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
from lite.server.store.interface import StoreLike
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
    "StoreLike",
    "Watch",
    "WatchDropped",
    "compactor",
]
