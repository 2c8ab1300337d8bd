"""`lite.server.serverjoin` per layer: what the first server hands over (pure), who may have it (the route, in
process), what the joiner does with it (files 0600, the endpoint parsed as `--datastore-endpoint`), the remembered
answer when the first server is down, and the CLI's refusals of `--server` before anything starts."""

from __future__ import annotations

import argparse
import json
import socket
from pathlib import Path

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from lite.cli.main import _join_refusal, build_parser
from lite.server.serverjoin import (
    CACHE,
    PATH,
    JoinError,
    NotShared,
    add_route,
    adopt,
    handover,
    joined_datastore,
    token_matches,
    without_tls_files,
)
from lite.server.store.endpoint import DatastoreEndpoint, parse_endpoint

SECRET = "the-join-secret"
TOKEN = "K10" + "ab" * 32 + "::server:" + SECRET


@pytest.mark.parametrize(("dsn", "uri", "files"), [
    ("postgres://u:p@h:5432/db", "postgres://u:p@h:5432/db", {}),
    ("postgres://u:p@h/db?sslmode=verify-full&sslrootcert=/x/ca.pem&sslcert=/x/c.pem&sslkey=/x/k.pem",
     "postgres://u:p@h/db?sslmode=verify-full", {"ca": "/x/ca.pem", "cert": "/x/c.pem", "key": "/x/k.pem"}),
    ("postgresql://u@h1:5432,h2:5432/db?sslrootcert=/ca&application_name=a", "postgresql://u@h1:5432,h2:5432/db?"
     "application_name=a", {"ca": "/ca"}),
])
def test_without_tls_files(dsn: str, uri: str, files: dict[str, str]) -> None:
    assert without_tls_files(dsn) == (uri, files)


def test_handover_carries_the_uri_and_the_files_contents() -> None:
    contents = {"/f/ca.pem": b"CA", "/f/c.pem": b"CERT", "/f/k.pem": b"KEY"}
    pg = parse_endpoint("postgres://u:secret@db.example:5432/k8s", cafile="/f/ca.pem", certfile="/f/c.pem",
                        keyfile="/f/k.pem")
    assert handover(pg, contents.__getitem__) == {
        "endpoint": "postgres://u:secret@db.example:5432/k8s?sslmode=verify-full", "ca": "CA", "cert": "CERT",
        "key": "KEY"}
    etcd = parse_endpoint("https://e1:2379,https://e2:2379", cafile="/f/ca.pem")
    assert handover(etcd, contents.__getitem__) == {"endpoint": "https://e1:2379,https://e2:2379", "ca": "CA"}
    plain = parse_endpoint("http://e1:2379")
    assert handover(plain, contents.__getitem__) == {"endpoint": "http://e1:2379"}
    for sqlite in (None, DatastoreEndpoint(), parse_endpoint("sqlite:///tmp/x.db")):
        with pytest.raises(NotShared):
            handover(sqlite, contents.__getitem__)


@pytest.mark.parametrize(("token", "ok"), [(TOKEN, True), (SECRET, True), ("K10" + "cd" * 32 + "::server:" + SECRET,
                                                                               True),
                                           (SECRET + "x", False), ("", False), (None, False), ("admin-token", False)])
def test_token_matches(token: str | None, ok: bool) -> None:
    assert token_matches(token, SECRET) is ok


