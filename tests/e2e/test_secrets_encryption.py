"""`lite server --secrets-encryption` end to end: Secrets made with kubectl never reach the store file in plain
text (nor base64, nor the last-applied annotation), `lite secrets-encrypt` reports and rotates the keys, and
the Secrets stay readable through rotation and a restart without the flag. Every file the server keeps in its
data dir is readable by its owner only."""

from __future__ import annotations

import base64
import stat
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from e2ekit import Cluster
from liteproc import LiteServer, find_free_port, lite_command


def start(data: Path, *extra: str) -> LiteServer:
    server = LiteServer(data, find_free_port(), extra=extra).start()
    try:
        server.wait_ready(60)
    except BaseException:
        server.kill()
        raise
    return server


@pytest.fixture
def data_dir(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path / "data"


def lite(data: Path, *args: str) -> str:
    out = subprocess.run([*lite_command(), "secrets-encrypt", *args, "--data-dir", str(data)], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout


def store_bytes(data: Path) -> bytes:
    db = data / "server" / "db"
    return b"".join(p.read_bytes() for p in db.iterdir())


def active_key(status: str) -> tuple[str, int]:
    for line in status.splitlines():
        if line.lstrip().startswith("*"):
            _, _, count, name = line.split()
            return name, int(count)
    raise AssertionError(f"no active key in:\n{status}")


def test_secrets_are_encrypted_at_rest_and_survive_rotation(data_dir: Path, tmp_path: Path) -> None:
    secret = f"s3cr3t-{uuid.uuid4().hex}"
    applied = f"applied-{uuid.uuid4().hex}"
    server = start(data_dir, "--secrets-encryption")
    try:
        cluster = Cluster(server, server.kubeconfig, tmp_path / "kube-cache", None)
        cluster.kubectl("create", "secret", "generic", "one", f"--from-literal=password={secret}")
        cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump({
            "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "two", "namespace": "default"},
            "stringData": {"token": applied}}))  # kubectl apply also keeps it in an annotation
        raw = store_bytes(data_dir)
        for text in (secret, applied):
            assert text.encode() not in raw and base64.b64encode(text.encode()) not in raw
        assert b"k8s:enc:aesgcm:v1:aesgcmkey-" in raw

        status = lite(data_dir, "status")
        assert "Encryption Status: Enabled" in status and "Secrets (plain text): 0" in status
        first, count = active_key(status)
        assert count >= 2  # (and any Secret the server made itself)

        rotated = lite(data_dir, "rotate-keys")
        second, count_after = active_key(rotated)
        assert second != first and count_after == count and first in rotated
        assert "Current Rotation Stage: reencrypt_finished" in rotated
        got = cluster.kubectl("get", "secret", "one", "-o", "jsonpath={.data.password}").stdout
        assert base64.b64decode(got).decode() == secret
    finally:
        assert server.stop(timeout=15) == 0, server.log_tail()

    server = start(data_dir)  # without the flag: the key file is still used to read
    try:
        cluster = Cluster(server, server.kubeconfig, tmp_path / "kube-cache", None)
        got = cluster.kubectl("get", "secret", "two", "-o", "jsonpath={.data.token}").stdout
        assert base64.b64decode(got).decode() == applied
        assert active_key(lite(data_dir, "status"))[0] == second
    finally:
        assert server.stop(timeout=15) == 0, server.log_tail()

    for path in data_dir.rglob("*"):
        mode = stat.S_IMODE(path.stat().st_mode)
        assert mode & 0o077 == 0, f"{path} has mode {mode:o}"
