"""Every datastore through the API: SQLite (today's Store), PostgreSQL and etcd, each against its raw baseline.

For each backend the bench starts the datastore itself (temporary dir, loopback only, stopped and removed at the
end; PostgreSQL from Debian's `postgresql`, fsync on, tests/helpers/pgserver.py; etcd from `etcd-server`, its data
on disk, tests/helpers/etcdserver.py), starts `lite server`s on it with `--datastore-endpoint`, measures, and
prints one table: figure, backend, value, same-run baseline, ratio, target, pass/miss.

- creates/s through the API: 64 clients over TLS, 2 KB pods, one `lite server` with the API alone
  (`--disable-scheduler --disable-controller-manager`, as bench/api.py's headline figure), bursts alternating with
  the raw baseline's (A B B A ...); medians of the rounds. Baselines: SQLite: bench/api.py's bare aiohttp + TLS +
  group-committed SQLite insert server (same clients, same pods; each measured while the other is SIGSTOPped);
  PostgreSQL: plain single-row INSERTs of the same pod bytes from 64 asyncpg connections (autocommit);
  etcd: plain Put RPCs of the same bytes from 64 concurrent calls on one gRPC channel.
- list of 10,000 pods (limit=500 pages) against reading 10,000 rows/keys of the raw baseline straight
  from the datastore in pages of 500 (keyset pages; the values are not decoded); 3 of each, alternating; the best.
- watch delivery p50/p99: pods created through server A at 50/s one at a time, seen by 10 watchers on server B
  (a second `lite server`, API alone, joined on the same datastore); from the POST's start to the event. Baseline:
  the same run's delivery from lite's own backend on one connection to its change stream on another (no API, no
  mirror). Target p99 <= 50 ms (kine polls every second). SQLite belongs to one server: its writer and watchers
  are on the same server and it has no such baseline.
- failover: two whole control planes on a fresh keyspace with `--leader-elect-lease-duration 3s
  --leader-elect-renew-deadline 2s --leader-elect-retry-period 500ms` (tests/e2e/test_shared_datastore.py's);
  kill -9 of the server holding the kube-controller-manager Lease, then at once a Deployment (2 replicas) created
  through the survivor; seconds from the kill to the survivor holding the Lease, and to the Deployment's 2 pods
  existing. Baseline: the lease duration (no standby can take over sooner). Target: 20 s (issue 20's takeover).
  The killed server is started again before the next round. Not applicable to SQLite (one server).

Usage: python bench/store.py [--quick] [--backends sqlite,postgres,etcd] [--rounds N] [--failovers N] [--json F]
A backend whose datastore is not installed is "not measured" with the reason. Exits 1, the error on the last
line, if any request fails (bench/benchlib.py). The SQLite Store's in-process micro-bench: bench/store_micro.py.
Everything listens on 127.0.0.1; every process started is stopped and every temp dir removed at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import os
import shutil
import signal
import sqlite3
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg
import grpc
import orjson
import yaml

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

import api  # noqa: E402
import benchlib  # noqa: E402
from benchlib import BenchFailed  # noqa: E402

from lite.server.store import etcdpb as pb  # noqa: E402
from lite.server.store.backend import Backend, Write  # noqa: E402
from lite.server.store.etcdbackend import _OPTIONS, EtcdBackend  # noqa: E402
from lite.server.store.pgbackend import PgBackend  # noqa: E402
from tests.helpers.etcdserver import ETCD, EtcdServer  # noqa: E402
from tests.helpers.pgserver import PgServer, missing_reason  # noqa: E402

BACKENDS = ("sqlite", "postgres", "etcd")
TOKEN = "bench-store-shared-token"
LEASE_S = 3.0
FAST_LEASE = ("--leader-elect-lease-duration", "3s", "--leader-elect-renew-deadline", "2s",
              "--leader-elect-retry-period", "500ms")
LEASE = "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/kube-controller-manager"
PODS = "/api/v1/namespaces/bench/pods"
LIST_N = 10_000
CLIENTS = 64
WATCHERS = 10
WATCH_RATE = 50.0
RAW_ETCD_PREFIX = b"/bench/raw/"


@dataclass
class Row:
    """One line of the table; `status` is "pass", "MISS", "info" or "not measured: why"."""

    figure: str
    backend: str
    value: str
    baseline: str
    ratio: str
    target: str
    status: str


class Server(api.Target):
    """A `lite server` child process with its log file (to tell which one took a Lease)."""

    def __init__(self, proc: subprocess.Popen[bytes], url: str, ctx: ssl.SSLContext, token: str, log: Path,
                 argv: list[str]) -> None:
        super().__init__(proc, url, ctx, token)
        self.log, self.argv = log, argv

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")

    def check_alive(self) -> None:
        """BenchFailed, with the end of its log, when the server is no longer running."""
        if self.proc.poll() is not None:
            tail = " | ".join(self.log_text().strip().splitlines()[-5:])
            raise BenchFailed(f"lite server {self.log.stem} exited with {self.proc.returncode}: {tail}")

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()


async def start_server(work: Path, name: str, endpoint: str, *flags: str, argv: list[str] | None = None) -> Server:
    """`lite server` on 127.0.0.1:<free port>, data dir work/name, on `endpoint` with the shared token; ready."""
    data = work / name
    log = work / f"{name}.log"
    if argv is None:
        argv = [*api.lite_command(), "server", "--data-dir", str(data), "--https-listen-port", str(api.free_port()),
                "--bind-address", "127.0.0.1", "--disable-agent", "--datastore-endpoint", endpoint,
                "--token", TOKEN, *flags]
    port = argv[argv.index("--https-listen-port") + 1]
    with open(log, "ab") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    kubeconfig = data / "kubeconfig.yaml"
    deadline = time.monotonic() + 120
    cfg: Any = None
    while cfg is None:
        if proc.poll() is not None or time.monotonic() > deadline:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            proc.wait()
            tail = log.read_text(errors="replace").strip().splitlines()[-3:]
            raise BenchFailed(f"lite server {name} did not start: {' | '.join(tail)}")
        await asyncio.sleep(0.02)
        with contextlib.suppress(OSError, yaml.YAMLError, TypeError, KeyError, IndexError):
            loaded = yaml.safe_load(kubeconfig.read_text())
            loaded["clusters"][0]["cluster"]["certificate-authority-data"]
            loaded["users"][0]["user"]["token"]
            cfg = loaded
    ca = base64.b64decode(cfg["clusters"][0]["cluster"]["certificate-authority-data"])
    ctx = ssl.create_default_context(cadata=ca.decode())
    url = f"https://127.0.0.1:{port}"
    server = Server(proc, url, ctx, cfg["users"][0]["user"]["token"], log, argv)
    try:
        await api.wait_ready(url, ctx, timeout=120)
    except RuntimeError as e:
        server.kill()
        raise BenchFailed(f"lite server {name}: {e}") from None
    return server


def med(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def quantile(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(len(s) * q))] if s else float("nan")


# --- raw baselines ------------------------------------------------------------------------------------------


class RawSqlite:
    """bench/api.py's bare aiohttp + TLS + SQLite server (creates), and its file read directly (list)."""

    def __init__(self, base: api.Target, db: Path, servers: list[api.Target]) -> None:
        self.base, self.db, self.servers = base, db, servers
        self.what = "bare aiohttp+TLS+SQLite server"

    async def creates(self, n: int, tag: str) -> float:
        async with api.alone(self.base, self.servers):
            rate, _ = await api.create_burst(self.base, "/pods", n, CLIENTS, f"raw{tag}")
        return rate

    async def list_pages(self, n: int) -> float:
        db = sqlite3.connect(self.db)
        try:
            have = db.execute("SELECT count(*) FROM kv").fetchone()[0]
            if have < n:
                body = api.pod_body("fill")
                with db:
                    db.executemany("INSERT INTO kv (key, value) VALUES (?, ?)",
                                   ((f"fill-{i}", body) for i in range(n - have)))
            return _sqlite_pages(db, n)
        finally:
            db.close()

    async def close(self) -> None:
        pass


