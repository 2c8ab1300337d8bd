"""The frozen build: packaging/build.sh produces a onedir `lite` that serves the API and stops on SIGTERM."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from liteproc import LiteServer

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def frozen(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("frozen")
    env = {**os.environ, "DIST_DIR": str(out / "dist"), "WORK_DIR": str(out / "work")}
    proc = subprocess.run(["bash", str(ROOT / "packaging" / "build.sh"), sys.executable], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    exe = out / "dist" / "lite" / "lite"
    assert exe.is_file() and os.access(exe, os.X_OK)
    return exe


@pytest.mark.slow
def test_frozen_cli_runs(frozen: Path, data_dir: Path) -> None:
    helptext = subprocess.run([str(frozen), "server", "--help"], capture_output=True, text=True, timeout=60)
    assert helptext.returncode == 0 and "--https-listen-port" in helptext.stdout
    missing = subprocess.run([str(frozen), "token", "--data-dir", str(data_dir)], capture_output=True, text=True,
                             timeout=60)
    assert missing.returncode == 1 and "has `lite server` run" in missing.stderr


@pytest.mark.slow
def test_frozen_server_serves_and_stops(frozen: Path, data_dir: Path, free_port: int) -> None:
    server = LiteServer(data_dir, free_port, command=[str(frozen)]).start()
    try:
        server.wait_ready(60)
        status, version = server.request("/version")
        assert status == 200 and version["major"] == "1"
        status, nss = server.request("/api/v1/namespaces")
        assert status == 200 and nss["kind"] == "NamespaceList"
        assert server.request("/api/v1/namespaces", token="wrong")[0] == 401
        # upstream's OpenAPI schemas are package data: the frozen build must carry them
        typo = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"a": 1}}
        status, err = server.request("/api/v1/namespaces/default/configmaps", "POST", typo)
        assert status == 400 and "cannot unmarshal number" in err["message"], err
        status, doc = server.request("/openapi/v3/api/v1")
        assert status == 200 and "io.k8s.api.core.v1.PodSpec" in doc["components"]["schemas"]
    finally:
        code = server.stop(timeout=15)
    assert code == 0, server.log_tail()
    token = subprocess.run([str(frozen), "token", "--data-dir", str(data_dir)],
                           capture_output=True, text=True, timeout=60)
    assert token.returncode == 0 and token.stdout.strip() == (data_dir / "token").read_text().strip()
