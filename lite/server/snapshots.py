"""Store snapshots (k3s's etcd-snapshot): save, list, delete, prune, a schedule, and the restore behind
`lite server --cluster-reset --cluster-reset-restore-path FILE` (SQLite).

On a shared datastore (`save_datastore`, for `--datastore-endpoint` postgres/etcd):
- PostgreSQL: the live state (one consistent snapshot of the datastore) is copied into an SQLite file in lite's
  own schema (`store/migrate.copy_store` into a `SqliteBackend`; sealed Secrets stay sealed with their key, so
  the server's encryption keys must be at hand): a portable snapshot that `Store.open` reads and
  `lite datastore migrate --from sqlite://SNAPSHOT --to postgres://...` restores into an empty database.
- etcd: etcd's own snapshot (Maintenance.Snapshot, `EtcdBackend.save_snapshot`), restored with etcd's tools
  (`etcdutl snapshot restore FILE --data-dir DIR`, `etcdctl snapshot restore` before etcd 3.5) and an etcd
  started on that data dir.
Both are written beside their final name and renamed, as SQLite snapshots are, under the same names.

- `save` copies the live store with SQLite's online backup API from a connection of its own: consistent at
  one commit even while the server writes (WAL readers see a fixed snapshot), never blocking the writer for
  long (pages are copied in steps). The copy is written beside its final name, checked (`quick_check`),
  fsync'd and renamed, so a snapshot file is either whole or absent. Name: `<name>-<node>-<unix time>`
  (k3s's), default name `lite-snapshot`, in `<data-dir>/server/snapshots/`.
- `prune(retention, name)` keeps the newest `retention` snapshots of that name and deletes the rest.
- `run_schedule(cron, retention)` saves (and prunes) at each activation of a 5-field cron schedule
  (default every 12 hours, as k3s).
- `restore(file)` (the server must be stopped) checks the file is a lite store, moves the current database
  aside as `state.db.pre-restore-<time>` and puts the snapshot in its place.

Invariants: blocking SQLite and file work runs in worker threads (`asyncio.to_thread`) from async callers; the
live database is only ever read here, except by `restore`, which refuses to run on a file that is not a store.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import os
import shutil
import socket
import sqlite3
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING

from lite.cron import parse as parse_cron
from lite.records import dataclass

if TYPE_CHECKING:
    from lite.server.encryption.aesgcm import Key
    from lite.server.store.backend import Backend
    from lite.server.store.endpoint import DatastoreEndpoint

log = logging.getLogger(__name__)
DEFAULT_NAME = "lite-snapshot"
DEFAULT_CRON = "0 */12 * * *"
DEFAULT_RETENTION = 5
_PAGES_PER_STEP = 1024


class SnapshotError(Exception):
    """A snapshot that cannot be taken, found or restored; the message says which and why."""


@dataclass(frozen=True)
class Snapshot:
    name: str
    path: Path
    size: int
    created: float  # unix time

    @property
    def created_at(self) -> str:
        return dt.datetime.fromtimestamp(self.created, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def snapshot_dir(data_dir: Path) -> Path:
    return data_dir / "server" / "snapshots"


def db_path(data_dir: Path) -> Path:
    return data_dir / "server" / "db" / "state.db"


def _target(data_dir: Path, name: str, node: str, now: float | None) -> Path:
    """The snapshot's final path (its directory made); SnapshotError for a bad name."""
    if not name or "/" in name or name.startswith("."):
        raise SnapshotError(f"invalid snapshot name {name!r}")
    stamp = int(now if now is not None else time.time())
    out_dir = snapshot_dir(data_dir)
    out_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    return out_dir / f"{name}-{node or socket.gethostname()}-{stamp}"


