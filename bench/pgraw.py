"""PostgreSQL write rates: plain INSERTs of pod-sized rows (the raw baseline) beside PgBackend's commits.

`raw_insert_rate(dsn)`: `clients` asyncpg connections each INSERTing one ~2 KB row per statement (autocommit: a
transaction each) into a plain table with a bigserial key, for `seconds`; rows/s. This is what PostgreSQL gives
with no revision order at all, and what `bench/store.py` puts beside the API's create rate.
`backend_commit_rate(dsn)`: the same clients calling `PgBackend.commit([create])` one write at a time, spread
over `servers` backends (each its own pool and listener, as separate lite servers would be); writes/s. Each
backend joins the commits that wait while its batch is in flight; batches of all backends take the revision
lock one after another.

`delivery_latency(dsn)`: p50/p99 from a commit on one backend to its change on another backend's stream.

Usage: python bench/pgraw.py [--dsn postgres://...] [--seconds 4] [--clients 64]
Without --dsn it starts its own PostgreSQL (tests/helpers/pgserver.py, durable: fsync on) on loopback and
removes it at the end. Phases run A B A B (raw, backend, ...) so the shared machine's noise shows.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

import asyncpg
import orjson

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

import benchlib  # noqa: E402

from lite.server.store.backend import Write  # noqa: E402
from lite.server.store.pgbackend import PgBackend  # noqa: E402


def pod_bytes(i: int, size: int = 2048) -> bytes:
    """A pod's JSON of about `size` bytes."""
    obj = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": f"pod-{i:06d}", "namespace": "bench", "labels": {"app": "bench"},
                        "uid": f"00000000-0000-0000-0000-{i:012d}"},
           "spec": {"containers": [{"name": "c", "image": "busybox", "command": ["sleep", "3600"]}],
                    "nodeName": "node-1"}}
    raw = orjson.dumps(obj)
    obj["metadata"]["annotations"] = {"pad": "".join(f"{(i * 7919 + k) % 104729:x}" for k in range(size))
                                      [:max(0, size - len(raw) - 30)]}
    return orjson.dumps(obj)


async def raw_insert_rate(dsn: str, *, clients: int = 64, seconds: float = 4.0, size: int = 2048,
                          results: benchlib.Results | None = None) -> float:
    """Rows/s of plain single-row INSERTs from `clients` connections (see the module docstring)."""
    values = [pod_bytes(c, size) for c in range(clients)]  # made beforehand: the client's CPU is not measured
    pool = await asyncpg.create_pool(dsn, min_size=clients, max_size=clients)
    try:
        await pool.execute("CREATE TABLE IF NOT EXISTS bench_raw "
                           "(id bigserial PRIMARY KEY, key text NOT NULL, value bytea NOT NULL)")
        done = 0
        stop = time.monotonic() + seconds

        async def client(c: int) -> None:
            nonlocal done
            async with pool.acquire() as conn:
                i = 0
                while time.monotonic() < stop:
                    try:
                        await conn.execute("INSERT INTO bench_raw(key, value) VALUES ($1, $2)",
                                           f"raw/{c}/{i}", values[c])
                        done += 1
                    except (OSError, asyncpg.PostgresError) as e:
                        if results is not None:
                            results.error(f"INSERT: {e}")
                    i += 1

        t0 = time.monotonic()
        await asyncio.gather(*(client(c) for c in range(clients)))
        return done / (time.monotonic() - t0)
    finally:
        await pool.close()


async def backend_commit_rate(dsn: str, *, clients: int = 64, seconds: float = 4.0, size: int = 2048,
                              servers: int = 1, results: benchlib.Results | None = None,
                              tag: str = "b") -> float:
    """Writes/s of single-create commits from `clients` tasks over `servers` PgBackends (module docstring)."""
    values = [pod_bytes(c, size) for c in range(clients)]
    backends = [await PgBackend.open(dsn) for _ in range(servers)]
    try:
        done = 0
        stop = time.monotonic() + seconds

        async def client(c: int) -> None:
            nonlocal done
            b = backends[c % servers]
            i = 0
            while time.monotonic() < stop:
                key = f"core/pods/bench/{tag}-{c}-{i}"
                try:
                    [out] = await b.commit([Write("create", key, values[c])])
                    if isinstance(out, int):
                        done += 1
                    elif results is not None:
                        results.error(f"create {key}: {out}")
                except Exception as e:
                    if results is None:
                        raise
                    results.error(f"create {key}: {e!r}")
                i += 1

        t0 = time.monotonic()
        await asyncio.gather(*(client(c) for c in range(clients)))
        return done / (time.monotonic() - t0)
    finally:
        for b in backends:
            await b.close()


