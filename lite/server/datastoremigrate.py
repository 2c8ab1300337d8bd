"""Moving a cluster's objects between datastores: `lite datastore migrate --from --to` and a server's
`--datastore-migrate-from sqlite://PATH` (the copy itself is `store/migrate.py`, over the `Backend` contract).

- `open_source(endpoint)`: the source as a `Backend`: an SQLite file (it must exist and be a lite store; it is
  opened with `SqliteBackend`, which reads `Store`'s files) or PostgreSQL/etcd (`datastore.open_backend`).
- `open_target(endpoint, keys)`: the target likewise; an SQLite target is created if missing, with a
  `KeepKeyCodec` over `keys` (the server's encryption keys) so that a sealed Secret copied into it is sealed
  again with its own key around its new resourceVersion, which `Store` reads from the stored value.
- `migrate(source, target, keys)` copies (the target must be empty) and returns the `Report`; `import_at_start`
  is the server's variant: it copies only into an empty target, says so otherwise, and refuses a target whose
  earlier import did not finish.
- A sealed value bound for SQLite is unsealed before anything is written: a Secret sealed with a key not in
  `keys` stops the copy with `MigrationError` naming the key and where lite looked for it.

Invariants: every function closes what it opened, also when it raises; the source is only read.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sqlite3
import urllib.parse
from collections.abc import Callable

from lite.server.datastore import DatastoreUnavailable, open_backend
from lite.server.encryption.aesgcm import KeepKeyCodec, Key, UnsealError, key_name
from lite.server.store.backend import Backend
from lite.server.store.endpoint import DatastoreEndpoint
from lite.server.store.errors import CommitFailed
from lite.server.store.migrate import MigrationError, Report, copy_store, import_state, live_keys

log = logging.getLogger(__name__)


async def open_source(endpoint: DatastoreEndpoint, what: str = "--from") -> Backend:
    """The source datastore, connected; MigrationError when an SQLite source is not there."""
    if endpoint.kind == "sqlite":
        from lite.server.store.sqlitebackend import SqliteBackend

        await asyncio.to_thread(_check_sqlite, endpoint.path, what, source=True)
        return await SqliteBackend.open(endpoint.path)
    return await open_backend(endpoint)


async def open_target(endpoint: DatastoreEndpoint, keys: tuple[Key, ...], what: str = "--to") -> Backend:
    """The target datastore, connected (an SQLite file is created when missing)."""
    if endpoint.kind == "sqlite":
        from lite.server.store.sqlitebackend import SqliteBackend

        await asyncio.to_thread(_check_sqlite, endpoint.path, what, source=False)
        return await SqliteBackend.open(endpoint.path, codec=KeepKeyCodec(keys))
    return await open_backend(endpoint)


def _check_sqlite(path: str, what: str, *, source: bool) -> None:
    """A source file exists; a target's directory does (blocking: a few stat calls)."""
    if not path:
        raise MigrationError(f"{what}: name the SQLite file (sqlite:///var/lib/lite/server/db/state.db)")
    if source and not os.path.isfile(path):
        raise MigrationError(f"{what}: no SQLite store at {path}")
    if source:  # read-only: a file that is not a lite store must not get lite's tables
        try:
            conn = sqlite3.connect(f"file:{urllib.parse.quote(os.path.abspath(path))}?mode=ro", uri=True)
            try:
                tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
            finally:
                conn.close()
        except sqlite3.Error as e:
            raise MigrationError(f"{what}: {path} is not an SQLite store: {e}") from None
        if not {"log", "current"} <= tables:
            raise MigrationError(f"{what}: {path} is not a lite store (no log/current tables)")
    parent = os.path.dirname(os.path.abspath(path))
    if not source and not os.path.isdir(parent):
        raise MigrationError(f"{what}: {parent} is not a directory")


def reseal_check(keys: tuple[Key, ...], where: str) -> Callable[[list[tuple[str, int, bytes]]], None]:
    """A `copy_store` check: every sealed value opens with `keys` (needed when the target is SQLite)."""
    def check(items: list[tuple[str, int, bytes]]) -> None:
        codec = KeepKeyCodec(keys)
        for key, _, value in items:
            name = key_name(value)
            if name is None:
                continue
            try:
                codec.unseal(key, value)
            except UnsealError as e:
                raise MigrationError(f"{e}: an SQLite store holds each Secret's resourceVersion inside its "
                                     f"seal, so the copy must open it; lite looked for the key in {where} "
                                     "(give the server's --data-dir)") from None
    return check


async def migrate(source: DatastoreEndpoint, target: DatastoreEndpoint, keys: tuple[Key, ...] = (),
                  keys_from: str = "") -> Report:
    """Copy every object of `source` into the empty `target` (both servers stopped)."""
    if _same(source, target):
        raise MigrationError(f"--from and --to both name {source.display}")
    try:
        src = await open_source(source)
    except CommitFailed as e:
        raise MigrationError(f"--from {source.display}: {e}") from None
    new_file = target.kind == "sqlite" and not await asyncio.to_thread(os.path.exists, target.path)
    try:
        try:
            dst = await open_target(target, keys)
        except CommitFailed as e:
            raise MigrationError(f"--to {target.display}: {e}") from None
        try:
            report = await copy_store(src, dst, source_name=source.display, target_name=target.display,
                                      ordered_batches=target.kind != "etcd", strip_rv=target.shared,
                                      check=reseal_check(keys, keys_from) if target.kind == "sqlite" else None)
        except BaseException:
            await dst.close()
            if new_file:  # nothing to keep: the file did not exist before
                await asyncio.to_thread(_remove_sqlite, target.path)
            raise
        await dst.close()  # (not in an `else`: a `return` in the `try` would skip it and leave the target open)
        return report
    finally:
        await src.close()


def _remove_sqlite(path: str) -> None:
    for p in (path, path + "-wal", path + "-shm"):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(p)


async def import_at_start(backend: Backend, target: DatastoreEndpoint, source: DatastoreEndpoint) -> str:
    """`lite server --datastore-migrate-from`: copy `source` into the server's shared datastore `backend` if
    that is empty (before its bootstrap data is read, so the old cluster's CAs and keys come along); what was
    done, for the log. MigrationError when a previous import did not finish."""
    count, _ = await live_keys(backend)
    if count:
        state = await import_state(backend)
        if state is not None and not state.get("complete"):
            raise MigrationError(f"{target.display}: the import from {state.get('source', '?')} started earlier "
                                 "did not finish; empty the datastore and start again with "
                                 "--datastore-migrate-from")
        return (f"--datastore-migrate-from {source.display}: skipped, {target.display} already holds {count} "
                "key(s)")
    src = await open_source(source, "--datastore-migrate-from")
    try:
        report = await copy_store(src, backend, source_name=source.display, target_name=target.display,
                                  ordered_batches=target.kind != "etcd", strip_rv=True)
    finally:
        await src.close()
    return (f"imported {report.keys} key(s) ({report.bytes} bytes, {source.display} at revision "
            f"{report.source_rev}) into {target.display} in {report.seconds:.1f}s")


def _same(a: DatastoreEndpoint, b: DatastoreEndpoint) -> bool:
    if a.kind != b.kind:
        return False
    if a.kind == "sqlite":
        return os.path.abspath(a.path) == os.path.abspath(b.path)
    return a.dsn == b.dsn if a.kind == "postgres" else set(a.endpoints) == set(b.endpoints)


__all__ = ["DatastoreUnavailable", "MigrationError", "Report", "import_at_start", "migrate", "open_source",
           "open_target"]