def _sqlite_pages(db: sqlite3.Connection, n: int) -> float:
    t0 = time.perf_counter()
    last, got = 0, 0
    while got < n:
        rows = db.execute("SELECT id, key, value FROM kv WHERE id > ? ORDER BY id LIMIT 500", (last,)).fetchall()
        if not rows:
            raise BenchFailed(f"raw SQLite read: {got} rows, {n} expected")
        got += len(rows)
        last = rows[-1][0]
    return time.perf_counter() - t0


class RawPostgres:
    """Plain INSERTs from 64 connections (creates); keyset SELECTs of 500 rows (list). Table bench_raw."""

    what = "plain INSERTs, 64 connections"

    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool

    @classmethod
    async def open(cls, dsn: str) -> RawPostgres:
        pool = await asyncpg.create_pool(dsn, min_size=CLIENTS, max_size=CLIENTS)
        await pool.execute("CREATE TABLE IF NOT EXISTS bench_raw "
                           "(id bigserial PRIMARY KEY, key text NOT NULL, value bytea NOT NULL)")
        return cls(pool)

    async def creates(self, n: int, tag: str) -> float:
        bodies = [api.pod_body(f"raw{tag}-{i}") for i in range(n)]  # made beforehand, as the API's clients do
        it = iter(range(n))
        errors: list[str] = []

        async def client() -> None:
            async with self.pool.acquire() as conn:
                for i in it:
                    try:
                        await conn.execute("INSERT INTO bench_raw (key, value) VALUES ($1, $2)",
                                           f"raw/{tag}/{i}", bodies[i])
                    except (OSError, asyncpg.PostgresError) as e:
                        errors.append(f"INSERT: {e}")

        t0 = time.perf_counter()
        await asyncio.gather(*(client() for _ in range(CLIENTS)))
        rate = n / (time.perf_counter() - t0)
        if errors:
            raise BenchFailed(f"{len(errors)} of {n} raw INSERTs failed, first: {errors[0]}")
        return rate

    async def list_pages(self, n: int) -> float:
        have = await self.pool.fetchval("SELECT count(*) FROM bench_raw")
        if have < n:
            body = api.pod_body("fill")
            await self.pool.executemany("INSERT INTO bench_raw (key, value) VALUES ($1, $2)",
                                        [(f"fill/{i}", body) for i in range(n - have)])
        async with self.pool.acquire() as conn:
            t0 = time.perf_counter()
            last, got = 0, 0
            while got < n:
                rows = await conn.fetch("SELECT id, key, value FROM bench_raw WHERE id > $1 ORDER BY id LIMIT 500",
                                        last)
                if not rows:
                    raise BenchFailed(f"raw PostgreSQL read: {got} rows, {n} expected")
                got += len(rows)
                last = rows[-1]["id"]
            return time.perf_counter() - t0

    async def close(self) -> None:
        await self.pool.close()


