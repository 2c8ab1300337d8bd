"""Hostile and careless watch clients (issue 7 items 3 and 5): a too-new resourceVersion, a client that never
reads, one that disconnects on an idle resource, one whose watch is dropped for falling behind.

The real stack: `build_api_app` → `Resources` → SQLite `Store` in tmp_path, served by aiohttp on
127.0.0.1; stalled and vanishing clients are raw sockets. Every test checks that the server releases what
the watch held (the store's watcher and the open stream), and that nothing stored changes.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
from aiohttp import web

from lite.client import WatchEvent
from lite.informer import Informer
from lite.kinds import Kind, KindRegistry
from lite.server.api.http import API, build_api_app
from lite.server.api.resources import Resources
from lite.server.api.strategies import default_strategies
from lite.server.api.watchstream import WatchRegistry
from lite.server.store import Store

TOKEN = "Bearer t0ken"
GUARD = 15.0  # hang guard for waits, never a speed assertion
KINDS = KindRegistry()


def _kind(plural: str, group: str = "", version: str = "v1") -> Kind:
    kind = KINDS.by_resource(group, version, plural)
    assert kind is not None
    return kind


CM, NODE = _kind("configmaps"), _kind("nodes")


def _auth(request: web.Request) -> str | None:
    return "admin" if request.headers.get("Authorization") == TOKEN else None


@dataclass
class Stack:
    client: aiohttp.ClientSession
    port: int
    store: Store
    res: Resources
    watches: WatchRegistry

    async def released(self) -> None:
        """Wait until no watch is open anywhere (stream or store watcher)."""
        await until(lambda: len(self.watches) == 0 and self.store.watcher_count() == 0,
                    lambda: f"{len(self.watches)} streams, {self.store.watcher_count()} store watchers")


@contextlib.asynccontextmanager
async def stack(tmp_path: Path, **store_args: int) -> AsyncIterator[Stack]:
    store = await Store.open(str(tmp_path / "db.sqlite"), **store_args)
    try:
        res = Resources(store, KINDS, default_strategies())
        await res.start()
        app = build_api_app(res, KINDS, _auth)
        # As lite server runs it: aiohttp's test server would cancel handlers on disconnect, hiding the bug.
        runner = web.AppRunner(app, handle_signals=False, access_log=None)
        await runner.setup()
        try:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1])
            await web.SockSite(runner, sock).start()
            async with aiohttp.ClientSession(f"http://127.0.0.1:{port}") as client:
                yield Stack(client, port, store, res, app[API].watches)
        finally:
            await runner.cleanup()
    finally:
        await store.close()


async def until(ok: Callable[[], bool], what: Callable[[], str], timeout: float = GUARD) -> None:
    deadline = time.monotonic() + timeout
    while not ok():
        if time.monotonic() > deadline:
            raise AssertionError(f"still not released after {timeout}s: {what()}")
        await asyncio.sleep(0.05)


def _cm(name: str, kib: int = 1, n: int = 0) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name},
            "data": {"blob": "x" * (kib * 1024), "n": str(n)}}


async def raw_watch(port: int, path: str, rcvbuf: int = 0) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A watch request on a raw socket (optionally with a tiny receive buffer), headers read."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if rcvbuf:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", port))
    reader, writer = await asyncio.open_connection(sock=sock)
    writer.write(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: {TOKEN}\r\n\r\n".encode())
    await writer.drain()
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), GUARD)
    assert head.startswith(b"HTTP/1.1 200"), head
    return reader, writer


# ---- a watch from a resourceVersion newer than the store: 504 Too large resource version -----------------

TOO_NEW = [
    ("/api/v1/namespaces/default/configmaps", 1),
    ("/api/v1/namespaces/default/configmaps", 1000),
    ("/api/v1/configmaps", 7),
    ("/api/v1/nodes", 1),
    ("/api/v1/namespaces/default/configmaps/c0", 1),  # a watch narrowed to one name
    ("/api/v1/namespaces/default/configmaps?labelSelector=a%3Db", 3),
    ("/api/v1/namespaces/default/configmaps?fieldSelector=metadata.name%3Dc0", 3),
    ("/api/v1/namespaces/default/configmaps?allowWatchBookmarks=true&timeoutSeconds=5", 2),
    ("/api/v1/namespaces/default/configmaps", 1 << 62),
]


@pytest.mark.parametrize(("path", "ahead"), TOO_NEW)
async def test_watch_from_a_too_new_rv_is_504_too_large(tmp_path: Path, path: str, ahead: int) -> None:
    async with stack(tmp_path) as s:
        await s.res.create(CM, "default", _cm("c0"))
        before = await s.res.list(CM, "default")
        current = s.store.current_rev
        rv = current + ahead
        sep = "&" if "?" in path else "?"
        r = await s.client.get(f"{path}{sep}watch=true&resourceVersion={rv}", headers={"Authorization": TOKEN})
        body = orjson.loads(await r.read())
        assert r.status == 504 and r.headers.get("Retry-After") == "1"
        assert body == {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                        "message": f"Timeout: Too large resource version: {rv}, current: {current}",
                        "reason": "Timeout", "code": 504,
                        "details": {"causes": [{"reason": "ResourceVersionTooLarge",
                                                "message": "Too large resource version"}],
                                    "retryAfterSeconds": 1}}
        assert s.store.current_rev == current and before == await s.res.list(CM, "default")
        await s.released()


@pytest.mark.parametrize("behind", [0, 1])
async def test_watch_from_current_or_older_rv_streams(tmp_path: Path, behind: int) -> None:
    """The boundary: RV == current (or inside the window) is an ordinary 200 watch."""
    async with stack(tmp_path) as s:
        await s.res.create(CM, "default", _cm("c0"))
        rv = s.store.current_rev - behind
        r = await s.client.get(f"/api/v1/namespaces/default/configmaps?watch=true&resourceVersion={rv}"
                               "&timeoutSeconds=1", headers={"Authorization": TOKEN})
        assert r.status == 200
        lines = [orjson.loads(x) for x in (await asyncio.wait_for(r.read(), GUARD)).splitlines() if x]
        assert [e["type"] for e in lines] == (["ADDED"] if behind else [])
        await s.released()


# ---- timeoutSeconds, stalled clients, vanished clients ---------------------------------------------------

async def test_timeout_seconds_honoured_on_an_idle_resource(tmp_path: Path) -> None:
    async with stack(tmp_path) as s:
        reader, writer = await raw_watch(s.port, "/api/v1/namespaces/default/configmaps?watch=true"
                                                 "&timeoutSeconds=1")
        # the server ends the response by itself: the terminating chunk, and no event before it
        rest = await asyncio.wait_for(reader.readuntil(b"0\r\n\r\n"), GUARD)
        assert rest == b"0\r\n\r\n"
        writer.close()
        await s.released()


async def test_stalled_client_released_at_its_timeout_seconds(tmp_path: Path) -> None:
    """A client that never reads, on a busy resource: the stream still ends at timeoutSeconds (the write it
    is blocked in does not hold it), the connection is closed and the store watcher released."""
    async with stack(tmp_path) as s:
        s.watches.write_timeout = 3600.0  # only timeoutSeconds can end it
        _reader, writer = await raw_watch(s.port, "/api/v1/namespaces/default/configmaps?watch=true"
                                                  "&timeoutSeconds=2", rcvbuf=4096)
        for i in range(40):  # ~10 MiB of events: far more than the socket buffers hold
            await s.res.create(CM, "default", _cm(f"big{i}", kib=256))
        await s.released()
        writer.close()
        assert len((await s.res.list(CM, "default"))["items"]) == 40


async def test_stalled_client_closed_after_write_timeout(tmp_path: Path) -> None:
    """No timeoutSeconds: a write blocked longer than write_timeout aborts the stalled connection."""
    async with stack(tmp_path) as s:
        s.watches.write_timeout = 0.5
        reader, writer = await raw_watch(s.port, "/api/v1/namespaces/default/configmaps?watch=true",
                                         rcvbuf=4096)
        for i in range(40):
            await s.res.create(CM, "default", _cm(f"big{i}", kib=256))
        await s.released()
        with contextlib.suppress(ConnectionError):  # the server aborted: the client reads what was sent, then EOF
            while await asyncio.wait_for(reader.read(1 << 20), GUARD):
                pass
        writer.close()


async def test_disconnected_client_released_on_an_idle_resource(tmp_path: Path) -> None:
    async with stack(tmp_path) as s:
        s.watches.disconnect_check = 0.1
        _reader, writer = await raw_watch(s.port, "/api/v1/namespaces/default/configmaps?watch=true")
        await until(lambda: s.store.watcher_count() == 1, lambda: "the watch never started")
        writer.close()
        await writer.wait_closed()
        await s.released()  # no event ever comes on this resource: only the disconnect check can notice
        await s.res.create(CM, "default", _cm("after"))  # and the server still works
        assert (await s.res.get(CM, "default", "after"))["metadata"]["name"] == "after"


# ---- a burst of events is written as one chunk, not one chunk per event -------------------------------------

async def read_chunk(reader: asyncio.StreamReader) -> bytes:
    """One chunk of a chunked HTTP body (b"" for the terminating one)."""
    size = int((await asyncio.wait_for(reader.readuntil(b"\r\n"), GUARD)).strip(), 16)
    data = await asyncio.wait_for(reader.readexactly(size + 2), GUARD)
    return data[:-2]


async def test_a_committed_burst_is_written_in_few_chunks(tmp_path: Path) -> None:
    """60 creates committed together reach a watcher in one pass of the loop: they go out coalesced (each
    chunk whole lines), in revision order, none lost; a lone event afterwards is still sent at once."""
    async with stack(tmp_path) as s:
        reader, writer = await raw_watch(s.port, "/api/v1/namespaces/default/configmaps?watch=true")
        await until(lambda: s.store.watcher_count() == 1, lambda: "the watch never started")
        await asyncio.gather(*(s.res.create(CM, "default", _cm(f"c{i}", n=i)) for i in range(60)))
        chunks: list[bytes] = []
        lines: list[bytes] = []
        while len(lines) < 60:
            chunk = await read_chunk(reader)
            assert chunk.endswith(b"\n")  # an event is never split across chunks
            chunks.append(chunk)
            lines += chunk.splitlines()
        events = [orjson.loads(line) for line in lines]
        assert [e["type"] for e in events] == ["ADDED"] * 60
        assert sorted(e["object"]["metadata"]["name"] for e in events) == sorted(f"c{i}" for i in range(60))
        revs = [int(e["object"]["metadata"]["resourceVersion"]) for e in events]
        assert revs == sorted(revs)
        assert len(chunks) < 10, f"{len(chunks)} chunks for one burst of 60 events"
        await s.res.create(CM, "default", _cm("alone"))
        alone = orjson.loads(await read_chunk(reader))
        assert alone["object"]["metadata"]["name"] == "alone"
        writer.close()
        await s.released()


# ---- a watcher dropped for falling behind relists/resumes without losing anything ------------------------

class CountingClient:
    """The real Resources, counting the watch streams an informer opens (a drop makes it open another)."""

    def __init__(self, res: Resources) -> None:
        self.res = res
        self.watches = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.res, name)

    def watch(self, *args: Any, **kwargs: Any) -> AsyncIterator[WatchEvent]:
        self.watches += 1
        return self.res.watch(*args, **kwargs)


async def test_informer_dropped_for_falling_behind_loses_nothing(tmp_path: Path) -> None:
    store = await Store.open(str(tmp_path / "db.sqlite"), watch_queue=3)
    res = Resources(store, KINDS, default_strategies())
    await res.start()
    client = CountingClient(res)
    informer = Informer(client, CM, "default", label_selector="app=x")
    task = asyncio.create_task(informer.run())
    try:
        await asyncio.wait_for(informer.wait_synced(), GUARD)
        # one burst, committed as one batch: 60 events reach a watcher whose queue holds 3
        await asyncio.gather(*(res.create(CM, "default", {**_cm(f"c{i}"), "metadata": {
            "name": f"c{i}", "labels": {"app": "x" if i % 3 else "y"}}}) for i in range(60)))
        await asyncio.gather(*(res.delete(CM, "default", f"c{i}") for i in range(0, 60, 4)))
        await asyncio.gather(*(res.patch(CM, "default", f"c{i}", {"metadata": {"labels": {"app": "x"}}})
                               for i in range(1, 60, 4)))

        def want() -> set[str]:
            return {key for key, _rev, raw in store.list("core/configmaps/default/")[0]
                    if orjson.loads(raw)["metadata"].get("labels", {}).get("app") == "x"}

        async def matches() -> bool:
            return {f"core/configmaps/default/{o['metadata']['name']}" for o in informer.list()} == want()

        await _until_async(matches, GUARD)
        for obj in informer.list():  # each cached object is the stored one, not a stale version
            stored = store.get(f"core/configmaps/default/{obj['metadata']['name']}")
            assert stored is not None and orjson.loads(stored[1]) == obj
        assert client.watches > 1  # its watch really was dropped and resumed
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await store.close()


async def _until_async(probe: Callable[[], Awaitable[bool]], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not await probe():
        assert time.monotonic() < deadline, "informer cache never matched the store"
        await asyncio.sleep(0.05)
