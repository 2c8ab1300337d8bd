"""The conformance suite's vocabulary: what a store under test must offer, how a test gets one, small helpers.

A *factory* (`Factory`) names one way of building a store over one kind of datastore (today: `Store` on an
SQLite file; at merge: `MirrorStore` over each `Backend`). Per test it provides a fresh, empty datastore as an
async context manager (given the values of the fixtures it `needs`, by name) that yields an *opener*:
`await opener(**opts)` opens a store on that datastore, with `opts` among `window`, `watch_queue`,
`window_bytes`, `watch_queue_bytes` (the keyword arguments `Store.open` and `MirrorStore.open` share). Opening
again after `close` is a *reopen*: for `Store`, the same file; for a backend, a new `MirrorStore` (and a new
backend connection) on the same datastore. Leaving the context manager removes the datastore; the stores
themselves are closed by `Datastore` before that.

The list of factories the suite runs over is `FACTORIES` in this directory's conftest.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Any, Protocol

import orjson
import pytest

from lite.server.store import StoreEvent, Watch


class ConformingStore(Protocol):
    """The public interface every store under test has (see `lite/server/store/store.py`)."""

    current_rev: int

    @property
    def oldest_rev(self) -> int: ...
    def get(self, key: str) -> tuple[int, bytes] | None: ...
    def get_packed(self, key: str) -> tuple[int, bytes] | None: ...
    def list(self, prefix: str, *, start_after: str = "", limit: int = 0
             ) -> tuple[list[tuple[str, int, bytes]], int, int]: ...
    def list_packed(self, prefix: str, *, start_after: str = "", limit: int = 0
                    ) -> tuple[list[tuple[str, int, bytes]], int, int]: ...
    def count(self, prefix: str) -> int: ...
    def watch(self, prefix: str, after_rev: int) -> Watch: ...
    def watcher_count(self) -> int: ...
    async def create(self, key: str, obj: dict[str, Any]) -> tuple[int, bytes]: ...
    async def update(self, key: str, obj: dict[str, Any], expected_rev: int) -> tuple[int, bytes]: ...
    async def delete(self, key: str, expected_rev: int, final: dict[str, Any] | None = None
                     ) -> tuple[int, bytes]: ...
    async def compact(self, keep: int) -> int: ...
    async def close(self) -> None: ...


Opener = Callable[..., Awaitable[ConformingStore]]


@dataclass(frozen=True)
class Factory:
    """One way of building stores for the suite (see the module docstring).

    `datastore(fixtures)` is a fresh, empty datastore for one test; `fixtures` maps each name in `needs` to
    that fixture's value (resolved by pytest before the test's event loop runs, so async fixtures are fine; a
    fixture that skips, e.g. when PostgreSQL is not installed, skips the test with its reason; so may
    `datastore` itself). `can_reopen=False` says a second store on the same datastore is not possible: the
    tests that reopen then skip. `skip` maps a test function's name to the reason this factory skips it.

    `delete_writes_final_first=True` declares the one known variant of the contract: a delete whose final state
    differs from the stored object is committed as an update to that state, then the delete (each at a revision
    of its own), so watchers see one more MODIFIED event before the DELETED one (EtcdBackend: etcd's DELETED
    event can only carry the value stored). The tests then expect exactly that, and the model test's deletes
    keep the stored object as their final state.
    """

    name: str
    datastore: Callable[[Mapping[str, Any]], AbstractAsyncContextManager[Opener]]
    needs: Sequence[str] = ("tmp_path",)
    can_reopen: bool = True
    delete_writes_final_first: bool = False
    skip: Mapping[str, str] = field(default_factory=dict)


class Datastore:
    """A test's datastore: opens stores on it, reopens them, and closes every store still open at the end."""

    def __init__(self, factory: Factory, opener: Opener) -> None:
        self.factory = factory
        self._opener = opener
        self._opened: list[ConformingStore] = []

    async def open(self, **opts: Any) -> ConformingStore:
        if self._opened and not self.factory.can_reopen:
            pytest.skip(f"{self.factory.name}: cannot open a second store on one datastore")
        store = await self._opener(**opts)
        self._opened.append(store)
        return store

    async def reopen(self, store: ConformingStore, **opts: Any) -> ConformingStore:
        """Close `store` and open a new one on the same datastore."""
        if not self.factory.can_reopen:
            pytest.skip(f"{self.factory.name}: cannot reopen a datastore")
        await store.close()
        return await self.open(**opts)

    async def close_all(self) -> None:
        for store in self._opened:
            await store.close()  # idempotent


def obj(key: str, **data: Any) -> dict[str, Any]:
    """A ConfigMap-shaped object for `key` (GROUP/PLURAL/NS/NAME) with `data`."""
    parts = key.split("/")
    meta: dict[str, Any] = {"name": parts[-1]}
    if len(parts) > 3:
        meta["namespace"] = parts[-2]
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {k: str(v) for k, v in data.items()}}


def with_rv(o: dict[str, Any], rev: int) -> dict[str, Any]:
    """`o` as the store must hold it at `rev`: metadata.resourceVersion = str(rev), nothing else changed."""
    return {**o, "metadata": {**o.get("metadata", {}), "resourceVersion": str(rev)}}


def decoded(value: bytes | None) -> Any:
    return None if value is None else orjson.loads(value)


def rv_of(value: bytes) -> str:
    return str(orjson.loads(value)["metadata"]["resourceVersion"])


async def take(w: Watch, n: int, timeout: float = 10) -> list[StoreEvent]:
    """The next `n` events of `w` (a generous timeout: only a broken store ever waits for it)."""
    return [await asyncio.wait_for(anext(w), timeout) for _ in range(n)]


async def queued(w: Watch) -> list[StoreEvent]:
    """Every event `w` can hand out right now, without waiting for any (the deadline is now)."""
    loop = asyncio.get_running_loop()
    out: list[StoreEvent] = []
    while (ev := await w.next_before(loop.time())) is not None:
        out.append(ev)
    return out


def summary(events: list[StoreEvent]) -> list[tuple[str, str, int, Any]]:
    """(type, key, rev, decoded value) of each event: what two streams must agree on."""
    return [(e.type, e.key, e.rev, decoded(e.value)) for e in events]


def entry(got: tuple[int, bytes] | None) -> tuple[int, Any] | None:
    """A (rev, value) as get returns it, with the value decoded: values compare as JSON, not as bytes."""
    return None if got is None else (got[0], decoded(got[1]))


def entries(items: list[tuple[str, int, bytes]]) -> list[tuple[str, int, Any]]:
    """list's items with their values decoded."""
    return [(k, r, decoded(v)) for k, r, v in items]
