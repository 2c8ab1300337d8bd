"""Store snapshots: `lite snapshot save|ls|delete|prune` against a live server under write load, the
schedule's prune rule, and `lite server --cluster-reset --cluster-reset-restore-path` into a serving cluster."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from liteproc import LiteServer, find_free_port

from lite.server import snapshots


def lite(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "lite.cli.main", *args], capture_output=True, text=True,
                          timeout=120, stdin=subprocess.DEVNULL)


def _cm(name: str) -> dict[str, object]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"k": name}}


@pytest.mark.e2e
def test_snapshot_under_writes_restores_into_a_serving_cluster(tmp_path: Path) -> None:
    data = tmp_path / "data"
    server = LiteServer(data, find_free_port(), extra=("--disable-snapshots",)).start()
    acked: list[str] = []
    stop = threading.Event()

    def writer() -> None:
        i = 0
        while not stop.is_set():
            status, _ = server.request("/api/v1/namespaces/default/configmaps", "POST", _cm(f"cm-{i}"))
            if status == 201:
                acked.append(f"cm-{i}")
            i += 1

    try:
        server.wait_ready(60)
        t = threading.Thread(target=writer)
        t.start()
        time.sleep(1.0)
        before = list(acked)  # acknowledged before the snapshot started: all must be in it
        saved = lite("snapshot", "save", "--data-dir", str(data), "--name", "test")
        time.sleep(0.5)
        stop.set()
        t.join()
        assert saved.returncode == 0, saved.stderr
        assert len(before) > 10 and len(acked) > len(before)
        listed = lite("snapshot", "ls", "--data-dir", str(data))
        (snap,) = [ln.split()[0] for ln in listed.stdout.splitlines()[1:]]
        assert snap.startswith("test-")
    finally:
        stop.set()
        server.stop(timeout=15)

    restored = lite("server", "--data-dir", str(data), "--cluster-reset", "--cluster-reset-restore-path",
                    str(data / "server" / "snapshots" / snap))
    assert restored.returncode == 0 and "restored the store" in restored.stdout, restored.stderr
    server = LiteServer(data, find_free_port(), extra=("--disable-snapshots",)).start()
    try:
        server.wait_ready(60)
        status, body = server.request("/api/v1/namespaces/default/configmaps?limit=100000")
        assert status == 200
        names = {i["metadata"]["name"] for i in body["items"]}
        assert set(before) <= names <= set(acked) | {"kube-root-ca.crt"}
        assert len(names - {"kube-root-ca.crt"}) < len(acked)  # the writes after the snapshot are gone
        assert server.request("/api/v1/namespaces/default/configmaps", "POST", _cm("after"))[0] == 201
    finally:
        server.stop(timeout=15)


def test_prune_delete_and_a_bad_restore(tmp_path: Path) -> None:
    data = tmp_path / "data"
    db = snapshots.db_path(data)
    db.parent.mkdir(parents=True)
    import sqlite3

    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE log (id INTEGER PRIMARY KEY, name TEXT)")
    conn.commit()
    conn.close()
    for t in range(7):
        snapshots.save(data, "lite-snapshot", "n1", now=1000 + t)
    snapshots.save(data, "other", "n1", now=2000)
    gone = snapshots.prune(data, 5)
    assert gone == ["lite-snapshot-n1-1000", "lite-snapshot-n1-1001"]
    assert [s.name for s in snapshots.list_snapshots(data)][-1] == "other-n1-2000"
    assert lite("snapshot", "delete", "--data-dir", str(data), "other-n1-2000").returncode == 0
    missing = lite("snapshot", "delete", "--data-dir", str(data), "nope")
    assert missing.returncode == 1 and "no snapshot nope" in missing.stderr
    junk = tmp_path / "junk"
    junk.write_bytes(b"not a database at all" * 100)
    bad = lite("server", "--data-dir", str(data), "--cluster-reset", "--cluster-reset-restore-path", str(junk))
    assert bad.returncode == 1 and "not a lite snapshot" in bad.stderr
    assert db.exists()  # the current store is untouched by a refused restore
    half = lite("server", "--data-dir", str(data), "--cluster-reset")
    assert half.returncode == 2
    none = lite("snapshot", "save", "--data-dir", str(tmp_path / "empty"))
    assert none.returncode == 1 and "no store" in none.stderr
