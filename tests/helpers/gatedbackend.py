"""A real Backend whose change streams can be held at a gate (shared by the MirrorStore and HTTP freshness tests)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence

from lite.server.store.backend import Change, Outcome, Write
from lite.server.store.sqlitebackend import SqliteBackend


class GatedBackend:
    """A real SqliteBackend whose change streams wait at a gate before each batch: a server whose stream fell
    behind (a slow network) while the datastore moved on and compacted."""

    def __init__(self, inner: SqliteBackend) -> None:
        self.inner = inner
        self.gate = asyncio.Event()
        self.gate.set()

    async def commit(self, writes: Sequence[Write]) -> list[Outcome]:
        return await self.inner.commit(writes)

    async def snapshot(self, prefix: str = "") -> tuple[int, list[tuple[str, int, bytes]]]:
        return await self.inner.snapshot(prefix)

    async def changes(self, after_rev: int, prefix: str = "") -> AsyncIterator[list[Change]]:
        while True:
            await self.gate.wait()
            async with contextlib.aclosing(self.inner.changes(after_rev, prefix)) as stream:
                async for batch in stream:
                    if not self.gate.is_set():
                        break  # arrived while stalled: read again from after_rev once the gate opens
                    yield batch
                    after_rev = batch[-1].rev
                else:
                    return

    async def current_rev(self) -> int:
        return await self.inner.current_rev()

    async def compact(self, rev: int) -> None:
        await self.inner.compact(rev)

    async def close(self) -> None:
        pass
