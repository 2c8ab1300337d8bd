"""Faults under a real `lite server`: a damaged state.db, `lite server --check-db`, and a full disk (root).

- A damaged store file (garbage header, cut short, pages overwritten) makes `lite server` exit 1 at once with
  a short message naming the file, the problem and how to restore, never a traceback, and without touching
  the file; `--check-db` reports it (exit 1) and passes a sound file (exit 0); the advice it gives works.
- A full disk (the data dir on a small tmpfs, filled): writes answer 507 InsufficientStorage, reads and
  watches go on, the failed write is nowhere, and writes succeed again as soon as space is freed.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import shutil
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from e2ekit import KUBECTL
from liteproc import LiteServer, find_free_port, lite_command

CMS = "/api/v1/namespaces/default/configmaps"


def _lite(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*lite_command(), *args], capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL)


def _db(data: Path) -> Path:
    return data / "server" / "db" / "state.db"


def _cm(name: str, size: int = 10) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"v": "x" * size}}


@pytest.fixture(scope="module")
def sound_data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A data dir written by a real server (200 ConfigMaps), stopped cleanly."""
    data = tmp_path_factory.mktemp("faults") / "data"
    server = LiteServer(data, find_free_port()).start()
    try:
        server.wait_ready(60)
        for i in range(200):
            status, out = server.request(CMS, "POST", _cm(f"c{i:03d}", 400))
            assert status == 201, out
        assert server.stop() == 0
    finally:
        server.kill()
    return data


def _garbage_header(p: Path) -> None:
    with p.open("r+b") as f:
        f.write(b"\x00garbage where the SQLite header was\x00")


