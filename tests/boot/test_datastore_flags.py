"""`lite server --datastore-endpoint`: SQLite at a path of one's choosing, and the endpoints this build cannot
open refused with a clear message (real `lite server` processes)."""

from __future__ import annotations

import importlib.util
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from lite.server.bootstrapdata import KEY
from lite.server.datastore import DatastoreUnavailable, open_backend
from lite.server.store.endpoint import parse_endpoint
from tests.liteproc import LiteServer, find_free_port


def _server(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "lite.cli.main", "server", *args], capture_output=True, text=True,
                          timeout=60, stdin=subprocess.DEVNULL, env={**os.environ, **(env or {})})


def test_sqlite_endpoint_puts_the_store_where_it_says(tmp_path: Path) -> None:
    db = tmp_path / "elsewhere" / "objects.db"
    tmp_path.chmod(0o755)  # the user's directory: the server must leave its mode alone
    server = LiteServer(tmp_path / "data", find_free_port(),
                        extra=("--disable-snapshots", "--datastore-endpoint", f"sqlite://{db}")).start()
    try:
        server.wait_ready(60)
        body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "where"}, "data": {"a": "b"}}
        status, _ = server.request("/api/v1/namespaces/default/configmaps", "POST", body)
        assert status == 201
        assert server.proc is not None
        maps = Path(f"/proc/{server.proc.pid}/maps").read_text()
        assert "cryptography" not in maps  # the bootstrap data was sealed in a forked child
    finally:
        assert server.stop(timeout=15) == 0
    assert not (tmp_path / "data" / "server" / "db" / "state.db").exists()
    conn = sqlite3.connect(db)
    try:
        names = {name for (name,) in conn.execute("SELECT name FROM current")}
    finally:
        conn.close()
    assert {"core/configmaps/default/where", KEY} <= names  # the objects and the sealed bootstrap data
    assert db.stat().st_mode & 0o777 == 0o600
    assert tmp_path.stat().st_mode & 0o777 == 0o755
    assert (tmp_path / "data" / "server").stat().st_mode & 0o777 == 0o700


@pytest.mark.parametrize(("endpoint", "module"), [
    ("postgres://lite:pw-not-shown@127.0.0.1:1/lite", "lite.server.store.pgbackend"),
    ("https://127.0.0.1:1", "lite.server.store.etcdbackend"),
])
async def test_shared_datastores_missing_from_the_build_are_refused(endpoint: str, module: str) -> None:
    if importlib.util.find_spec(module) is not None:
        pytest.skip(f"{module} is installed: the datastore's own tests open it")
    with pytest.raises(DatastoreUnavailable, match="datastores are not available in this build of lite") as e:
        await open_backend(parse_endpoint(endpoint))
    assert "pw-not-shown" not in str(e.value)


def test_the_server_refuses_them_before_making_anything(tmp_path: Path) -> None:
    if importlib.util.find_spec("lite.server.store.pgbackend") is not None:
        pytest.skip("lite.server.store.pgbackend is installed: the PostgreSQL tests start servers on it")
    done = _server("--data-dir", str(tmp_path / "data"), "--disable-agent", "--datastore-endpoint",
                   "postgres://lite:pw-not-shown@127.0.0.1:1/lite")
    assert done.returncode == 1, done.stderr
    assert "PostgreSQL datastores are not available in this build of lite" in done.stderr
    assert "pw-not-shown" not in done.stderr
    assert not (tmp_path / "data" / "server" / "tls" / "ca.key").exists()


@pytest.mark.parametrize(("args", "env", "message"), [
    (["--datastore-endpoint", "mysql://u:p@tcp(db:3306)/k3s"], {}, "MySQL is not supported"),
    ([], {"LITE_DATASTORE_ENDPOINT": "http://a:2379,https://b:2379"}, "mixes http:// and https://"),
    (["--datastore-endpoint", "https://e:2379", "--datastore-cafile", "/"], {}, "--datastore-cafile: / is a directory"),
])
def test_bad_datastore_flags_are_usage_errors(tmp_path: Path, args: list[str], env: dict[str, str],
                                              message: str) -> None:
    done = _server("--data-dir", str(tmp_path / "data"), *args, env=env)
    assert done.returncode == 2 and message in done.stderr, done.stderr
