"""`--datastore-endpoint` and its TLS files: every accepted form, and every refusal naming its flag."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from lite.server.config import ServerConfig
from lite.server.store.endpoint import DatastoreEndpoint, EndpointError, check_files, parse_endpoint

ACCEPTED = [
    ("", DatastoreEndpoint()),
    ("  ", DatastoreEndpoint()),
    ("sqlite://", DatastoreEndpoint("sqlite", path="")),
    ("sqlite:///var/lib/lite/state.db", DatastoreEndpoint("sqlite", path="/var/lib/lite/state.db")),
    ("SQLITE://rel/state.db", DatastoreEndpoint("sqlite", path="rel/state.db")),
    ("postgres://u:p@db.example:5432/lite", DatastoreEndpoint("postgres", dsn="postgres://u:p@db.example:5432/lite")),
    ("postgresql://u@10.0.0.5/k8s", DatastoreEndpoint("postgres", dsn="postgresql://u@10.0.0.5/k8s")),
    ("postgres://u:p@h1:5432,h2:5433/lite?sslmode=require",
     DatastoreEndpoint("postgres", dsn="postgres://u:p@h1:5432,h2:5433/lite?sslmode=require")),
    ("postgres://u@/lite?host=/run/postgresql", DatastoreEndpoint("postgres", dsn="postgres://u@/lite?host=/run/postgresql")),
    ("postgres://u:p@[::1]:5432/lite", DatastoreEndpoint("postgres", dsn="postgres://u:p@[::1]:5432/lite")),
    ("http://127.0.0.1:2379", DatastoreEndpoint("etcd", endpoints=("http://127.0.0.1:2379",))),
    ("http://etcd1", DatastoreEndpoint("etcd", endpoints=("http://etcd1:2379",))),
    ("https://e1:2379, https://e2:2380/,https://[::1]",
     DatastoreEndpoint("etcd", endpoints=("https://e1:2379", "https://e2:2380", "https://[::1]:2379"))),
]


@pytest.mark.parametrize(("text", "want"), ACCEPTED)
def test_accepted_forms(text: str, want: DatastoreEndpoint) -> None:
    assert parse_endpoint(text) == want


REFUSED = [
    ("mysql://u:p@tcp(db:3306)/k3s", {}, "MySQL is not supported"),
    ("etcd://e1:2379", {}, "unknown scheme 'etcd://'"),
    ("unix:///run/kine.sock", {}, "unknown scheme 'unix://'"),
    ("/var/lib/lite/state.db", {}, "names no scheme"),
    ("sqlite:///x/state.db?_journal=WAL&cache=shared", {}, "remove the '?...' part"),
    ("sqlite:///var/lib/lite/", {}, "names a directory"),
    ("postgres://u:p@db:5432", {}, "names no database"),
    ("postgres://u:p@db:5432/", {}, "names no database"),
    ("postgres://u:secret@db:99999/lite", {}, "port '99999'"),
    ("postgres://u:secret@/lite", {}, "names no host"),
    ("postgres://u:p@db/lite?sslrootcert=/a.pem", {"cafile": "/b.pem"}, "--datastore-cafile and the endpoint's"),
    ("http://e1:2379,https://e2:2379", {}, "mixes http:// and https://"),
    ("https://e1:2379,postgres://u@h/db", {}, "is not an http:// or https:// URL"),
    ("https://e1:2379,,https://e2:2379", {}, "empty entry"),
    ("https://root:pw@e1:2379", {}, "user/password authentication is not supported"),
    ("https://e1:2379/v3/kv", {}, "nothing after it"),
    ("https://e1:port", {}, "port 'port'"),
    ("http://e1:2379", {"cafile": "/ca.pem"}, "need https://"),
    ("", {"cafile": "/ca.pem"}, "--datastore-cafile: TLS files apply to PostgreSQL and etcd"),
    ("sqlite://", {"certfile": "/c.pem", "keyfile": "/k.pem"}, "--datastore-certfile, --datastore-keyfile"),
    ("https://e1:2379", {"certfile": "/c.pem"}, "must be given together"),
    ("https://e1:2379", {"keyfile": "/k.pem"}, "must be given together"),
]


@pytest.mark.parametrize(("text", "files", "message"), REFUSED)
def test_refused_forms(text: str, files: dict[str, str], message: str) -> None:
    with pytest.raises(EndpointError) as e:
        parse_endpoint(text, **files)
    assert message in str(e.value)
    assert "--datastore-" in str(e.value)  # the flag is named
    assert "secret" not in str(e.value)  # a password never shows


def test_postgres_tls_files_become_dsn_parameters() -> None:
    ep = parse_endpoint("postgres://u:p@db:5432/lite", cafile="/etc/ca.pem", certfile="/etc/c.pem",
                        keyfile="/etc/k.pem")
    assert ep.dsn == ("postgres://u:p@db:5432/lite?sslrootcert=/etc/ca.pem&sslcert=/etc/c.pem&sslkey=/etc/k.pem"
                      "&sslmode=verify-full")
    assert (ep.cafile, ep.certfile, ep.keyfile) == ("/etc/ca.pem", "/etc/c.pem", "/etc/k.pem")
    # An sslmode the user chose stays.
    ep = parse_endpoint("postgres://u:p@db/lite?sslmode=verify-ca", cafile="/etc/ca.pem")
    assert ep.dsn == "postgres://u:p@db/lite?sslmode=verify-ca&sslrootcert=/etc/ca.pem"


def test_etcd_keeps_tls_files_and_shared_flags() -> None:
    ep = parse_endpoint("https://e1:2379", cafile="/ca", certfile="/c", keyfile="/k")
    assert (ep.kind, ep.cafile, ep.certfile, ep.keyfile, ep.shared) == ("etcd", "/ca", "/c", "/k", True)
    assert not parse_endpoint("").shared
    assert parse_endpoint("postgres://u@h/db").shared


def test_display_hides_the_password() -> None:
    assert parse_endpoint("postgres://lite:s3cr3t@db:5432/lite").display == "postgres://lite:***@db:5432/lite"
    assert parse_endpoint("postgres://lite@db/lite").display == "postgres://lite@db/lite"
    assert parse_endpoint("http://a,http://b:1").display == "http://a:2379,http://b:1"


def test_check_files(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("x")
    check_files(parse_endpoint("https://e1", cafile=str(ca)))  # a readable file: fine
    with pytest.raises(EndpointError, match=r"--datastore-cafile: .* is a directory"):
        check_files(parse_endpoint("https://e1", cafile=str(tmp_path)))
    with pytest.raises(EndpointError, match=r"--datastore-keyfile: .*: no such file"):
        check_files(parse_endpoint("https://e1", certfile=str(ca), keyfile=str(tmp_path / "gone.pem")))
    with pytest.raises(EndpointError, match=r"--datastore-endpoint: .* is a directory"):
        check_files(parse_endpoint(f"sqlite://{tmp_path}"))
    with pytest.raises(EndpointError, match="is not a directory"):
        check_files(parse_endpoint(f"sqlite://{ca}/state.db"))
    if os.geteuid() != 0:  # root reads anything
        ca.chmod(0)
        with pytest.raises(EndpointError, match="not readable"):
            check_files(parse_endpoint("https://e1", cafile=str(ca)))


def test_config_store_path(tmp_path: Path) -> None:
    cfg = ServerConfig.create(tmp_path)
    assert cfg.store_path == tmp_path / "server" / "db" / "state.db" and not cfg.shared_datastore
    cfg = ServerConfig.create(tmp_path, datastore=parse_endpoint(f"sqlite://{tmp_path}/elsewhere.db"))
    assert cfg.store_path == tmp_path / "elsewhere.db"
    assert ServerConfig.create(tmp_path, datastore=parse_endpoint("http://e1")).shared_datastore