async def delivery_latency(dsn: str, *, rate: float = 200.0, seconds: float = 3.0,
                           results: benchlib.Results | None = None) -> tuple[float, float]:
    """(p50, p99) ms from a commit's call on one backend to its change reaching a stream on another backend
    (as a write on one lite server reaches a watcher on another), at `rate` single-write commits per second."""
    writer, reader = await PgBackend.open(dsn), await PgBackend.open(dsn)
    sent: dict[str, float] = {}
    lat: list[float] = []
    value = pod_bytes(0)
    try:
        start = await reader.current_rev()
        n = int(rate * seconds)
        got_all = asyncio.Event()

        async def watch() -> None:
            async for batch in reader.changes(start, "core/pods/lat/"):
                now = time.monotonic()
                for ch in batch:
                    lat.append(now - sent[ch.key])
                if len(lat) >= n:
                    got_all.set()
                    return

        watcher = asyncio.create_task(watch())

        async def one(i: int) -> None:
            key = f"core/pods/lat/p{i}"
            sent[key] = time.monotonic()
            [out] = await writer.commit([Write("create", key, value)])
            if results is not None:
                results.count(isinstance(out, int), f"create {key}: {out}")

        await benchlib.paced(rate, seconds, one)
        try:
            await asyncio.wait_for(got_all.wait(), 30)
        except TimeoutError:
            if results is not None:
                results.error(f"watch: {n - len(lat)} of {n} changes never arrived", n - len(lat))
        watcher.cancel()
    finally:
        await writer.close()
        await reader.close()
    lat.sort()
    if not lat:
        return float("nan"), float("nan")
    return lat[len(lat) // 2] * 1000, lat[min(len(lat) - 1, int(len(lat) * 0.99))] * 1000


async def main(args: argparse.Namespace, results: benchlib.Results) -> None:
    server = None
    dsn = args.dsn
    if dsn is None:
        from tests.helpers.pgserver import PgServer, missing_reason
        if (reason := missing_reason()) is not None:
            results.skip(reason)
        server = PgServer.start(durable=True)
    try:
        if server is not None:
            async with server.database() as dsn:
                await phases(dsn, args, results)
        else:
            await phases(dsn, args, results)
    finally:
        if server is not None:
            server.stop()


async def phases(dsn: str, args: argparse.Namespace, results: benchlib.Results) -> None:
    figures: dict[str, list[float]] = {"raw": [], "backend": [], "backend3": []}
    for rnd in range(2):
        figures["raw"].append(await raw_insert_rate(dsn, clients=args.clients, seconds=args.seconds,
                                                    results=results))
        figures["backend"].append(await backend_commit_rate(dsn, clients=args.clients, seconds=args.seconds,
                                                            results=results, tag=f"one{rnd}"))
        figures["backend3"].append(await backend_commit_rate(dsn, clients=args.clients, seconds=args.seconds,
                                                             servers=3, results=results, tag=f"three{rnd}"))
    print(f"{args.clients} clients, {args.seconds:g} s per phase, ~2 KB pods, fsync "
          f"{'as configured' if args.dsn else 'on'}; rounds A B C A B C")
    for name, what in (("raw", "plain INSERTs (baseline)"), ("backend", "PgBackend.commit, 1 server"),
                       ("backend3", "PgBackend.commit, 3 servers")):
        vals = figures[name]
        print(f"  {what:32} {' '.join(f'{v:8.0f}' for v in vals)} /s   mean {sum(vals) / len(vals):8.0f}")
        results.set(f"{name}_per_s", sum(vals) / len(vals))
    p50, p99 = await delivery_latency(dsn, results=results)
    print(f"  change delivery, write on one backend to a stream on another (200 writes/s): "
          f"p50 {p50:.1f} ms, p99 {p99:.1f} ms")
    results.set("delivery_p50_ms", p50)
    results.set("delivery_p99_ms", p99)
    raw = sum(figures["raw"]) / 2
    for name in ("backend", "backend3"):
        ratio = sum(figures[name]) / 2 / raw if raw else float("nan")
        print(f"  {name} / raw: {ratio:.2f}")
        results.set(f"{name}_vs_raw", ratio)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dsn", default=None, help="a PostgreSQL to use (default: start one on loopback)")
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--clients", type=int, default=64)
    benchlib.add_args(parser)
    ns = parser.parse_args()
    res = benchlib.Results.from_args("pgraw", ns)
    benchlib.run(res, lambda: asyncio.run(main(ns, res)))