class RawEtcd:
    """Plain Put RPCs from 64 concurrent calls on one channel (creates); Range pages of 500 keys (list)."""

    what = "plain etcd Puts, 64 clients"

    def __init__(self, endpoint: str) -> None:
        self.channel = grpc.aio.insecure_channel(endpoint.removeprefix("http://"), options=_OPTIONS)
        self.put = self.channel.unary_unary(pb.KV_PUT, request_serializer=pb.PutRequest.SerializeToString,
                                            response_deserializer=pb.PutResponse.FromString)
        self.range = self.channel.unary_unary(pb.KV_RANGE, request_serializer=pb.RangeRequest.SerializeToString,
                                              response_deserializer=pb.RangeResponse.FromString)
        self.written = 0

    async def creates(self, n: int, tag: str) -> float:
        bodies = [api.pod_body(f"raw{tag}-{i}") for i in range(n)]
        it = iter(range(n))
        errors: list[str] = []

        async def client() -> None:
            for i in it:
                try:
                    await self.put(pb.PutRequest(key=RAW_ETCD_PREFIX + f"{tag}/{i:06d}".encode(), value=bodies[i]),
                                   timeout=10)
                except grpc.RpcError as e:
                    errors.append(f"Put: {e}")

        t0 = time.perf_counter()
        await asyncio.gather(*(client() for _ in range(CLIENTS)))
        rate = n / (time.perf_counter() - t0)
        if errors:
            raise BenchFailed(f"{len(errors)} of {n} raw etcd Puts failed, first: {errors[0]}")
        self.written += n
        return rate

    async def list_pages(self, n: int) -> float:
        if self.written < n:
            await self.creates(n - self.written, "fill")
        end = RAW_ETCD_PREFIX[:-1] + bytes([RAW_ETCD_PREFIX[-1] + 1])
        t0 = time.perf_counter()
        key, got = RAW_ETCD_PREFIX, 0
        while got < n:
            resp = await self.range(pb.RangeRequest(key=key, range_end=end, limit=min(500, n - got)), timeout=10)
            if not resp.kvs:
                raise BenchFailed(f"raw etcd read: {got} keys, {n} expected")
            got += len(resp.kvs)
            key = resp.kvs[-1].key + b"\0"
        return time.perf_counter() - t0

    async def close(self) -> None:
        await self.channel.close()


# --- figures through the API ---------------------------------------------------------------------------------


