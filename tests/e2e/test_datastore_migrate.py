"""`lite server --datastore-migrate-from sqlite://PATH` on an empty PostgreSQL (issue 20): a real server on SQLite
with an encrypted Secret is stopped; a server with a fresh data dir, the same token and the PostgreSQL endpoint
imports the old store at start and serves the old objects (same uids, same order of resourceVersions, the Secret
decrypted with the old cluster's keys) under the old cluster's CA. Then `lite snapshot save` on that PostgreSQL
writes an SQLite snapshot that `lite datastore migrate` restores into a fresh SQLite store. Loopback only."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from liteproc import LiteServer, find_free_port, lite_command

from lite.server.encryption import keyfile
from lite.server.encryption.aesgcm import PREFIX, SecretsCodec
from lite.server.store import Store
from tests.helpers.pgserver import PgServer, missing_reason

TOKEN = "datastore-migrate-test-token"
CMS = "/api/v1/namespaces/default/configmaps"
SECRETS = "/api/v1/namespaces/default/secrets"


@pytest.fixture
def pg() -> Iterator[PgServer]:
    reason = missing_reason()
    if reason is not None:
        pytest.skip(reason)
    server = PgServer.start()
    try:
        yield server
    finally:
        server.stop()



def lite(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*lite_command(), *args], capture_output=True, text=True, timeout=120)


async def stored(dsn: str, key: str) -> bytes:
    """The value PostgreSQL holds for `key`."""
    from lite.server.store.pgbackend import PgBackend

    backend = await PgBackend.open(dsn)
    try:
        _, items = await backend.snapshot(key)
        return items[0][2]
    finally:
        await backend.close()


async def read(path: Path, codec: SecretsCodec) -> dict[str, Any]:
    """Every object of an SQLite store, as `Store.open` serves it (RV checked to be the mod revision)."""
    st = await Store.open(str(path), codec=codec)
    try:
        items, _, _ = st.list("")
        out = {key: json.loads(value) for key, _, value in items}
        for key, rev, _ in items:
            if "metadata" in out[key]:
                assert out[key]["metadata"]["resourceVersion"] == str(rev), key
        return out
    finally:
        await st.close()


def test_server_imports_an_sqlite_store_into_postgres(tmp_path: Path, pg: PgServer) -> None:
    old = LiteServer(tmp_path / "old", find_free_port(), extra=("--token", TOKEN, "--secrets-encryption"))
    new = LiteServer(tmp_path / "new", find_free_port(), extra=(
        "--token", TOKEN, "--datastore-endpoint", pg.dsn("postgres"),
        "--datastore-migrate-from", f"sqlite://{tmp_path / 'old' / 'server' / 'db' / 'state.db'}"))
    try:
        old.start().wait_ready(60)
        created = {}
        for name in ("first", "second"):
            status, created[name] = old.request(CMS, "POST", {"metadata": {"name": name}, "data": {"k": name}})
            assert status == 201, created[name]
        status, secret = old.request(SECRETS, "POST", {"metadata": {"name": "s"}, "stringData": {"pw": "hunter2"}})
        assert status == 201, secret
        old_ca = old.ca()
        assert old.stop() == 0

        new.start().wait_ready(60)
        assert "imported " in new.log_tail(400), new.log_tail()
        assert new.ca() == old_ca, "the imported bootstrap data did not bring the old cluster's CA"
        got = {}
        for name in ("first", "second"):
            status, got[name] = new.request(f"{CMS}/{name}")
            assert status == 200, got[name]
            assert got[name]["metadata"]["uid"] == created[name]["metadata"]["uid"]
            assert got[name]["data"] == {"k": name}
        status, s = new.request(f"{SECRETS}/s")
        assert status == 200 and base64.b64decode(s["data"]["pw"]) == b"hunter2", s
        assert s["metadata"]["uid"] == secret["metadata"]["uid"]
        assert asyncio.run(stored(pg.dsn("postgres"), "core/secrets/default/s")).startswith(PREFIX)  # still sealed
        rvs = [int(got["first"]["metadata"]["resourceVersion"]), int(got["second"]["metadata"]["resourceVersion"]),
               int(s["metadata"]["resourceVersion"])]
        assert rvs == sorted(rvs) and len(set(rvs)) == 3, rvs
        status, upd = new.request(f"{CMS}/first", "PUT", {**got["first"], "data": {"k": "changed"}})
        assert status == 200, upd  # the served resourceVersion is the stored one (optimistic concurrency)

        # a snapshot of the PostgreSQL store is an SQLite file in lite's schema, restorable with migrate
        snap = lite("snapshot", "save", "--data-dir", str(new.data_dir), "--datastore-endpoint", pg.dsn("postgres"))
        assert snap.returncode == 0, snap.stderr
        path = snap.stdout.splitlines()[0].split(" to ")[-1]
        restored = tmp_path / "restored.db"
        out = lite("datastore", "migrate", "--from", f"sqlite://{path}", "--to", f"sqlite://{restored}",
                   "--data-dir", str(new.data_dir))
        assert out.returncode == 0, out.stderr
        assert "migrated " in out.stdout
        keyset = keyfile.load(new.data_dir / "server" / "cred")
        assert keyset is not None
        st = asyncio.run(read(restored, SecretsCodec(keyset)))
        assert st["core/configmaps/default/first"]["data"] == {"k": "changed"}
        def rv(key: str) -> int:
            return int(st[key]["metadata"]["resourceVersion"])
        # revisions are the new store's; their order is the old one's (the update of `first` came last)
        assert rv("core/configmaps/default/second") < rv("core/secrets/default/s") < rv(
            "core/configmaps/default/first")
        assert st["core/configmaps/default/second"]["metadata"]["uid"] == created["second"]["metadata"]["uid"]
        assert base64.b64decode(st["core/secrets/default/s"]["data"]["pw"]) == b"hunter2"
    finally:
        for s in (old, new):
            if s.proc is not None:
                with contextlib.suppress(Exception):
                    s.stop()
                s.kill()