def save(data_dir: Path, name: str = DEFAULT_NAME, node: str = "", now: float | None = None,
         db: Path | None = None) -> Snapshot:
    """Take a snapshot of the store (blocking): `db`, else the data dir's `server/db/state.db`."""
    src_path = db if db is not None else db_path(data_dir)
    if not src_path.exists():
        raise SnapshotError(f"no store at {src_path}: has `lite server` run with this data dir?")
    final = _target(data_dir, name, node, now)
    tmp = final.with_name(f".{final.name}.tmp")
    src = sqlite3.connect(f"file:{src_path}?mode=ro", uri=True, timeout=30)
    try:
        dst = sqlite3.connect(tmp)
        try:
            src.backup(dst, pages=_PAGES_PER_STEP)
            dst.execute("PRAGMA journal_mode=DELETE")  # a standalone file, no -wal beside it
            ok = dst.execute("PRAGMA quick_check").fetchone()[0]
        finally:
            dst.close()
    finally:
        src.close()
    if ok != "ok":
        tmp.unlink(missing_ok=True)
        raise SnapshotError(f"the snapshot failed its check: {ok}")
    os.chmod(tmp, 0o600)
    with open(tmp, "rb") as f:
        os.fsync(f.fileno())
    os.rename(tmp, final)
    return _describe(final)


async def save_datastore(data_dir: Path, endpoint: DatastoreEndpoint, name: str = DEFAULT_NAME, node: str = "",
                         now: float | None = None, keys: tuple[Key, ...] = (), keys_from: str = "") -> Snapshot:
    """Take a snapshot of the datastore `endpoint` names (see the module docstring); SQLite as `save`. `keys`:
    the encryption keys that open sealed Secrets (a PostgreSQL snapshot reseals them around their revision)."""
    from lite.server.datastore import DatastoreUnavailable, open_backend
    from lite.server.store import StoreError

    if endpoint.kind == "sqlite":
        return await asyncio.to_thread(save, data_dir, name, node, now,
                                       Path(endpoint.path) if endpoint.path else None)
    final = await asyncio.to_thread(_target, data_dir, name, node, now)
    tmp = final.with_name(f".{final.name}.tmp")
    try:
        backend = await open_backend(endpoint)
    except (StoreError, DatastoreUnavailable) as e:
        raise SnapshotError(f"{endpoint.display}: {e}") from None
    try:
        if endpoint.kind == "etcd":
            from lite.server.store.etcdbackend import EtcdBackend

            assert isinstance(backend, EtcdBackend)
            await backend.save_snapshot(tmp)
        else:
            await _copy_to_sqlite(backend, endpoint, tmp, keys, keys_from)
        await asyncio.to_thread(_seal_file, tmp, final)
    except StoreError as e:
        await asyncio.to_thread(_discard, tmp)
        raise SnapshotError(f"snapshot of {endpoint.display} failed: {e}") from None
    except BaseException:
        await asyncio.to_thread(_discard, tmp)
        raise
    finally:
        await backend.close()
    return await asyncio.to_thread(_describe, final)


async def _copy_to_sqlite(backend: Backend, endpoint: DatastoreEndpoint, tmp: Path, keys: tuple[Key, ...],
                          keys_from: str) -> None:
    from lite.server.datastoremigrate import reseal_check
    from lite.server.encryption.aesgcm import KeepKeyCodec
    from lite.server.store.migrate import copy_store
    from lite.server.store.sqlitebackend import SqliteBackend

    await asyncio.to_thread(_discard, tmp)
    target = await SqliteBackend.open(str(tmp), codec=KeepKeyCodec(keys))
    try:
        await copy_store(backend, target, source_name=endpoint.display, target_name=str(tmp),
                         ordered_batches=True, allow_empty=True, check=reseal_check(keys, keys_from))
    finally:
        await target.close()


def _seal_file(tmp: Path, final: Path) -> None:
    """Make `tmp` a standalone, private, durable file and give it its final name."""
    if tmp.with_name(tmp.name + "-wal").exists() or tmp.read_bytes()[:16] == b"SQLite format 3\x00":
        conn = sqlite3.connect(tmp)
        try:
            conn.execute("PRAGMA journal_mode=DELETE")
            ok = conn.execute("PRAGMA quick_check").fetchone()[0]
        finally:
            conn.close()
        if ok != "ok":
            raise SnapshotError(f"the snapshot failed its check: {ok}")
    os.chmod(tmp, 0o600)
    with open(tmp, "rb") as f:
        os.fsync(f.fileno())
    os.rename(tmp, final)


