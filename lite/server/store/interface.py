"""`StoreLike`: the public interface that `Store` (one SQLite file) and `MirrorStore` (a shared datastore) both
give the API, as a typing Protocol, so that code taking either can say so (`compactor` does).

mypy checks that both classes satisfy it (`mirror._conforms`); `tests/store/test_mirror.py` checks that
their signatures are the same at run time.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from lite.server.store.watch import Watch

_Items = list[tuple[str, int, bytes]]


class StoreLike(Protocol):
    """See docs/internals.md (Store, and MirrorStore under "Shared datastores") for the contract."""

    current_rev: int
    commits: int
    writes: int
    compactions: int
    compacted_rows: int
    full: bool
    failed_batches: int
    on_commit: Callable[[int], None] | None

    @property
    def oldest_rev(self) -> int: ...

    @property
    def path(self) -> str: ...

    def get(self, key: str) -> tuple[int, bytes] | None: ...

    def list(self, prefix: str, *, start_after: str = "", limit: int = 0,
             at_rev: int = 0) -> tuple[_Items, int, int]: ...

    def get_packed(self, key: str) -> tuple[int, bytes] | None: ...

    def list_packed(self, prefix: str, *, start_after: str = "", limit: int = 0,
                    at_rev: int = 0) -> tuple[_Items, int, int]: ...

    def count(self, prefix: str) -> int: ...

    def stamp(self, prefix: str) -> object: ...

    def __len__(self) -> int: ...

    def watcher_count(self) -> int: ...

    def watch(self, prefix: str, after_rev: int) -> Watch: ...

    def fresh(self, rev: int = 0) -> Awaitable[None] | None: ...

    async def create(self, key: str, obj: dict[str, Any]) -> tuple[int, bytes]: ...

    async def update(self, key: str, obj: dict[str, Any], expected_rev: int) -> tuple[int, bytes]: ...

    async def delete(self, key: str, expected_rev: int, final: dict[str, Any] | None = None) -> tuple[int, bytes]:
        ...

    async def compact(self, keep: int, *, history_factor: float = ..., history_floor: int = ...) -> int: ...

    async def stats(self) -> tuple[int, int]: ...

    async def release_memory(self) -> None: ...

    async def close(self) -> None: ...
