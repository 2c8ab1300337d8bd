"""`lite server --server https://FIRST:6443 --token T`: a second server joins through the first (issue 20).

Real servers on a real PostgreSQL (tests/helpers/pgserver.py): the first runs with `--datastore-endpoint` (a URI
with a password) and a token; the joiner gets only `--server` and the first server's full join token, fetches the
datastore endpoint over the CA-pinned connection, and serves the same objects with the same CA. A wrong secret
and a token of another cluster's CA are refused before anything starts, as is joining a server on SQLite (the
session's shared server). Of the two servers, exactly one runs the loops gated under the controller manager's
Lease (ClusterRole aggregation), and the aggregation still happens (default Lease durations: no takeover can
happen during the test, however slow the machine). Everything listens on 127.0.0.1 only.
"""

from __future__ import annotations

import contextlib
import subprocess
from pathlib import Path

import pytest
from e2ekit import Cluster
from liteproc import LiteServer, find_free_port, lite_command, wait_for

from tests.helpers.pgserver import PgServer, missing_reason

SECRET = "server-join-test-secret"
PASSWORD = "pw-never-logged-7c1e"
LEADING = "controller manager: leading:"



def join_token(server: LiteServer) -> str:
    return (server.data_dir / "token").read_text().strip()


def join(data_dir: Path, url: str, token: str, *extra: str) -> subprocess.CompletedProcess[str]:
    """A `lite server --server URL --token T` expected to refuse and exit (its port is never used)."""
    return subprocess.run([*lite_command(), "server", "--data-dir", str(data_dir), "--https-listen-port",
                           str(find_free_port()), "--bind-address", "127.0.0.1", "--disable-agent", "--server", url,
                           "--token", token, *extra], capture_output=True, text=True, timeout=60, check=False)


def test_a_server_joins_with_server_and_token_only(tmp_path: Path) -> None:
    reason = missing_reason()
    if reason is not None:
        pytest.skip(reason)
    pg = PgServer.start()
    a = b = None
    try:
        dsn = pg.dsn("postgres").replace("://lite@", f"://lite:{PASSWORD}@")  # trust auth: any password works
        a = LiteServer(tmp_path / "a", find_free_port(), extra=("--datastore-endpoint", dsn, "--token", SECRET))
        a.start().wait_ready(60)
        token = join_token(a)
        assert token.endswith(f"::server:{SECRET}")

        wrong = join(tmp_path / "wrong", a.url, token.rpartition(":")[0] + ":not-the-secret")
        assert wrong.returncode == 1, wrong.stderr
        assert "refused the token (401 Unauthorized)" in wrong.stderr, wrong.stderr
        other_ca = join(tmp_path / "other", a.url, "K10" + "0" * 64 + f"::server:{SECRET}")
        assert other_ca.returncode == 1, other_ca.stderr
        assert "does not match the hash in the join token" in other_ca.stderr, other_ca.stderr
        for refused in (wrong, other_ca):
            assert PASSWORD not in refused.stderr + refused.stdout

        b = LiteServer(tmp_path / "b", find_free_port(), extra=("--server", a.url, "--token", token))
        b.start().wait_ready(60)
        assert a.config()["clusters"][0]["cluster"]["certificate-authority-data"] == \
            b.config()["clusters"][0]["cluster"]["certificate-authority-data"]
        assert join_token(b) == token

        path = "/api/v1/namespaces/default/configmaps"
        status, created = a.request(path, "POST", {"apiVersion": "v1", "kind": "ConfigMap",
                                                   "metadata": {"name": "joined"}, "data": {"k": "1"}})
        assert status == 201, created
        wait_for("b to serve a's ConfigMap", lambda: b.request(f"{path}/joined")[0] == 200, 10)
        assert b.request(f"{path}/joined")[1]["metadata"]["uid"] == created["metadata"]["uid"]

        # ClusterRole aggregation runs under the controller manager's Lease: on one server, and it works
        roles = "/apis/rbac.authorization.k8s.io/v1/clusterroles"
        agg = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "join-agg"},
               "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {"join-test": "yes"}}]}, "rules": []}
        part = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                "metadata": {"name": "join-part", "labels": {"join-test": "yes"}},
                "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]}]}
        assert b.request(roles, "POST", agg)[0] == 201
        assert b.request(roles, "POST", part)[0] == 201
        wait_for("the aggregated rules", lambda: a.request(f"{roles}/join-agg")[1].get("rules"), 20)
        leading = [s for s in (a, b) if LEADING in s.log_path.read_text(errors="replace")]
        assert len(leading) == 1, (a.log_tail(), b.log_tail())
        assert "clusterrole-aggregation" in leading[0].log_path.read_text(errors="replace")

        for s in (a, b):
            text = s.log_path.read_text(errors="replace")
            assert PASSWORD not in text, "the datastore password reached a log"
        assert f"lite:***@127.0.0.1:{pg.port}" in b.log_path.read_text(errors="replace")
        cred = tmp_path / "b" / "server" / "cred" / "datastore.json"
        assert cred.stat().st_mode & 0o777 == 0o600
    finally:
        for s in (a, b):
            if s is not None and s.proc is not None:
                with contextlib.suppress(Exception):
                    s.stop()
                s.kill()
        pg.stop()


def test_joining_a_server_on_sqlite_is_refused(cluster: Cluster, tmp_path: Path) -> None:
    """The session's server keeps its data in SQLite: a joiner is refused at once and starts nothing."""
    out = join(tmp_path / "j", cluster.server.url, join_token(cluster.server))
    assert out.returncode == 1, out.stderr
    assert f"cannot join the server at {cluster.server.url} (400): it keeps its data in SQLite, which one server " \
           "owns; start it with --datastore-endpoint postgres://... or https://etcd..." in out.stderr, out.stderr
    assert not (tmp_path / "j" / "server" / "db").exists()
    assert not (tmp_path / "j" / "kubeconfig.yaml").exists()
