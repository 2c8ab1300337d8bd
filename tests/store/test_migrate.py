"""Migration between datastores (`lite.server.store.migrate`, `lite.server.datastoremigrate`): the round trip
SQLite -> PostgreSQL -> etcd -> SQLite on real servers keeps every object, its uid, its value and the order of
resourceVersions (an encrypted Secret stays sealed and readable; a deleted-then-recreated key keeps its new
uid); a non-empty target is refused; sealed values bound for SQLite need their key."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from lite.server.datastoremigrate import migrate
from lite.server.encryption.aesgcm import PREFIX, Key, Keyset, SecretsCodec
from lite.server.store import Store, StoreLike
from lite.server.store.backend import Backend, Write
from lite.server.store.endpoint import parse_endpoint
from lite.server.store.migrate import MARKER, MigrationError, TargetNotEmpty, import_state
from lite.server.store.mirror import MirrorStore
from tests.helpers.etcdserver import EtcdServer, etcd_or_skip

KEY = Key("k1", b"\x07" * 32)
SECRET = "core/secrets/default/s"


@pytest.fixture(scope="module")
def etcd() -> Iterator[EtcdServer]:
    with etcd_or_skip() as server:
        yield server


def obj(kind: str, name: str, uid: str, ns: str | None = "default", **extra: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "uid": uid}
    if ns:
        meta["namespace"] = ns
    return {"kind": kind, "metadata": meta, **extra}


async def make_source(path: str) -> None:
    """A store with objects of several kinds, updates, a sealed Secret and a deleted-then-recreated key."""
    st = await Store.open(path, codec=SecretsCodec(Keyset((KEY,), True)))
    try:
        await st.create("core/namespaces/default", obj("Namespace", "default", "u-ns", None))
        r, _ = await st.create("core/pods/default/a", obj("Pod", "a", "u-a"))
        await st.create("core/configmaps/default/c", obj("ConfigMap", "c", "u-c", data={"x": "1"}))
        rs, _ = await st.create(SECRET, obj("Secret", "s", "u-s", data={"k": "dG9w"}))
        await st.create("core/pods/default/d", obj("Pod", "d", "u-d1"))
        await st.update("core/pods/default/a", obj("Pod", "a", "u-a", spec={"n": 1}), r)
        await st.delete("core/pods/default/d", 0)
        await st.create("apps/deployments/default/web", obj("Deployment", "web", "u-web"))
        await st.create("core/pods/default/d", obj("Pod", "d", "u-d2"))
        await st.create("lite/bootstrap/cluster", {"sealed": "bundle"})
        await st.update(SECRET, obj("Secret", "s", "u-s", data={"k": "b3Bz"}), rs)
    finally:
        await st.close()


def view(items: list[tuple[str, int, bytes]]) -> tuple[list[tuple[str, Any]], list[str]]:
    """(every (key, object without resourceVersion), keys in resourceVersion order); RV must be the mod rev."""
    objects, order = [], []
    for key, rev, value in sorted(items, key=lambda item: item[1]):
        if key == MARKER:
            continue
        doc = orjson.loads(value)
        meta = doc.get("metadata", {})
        assert meta.pop("resourceVersion", str(rev)) == str(rev), key
        objects.append((key, doc))
        order.append(key)
    return sorted(objects, key=lambda kv: kv[0]), order


async def read_store(store: StoreLike) -> tuple[list[tuple[str, Any]], list[str]]:
    items, _, _ = store.list("")
    return view(items)


async def read_backend(backend: Backend) -> tuple[list[tuple[str, Any]], list[str]]:
    store = await MirrorStore.open(backend, codec=SecretsCodec(Keyset((KEY,), True)))
    try:
        return await read_store(store)
    finally:
        await store.close()


async def read_sqlite(path: str) -> tuple[list[tuple[str, Any]], list[str]]:
    st = await Store.open(path, codec=SecretsCodec(Keyset((KEY,), True)))
    try:
        return await read_store(st)
    finally:
        await st.close()


async def test_round_trip_sqlite_postgres_etcd_sqlite(tmp_path: Path, pg_dsn: str, etcd: EtcdServer) -> None:
    from lite.server.store.etcdbackend import EtcdBackend
    from lite.server.store.pgbackend import PgBackend

    etcd.wipe()
    src, final = str(tmp_path / "src.db"), str(tmp_path / "final.db")
    await make_source(src)
    expected = await read_sqlite(src)
    assert [k for k in expected[1] if k.endswith("/d")] == ["core/pods/default/d"]
    assert dict(expected[0])["core/pods/default/d"]["metadata"]["uid"] == "u-d2"

    pg, ed = parse_endpoint(pg_dsn), parse_endpoint(etcd.endpoint)
    report = await migrate(parse_endpoint(f"sqlite://{src}"), pg)
    assert report.keys == len(expected[1]) == 7
    pgb = await PgBackend.open(pg_dsn)
    try:
        assert await read_backend(pgb) == expected
        _, items = await pgb.snapshot(SECRET)
        assert items[0][2].startswith(PREFIX + b"k1:")  # carried sealed
        _, items = await pgb.snapshot("core/pods/")
        assert items and all(b"resourceVersion" not in value for _, _, value in items)  # as MirrorStore writes
        state = await import_state(pgb)
        assert state is not None and state["complete"] and state["keys"] == 7
    finally:
        await pgb.close()

    report = await migrate(pg, ed)
    assert report.keys == 7
    etb = await EtcdBackend.open([etcd.endpoint])
    try:
        assert await read_backend(etb) == expected
        _, items = await etb.snapshot(SECRET)
        assert items[0][2].startswith(PREFIX + b"k1:")
    finally:
        await etb.close()

    report = await migrate(ed, parse_endpoint(f"sqlite://{final}"), (KEY,))
    assert report.keys == 7
    assert await read_sqlite(final) == expected  # Store.open reads it, RVs = mod revs inside the seal too

    with pytest.raises(TargetNotEmpty, match=r"holds 8 key\(s\)"):  # 7 objects + the import marker
        await migrate(parse_endpoint(f"sqlite://{src}"), pg)


async def test_refuses_a_non_empty_sqlite_target(tmp_path: Path) -> None:
    src, dst = str(tmp_path / "src.db"), str(tmp_path / "dst.db")
    await make_source(src)
    st = await Store.open(dst)
    await st.create("core/pods/default/x", obj("Pod", "x", "u-x"))
    await st.close()
    with pytest.raises(TargetNotEmpty, match=r"holds 1 key\(s\) \(core/pods/default/x\)"):
        await migrate(parse_endpoint(f"sqlite://{src}"), parse_endpoint(f"sqlite://{dst}"), (KEY,))
    empty = await Store.open(str(tmp_path / "empty.db"))
    await empty.close()
    with pytest.raises(MigrationError, match="holds no objects"):
        await migrate(parse_endpoint(f"sqlite://{tmp_path}/empty.db"), parse_endpoint(f"sqlite://{dst}"))
    other = tmp_path / "other.db"
    with sqlite3.connect(other) as conn:
        conn.execute("CREATE TABLE foo(x)")
    with pytest.raises(MigrationError, match="is not a lite store"):
        await migrate(parse_endpoint(f"sqlite://{other}"), parse_endpoint(f"sqlite://{dst}"))
    with sqlite3.connect(other) as conn:  # the file was only read
        assert [r[0] for r in conn.execute("SELECT name FROM sqlite_master")] == ["foo"]
    with pytest.raises(MigrationError, match="no SQLite store at"):
        await migrate(parse_endpoint(f"sqlite://{tmp_path}/none.db"), parse_endpoint(f"sqlite://{dst}"))


async def test_sealed_values_into_sqlite_need_their_key(tmp_path: Path) -> None:
    src, dst = str(tmp_path / "src.db"), str(tmp_path / "dst.db")
    await make_source(src)
    with pytest.raises(MigrationError, match=r"'k1'.*--data-dir"):
        await migrate(parse_endpoint(f"sqlite://{src}"), parse_endpoint(f"sqlite://{dst}"), (), "/nowhere")
    assert not await asyncio.to_thread(os.path.exists, dst)  # the file it would have made is gone again
    await migrate(parse_endpoint(f"sqlite://{src}"), parse_endpoint(f"sqlite://{dst}"), (KEY,))
    # both ends closed again (a `return` inside try/else once left the target's threads and file open)
    assert not [t.name for t in threading.enumerate() if t.name.startswith(("lite-sqlitebackend", "lite-store"))]
    assert await read_sqlite(dst) == await read_sqlite(src)


async def test_import_at_start_copies_once_and_refuses_an_unfinished_import(tmp_path: Path) -> None:
    """The server's `--datastore-migrate-from`: an empty target gets the store; a non-empty one is left alone
    (and said so); one whose import stopped half way (marker incomplete) refuses the start."""
    from lite.server.datastoremigrate import import_at_start
    from lite.server.store.sqlitebackend import SqliteBackend

    src = str(tmp_path / "src.db")
    await make_source(src)
    source = parse_endpoint(f"sqlite://{src}")
    target = parse_endpoint("postgres://u@h/db")  # names the target in messages only
    b = await SqliteBackend.open(str(tmp_path / "t.db"))
    try:
        assert (await import_at_start(b, target, source)).startswith("imported 7 key(s)")
        rev = await b.current_rev()
        assert "skipped" in await import_at_start(b, target, source)
        assert await b.current_rev() == rev  # nothing written the second time
    finally:
        await b.close()
    half = await SqliteBackend.open(str(tmp_path / "half.db"))
    try:
        await half.commit([Write("create", MARKER, orjson.dumps({"source": "sqlite:///old", "complete": False})),
                           Write("create", "core/pods/default/a", b"{}")])
        with pytest.raises(MigrationError, match="import from sqlite:///old started earlier did not finish"):
            await import_at_start(half, target, source)
    finally:
        await half.close()


async def test_etcd_snapshot_is_etcds_own(tmp_path: Path, etcd: EtcdServer) -> None:
    """`lite snapshot save` on etcd writes etcd's own snapshot file (etcdctl reads it)."""
    from lite.server.snapshots import save_datastore
    from lite.server.store.etcdbackend import EtcdBackend

    etcd.wipe()
    b = await EtcdBackend.open([etcd.endpoint])
    try:
        await b.commit([Write("create", "core/pods/default/a", b"{}")])
    finally:
        await b.close()
    snap = await save_datastore(tmp_path, parse_endpoint(etcd.endpoint), "t", "n1")
    assert snap.path.parent == tmp_path / "server" / "snapshots" and snap.size > 0
    status = orjson.loads(etcd.etcdctl("snapshot", "status", str(snap.path), "-w", "json"))
    assert status["totalKey"] >= 1


