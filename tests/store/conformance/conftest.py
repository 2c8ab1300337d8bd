"""The factories the store conformance suite runs over, and its fixtures.

Every test in this directory runs once per entry of `FACTORIES` (test ids `[sqlite]`, ...). To add a store
over another datastore, add one entry: a `Factory` whose `datastore(fixtures)` is an async context manager
that creates a fresh, empty datastore, yields an opener `async (**opts) -> store`, and removes the datastore on
exit; `needs` names the fixtures it gets in `fixtures`. For example, MirrorStore over PostgreSQL (a sketch:
`pg_dsn` stands for whichever fixture gives a fresh database's DSN):

    @asynccontextmanager
    async def mirror_pg(fixtures: Mapping[str, Any]) -> AsyncIterator[Opener]:
        backends: list[PgBackend] = []

        async def open_(**opts: Any) -> ConformingStore:
            backends.append(backend := await PgBackend.open(fixtures["pg_dsn"]))
            return await MirrorStore.open(backend, **opts)  # reopen: a new MirrorStore on the same database

        try:
            yield open_
        finally:
            for b in backends:
                await b.close()  # idempotent; the stores are closed before this runs

    FACTORIES = [
        Factory("sqlite", sqlite_store),
        Factory("mirror-pg", mirror_pg, needs=("pg_dsn",)),
    ]

(The entry goes in the list literal: the `factory` fixture below takes its params when it is defined, so an
append after it would not be seen.)

`Factory(..., can_reopen=False)` skips the tests that open a second store on the datastore;
`Factory(..., skip={"test_name": "why"})` skips single tests for that factory, with the reason shown.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from conformance_kit import ConformingStore, Datastore, Factory, Opener

from lite.server.store import Store
from lite.server.store.etcdbackend import EtcdBackend
from lite.server.store.mirror import MirrorStore
from lite.server.store.pgbackend import PgBackend
from lite.server.store.sqlitebackend import SqliteBackend
from tests.helpers.etcdserver import EtcdServer, etcd_or_skip


@asynccontextmanager
async def sqlite_store(fixtures: Mapping[str, Any]) -> AsyncIterator[Opener]:
    """`Store` (the default store) on an SQLite file in the test's tmp_path; reopen = the same file."""
    path = str(Path(fixtures["tmp_path"]) / "lite.db")

    async def open_(**opts: Any) -> ConformingStore:
        return await Store.open(path, **opts)

    yield open_  # tmp_path is pytest's to remove


@pytest.fixture(scope="module")  # one etcd per test file, not kept running through the whole session
def etcd_server() -> Iterator[EtcdServer]:
    with etcd_or_skip() as server:
        yield server


@pytest.fixture
def etcd_endpoint(etcd_server: EtcdServer) -> str:
    etcd_server.wipe()
    return etcd_server.endpoint


def mirror(connect: Any) -> Any:
    """A datastore factory: MirrorStore over the backend `connect(fixtures)` opens; reopen = a new backend."""

    @asynccontextmanager
    async def datastore(fixtures: Mapping[str, Any]) -> AsyncIterator[Opener]:
        backends: list[Any] = []

        async def open_(**opts: Any) -> ConformingStore:
            backends.append(backend := await connect(fixtures))
            return await MirrorStore.open(backend, **opts)

        try:
            yield open_
        finally:
            for b in backends:
                await b.close()

    return datastore


async def _sqlite(fixtures: Mapping[str, Any], rev_step: int = 1) -> SqliteBackend:
    return await SqliteBackend.open(str(Path(fixtures["tmp_path"]) / "backend.db"), rev_step=rev_step)


async def _sqlite_gaps(fixtures: Mapping[str, Any]) -> SqliteBackend:
    return await _sqlite(fixtures, rev_step=3)


async def _pg(fixtures: Mapping[str, Any]) -> PgBackend:
    return await PgBackend.open(fixtures["pg_dsn"])


async def _etcd(fixtures: Mapping[str, Any]) -> EtcdBackend:
    return await EtcdBackend.open([fixtures["etcd_endpoint"]])


FACTORIES: list[Factory] = [
    Factory("sqlite", sqlite_store),
    Factory("mirror-sqlite", mirror(_sqlite)),
    Factory("mirror-sqlite-gaps", mirror(_sqlite_gaps)),
    Factory("mirror-pg", mirror(_pg), needs=("pg_dsn",)),
    Factory("mirror-etcd", mirror(_etcd), needs=("etcd_endpoint",), delete_writes_final_first=True),
]


@pytest.fixture(params=FACTORIES, ids=lambda f: f.name)
def factory(request: pytest.FixtureRequest) -> tuple[Factory, dict[str, Any]]:
    """One factory, and the fixtures it needs (resolved here, outside the event loop; or the test skips)."""
    f: Factory = request.param
    reason = f.skip.get(request.node.originalname)
    if reason is not None:
        pytest.skip(f"{f.name}: {reason}")
    return f, {name: request.getfixturevalue(name) for name in f.needs}


@pytest.fixture
async def datastore(factory: tuple[Factory, dict[str, Any]]) -> AsyncIterator[Datastore]:
    """A fresh datastore of one factory; every store opened on it is closed when the test ends."""
    f, fixtures = factory
    async with f.datastore(fixtures) as opener:
        ds = Datastore(f, opener)
        try:
            yield ds
        finally:
            await ds.close_all()


@pytest.fixture
async def store(datastore: Datastore) -> ConformingStore:
    """A store with default options on a fresh datastore (closed by `datastore`)."""
    return await datastore.open()
