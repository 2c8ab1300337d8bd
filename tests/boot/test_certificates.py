"""Certificate expiry and rotation: `lite certificate check|rotate`, renewal within 90 days at start, and a
server that keeps serving kubectl and agents (both trust the CA) after a rotation."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
from pathlib import Path

import pytest
from cryptography import x509
from liteproc import LiteServer, find_free_port

from lite.server.certs import _write_client, ensure_credentials
from lite.server.config import ServerConfig


def lite(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "lite.cli.main", *args], capture_output=True, text=True,
                          timeout=60, stdin=subprocess.DEVNULL)


def _serial(path: Path) -> int:
    return x509.load_pem_x509_certificate(path.read_bytes()).serial_number


def test_check_lists_every_certificate_with_its_expiry(tmp_path: Path) -> None:
    cfg = ServerConfig.create(tmp_path / "data")
    ensure_credentials(cfg)
    done = lite("certificate", "check", "--data-dir", str(cfg.data_dir))
    assert done.returncode == 0, done.stderr
    rows = {ln.split()[0]: ln for ln in done.stdout.splitlines()[1:]}
    assert {"ca.crt", "client-ca.crt", "serving.crt", "front-proxy-client.crt"} <= set(rows)
    assert rows["ca.crt"].rstrip().endswith("CA")
    assert rows["serving.crt"].split()[-1] in ("364", "365")  # days left of a new serving certificate
    missing = lite("certificate", "check", "--data-dir", str(tmp_path / "none"))
    assert missing.returncode == 1


def test_leaf_certificates_within_90_days_are_renewed_at_start(tmp_path: Path) -> None:
    cfg = ServerConfig.create(tmp_path / "data")
    creds = ensure_credentials(cfg)
    tls = cfg.paths.tls
    meta = json.loads((tls / "serving.json").read_text())
    meta["not_after"] = (dt.datetime.now(dt.UTC) + dt.timedelta(days=60)).timestamp()
    (tls / "serving.json").write_text(json.dumps(meta))
    soon = dt.datetime.now(dt.UTC) + dt.timedelta(days=60)
    _write_client(tls / "front-proxy-ca.crt", tls / "front-proxy-ca.key", tls / "front-proxy-client.crt",
                  tls / "front-proxy-client.key", "front-proxy-client", not_after=soon)
    check = lite("certificate", "check", "--data-dir", str(cfg.data_dir))
    assert "renewed at the next start" in next(ln for ln in check.stdout.splitlines()
                                                if ln.startswith("front-proxy-client.crt"))
    before = {n: _serial(tls / n) for n in ("serving.crt", "front-proxy-client.crt", "ca.crt")}
    again = ensure_credentials(cfg)
    after = {n: _serial(tls / n) for n in before}
    assert after["serving.crt"] != before["serving.crt"]
    assert after["front-proxy-client.crt"] != before["front-proxy-client.crt"]
    assert after["ca.crt"] == before["ca.crt"] and again.join_token == creds.join_token


@pytest.mark.e2e
def test_rotate_keeps_kubectl_and_the_join_token_working(tmp_path: Path) -> None:
    data = tmp_path / "data"
    server = LiteServer(data, find_free_port()).start()
    try:
        server.wait_ready(60)
        token_before = (data / "token").read_text()
    finally:
        server.stop(timeout=15)
    serving = data / "server" / "tls" / "serving.crt"
    serial = _serial(serving)
    done = lite("certificate", "rotate", "--data-dir", str(data))
    assert done.returncode == 0 and "serving.crt" in done.stdout, done.stderr
    assert _serial(serving) != serial
    server = LiteServer(data, server.port).start()
    try:
        server.wait_ready(60)  # verifies TLS against the CA in the kubeconfig
        kubectl = subprocess.run(["kubectl", "--kubeconfig", str(server.kubeconfig), "get", "ns", "default",
                                  "-o", "name"], capture_output=True, text=True, timeout=60)
        assert kubectl.stdout.strip() == "namespace/default", kubectl.stderr
        assert (data / "token").read_text() == token_before  # agents pin the CA hash it carries
        status, _ = server.request("/cacerts", token="")
        assert status == 200
    finally:
        server.stop(timeout=15)