async def cross_watch(writer: api.Target, reader: api.Target, tag: str, count: int,
                      acks: list[float] | None = None) -> list[float]:
    """Seconds from each create's POST start on `writer` to its ADDED event at each of WATCHERS watches on
    `reader` (creates one at a time, WATCH_RATE per second, in namespace "watch"); each POST's own latency
    (to its answer) is appended to `acks`."""
    ns = "/api/v1/namespaces/watch/pods"
    sent: dict[str, float] = {}
    lat: list[float] = []
    prefix = f"wl{tag}-"
    marker = f'"name":"{prefix}'.encode()
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=WATCHERS + 4, ssl=reader.ctx)) as rs, \
            aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=4, ssl=writer.ctx)) as ws:
        async with rs.get(reader.url + ns + "?limit=1", headers=reader.headers) as r:
            if r.status != 200:
                raise BenchFailed(f"list {ns} on the watching server: {r.status} {await r.text()}")
            rv = (await r.json())["metadata"]["resourceVersion"]
        ready = 0
        done = asyncio.Event()

        async def watcher() -> None:
            nonlocal ready
            url = f"{reader.url}{ns}?watch=true&resourceVersion={rv}&timeoutSeconds=300"
            async with rs.get(url, headers=reader.headers, timeout=aiohttp.ClientTimeout(total=None)) as r:
                if r.status != 200:
                    raise BenchFailed(f"watch {ns}: {r.status} {await r.text()}")
                ready += 1
                buf = b""
                async for chunk in r.content.iter_any():
                    now = time.perf_counter()
                    buf += chunk
                    while b"\n" in buf:
                        line, buf = buf.split(b"\n", 1)
                        i = line.find(marker)
                        if i < 0 or b'"type":"ADDED"' not in line:
                            continue
                        name = line[i + 8:line.index(b'"', i + 8)].decode()
                        if name in sent:
                            lat.append(now - sent[name])
                            if len(lat) >= WATCHERS * count:
                                done.set()

        tasks = [asyncio.create_task(watcher()) for _ in range(WATCHERS)]
        try:
            while ready < WATCHERS:
                for task in tasks:
                    if task.done():
                        await task  # a watch that failed to open: its error
                await asyncio.sleep(0.01)
            await asyncio.sleep(0.2)

            async def one(i: int) -> None:
                name = f"{prefix}{i}"
                sent[name] = time.perf_counter()
                async with ws.post(writer.url + ns, data=api.pod_body(name), headers=writer.headers) as r:
                    text = await r.read()
                    if r.status != 201:
                        raise BenchFailed(f"create {name}: {r.status} {text[:300]!r}")
                if acks is not None:
                    acks.append(time.perf_counter() - sent[name])

            await benchlib.paced(WATCH_RATE, count / WATCH_RATE, one)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(done.wait(), 30)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
    if len(lat) < WATCHERS * count:
        raise BenchFailed(f"watch across servers: {len(lat)} of {WATCHERS * count} events arrived within 30 s")
    return lat


async def backend_delivery(opener: Callable[[], Awaitable[Backend]], tag: str, count: int) -> list[float]:
    """Seconds from a create's commit call on one backend to its change on another backend's stream (two
    connections to the same datastore, lite's own backend code, no API), one write at a time at WATCH_RATE/s."""
    writer, reader = await opener(), await opener()
    sent: dict[str, float] = {}
    lat: list[float] = []
    prefix = f"core/configmaps/bench-lat{tag}/"
    value = api.pod_body("lat")
    try:
        stream = reader.changes(await reader.current_rev(), prefix)
        got_all = asyncio.Event()

        async def read() -> None:
            async for batch in stream:
                now = time.perf_counter()
                for ch in batch:
                    lat.append(now - sent[ch.key])
                if len(lat) >= count:
                    got_all.set()
                    return

        task = asyncio.create_task(read())

        async def one(i: int) -> None:
            key = f"{prefix}c{i}"
            sent[key] = time.perf_counter()
            [out] = await writer.commit([Write("create", key, value)])
            if not isinstance(out, int):
                raise BenchFailed(f"backend create {key}: {out!r}")

        await benchlib.paced(WATCH_RATE, count / WATCH_RATE, one)
        try:
            await asyncio.wait_for(got_all.wait(), 30)
        except TimeoutError:
            raise BenchFailed(f"backend delivery: {len(lat)} of {count} changes arrived within 30 s") from None
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
    finally:
        await writer.close()
        await reader.close()
    return lat


async def get_json(t: api.Target, path: str, session: aiohttp.ClientSession) -> tuple[int, Any]:
    async with session.get(t.url + path, headers=t.headers) as r:
        body = await r.read()
        return r.status, orjson.loads(body) if body[:1] == b"{" else body