def test_cli_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`lite datastore migrate`: a malformed endpoint is a usage error naming this command's flag (2); a
    missing or unreachable source and a non-empty target fail (1) saying which."""
    from lite.cli.main import main

    assert main(["datastore", "migrate", "--from", "mysql://x/y", "--to", "sqlite:///tmp/x.db"]) == 2
    assert "--from: MySQL is not supported" in capsys.readouterr().err
    assert main(["datastore", "migrate", "--from", f"sqlite://{tmp_path}/a.db", "--to", "https://h:2379",
                 "--to-certfile", "/c"]) == 2
    assert "--to-certfile and --to-keyfile must be given together" in capsys.readouterr().err
    assert main(["datastore", "migrate", "--from", f"sqlite://{tmp_path}/none.db", "--to",
                 f"sqlite://{tmp_path}/b.db"]) == 1
    assert "--from: no SQLite store at" in capsys.readouterr().err
    assert main(["datastore", "migrate", "--from", "postgres://u@127.0.0.1:1/db", "--to",
                 f"sqlite://{tmp_path}/b.db"]) == 1
    assert "--from postgres://u@127.0.0.1:1/db: cannot reach PostgreSQL" in capsys.readouterr().err


def test_snapshot_save_reads_the_servers_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`lite snapshot save` without --datastore-endpoint takes the server's config file's (here an SQLite file
    outside the data dir, which it could not snapshot before); a malformed one is a usage error."""
    from lite.cli.main import main

    db = tmp_path / "elsewhere.db"
    asyncio.run(make_source(str(db)))
    cfg = tmp_path / "config.yaml"
    cfg.write_text(f"datastore-endpoint: sqlite://{db}\ntls-san: [x]\n")
    data = tmp_path / "data"
    assert main(["snapshot", "save", "--data-dir", str(data), "--config", str(cfg), "--name", "t"]) == 0
    (snap,) = (data / "server" / "snapshots").iterdir()
    assert str(snap) in capsys.readouterr().out
    assert asyncio.run(read_sqlite(str(snap))) == asyncio.run(read_sqlite(str(db)))
    cfg.write_text("datastore-endpoint: mysql://x/y\n")
    assert main(["snapshot", "save", "--data-dir", str(data), "--config", str(cfg)]) == 2
    assert "MySQL is not supported" in capsys.readouterr().err
