"""Baseline for bench/api.py: a bare aiohttp handler doing one group-committed SQLite insert per request.

Same durability as lite (WAL, synchronous=FULL, one writer thread batching everything pending into one
transaction) and TLS, but no API semantics at all: it parses the JSON body (as any server must) and stores it.

Usage: baseline_server.py PORT DB CERT KEY
"""

from __future__ import annotations

import asyncio
import sqlite3
import ssl
import sys
import threading

import orjson
from aiohttp import web


class GroupCommitter:
    """One writer thread; each batch of pending inserts is one transaction; futures resolve after COMMIT."""

    def __init__(self, path: str) -> None:
        self.db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=FULL")
        self.db.execute("CREATE TABLE IF NOT EXISTS kv (id INTEGER PRIMARY KEY, key TEXT, value BLOB)")
        self.pending: list[tuple[str, bytes, asyncio.Future[int]]] = []
        self.cv = threading.Condition()
        self.loop = asyncio.get_running_loop()
        threading.Thread(target=self._run, daemon=True).start()

    def insert(self, key: str, value: bytes) -> asyncio.Future[int]:
        fut: asyncio.Future[int] = self.loop.create_future()
        with self.cv:
            self.pending.append((key, value, fut))
            self.cv.notify()
        return fut

    def _run(self) -> None:
        while True:
            with self.cv:
                while not self.pending:
                    self.cv.wait()
                batch, self.pending = self.pending, []
            self.db.execute("BEGIN")
            ids = [self.db.execute("INSERT INTO kv (key, value) VALUES (?, ?)", (k, v)).lastrowid or 0
                   for k, v, _ in batch]
            self.db.execute("COMMIT")
            for (_, _, fut), rid in zip(batch, ids, strict=True):
                self.loop.call_soon_threadsafe(_resolve, fut, rid)


def _resolve(fut: asyncio.Future[int], rid: int) -> None:
    if not fut.done():
        fut.set_result(rid)


async def main() -> None:
    port, db, cert, key = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
    gc = GroupCommitter(db)

    async def create(request: web.Request) -> web.Response:
        obj = orjson.loads(await request.read())
        rid = await gc.insert(obj["metadata"]["name"], orjson.dumps(obj))
        obj["metadata"]["resourceVersion"] = str(rid)
        return web.Response(status=201, body=orjson.dumps(obj), content_type="application/json")

    async def ready(request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def listing(request: web.Request) -> web.Response:  # for clients that warm their connections up
        return web.Response(body=b'{"items":[]}', content_type="application/json")

    app = web.Application()
    app.router.add_post("/pods", create)
    app.router.add_get("/readyz", ready)
    app.router.add_get("/pods", listing)
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(cert, key)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port, ssl_context=ctx).start()
    await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main())