async def lease_holder(t: api.Target, session: aiohttp.ClientSession) -> str:
    status, body = await get_json(t, LEASE, session)
    return str(body.get("spec", {}).get("holderIdentity") or "") if status == 200 else ""


async def failover_rounds(work: Path, endpoint: str, n: int) -> tuple[list[float], list[float]]:
    """`n` failovers between two whole control planes (see the module docstring): (seconds to the Lease taken,
    seconds to the new Deployment's pods), one of each per round."""
    servers = [await start_server(work, "fo-a", endpoint, *FAST_LEASE),
               await start_server(work, "fo-b", endpoint, *FAST_LEASE)]
    to_lease: list[float] = []
    to_pods: list[float] = []
    try:
        for k in range(n):
            async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=servers[0].ctx)) as s:
                deadline = time.monotonic() + 60
                leader: Server | None = None
                while leader is None:
                    holder = await lease_holder(servers[0], s)
                    found = [x for x in servers if holder and f"{holder}: acquired lease" in x.log_text()]
                    if found:
                        leader = found[0]
                        break
                    if time.monotonic() > deadline:
                        raise BenchFailed(f"failover {k}: no server took the controller Lease within 60 s")
                    await asyncio.sleep(0.1)
                standby = servers[1] if leader is servers[0] else servers[0]
            leader.kill()
            killed = time.perf_counter()
            dep = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": f"after-failover-{k}"},
                   "spec": {"replicas": 2, "selector": {"matchLabels": {"app": f"af{k}"}},
                            "template": {"metadata": {"labels": {"app": f"af{k}"}},
                                         "spec": {"containers": [{"name": "c", "image": "busybox"}]}}}}
            async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=standby.ctx)) as s:
                async with s.post(standby.url + "/apis/apps/v1/namespaces/default/deployments",
                                  data=orjson.dumps(dep), headers=standby.headers) as r:
                    if r.status != 201:
                        raise BenchFailed(f"failover {k}: create Deployment: {r.status} {await r.text()}")
                lease_at = pods_at = None
                while lease_at is None or pods_at is None:
                    if time.perf_counter() - killed > 60:
                        missed = "took no Lease" if lease_at is None else "made no pods"
                        raise BenchFailed(f"failover {k}: the survivor {missed} within 60 s of the kill")
                    if lease_at is None:
                        h = await lease_holder(standby, s)
                        if h and h != holder:
                            lease_at = time.perf_counter() - killed
                    if pods_at is None:
                        status, body = await get_json(
                            standby, f"/api/v1/namespaces/default/pods?labelSelector=app%3Daf{k}", s)
                        if status == 200 and len(body["items"]) == 2:
                            pods_at = time.perf_counter() - killed
                    await asyncio.sleep(0.02)
            to_lease.append(lease_at)
            to_pods.append(pods_at)
            print(f"  failover {k + 1}: Lease taken {lease_at:.2f} s, new Deployment's pods {pods_at:.2f} s after "
                  "the kill", flush=True)
            if k + 1 < n:  # the killed server comes back (same data dir and port) as the next round's standby
                i = servers.index(leader)
                servers[i] = await start_server(work, Path(leader.argv[leader.argv.index("--data-dir") + 1]).name,
                                                endpoint, argv=leader.argv)
    finally:
        for x in servers:
            x.stop()
    return to_lease, to_pods


# --- one backend ---------------------------------------------------------------------------------------------


@dataclass
class Figures:
    creates: list[float]
    raw_creates: list[float]
    cpu_per_create: float
    list_s: float
    raw_list_s: float
    watch: list[float]
    raw_watch: list[float]
    to_lease: list[float]
    to_pods: list[float]
    raw_what: str