def _truncate(p: Path) -> None:
    with p.open("r+b") as f:
        f.truncate(p.stat().st_size // 2)


def _overwrite_middle(p: Path) -> None:
    with p.open("r+b") as f:
        f.seek(p.stat().st_size // 2 // 4096 * 4096)
        f.write(b"\xa5" * 4096 * 3)


def _overwrite_a_log_page(p: Path) -> None:
    """Overwrite one page of log rows (they hold the objects' data; the `current` index does not)."""
    raw = p.read_bytes()
    pages = [i for i in range(len(raw) // 4096 // 2, len(raw) // 4096) if b'"v":"xxxxxxxx' in raw[i * 4096:][:4096]]
    with p.open("r+b") as f:
        f.seek(pages[0] * 4096)
        f.write(b"\xa5" * 4096)


DAMAGE = {"garbage-header": _garbage_header, "truncated": _truncate, "middle-pages": _overwrite_middle}


def test_check_db_passes_a_sound_store(sound_data_dir: Path) -> None:
    r = _lite("server", "--check-db", "--data-dir", str(sound_data_dir))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "ok" in r.stdout and str(_db(sound_data_dir)) in r.stdout


def test_check_db_without_a_store(tmp_path: Path) -> None:
    r = _lite("server", "--check-db", "--data-dir", str(tmp_path / "empty"))
    assert r.returncode == 1 and "no store at" in r.stderr
    assert not (tmp_path / "empty").exists()  # checking created nothing


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_damaged_store_gives_a_clear_message(sound_data_dir: Path, tmp_path: Path, damage: str) -> None:
    data = tmp_path / "data"
    shutil.copytree(sound_data_dir, data)
    db = _db(data)
    DAMAGE[damage](db)
    digest = hashlib.sha256(db.read_bytes()).hexdigest()

    server = LiteServer(data, find_free_port()).start()
    try:
        assert server.proc is not None
        code = server.proc.wait(60)
    finally:
        server.kill()
    out = server.log_tail(100)
    assert code == 1, out
    assert "Traceback" not in out, out
    assert f"the store file {db} is damaged" in out, out
    assert "restore a copy of the data dir" in out and ".recover" in out, out
    assert hashlib.sha256(db.read_bytes()).hexdigest() == digest  # left exactly as found

    r = _lite("server", "--check-db", "--data-dir", str(data))
    assert r.returncode == 1, r.stdout + r.stderr
    assert "DAMAGED" in r.stdout and "Traceback" not in r.stdout + r.stderr
    assert hashlib.sha256(db.read_bytes()).hexdigest() == digest


@pytest.mark.skipif(shutil.which("sqlite3") is None, reason="the sqlite3 tool is not installed")
def test_the_recover_advice_works(sound_data_dir: Path, tmp_path: Path) -> None:
    """Following the message's `.recover` steps gives a store the server starts on, objects readable."""
    data = tmp_path / "data"
    shutil.copytree(sound_data_dir, data)
    db = _db(data)
    _overwrite_a_log_page(db)
    recovered = db.with_name("state-recovered.db")
    dump = subprocess.run(["sqlite3", str(db), ".recover"], capture_output=True, timeout=60)
    if dump.returncode != 0:  # a build without the dbpage extension: the message says to use .dump then
        dump = subprocess.run(["sqlite3", str(db), ".dump"], capture_output=True, check=True, timeout=60)
        dump.stdout = dump.stdout.replace(b"ROLLBACK; -- due to errors", b"COMMIT;")
    subprocess.run(["sqlite3", str(recovered)], input=dump.stdout, capture_output=True, check=True, timeout=60)
    db.rename(db.with_name("state.db.damaged"))
    recovered.rename(db)
    assert _lite("server", "--check-db", "--data-dir", str(data)).returncode == 0
    server = LiteServer(data, find_free_port()).start()
    try:
        server.wait_ready(60)
        status, listed = server.request(CMS)
        # The objects whose rows were on the overwritten page are lost; the rest is back, intact.
        ours = [o for o in listed["items"] if o["metadata"]["name"] != "kube-root-ca.crt"]  # the publisher's
        assert status == 200 and 150 < len(ours) < 200
        assert all(o["data"] == {"v": "x" * 400} for o in ours)
        assert (server.request(CMS, "POST", _cm("after-recovery")))[0] == 201
        assert server.stop() == 0
    finally:
        server.kill()


# ---- full disk -------------------------------------------------------------------------------------------

@contextlib.contextmanager
def _tmpfs(where: Path, size: str) -> Iterator[Path]:
    where.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "lite-faults-test", str(where)],
                   check=True, capture_output=True, timeout=30)
    try:
        yield where
    finally:
        if subprocess.run(["umount", str(where)], capture_output=True, timeout=30).returncode != 0:
            subprocess.run(["umount", "-l", str(where)], capture_output=True, timeout=30)
        where.rmdir()


def _fill(mnt: Path) -> Path:
    """Write a file until the file system refuses more; returns it (delete it to free the space)."""
    filler = mnt / "filler"
    with filler.open("wb", buffering=0) as f:
        for chunk in (1 << 20, 64 << 10, 4 << 10, 512):
            block = b"\0" * chunk
            while True:
                try:
                    f.write(block)
                except OSError as e:
                    assert e.errno == errno.ENOSPC, e
                    break
    return filler


def _clients_see_507(server: LiteServer, tmp_path: Path, name: str) -> None:
    """kubectl and the official Python client show the Status as it is: reason, code and message."""
    manifest = json.dumps(_cm(name, 256 << 10))
    if os.access(KUBECTL, os.X_OK):
        r = subprocess.run([KUBECTL, "--kubeconfig", str(server.kubeconfig), "--cache-dir", str(tmp_path / "kc"),
                            "create", "-f", "-"], input=manifest, capture_output=True, text=True, timeout=60)
        assert r.returncode == 1, r.stdout + r.stderr
        assert "Error from server (InsufficientStorage)" in r.stderr and "the store is full" in r.stderr, r.stderr
    from kubernetes import client, config

    api = config.new_client_from_config(config_file=str(server.kubeconfig), persist_config=False)
    try:
        with pytest.raises(client.ApiException) as info:
            client.CoreV1Api(api).create_namespaced_config_map("default", json.loads(manifest))
        assert info.value.status == 507
        assert json.loads(info.value.body)["reason"] == "InsufficientStorage"
    finally:
        api.close()


@pytest.mark.root
@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root")
def test_full_disk_refuses_writes_serves_reads_and_recovers(tmp_path: Path) -> None:
    with _tmpfs(tmp_path / "mnt", "24m") as mnt:
        server = LiteServer(mnt, find_free_port()).start()  # its log is beside the mount, not on it
        try:
            server.wait_ready(60)
            assert server.request(CMS, "POST", _cm("before"))[0] == 201
            _, listed = server.request(CMS)
            watch_req = urllib.request.Request(
                f"{server.url}{CMS}?watch=true&resourceVersion={listed['metadata']['resourceVersion']}",
                headers={"Authorization": f"Bearer {server.token()}"})
            with urllib.request.urlopen(watch_req, context=server.ssl_context(), timeout=60) as watch:
                filler = _fill(mnt)
                acked, refused = [], None
                for i in range(200):  # each is 256 KiB: the WAL must grow within a few of them
                    status, out = server.request(CMS, "POST", _cm(f"big-{i:03d}", 256 << 10), timeout=30)
                    if status == 201:
                        acked.append(f"big-{i:03d}")
                        continue
                    assert status == 507, out
                    refused = out
                    failed = f"big-{i:03d}"
                    break
                assert refused is not None, "writes never failed on a full disk"
                assert (refused["kind"], refused["code"], refused["reason"]) == ("Status", 507, "InsufficientStorage")
                assert "the store is full" in refused["message"] and "writes are refused" in refused["message"]
                # Still full: another write is refused the same way, and the server is fine.
                assert server.request(CMS, "POST", _cm(failed, 256 << 10), timeout=30)[0] == 507
                _clients_see_507(server, tmp_path, failed)
                # Reads go on.
                assert server.request(f"{CMS}/before")[0] == 200
                assert server.request(f"{CMS}/{failed}")[0] == 404
                status, listed = server.request(CMS)
                assert status == 200
                assert {o["metadata"]["name"] for o in listed["items"]} - {"kube-root-ca.crt"} == {"before", *acked}
                assert server.request("/readyz")[0] == 200
                assert server.request("/api/v1/namespaces/default")[0] == 200

                filler.unlink()  # space is back: writes succeed at once, no restart
                status, out = server.request(CMS, "POST", _cm("after", 256 << 10), timeout=30)
                assert status == 201, out
                assert server.request(CMS, "POST", _cm(failed, 256 << 10), timeout=30)[0] == 201

                # The watch went on through it all and never showed the refused write before it was made.
                seen: list[tuple[str, str]] = []
                while ("ADDED", failed) not in seen:
                    ev = json.loads(watch.readline())
                    seen.append((ev["type"], ev["object"]["metadata"]["name"]))
                assert seen == [("ADDED", n) for n in [*acked, "after", failed]]
            assert server.stop() == 0
            log = server.log_path.read_text(errors="replace")
            # The store says it once, not per refused commit (clients such as the lease renewer log their own).
            assert log.count("lite.server.store.store: the store is full") == 1, log[-3000:]
            assert "store writable again" in log and "Traceback" not in log

            check = _lite("server", "--check-db", "--data-dir", str(mnt))
            assert check.returncode == 0, check.stdout + check.stderr
            server = LiteServer(mnt, find_free_port()).start()  # what was acknowledged is on disk
            server.wait_ready(60)
            _, listed = server.request(CMS)
            names = {o["metadata"]["name"] for o in listed["items"]} - {"kube-root-ca.crt"}
            assert names == {"before", *acked, "after", failed}
            assert server.stop() == 0
        finally:
            server.kill()


@pytest.mark.root
@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root")
def test_start_on_a_full_disk_says_so_and_starts_once_space_is_freed(tmp_path: Path) -> None:
    with _tmpfs(tmp_path / "mnt", "16m") as mnt:
        server = LiteServer(mnt, find_free_port()).start()
        try:
            server.wait_ready(60)
            assert server.request(CMS, "POST", _cm("kept"))[0] == 201
            assert server.stop() == 0
            filler = _fill(mnt)
            server = LiteServer(mnt, find_free_port()).start()
            assert server.proc is not None
            code = server.proc.wait(60)
            out = server.log_tail(20)
            assert code == 1 and "Traceback" not in out, out
            assert "is full" in out and "free space on it and start lite again" in out, out
            filler.unlink()
            server = LiteServer(mnt, find_free_port()).start()
            server.wait_ready(60)
            assert server.request(f"{CMS}/kept")[0] == 200
            assert server.stop() == 0
        finally:
            server.kill()
