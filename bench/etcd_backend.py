"""EtcdBackend against a throw-away local etcd: conditional creates/s with 64 clients against the same run's raw
etcd puts (plain Put RPCs, no condition, on the same gRPC channel settings) and hand-made create transactions,
and watch delivery latency of a write made through one backend as seen on another backend's change stream.

Rounds alternate raw / txn / backend (A B C A B C) so that load from elsewhere on the machine hits all alike; the
figures are the medians. Every write must succeed, every change must arrive: any miss fails the run (exit 1).

    python bench/etcd_backend.py [--writes 3000] [--rounds 2] [--latency-writes 300] [--disk]

`--disk` keeps etcd's data on /tmp instead of /dev/shm (etcd fsyncs every commit: the disk then dominates).
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import grpc

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import benchlib  # noqa: E402  (bench/ is on sys.path: the script's own directory)

from lite.server.store import etcdpb as pb  # noqa: E402
from lite.server.store.backend import Write  # noqa: E402
from lite.server.store.etcdbackend import _OPTIONS, EtcdBackend  # noqa: E402
from tests.helpers.etcdserver import ETCD, EtcdServer  # noqa: E402

CLIENTS = 64
VALUE = (b'{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x","namespace":"bench"},"data":{"a":"'
         + b"x" * 300 + b'"}}')


async def closed_loop(n: int, one: object) -> float:
    """`n` calls of `one(i)` from CLIENTS concurrent clients; calls per second."""
    it = iter(range(n))

    async def client() -> None:
        for i in it:
            await one(i)  # type: ignore[operator]

    t0 = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(CLIENTS)))
    return n / (time.perf_counter() - t0)


async def raw_puts(endpoint: str, n: int, tag: str) -> float:
    async with grpc.aio.insecure_channel(endpoint.removeprefix("http://"), options=_OPTIONS) as channel:
        put = channel.unary_unary(pb.KV_PUT, request_serializer=pb.PutRequest.SerializeToString,
                                  response_deserializer=pb.PutResponse.FromString)

        async def one(i: int) -> None:
            await put(pb.PutRequest(key=f"/bench/raw/{tag}/{i}".encode(), value=VALUE), timeout=10)

        return await closed_loop(n, one)


async def raw_txns(endpoint: str, n: int, tag: str, results: benchlib.Results) -> float:
    """The backend's create transaction (compare create_revision == 0, put, else read) sent by hand."""
    async with grpc.aio.insecure_channel(endpoint.removeprefix("http://"), options=_OPTIONS) as channel:
        txn = channel.unary_unary(pb.KV_TXN, request_serializer=pb.TxnRequest.SerializeToString,
                                  response_deserializer=pb.TxnResponse.FromString)

        async def one(i: int) -> None:
            key = f"/bench/txn/{tag}/{i}".encode()
            resp = await txn(pb.TxnRequest(
                compare=[pb.Compare(key=key, target=pb.CREATE, result=pb.EQUAL, create_revision=0)],
                success=[pb.RequestOp(request_put=pb.PutRequest(key=key, value=VALUE))],
                failure=[pb.RequestOp(request_range=pb.RangeRequest(key=key, keys_only=True))]), timeout=10)
            results.count(resp.succeeded, f"txn {key!r} refused")

        return await closed_loop(n, one)


async def backend_creates(backend: EtcdBackend, n: int, tag: str, results: benchlib.Results) -> float:
    async def one(i: int) -> None:
        [outcome] = await backend.commit([Write("create", f"core/configmaps/b{tag}/c{i}", VALUE)])
        results.count(isinstance(outcome, int), f"create c{i}: {outcome!r}")

    return await closed_loop(n, one)


async def watch_latency(endpoint: str, n: int, results: benchlib.Results) -> list[float]:
    """Seconds from a write's start on one backend to its change on another backend's stream."""
    writer, watcher = await EtcdBackend.open([endpoint]), await EtcdBackend.open([endpoint])
    started: dict[str, float] = {}
    lags: list[float] = []
    try:
        stream = watcher.changes(await watcher.current_rev(), "core/configmaps/lat/")
        seen = asyncio.Event()

        async def read() -> None:
            async for batch in stream:
                now = time.perf_counter()
                for change in batch:
                    lags.append(now - started[change.key])
                if len(lags) >= n:
                    seen.set()
                    return

        reader = asyncio.create_task(read())
        for i in range(n):
            key = f"core/configmaps/lat/c{i}"
            started[key] = time.perf_counter()
            [outcome] = await writer.commit([Write("create", key, VALUE)])
            results.count(isinstance(outcome, int), f"create {key}: {outcome!r}")
        try:
            await asyncio.wait_for(seen.wait(), 30)
        except TimeoutError:
            results.fail(f"only {len(lags)} of {n} changes arrived on the other backend's stream")
        await reader
    finally:
        await writer.close()
        await watcher.close()
    return lags


async def main(args: argparse.Namespace, results: benchlib.Results) -> None:
    root = Path(tempfile.mkdtemp(prefix="lite-etcd-bench-", dir=None if args.disk else "/dev/shm"))
    server = EtcdServer(root)
    try:
        await asyncio.to_thread(server.start)
        backend = await EtcdBackend.open([server.endpoint])
        raw, txns, ours = [], [], []
        try:
            for r in range(args.rounds):
                raw.append(await raw_puts(server.endpoint, args.writes, str(r)))
                txns.append(await raw_txns(server.endpoint, args.writes, str(r), results))
                ours.append(await backend_creates(backend, args.writes, str(r), results))
                print(f"round {r + 1}: raw puts {raw[-1]:7.0f}/s | raw create txns {txns[-1]:7.0f}/s | "
                      f"EtcdBackend creates {ours[-1]:7.0f}/s", flush=True)
        finally:
            await backend.close()
        lags = sorted(await watch_latency(server.endpoint, args.latency_writes, results))
    finally:
        await asyncio.to_thread(server.stop)
        shutil.rmtree(root, ignore_errors=True)
    raw_m, txn_m, ours_m = statistics.median(raw), statistics.median(txns), statistics.median(ours)
    p50, p99 = lags[len(lags) // 2], lags[min(len(lags) - 1, int(len(lags) * 0.99))]
    print(f"etcd raw puts, {CLIENTS} clients      {raw_m:8.0f}/s (baseline)")
    print(f"raw create txns, {CLIENTS} clients    {txn_m:8.0f}/s ({txn_m / raw_m:.2f}x of raw puts)")
    print(f"EtcdBackend creates, {CLIENTS} clients {ours_m:8.0f}/s ({ours_m / raw_m:.2f}x of raw)")
    print(f"watch delivery, backend to backend  p50 {p50 * 1000:.1f} ms, p99 {p99 * 1000:.1f} ms "
          f"({len(lags)} writes, one at a time)")
    results.set("raw_puts_per_s", raw_m)
    results.set("raw_txns_per_s", txn_m)
    results.set("creates_per_s", ours_m)
    results.set("watch_p50_ms", p50 * 1000)
    results.set("watch_p99_ms", p99 * 1000)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--writes", type=int, default=3000)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--latency-writes", type=int, default=300)
    ap.add_argument("--disk", action="store_true", help="etcd's data on /tmp, not /dev/shm")
    benchlib.add_args(ap)
    a = ap.parse_args()
    res = benchlib.Results.from_args("etcd_backend", a)
    if shutil.which("etcd") is None and not Path(ETCD).exists():
        res.skip("etcd is not installed (Debian package etcd-server)")
    benchlib.run(res, lambda: asyncio.run(main(a, res)))