async def measure(kind: str, endpoint: str, work: Path, raw: RawSqlite | RawPostgres | RawEtcd,
                  opener: Callable[[], Awaitable[Backend]] | None, args: argparse.Namespace,
                  fresh_endpoint: Callable[[], contextlib.AbstractAsyncContextManager[str]] | None,
                  servers: list[api.Target]) -> Figures:
    """Every figure of one backend; `servers` collects the lite servers (for stopping, and SIGSTOP with SQLite)."""
    per = 1000 if args.quick else 2000
    rounds = args.rounds or (2 if args.quick else 4)
    if 500 + rounds * per > LIST_N:
        raise BenchFailed(f"--rounds {rounds}: {500 + rounds * per} creates would exceed the {LIST_N} pods listed")
    a = await start_server(work, f"{kind}-a", endpoint, *api.API_ONLY)
    servers.append(a)
    await api.ensure_namespace(a, "bench")
    await api.ensure_namespace(a, "watch")
    await api.settle(a, limit=10)
    creates: list[float] = []
    raw_creates: list[float] = []
    cpu: list[float] = []  # the API server's CPU seconds per create, each burst
    p50: list[float] = []  # the median create's latency (s), each burst

    async def lite_burst(n: int, tag: str) -> float:
        a.check_alive()
        before = api.cpu_seconds(a.proc.pid)
        async with api.alone(a, servers) if kind == "sqlite" else contextlib.nullcontext():
            rate, lat = await api.create_burst(a, PODS, n, CLIENTS, tag)
        a.check_alive()
        cpu.append((api.cpu_seconds(a.proc.pid) - before) / n)
        p50.append(statistics.median(lat))
        return rate

    await lite_burst(500, "warm")
    await raw.creates(500, "warm")
    for r in range(rounds):
        order = [("raw", raw.creates), ("api", lite_burst)]
        for name, burst in (order if r % 2 == 0 else order[::-1]):
            rate = await burst(per, f"c{r}")
            (raw_creates if name == "raw" else creates).append(rate)
        print(f"  {kind} round {r + 1}: API {creates[-1]:7.0f} creates/s (p50 {p50[-1] * 1e3:.0f} ms, "
              f"{cpu[-1] * 1e6:.0f} us of server CPU each) | {raw.what} {raw_creates[-1]:7.0f}/s", flush=True)
    round_cpu = cpu[1:]  # not the warm-up burst's
    await lite_burst(LIST_N - 500 - rounds * per, "fill")
    lists: list[float] = []
    raw_lists: list[float] = []
    for r in range(3):  # alternating, A B B A B; the best of each, as bench/api.py's list figure
        if r % 2 == 0:
            lists.append(await api.list_time(a, PODS, repeat=1, expect=LIST_N))
        raw_lists.append(await raw.list_pages(LIST_N))
        if r % 2 == 1:
            lists.append(await api.list_time(a, PODS, repeat=1, expect=LIST_N))
    list_s, raw_list_s = min(lists), min(raw_lists)
    print(f"  {kind} list {LIST_N} pods (limit=500 pages): {list_s * 1e3:.0f} ms | raw pages: "
          f"{raw_list_s * 1e3:.0f} ms", flush=True)
    # Watch delivery: a second server (PostgreSQL, etcd) joins and watches; SQLite's watchers are on A itself.
    b = a
    if kind != "sqlite":
        b = await start_server(work, f"{kind}-b", endpoint, *api.API_ONLY)
        servers.append(b)
        await api.settle(b, limit=10)
    count = 150 if args.quick else 200
    watch: list[float] = []
    raw_watch: list[float] = []
    acks: list[float] = []
    for r in range(args.watch_rounds or (1 if args.quick else 2)):
        steps: list[tuple[str, Callable[[], Awaitable[list[float]]]]] = [
            ("api", lambda r=r: cross_watch(a, b, str(r), count, acks))]
        if opener is not None:
            steps.insert(0, ("raw", lambda r=r: backend_delivery(opener, str(r), count)))
        for name, step in (steps if r % 2 == 0 else steps[::-1]):
            (raw_watch if name == "raw" else watch).extend(await step())
    print(f"  {kind} watch delivery ({'A to B' if b is not a else 'one server'}): p50 "
          f"{quantile(watch, 0.5) * 1e3:.1f} ms, p99 {quantile(watch, 0.99) * 1e3:.1f} ms (the POSTs' own answers: "
          f"p50 {quantile(acks, 0.5) * 1e3:.1f} ms, p99 {quantile(acks, 0.99) * 1e3:.1f} ms)"
          + (f" | backend to backend p50 {quantile(raw_watch, 0.5) * 1e3:.1f} ms, p99 "
             f"{quantile(raw_watch, 0.99) * 1e3:.1f} ms" if raw_watch else ""), flush=True)
    for t in (a, b):
        t.stop()
    to_lease: list[float] = []
    to_pods: list[float] = []
    if fresh_endpoint is not None and args.failovers:
        async with fresh_endpoint() as fresh:
            to_lease, to_pods = await failover_rounds(work, fresh, args.failovers)
    return Figures(creates, raw_creates, med(round_cpu), list_s, raw_list_s, watch, raw_watch, to_lease, to_pods,
                   raw.what)