async def test_the_route_answers_the_join_token_only(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_bytes(b"PEM")
    pg = parse_endpoint("postgres://u:pw@h:5432/db", cafile=str(ca))
    shared, sqlite = web.Application(), web.Application()
    add_route(shared, pg, SECRET)
    add_route(sqlite, None, SECRET)
    async with TestClient(TestServer(shared)) as client:
        for headers in ({}, {"Authorization": "Bearer admin-token"}, {"Authorization": f"Bearer {SECRET}x"},
                        {"Authorization": f"Basic {SECRET}"}):
            r = await client.get(PATH, headers=headers)
            assert r.status == 401, headers
            assert (await r.json())["reason"] == "Unauthorized"
            assert "pw" not in await r.text()
        r = await client.get(PATH, headers={"Authorization": f"Bearer {TOKEN}"})
        assert r.status == 200
        assert r.headers["Cache-Control"] == "no-store"
        assert await r.json() == {"endpoint": "postgres://u:pw@h:5432/db?sslmode=verify-full", "ca": "PEM"}
    async with TestClient(TestServer(sqlite)) as client:
        r = await client.get(PATH, headers={"Authorization": f"Bearer {TOKEN}"})
        assert r.status == 400
        assert "keeps its data in SQLite, which one server owns" in (await r.json())["message"]
        r = await client.get(PATH)
        assert r.status == 401  # nothing, not even the refusal, before the token


def test_adopt_writes_the_files_privately_and_parses_the_endpoint(tmp_path: Path) -> None:
    cred = tmp_path / "cred"
    got = adopt({"endpoint": "postgres://u:pw@h:5432/db?sslmode=verify-full", "ca": "CA", "cert": "C", "key": "K"},
                cred)
    files = {name: cred / "datastore" / name for name in ("ca.crt", "client.crt", "client.key")}
    assert [p.read_text() for p in files.values()] == ["CA", "C", "K"]
    assert all(p.stat().st_mode & 0o777 == 0o600 for p in files.values())
    assert got == parse_endpoint("postgres://u:pw@h:5432/db?sslmode=verify-full", cafile=str(files["ca.crt"]),
                                 certfile=str(files["client.crt"]), keyfile=str(files["client.key"]))
    with pytest.raises(JoinError, match="SQLite"):
        adopt({"endpoint": "sqlite:///x.db"}, cred)
    with pytest.raises(JoinError, match="cannot be used here"):
        adopt({"endpoint": "mysql://x"}, cred)


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_an_unreachable_server_falls_back_to_the_remembered_answer_of_the_same_cluster(tmp_path: Path) -> None:
    url = f"https://127.0.0.1:{_closed_port()}"
    with pytest.raises(JoinError, match="cannot reach the server"):
        await joined_datastore(url, TOKEN, tmp_path)
    (tmp_path / CACHE).write_text(json.dumps({"ca_hash": "ab" * 32, "endpoint": "postgres://u:pw@h:5432/db"}))
    got = await joined_datastore(url, TOKEN, tmp_path)
    assert got == parse_endpoint("postgres://u:pw@h:5432/db")
    other = "K10" + "ef" * 32 + "::server:" + SECRET  # another cluster's token: the remembered answer is not its
    with pytest.raises(JoinError, match="cannot reach the server"):
        await joined_datastore(url, other, tmp_path)
    with pytest.raises(JoinError, match="full join token"):
        await joined_datastore(url, SECRET, tmp_path)


@pytest.mark.parametrize(("argv", "refusal"), [
    ([], ""),
    (["--server", "https://a:6443", "--token", TOKEN], ""),
    (["--server", "https://a:6443", "--token", SECRET, "--datastore-endpoint", "postgres://u@h/db"], ""),
    (["--server", "http://a:6443", "--token", TOKEN], "must be an https:// URL"),
    (["--server", "https://a:6443"], "--server needs --token"),
    (["--server", "https://a:6443", "--token", SECRET], "needs the full join token"),
    (["--server", "https://a:6443", "--token", TOKEN, "--datastore-endpoint", "sqlite:///x.db"],
     "would make this server a separate cluster"),
])
def test_cli_refusals_of_server(argv: list[str], refusal: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LITE_TOKEN", raising=False)
    args: argparse.Namespace = build_parser().parse_args(["server", *argv])
    datastore = parse_endpoint(args.datastore_endpoint)
    got = _join_refusal(args, datastore)
    assert (refusal in got) if refusal else got == ""
