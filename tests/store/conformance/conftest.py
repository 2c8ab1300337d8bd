"""The factories the store conformance suite runs over, and its fixtures.

Every test in this directory runs once per entry of `FACTORIES` (test ids `[sqlite]`, ...). To add a store
over another datastore, add one entry: a `Factory` whose `datastore(request)` is an async context manager that
creates a fresh, empty datastore, yields an opener `async (**opts) -> store`, and removes the datastore on exit.
For example, MirrorStore over PostgreSQL (a sketch: `pgserver` and its `fresh_dsn` are that fixture's names):

    @asynccontextmanager
    async def mirror_pg(request: pytest.FixtureRequest) -> AsyncIterator[Opener]:
        dsn = await request.getfixturevalue("pgserver").fresh_dsn()   # pytest.skip()s where there is no server
        backends: list[PgBackend] = []

        async def open_(**opts: Any) -> MirrorStore:
            backends.append(backend := await PgBackend.open(dsn))
            return await MirrorStore.open(backend, **opts)

        yield open_
        for b in backends:
            await b.close()
        # ... drop the database

    FACTORIES.append(Factory("mirror-pg", mirror_pg))

`Factory(..., can_reopen=False)` skips the tests that open a second store on the datastore;
`Factory(..., skip={"test_name": "why"})` skips single tests for that factory, with the reason shown.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from conformance_kit import ConformingStore, Datastore, Factory, Opener

from lite.server.store import Store


@asynccontextmanager
async def sqlite_store(request: pytest.FixtureRequest) -> AsyncIterator[Opener]:
    """`Store` (the default store) on an SQLite file in the test's tmp_path; reopen = the same file."""
    tmp: Path = request.getfixturevalue("tmp_path")
    path = str(tmp / "lite.db")

    async def open_(**opts: Any) -> ConformingStore:
        return await Store.open(path, **opts)

    yield open_  # tmp_path is pytest's to remove


FACTORIES: list[Factory] = [
    Factory("sqlite", sqlite_store),
]


@pytest.fixture(params=FACTORIES, ids=lambda f: f.name)
async def datastore(request: pytest.FixtureRequest) -> AsyncIterator[Datastore]:
    """A fresh datastore of one factory; every store opened on it is closed when the test ends."""
    factory: Factory = request.param
    reason = factory.skip.get(request.node.originalname)
    if reason is not None:
        pytest.skip(f"{factory.name}: {reason}")
    async with factory.datastore(request) as opener:
        ds = Datastore(factory, opener)
        try:
            yield ds
        finally:
            await ds.close_all()


@pytest.fixture
async def store(datastore: Datastore) -> ConformingStore:
    """A store with default options on a fresh datastore (closed by `datastore`)."""
    return await datastore.open()
