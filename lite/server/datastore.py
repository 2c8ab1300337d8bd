"""Opening the datastore `--datastore-endpoint` names (`lite.server.store.endpoint`).

- SQLite (the default): lite's own `Store` on one file, exactly as before (`open_sqlite`).
- PostgreSQL and etcd: `open_backend` connects the shared datastore's `Backend` (`pgbackend.PgBackend`,
  `etcdbackend.EtcdBackend`); the server reads and writes the bootstrap data through it
  (`lite.server.bootstrapdata`) and then `open_mirror` puts the `MirrorStore` (the `Store` interface over any
  `Backend`) in front of it for the API.
The backends and the mirror are separate modules imported only when such an endpoint is used, so a server on
SQLite never loads asyncpg or an etcd client. Where one is missing from the installed lite, the endpoint is
refused with `DatastoreUnavailable` ("not available in this build"), never replaced by SQLite.

Invariants: nothing is opened at import; every function here leaves nothing open when it raises.
"""

from __future__ import annotations

import importlib
from typing import Any

from lite.server.store import Store, StoreLike
from lite.server.store.backend import Backend
from lite.server.store.endpoint import DatastoreEndpoint
from lite.server.store.sqlite import ValueCodec

MODULES = {"postgres": "lite.server.store.pgbackend", "etcd": "lite.server.store.etcdbackend"}
DRIVERS = {"postgres": "PostgreSQL", "etcd": "etcd"}


class DatastoreUnavailable(Exception):
    """The endpoint names a datastore this installation cannot open; the message says which and why."""


async def open_sqlite(path: str, codec: ValueCodec | None) -> Store:
    return await Store.open(path, codec=codec)


async def open_backend(endpoint: DatastoreEndpoint) -> Backend:
    """The shared datastore's Backend, connected."""
    module = _module(MODULES[endpoint.kind], endpoint)
    try:
        if endpoint.kind == "postgres":
            backend: Backend = await module.PgBackend.open(endpoint.dsn)
        else:
            backend = await module.EtcdBackend.open(list(endpoint.endpoints), cafile=endpoint.cafile or None,
                                                    certfile=endpoint.certfile or None,
                                                    keyfile=endpoint.keyfile or None)
    except ValueError as e:  # a form the backend cannot use (e.g. several etcd endpoints by host name)
        raise DatastoreUnavailable(f"--datastore-endpoint {endpoint.display}: {e}") from None
    return backend


async def open_mirror(backend: Backend, endpoint: DatastoreEndpoint, codec: ValueCodec | None) -> StoreLike:
    """The API's store over `backend`: a MirrorStore (Store's public interface, `StoreLike`)."""
    from lite.server.store.mirror import MirrorStore

    return await MirrorStore.open(backend, codec=codec)


def _module(name: str, endpoint: DatastoreEndpoint) -> Any:
    """The module `name`; DatastoreUnavailable when it (or a library it needs) is not installed."""
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as e:
        what = DRIVERS.get(endpoint.kind, endpoint.kind)
        if e.name == name:
            raise DatastoreUnavailable(f"--datastore-endpoint {endpoint.display}: {what} datastores are not "
                                       f"available in this build of lite ({name} is missing)") from None
        raise DatastoreUnavailable(f"--datastore-endpoint {endpoint.display}: {what} needs the Python package "
                                   f"{e.name}, which is not installed") from None