async def run_sqlite(args: argparse.Namespace, work: Path) -> Figures:
    base = await api.start_baseline(work)
    servers: list[api.Target] = [base]
    try:
        raw = RawSqlite(base, work / "b.db", servers)
        return await measure("sqlite", f"sqlite://{work / 'sqlite-store' / 'state.db'}", work, raw, None, args,
                             None, servers)
    finally:
        for t in servers:
            t.stop()


async def run_postgres(args: argparse.Namespace, work: Path) -> Figures:
    server = await asyncio.to_thread(PgServer.start, durable=True)
    servers: list[api.Target] = []
    try:
        async with server.database() as dsn:
            raw = await RawPostgres.open(dsn)
            try:
                return await measure("postgres", dsn, work, raw, lambda: PgBackend.open(dsn), args,
                                     server.database, servers)
            finally:
                for t in servers:
                    t.stop()
                await raw.close()
    finally:
        await asyncio.to_thread(server.stop)


@contextlib.asynccontextmanager
async def etcd_server(work: Path, name: str) -> AsyncIterator[EtcdServer]:
    root = work / name
    root.mkdir()
    server = EtcdServer(root)
    try:
        await asyncio.to_thread(server.start)
        yield server
    finally:
        await asyncio.to_thread(server.stop)
        shutil.rmtree(root, ignore_errors=True)


async def run_etcd(args: argparse.Namespace, work: Path) -> Figures:
    @contextlib.asynccontextmanager
    async def fresh() -> AsyncIterator[str]:
        async with etcd_server(work, "etcd-failover") as other:
            yield other.endpoint

    servers: list[api.Target] = []
    async with etcd_server(work, "etcd") as server:
        raw = RawEtcd(server.endpoint)
        try:
            return await measure("etcd", server.endpoint, work, raw, lambda: EtcdBackend.open([server.endpoint]),
                                 args, fresh, servers)
        finally:
            for t in servers:
                t.stop()
            await raw.close()


def missing(kind: str) -> str | None:
    if kind == "postgres":
        return missing_reason()
    if kind == "etcd" and shutil.which("etcd") is None and not Path(ETCD).exists():
        return "etcd is not installed (Debian package etcd-server)"
    if kind == "etcd" and shutil.which("etcdctl") is None and not Path("/usr/bin/etcdctl").exists():
        return "etcdctl is not installed (Debian package etcd-client)"
    return None


# --- the table -----------------------------------------------------------------------------------------------


def fmt(x: float | None) -> str:
    if x is None or x != x:
        return "—"
    if abs(x) >= 100:
        return f"{x:,.0f}"
    if abs(x) >= 10:
        return f"{x:.1f}"
    return f"{x:.2f}"


def rows_of(kind: str, f: Figures, res: benchlib.Results) -> list[Row]:
    """The table's rows for one backend, and its figures recorded in `res` (keys prefixed with the backend)."""
    rate, raw_rate = med(f.creates), med(f.raw_creates)
    pairs = med([x / y for x, y in zip(f.creates, f.raw_creates, strict=True)])
    res.set(f"{kind}_creates_per_s", rate)
    res.set(f"{kind}_raw_creates_per_s", raw_rate)
    res.set(f"{kind}_creates_vs_raw_pairs", pairs)
    res.set(f"{kind}_api_cpu_us_per_create", f.cpu_per_create * 1e6)
    res.set(f"{kind}_list_ms", f.list_s * 1e3)
    res.set(f"{kind}_raw_list_ms", f.raw_list_s * 1e3)
    rows = [
        Row("creates/s through the API, 64 clients", kind, f"{fmt(rate)} /s", f"{fmt(raw_rate)} ({f.raw_what})",
            f"{fmt(rate / raw_rate)} (rounds {fmt(pairs)})", "—", "info"),
        Row("API server CPU per create (its /proc time over the burst)", kind, f"{fmt(f.cpu_per_create * 1e6)} us",
            "—", "—", "—", "info"),
        Row(f"list {LIST_N:,} pods (limit=500 pages)", kind, f"{fmt(f.list_s * 1e3)} ms",
            f"{fmt(f.raw_list_s * 1e3)} (raw reads, pages of 500 (ms))", fmt(f.list_s / f.raw_list_s), "—", "info"),
    ]
    p50, p99 = quantile(f.watch, 0.5) * 1e3, quantile(f.watch, 0.99) * 1e3
    res.set(f"{kind}_watch_p50_ms", p50)
    res.set(f"{kind}_watch_p99_ms", p99)
    where = "same server (SQLite: one server)" if kind == "sqlite" else "write on A, watcher on B"
    if f.raw_watch:
        b50, b99 = quantile(f.raw_watch, 0.5) * 1e3, quantile(f.raw_watch, 0.99) * 1e3
        res.set(f"{kind}_backend_watch_p50_ms", b50)
        res.set(f"{kind}_backend_watch_p99_ms", b99)
        base50, base99 = f"{fmt(b50)} (backend to backend (ms))", f"{fmt(b99)} (backend to backend (ms))"
        r50, r99 = fmt(p50 / b50), fmt(p99 / b99)
    else:
        base50 = base99 = r50 = r99 = "—"
    rows += [
        Row(f"watch delivery p50, {where}", kind, f"{fmt(p50)} ms", base50, r50, "—", "info"),
        Row(f"watch delivery p99, {where}", kind, f"{fmt(p99)} ms", base99, r99, "<= 50 ms",
            "pass" if p99 <= 50 else "MISS"),
    ]
    if kind == "sqlite":
        rows.append(Row("failover: kill -9 of the Lease holder to a new Deployment's pods", kind, "—", "—", "—",
                        "—", "not measured: SQLite belongs to one server"))
    elif f.to_pods:
        lease, pods = med(f.to_lease), med(f.to_pods)
        res.set(f"{kind}_failover_lease_s", lease)
        res.set(f"{kind}_failover_s", pods)
        n = f"median of {len(f.to_pods)}" if len(f.to_pods) > 1 else "1 round"
        rows += [
            Row(f"failover: kill -9 of the Lease holder to the other holding it ({n})", kind, f"{fmt(lease)} s",
                f"{fmt(LEASE_S)} (lease duration (s))", fmt(lease / LEASE_S), "<= 20 s",
                "pass" if lease <= 20 else "MISS"),
            Row(f"failover: kill -9 to the new Deployment's pods ({n})", kind, f"{fmt(pods)} s",
                f"{fmt(LEASE_S)} (lease duration (s))", fmt(pods / LEASE_S), "<= 20 s",
                "pass" if pods <= 20 else "MISS"),
        ]
    return rows