def _discard(tmp: Path) -> None:
    for p in (tmp, tmp.with_name(tmp.name + "-wal"), tmp.with_name(tmp.name + "-shm")):
        p.unlink(missing_ok=True)


def _describe(path: Path) -> Snapshot:
    st = path.stat()
    created = path.name.rsplit("-", 1)[-1]
    return Snapshot(path.name, path, st.st_size, float(created) if created.isdigit() else st.st_mtime)


def list_snapshots(data_dir: Path) -> list[Snapshot]:
    """Every snapshot in the data dir, oldest first."""
    d = snapshot_dir(data_dir)
    if not d.is_dir():
        return []
    return sorted((_describe(p) for p in d.iterdir() if p.is_file() and not p.name.startswith(".")),
                  key=lambda s: (s.created, s.name))


def delete(data_dir: Path, names: list[str]) -> list[str]:
    """Delete the named snapshots; the names that were not there."""
    missing = []
    for name in names:
        path = snapshot_dir(data_dir) / name
        if "/" in name or name.startswith(".") or not path.is_file():
            missing.append(name)
            continue
        path.unlink()
    return missing


def prune(data_dir: Path, retention: int, name: str = DEFAULT_NAME) -> list[str]:
    """Keep the newest `retention` snapshots whose name starts with `name-`; the names deleted."""
    mine = [s for s in list_snapshots(data_dir) if s.name.startswith(f"{name}-")]
    doomed = mine[:-retention] if retention > 0 else mine
    for s in doomed:
        s.path.unlink(missing_ok=True)
    return [s.name for s in doomed]


def restore(data_dir: Path, snapshot: Path, now: float | None = None) -> Path:
    """Put `snapshot` in place of the store (server stopped); returns where the old database went."""
    if not snapshot.is_file():
        raise SnapshotError(f"no snapshot file at {snapshot}")
    try:
        conn = sqlite3.connect(f"file:{snapshot}?mode=ro", uri=True)
        try:
            ok = conn.execute("PRAGMA quick_check").fetchone()[0]
            tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        finally:
            conn.close()
    except sqlite3.DatabaseError as e:
        raise SnapshotError(f"{snapshot} is not a lite snapshot: {e}") from None
    if ok != "ok" or "log" not in tables:
        raise SnapshotError(f"{snapshot} is not a usable lite snapshot ({ok}; tables {sorted(tables)})")
    target = db_path(data_dir)
    target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    aside = target.with_name(f"state.db.pre-restore-{int(now if now is not None else time.time())}")
    if target.exists():
        os.rename(target, aside)
    for extra in ("-wal", "-shm"):
        side = target.with_name(target.name + extra)
        if side.exists():
            os.rename(side, aside.with_name(aside.name + extra))
    tmp = target.with_name(".state.db.restore")
    shutil.copyfile(snapshot, tmp)
    os.chmod(tmp, 0o600)
    with open(tmp, "rb") as f:
        os.fsync(f.fileno())
    os.rename(tmp, target)
    return aside


async def run_schedule(data_dir: Path, cron: str = DEFAULT_CRON, retention: int = DEFAULT_RETENTION,
                       node: str = "", db: Path | None = None,
                       saver: Callable[[], Awaitable[Snapshot]] | None = None) -> None:
    """Save and prune at every activation of `cron`, until cancelled; a failed snapshot is logged. `db`: the
    store file when `--datastore-endpoint sqlite://PATH` puts it outside the data dir; `saver`: how to take
    one instead (a shared datastore: `save_datastore`)."""
    schedule = parse_cron(cron)
    while True:
        now = dt.datetime.now(dt.UTC)
        nxt = schedule.next(now)
        if nxt is None:
            return
        await asyncio.sleep(max(0.0, (nxt - now).total_seconds()))
        try:
            snap = await saver() if saver is not None else await asyncio.to_thread(
                save, data_dir, DEFAULT_NAME, node, None, db)
            gone = await asyncio.to_thread(prune, data_dir, retention)
            log.info("scheduled snapshot %s (%d bytes); pruned %d", snap.name, snap.size, len(gone))
        except (SnapshotError, OSError, sqlite3.Error) as e:
            log.error("scheduled snapshot failed: %s", e)