def print_table(rows: list[Row]) -> None:
    print("| figure | backend | value | baseline (same run) | ratio | target | result |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r.figure} | {r.backend} | {r.value} | {r.baseline} | {r.ratio} | {r.target} | {r.status} |")


async def main(args: argparse.Namespace, res: benchlib.Results) -> None:
    kinds = [k for k in args.backends.split(",") if k]
    unknown = [k for k in kinds if k not in BACKENDS]
    if unknown:
        raise BenchFailed(f"unknown backend(s) {', '.join(unknown)}; known: {', '.join(BACKENDS)}")
    runners = {"sqlite": run_sqlite, "postgres": run_postgres, "etcd": run_etcd}
    rows: list[Row] = []
    t_all = time.monotonic()
    load0 = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="lite-bench-store-") as tmp:
        for kind in kinds:
            reason = missing(kind)
            if reason is not None:
                print(f"{kind}: not measured: {reason}", flush=True)
                rows.append(Row("every figure", kind, "—", "—", "—", "—", f"not measured: {reason}"))
                continue
            work = Path(tmp) / kind
            work.mkdir()
            t0 = time.monotonic()
            print(f"== {kind} ==", flush=True)
            figures = await runners[kind](args, work)
            rows += rows_of(kind, figures, res)
            res.set(f"{kind}_seconds", time.monotonic() - t0)
            print(f"  {kind}: {time.monotonic() - t0:.0f} s", flush=True)
    print(f"\nlite datastores through the API{' (--quick)' if args.quick else ''}: 2 KB pods, {CLIENTS} clients over "
          f"TLS, {os.cpu_count()} cores, load average {load0:.1f} before, {os.getloadavg()[0]:.1f} after, "
          f"{time.monotonic() - t_all:.0f} s")
    print_table(rows)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer and smaller rounds (the 10,000 pods stay)")
    ap.add_argument("--backends", default=",".join(BACKENDS), help="comma-separated: " + ", ".join(BACKENDS))
    ap.add_argument("--rounds", type=int, default=0, help="create rounds per side (default 4; 2 with --quick)")
    ap.add_argument("--watch-rounds", type=int, default=0, help="watch rounds per side (default 2; 1 with --quick)")
    ap.add_argument("--failovers", type=int, default=-1, help="failovers per shared backend (default 2; 1 --quick)")
    benchlib.add_args(ap)
    cli = ap.parse_args()
    if cli.failovers < 0:
        cli.failovers = 1 if cli.quick else 2
    results = benchlib.Results.from_args("store", cli)
    benchlib.run(results, lambda: asyncio.run(main(cli, results)))
