"""API server benchmark: lite against a bare aiohttp+SQLite baseline measured in the same run.

Prints (issues 2 and 19): creates/s and p50/p99 with 64 concurrent clients and 2 KB pods, for the baseline (a
bare aiohttp handler doing one group-committed SQLite insert per request, over TLS like lite), the API server
alone and the whole control plane, in alternating rounds (each server measured while the others are stopped
with SIGSTOP), with the ratios; p99 at a paced 1,000 creates/s (and the baseline's); gets/s; the time to list
10,000 pods; watch delivery latency with 100 watchers; server RSS per stored pod above idle for the API alone
and for the whole control plane with 10,000 pods, before and after a restart on them; cold start to /readyz.

Usage: python bench/api.py [--pods 10000] [--quick] [--memory-only] [--only memory] [--json FILE]
       python bench/api.py --creates-only [--rounds N] [--quick]   (the API alone and the baseline only)
       python bench/api.py --cp-only [--rounds N] [--quick]        (the whole control plane against the API alone only)
       python bench/api.py --paced-only [--pods 10000] [--rounds 3] [--json FILE]
`--paced-only` measures only the paced 1,000 creates/s: the baseline and the API alone filled with --pods pods
first (as the whole run has them when it paces), then paced rounds alternating baseline / API alone (A B B A ...),
each measured alone; it prints each round's p50/p99 and their medians.
`--memory-only` measures only the API alone's RSS per stored pod. `--only memory` runs only the whole control
plane's memory figures (10,000 pods created and settled, a restart on them, and a start on an API-alone data dir
of 1.3 x --pods pods it never saw), without the throughput rounds or the baseline server; `--onto-pods N` sets
that last count.
Exits 1, the error on the last line, when any request fails (bench/benchlib.py).
Traffic goes only to 127.0.0.1. The servers are child processes and are stopped at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import os
import signal
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import yaml

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import benchlib  # noqa: E402
from benchlib import BenchFailed, paced  # noqa: E402


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def pod_body(name: str, pad: int = 2048) -> bytes:
    """A realistic ~2 KB pod."""
    pod: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "labels": {"app": "bench", "tier": "web", "release": "stable"},
            "annotations": {"bench/note": ""},
        },
        "spec": {
            "containers": [{
                "name": "app",
                "image": "registry.local/bench/app:1.2.3",
                "ports": [{"containerPort": 8080, "name": "http"}],
                "env": [{"name": f"VAR_{i}", "value": f"value-{i}-abcdefghij"} for i in range(12)],
                "resources": {"requests": {"cpu": "100m", "memory": "64Mi"},
                              "limits": {"cpu": "500m", "memory": "128Mi"}},
            }],
        },
    }
    size = len(orjson.dumps(pod))
    pod["metadata"]["annotations"]["bench/note"] = "x" * max(0, pad - size)
    return orjson.dumps(pod)


def pct(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, round(p / 100 * (len(s) - 1)))]


def rss_mb(pid: int, field: str = "VmRSS") -> float:
    """RSS of a process and its children (a PyInstaller/onefile parent would hide the worker otherwise);
    `field` "VmHWM" gives their peaks instead."""
    total = 0
    pids = [pid]
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        pids += [int(c) for c in children]
    except OSError:
        pass
    for p in pids:
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith(field + ":"):
                    total += int(line.split()[1])
        except OSError:
            pass
    return total / 1024


class Target:
    """A running server: base URL, TLS context, auth header, process."""

    def __init__(self, proc: subprocess.Popen[bytes], url: str, ctx: ssl.SSLContext, token: str) -> None:
        self.proc, self.url, self.ctx, self.token = proc, url, ctx, token
        self.headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json",
                        "Accept": "application/json"}

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


async def wait_ready(url: str, ctx: ssl.SSLContext, timeout: float = 30.0) -> float:
    t0 = time.perf_counter()
    async with aiohttp.ClientSession() as s:
        while time.perf_counter() - t0 < timeout:
            try:
                async with s.get(url + "/readyz", ssl=ctx) as r:
                    if r.status == 200:
                        return time.perf_counter() - t0
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.01)
    raise RuntimeError(f"{url} not ready after {timeout}s")


def lite_command() -> list[str]:
    exe = Path(sys.executable).with_name("lite")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "lite.cli.main"]


API_ONLY = ("--disable-scheduler", "--disable-controller-manager")


async def start_lite(data_dir: Path, *flags: str, env: dict[str, str] | None = None) -> tuple[Target, float]:
    port = free_port()
    t0 = time.perf_counter()
    proc = subprocess.Popen([*lite_command(), "server", "--data-dir", str(data_dir), "--https-listen-port",
                             str(port), "--bind-address", "127.0.0.1", "--disable-agent", *flags],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env=None if env is None else {**os.environ, **env})
    kubeconfig = data_dir / "kubeconfig.yaml"
    while not kubeconfig.exists():
        if proc.poll() is not None:
            raise RuntimeError("lite server exited at start")
        await asyncio.sleep(0.005)
    await asyncio.sleep(0.05)
    cfg = yaml.safe_load(kubeconfig.read_text())
    ca = base64.b64decode(cfg["clusters"][0]["cluster"]["certificate-authority-data"])
    ctx = ssl.create_default_context(cadata=ca.decode())
    token = cfg["users"][0]["user"]["token"]
    url = f"https://127.0.0.1:{port}"
    await wait_ready(url, ctx)
    return Target(proc, url, ctx, token), time.perf_counter() - t0


async def start_baseline(work: Path) -> Target:
    """The baseline server runs `bench/baseline_server.py` in its own process, with its own CA."""
    import datetime as dt
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "baseline")])
    now = dt.datetime.now(dt.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - dt.timedelta(minutes=1))
            .not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                           critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    (work / "b.crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (work / "b.key").write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                   serialization.NoEncryption()))
    port = free_port()
    proc = subprocess.Popen([sys.executable, str(HERE / "baseline_server.py"), str(port), str(work / "b.db"),
                             str(work / "b.crt"), str(work / "b.key")])
    ctx = ssl.create_default_context(cadata=(work / "b.crt").read_text())
    url = f"https://127.0.0.1:{port}"
    await wait_ready(url, ctx)
    return Target(proc, url, ctx, "none")


async def create_burst(t: Target, path: str, n: int, concurrency: int, prefix: str) -> tuple[float, list[float]]:
    """n creates with `concurrency` clients; returns (creates/s, latencies)."""
    lat: list[float] = []
    conn = aiohttp.TCPConnector(limit=concurrency, ssl=t.ctx)
    next_i = 0
    errors: list[str] = []

    async def worker(s: aiohttp.ClientSession) -> None:
        nonlocal next_i
        while next_i < n:
            i = next_i
            next_i += 1
            body = pod_body(f"{prefix}-{i}")
            t0 = time.perf_counter()
            async with s.post(t.url + path, data=body, headers=t.headers) as r:
                text = await r.read()
                if r.status != 201:
                    errors.append(f"{r.status} {text[:300]!r}")
            lat.append(time.perf_counter() - t0)

    async with aiohttp.ClientSession(connector=conn) as s:
        t0 = time.perf_counter()
        await asyncio.gather(*(worker(s) for _ in range(concurrency)))
        el = time.perf_counter() - t0
    if errors:
        raise BenchFailed(f"{len(errors)} of {n} creates to {path} failed, first: {errors[0]}")
    return n / el, lat


async def paced_creates(t: Target, path: str, rate: float, seconds: float, prefix: str,
                        connections: int = 64) -> list[float]:
    """Creates started at a fixed rate whatever the answers do (open loop); latency from start to answer.

    Like a real client (client-go keeps its connections; kubectl multiplexes on HTTP/2) it uses a warm pool
    of keep-alive connections, the same 64 as the burst test. Starting from an empty pool of 256 made
    every request of the first second open its own TLS connection: a handshake storm (256 handshakes,
    each costing the server about a millisecond of CPU) exactly while the server was catching up, which
    measured the client's connection policy rather than the server. A request finding all connections
    busy waits for one, and that wait is part of its latency.
    """
    lat: list[float] = []
    errors: list[str] = []
    conn = aiohttp.TCPConnector(limit=connections, ssl=t.ctx)
    async with aiohttp.ClientSession(connector=conn) as s:
        async def warm(i: int) -> None:
            async with s.get(f"{t.url}{path}?limit=1", headers=t.headers) as r:
                text = await r.read()
                if r.status != 200:
                    errors.append(f"warm-up list: {r.status} {text[:300]!r}")

        await asyncio.gather(*(warm(i) for i in range(connections)))

        async def one(i: int) -> None:
            t0 = time.perf_counter()
            async with s.post(t.url + path, data=pod_body(f"{prefix}-{i}"), headers=t.headers) as r:
                text = await r.read()
                if r.status != 201:
                    errors.append(f"create: {r.status} {text[:300]!r}")
            lat.append(time.perf_counter() - t0)

        await paced(rate, seconds, one)
    if errors:
        raise BenchFailed(f"{len(errors)} paced requests to {path} failed, first: {errors[0]}")
    return lat


async def gets(t: Target, path: str, names: list[str], n: int, concurrency: int) -> float:
    conn = aiohttp.TCPConnector(limit=concurrency, ssl=t.ctx)
    done = 0
    errors: list[str] = []

    async def worker(s: aiohttp.ClientSession, k: int) -> None:
        nonlocal done
        i = k
        while done < n:
            done += 1
            async with s.get(f"{t.url}{path}/{names[i % len(names)]}", headers=t.headers) as r:
                text = await r.read()
                if r.status != 200:
                    errors.append(f"get {names[i % len(names)]}: {r.status} {text[:300]!r}")
            i += concurrency

    async with aiohttp.ClientSession(connector=conn) as s:
        t0 = time.perf_counter()
        await asyncio.gather(*(worker(s, k) for k in range(concurrency)))
        rate = n / (time.perf_counter() - t0)
    if errors:
        raise BenchFailed(f"{len(errors)} of {n} gets failed, first: {errors[0]}")
    return rate


async def watch_latency(t: Target, ns_path: str, watchers: int, rate: float, count: int) -> list[float]:
    """Start `watchers` watch streams, create `count` pods at `rate`/s; latency from POST start to each event."""
    sent: dict[str, float] = {}
    lat: list[float] = []
    conn = aiohttp.TCPConnector(limit=watchers + 64, ssl=t.ctx)
    async with aiohttp.ClientSession(connector=conn) as s:
        async with s.get(t.url + ns_path + "?limit=1", headers=t.headers) as r:
            if r.status != 200:
                raise BenchFailed(f"list {ns_path}: {r.status} {await r.text()}")
            rv = (await r.json())["metadata"]["resourceVersion"]
        ready = 0
        got = 0
        all_done = asyncio.Event()

        async def watcher() -> None:
            nonlocal ready, got
            url = f"{t.url}{ns_path}?watch=true&resourceVersion={rv}&timeoutSeconds=120"
            async with s.get(url, headers=t.headers, timeout=aiohttp.ClientTimeout(total=None)) as r:
                if r.status != 200:
                    raise BenchFailed(f"watch {ns_path}: {r.status} {await r.text()}")
                ready += 1
                buf = b""
                async for chunk in r.content.iter_any():
                    now = time.perf_counter()
                    buf += chunk
                    while b"\n" in buf:
                        line, buf = buf.split(b"\n", 1)
                        i = line.find(b'"name":"wl-')
                        if i < 0:
                            continue
                        name = line[i + 8:line.index(b'"', i + 8)].decode()
                        if name in sent and b'"type":"ADDED"' in line:
                            lat.append(now - sent[name])
                            got += 1
                            if got >= watchers * count:
                                all_done.set()

        tasks = [asyncio.create_task(watcher()) for _ in range(watchers)]
        while ready < watchers:
            for task in tasks:
                if task.done():
                    await task  # a watch that failed to open: its error
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.2)
        start = time.perf_counter()
        for i in range(count):
            delay = start + i / rate - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            name = f"wl-{i}"
            sent[name] = time.perf_counter()
            async with s.post(t.url + ns_path, data=pod_body(name), headers=t.headers) as r:
                text = await r.read()
                if r.status != 201:
                    raise BenchFailed(f"create {name}: {r.status} {text[:300]!r}")
        try:
            await asyncio.wait_for(all_done.wait(), 30)
        except TimeoutError:
            pass
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    if got < watchers * count:
        raise BenchFailed(f"watch: {got} of {watchers * count} events arrived within 30 s")
    return lat


async def list_time(t: Target, path: str, repeat: int = 3, expect: int | None = None) -> float:
    best = float("inf")
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=t.ctx)) as s:
        for _ in range(repeat):
            t0 = time.perf_counter()
            n = 0
            cont = ""
            while True:
                url = f"{t.url}{path}?limit=500" + (f"&continue={cont}" if cont else "")
                async with s.get(url, headers=t.headers) as r:
                    text = await r.read()
                    if r.status != 200:
                        raise BenchFailed(f"list {path}: {r.status} {text[:300]!r}")
                    body = orjson.loads(text)
                n += len(body["items"])
                cont = body["metadata"].get("continue", "")
                if not cont:
                    break
            best = min(best, time.perf_counter() - t0)
            if expect is not None and n != expect:
                raise BenchFailed(f"list {path}: {n} items, expected {expect}")
    return best


async def ensure_namespace(t: Target, ns: str) -> None:
    """The namespace and its `default` ServiceAccount: with the controller manager off (API_ONLY) nothing else
    makes the account, and the ServiceAccount admission refuses every pod without it, as upstream does."""
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}
    account = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default"}}
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=t.ctx)) as s:
        for path, body in (("/api/v1/namespaces", namespace), (f"/api/v1/namespaces/{ns}/serviceaccounts", account)):
            async with s.post(t.url + path, data=orjson.dumps(body), headers=t.headers) as r:
                if r.status not in (201, 409):
                    raise BenchFailed(f"create {path}: {r.status} {await r.text()}")


def ms(x: float) -> str:
    return f"{x * 1000:.1f} ms"


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def settle(t: Target, limit: float = 20.0) -> float:
    """Wait until the server is quiet (under 5 % of a core over half a second: informers have listed, the
    controllers and the scheduler have caught up), at most `limit` seconds; returns the seconds waited."""
    t0 = time.perf_counter()
    last = cpu_seconds(t.proc.pid)
    while time.perf_counter() - t0 < limit:
        await asyncio.sleep(0.5)
        now = cpu_seconds(t.proc.pid)
        if now - last < 0.025:
            break
        last = now
    return time.perf_counter() - t0


async def count_pods(t: Target) -> int:
    """Pods stored in all namespaces (one list of one item and its remainingItemCount)."""
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=t.ctx)) as s, \
            s.get(t.url + "/api/v1/pods?limit=1", headers=t.headers) as r:
        text = await r.read()
        if r.status != 200:
            raise BenchFailed(f"list pods: {r.status} {text[:300]!r}")
        body = orjson.loads(text)
    return len(body["items"]) + int(body["metadata"].get("remainingItemCount") or 0)


def kb_per_pod(rss: float, idle: float, pods: int) -> float:
    return (rss - idle) * 1024 / pods


@contextlib.asynccontextmanager
async def alone(target: Target, servers: list[Target]) -> AsyncIterator[None]:
    """The other servers stopped (SIGSTOP) while `target` is measured, so none of them takes CPU from it (a
    whole control plane keeps working on its Pending pods); continued (SIGCONT) afterwards, also on failure."""
    others = [t for t in servers if t is not target and t.proc.poll() is None]
    for t in others:
        t.proc.send_signal(signal.SIGSTOP)
    try:
        yield
    finally:
        for t in others:
            t.proc.send_signal(signal.SIGCONT)


async def creates_only(args: argparse.Namespace, res: benchlib.Results) -> None:
    """`--creates-only`: the baseline and the API server alone, their bursts alternating (A B B A ...), each
    measured while the other is stopped; creates/s, their ratio, and each server's CPU per create (user +
    system, all its threads: what a create costs it, steadier than a rate on a shared machine)."""
    rounds = args.rounds or (4 if args.quick else 6)
    per = 500 if args.quick else 1000
    path = "/api/v1/namespaces/bench/pods"
    with tempfile.TemporaryDirectory(prefix="lite-bench-") as tmp:
        work = Path(tmp)
        base = await start_baseline(work)
        servers = [base]
        try:
            lite, _ = await start_lite(work / "lite", *API_ONLY)
            servers.append(lite)
            await ensure_namespace(lite, "bench")
            await settle(lite)
            order = [("base", base, "/pods"), ("api", lite, path)]
            for _, t, p in order:
                async with alone(t, servers):
                    await create_burst(t, p, 500, 64, "warm")
            rates: dict[str, list[float]] = {name: [] for name, _, _ in order}
            cpu: dict[str, list[float]] = {name: [] for name, _, _ in order}
            for r in range(rounds):
                for name, t, p in (order if r % 2 == 0 else order[::-1]):
                    async with alone(t, servers):
                        before = cpu_seconds(t.proc.pid)
                        got, _ = await create_burst(t, p, per, 64, f"c{r}")
                        cpu[name].append((cpu_seconds(t.proc.pid) - before) / per)
                    rates[name].append(got)
        finally:
            for t in servers:
                t.stop()
    b_rate, rate = statistics.median(rates["base"]), statistics.median(rates["api"])
    b_cpu, a_cpu = statistics.median(cpu["base"]), statistics.median(cpu["api"])
    pairs = statistics.median(a / b for a, b in zip(rates["api"], rates["base"], strict=True))
    res.set("baseline_creates_per_s", b_rate)
    res.set("api_creates_per_s", rate)
    res.set("api_vs_baseline", rate / b_rate)
    res.set("api_vs_baseline_pairs", pairs)
    res.set("baseline_cpu_us_per_create", b_cpu * 1e6)
    res.set("api_cpu_us_per_create", a_cpu * 1e6)
    print("== lite API alone vs the baseline: creates only (2 KB pods, 64 concurrent clients, TLS) ==")
    print(f"baseline: {b_rate:8.0f} creates/s  {b_cpu * 1e6:6.0f} us CPU per create")
    print(f"lite:     {rate:8.0f} creates/s  {a_cpu * 1e6:6.0f} us CPU per create")
    print(f"ratio lite/baseline: {rate / b_rate:.2f} (median of per-round ratios {pairs:.2f}; rounds lite/baseline: "
          f"{' '.join(f'{x:.0f}/{y:.0f}' for x, y in zip(rates['api'], rates['base'], strict=True))}); "
          f"CPU per create lite/baseline: {a_cpu / b_cpu:.2f}")


async def cp_only(args: argparse.Namespace, res: benchlib.Results) -> None:
    """`--cp-only`: the API alone and the whole control plane (no nodes), their bursts alternating (A B B A
    ...), each measured while the other is stopped; creates/s, their ratio, and each server's CPU per create
    (the burst and the settling after it: the whole control plane's controllers and scheduler catch up then).
    `--cp-variant NAME=VALUE` adds a third server, a whole control plane with that environment variable set
    (for comparing an experiment against the unchanged one in the same run)."""
    rounds = args.rounds or (4 if args.quick else 6)
    per = 500 if args.quick else 1000
    path = "/api/v1/namespaces/bench/pods"
    with tempfile.TemporaryDirectory(prefix="lite-bench-") as tmp:
        work = Path(tmp)
        servers: list[Target] = []
        try:
            lite, _ = await start_lite(work / "lite", *API_ONLY)
            servers.append(lite)
            full, _ = await start_lite(work / "full")
            servers.append(full)
            order = [("api", lite), ("full", full)]
            if args.cp_variant:
                k, _, v = args.cp_variant.partition("=")
                variant, _ = await start_lite(work / "variant", env={k: v})
                servers.append(variant)
                order.append(("variant", variant))
            for _, t in order:
                await ensure_namespace(t, "bench")
                await settle(t)
            for _, t in order:
                async with alone(t, servers):
                    await create_burst(t, path, 500, 64, "warm")
                    await settle(t, limit=10.0)
            rates: dict[str, list[float]] = {name: [] for name, _ in order}
            cpu: dict[str, list[float]] = {name: [] for name, _ in order}
            for r in range(rounds):
                for name, t in (order if r % 2 == 0 else order[::-1]):
                    async with alone(t, servers):
                        before = cpu_seconds(t.proc.pid)
                        got, _ = await create_burst(t, path, per, 64, f"c{r}")
                        await settle(t, limit=10.0)
                        cpu[name].append((cpu_seconds(t.proc.pid) - before) / per)
                    rates[name].append(got)
        finally:
            for t in servers:
                t.stop()
    print("== lite whole control plane (no nodes) vs the API alone: creates only (2 KB pods, 64 clients, TLS) ==")
    api_rate, api_cpu = statistics.median(rates["api"]), statistics.median(cpu["api"])
    res.set("api_creates_per_s", api_rate)
    res.set("api_cpu_us_per_create", api_cpu * 1e6)
    for name, _ in order:
        rate, c = statistics.median(rates[name]), statistics.median(cpu[name])
        pairs = statistics.median(a / b for a, b in zip(rates[name], rates["api"], strict=True))
        if name != "api":
            res.set(f"{name}_creates_per_s", rate)
            res.set(f"{name}_vs_api", rate / api_rate)
            res.set(f"{name}_vs_api_pairs", pairs)
            res.set(f"{name}_cpu_us_per_create", c * 1e6)
        print(f"{name:8} {rate:8.0f} creates/s ({rate / api_rate:.2f} of the API alone; median of per-round ratios "
              f"{pairs:.2f})  {c * 1e6:6.0f} us CPU per create ({c / api_cpu:.2f} x)  rounds: "
              f"{' '.join(f'{x:.0f}' for x in rates[name])}")


async def paced_only(args: argparse.Namespace, res: benchlib.Results) -> None:
    """Only the paced figure (see the module docstring), in `rounds` alternating rounds."""
    path = "/api/v1/namespaces/bench/pods"
    seconds = 3.0 if args.quick else 5.0
    rounds = args.rounds or 3
    with tempfile.TemporaryDirectory(prefix="lite-bench-") as tmp:
        work = Path(tmp)
        base = await start_baseline(work)
        servers = [base]
        try:
            lite, _ = await start_lite(work / "lite", *API_ONLY)
            servers.append(lite)
            await ensure_namespace(lite, "bench")
            await settle(lite)
            idle = rss_mb(lite.proc.pid)
            async with alone(lite, servers):
                await create_burst(lite, path, max(args.pods, 500), 64, "fill")
                await settle(lite)
            filled = rss_mb(lite.proc.pid)
            async with alone(base, servers):
                await create_burst(base, "/pods", 500, 64, "warm")
            p99s: dict[str, list[float]] = {"base": [], "api": []}
            p50s: dict[str, list[float]] = {"base": [], "api": []}
            order = [("base", base, "/pods"), ("api", lite, path)]
            for r in range(rounds):
                for name, t, p in (order if r % 2 == 0 else order[::-1]):
                    async with alone(t, servers):
                        started = time.time()
                        lat = await paced_creates(t, p, 1000, seconds, f"p{r}")
                    p99s[name].append(pct(lat, 99) * 1000)
                    p50s[name].append(pct(lat, 50) * 1000)
                    print(f"round {r} {name:4}: p50 {pct(lat, 50) * 1000:6.2f} ms  p99 {pct(lat, 99) * 1000:6.2f} ms"
                          f"  max {max(lat) * 1000:6.1f} ms  (wall {started:.3f}..{time.time():.3f})", flush=True)
            rss = rss_mb(lite.proc.pid)
        finally:
            for t in servers:
                t.stop()
    stored = max(args.pods, 500) + rounds * int(1000 * seconds)
    p99, b_p99 = statistics.median(p99s["api"]), statistics.median(p99s["base"])
    res.set("paced_create_p50_ms", statistics.median(p50s["api"]))
    res.set("paced_create_p99_ms", p99)
    res.set("baseline_paced_create_p99_ms", b_p99)
    res.set("api_kb_per_pod", kb_per_pod(rss, idle, stored))
    print(f"paced 1,000 creates/s, median of {rounds} rounds: API alone p99 {p99:.2f} ms, "
          f"baseline p99 {b_p99:.2f} ms (ratio {p99 / b_p99:.2f})")
    print(f"server RSS idle {idle:.0f} MB, filled with {max(args.pods, 500)} pods {filled:.0f} MB, "
          f"after the rounds ({stored} pods) {rss:.0f} MB: {kb_per_pod(rss, idle, stored):.1f} KB/pod above idle")


async def main(args: argparse.Namespace, res: benchlib.Results) -> None:
    if args.creates_only:
        await creates_only(args, res)
        return
    if args.paced_only:
        await paced_only(args, res)
        return
    if args.cp_only:
        await cp_only(args, res)
        return
    burst = 2000 if args.quick else 5000
    rounds = 4 if args.quick else 5
    per = burst // rounds
    pods = max(args.pods, 500 + rounds * per)
    path = "/api/v1/namespaces/bench/pods"
    paced_s = 3 if args.quick else 5
    with tempfile.TemporaryDirectory(prefix="lite-bench-") as tmp:
        work = Path(tmp)
        # Three servers at once: the baseline, the API server alone (as the baseline is: no scheduler or
        # controllers reacting to each pod), and the whole control plane (controllers, scheduler, informers; no
        # nodes, so every pod stays Pending). Their bursts alternate, A B C C B A ..., each measured alone.
        base = await start_baseline(work)
        servers = [base]
        try:
            lite, cold_first = await start_lite(work / "lite", *API_ONLY)
            servers.append(lite)
            full, cold_fresh = await start_lite(work / "full")
            servers.append(full)
            for t in (lite, full):
                await ensure_namespace(t, "bench")
                await settle(t)
            idle, full_idle = rss_mb(lite.proc.pid), rss_mb(full.proc.pid)
            order = [("base", base, "/pods"), ("api", lite, path), ("full", full, path)]
            for _, t, p in order:
                async with alone(t, servers):
                    await create_burst(t, p, 500, 64, "warm")
            rates: dict[str, list[float]] = {name: [] for name, _, _ in order}
            lats: dict[str, list[float]] = {name: [] for name, _, _ in order}
            for r in range(rounds):
                for name, t, p in (order if r % 2 == 0 else order[::-1]):
                    async with alone(t, servers):
                        got, lat = await create_burst(t, p, per, 64, f"c{r}")
                    rates[name].append(got)
                    lats[name] += lat
            b_rate, rate, full_rate = (statistics.median(rates[n]) for n in ("base", "api", "full"))
            b_lat, lat, full_lat = lats["base"], lats["api"], lats["full"]
            pairs_api = statistics.median(a / b for a, b in zip(rates["api"], rates["base"], strict=True))
            pairs_full = statistics.median(f / a for f, a in zip(rates["full"], rates["api"], strict=True))
            async with alone(lite, servers):
                # Fill up to --pods pods in all for the list/RSS figures.
                if pods > 500 + rounds * per:
                    await create_burst(lite, path, pods - 500 - rounds * per, 64, "fill")
                list_s = await list_time(lite, path, expect=pods)
                rss = rss_mb(lite.proc.pid)
                names = [f"c{r}-{i}" for r in range(rounds) for i in range(per)]
                get_rate = await gets(lite, path, names, 5000 if args.quick else 20000, 64)
            # Paced creates, the baseline and then the API alone, back to back.
            async with alone(base, servers):
                b_paced = await paced_creates(base, "/pods", 1000, paced_s, "bp")
            base.stop()
            async with alone(lite, servers):
                await ensure_namespace(lite, "paced")
                paced = await paced_creates(lite, "/api/v1/namespaces/paced/pods", 1000, paced_s, "p")
                await ensure_namespace(lite, "watch")
                wlat = await watch_latency(lite, "/api/v1/namespaces/watch/pods", 100, 50, 20 if args.quick else 50)
            lite.stop()
            # The whole control plane: --pods pods in all, settled, then a restart on them.
            if pods > 500 + rounds * per:
                await create_burst(full, path, pods - 500 - rounds * per, 64, "fill")
            full_settle = await settle(full)
            full_rss = rss_mb(full.proc.pid)
            full.stop()
        finally:
            for t in servers:
                t.stop()
        again, cold_warm = await start_lite(work / "full")
        try:
            await list_time(again, path, repeat=1, expect=pods)
            # A restart re-queues every pending pod: give it time to settle, and say if it did not.
            again_settle = await settle(again, limit=60.0)
            rss_restart = rss_mb(again.proc.pid)
            hwm_restart = rss_mb(again.proc.pid, "VmHWM")
            more = burst // 2
            await create_burst(again, path, more, 64, "more")
            await settle(again)
            rss_more = rss_mb(again.proc.pid)
        finally:
            again.stop()
        # As issue 19's first figures were taken: the whole control plane started on the API alone's data dir,
        # on pods it never saw (every one to schedule, and fail to, at once).
        onto, _ = await start_lite(work / "lite")
        try:
            stored = await count_pods(onto)
            onto_settle = await settle(onto)
            rss_onto = rss_mb(onto.proc.pid)
        finally:
            onto.stop()

    ratio = rate / b_rate
    res.set("baseline_creates_per_s", b_rate)
    res.set("api_creates_per_s", rate)
    res.set("api_vs_baseline", ratio)
    res.set("api_vs_baseline_pairs", pairs_api)
    res.set("full_vs_api_pairs", pairs_full)
    res.set("api_create_p99_ms", pct(lat, 99) * 1000)
    res.set("paced_create_p50_ms", pct(paced, 50) * 1000)
    res.set("paced_create_p99_ms", pct(paced, 99) * 1000)
    res.set("baseline_paced_create_p99_ms", pct(b_paced, 99) * 1000)
    res.set("gets_per_s", get_rate)
    res.set("list_pods_ms", list_s * 1000)
    res.set("watch_p99_ms", pct(wlat, 99) * 1000)
    res.set("pods", pods)
    res.set("api_idle_rss_mb", idle)
    res.set("api_rss_mb", rss)
    res.set("api_kb_per_pod", kb_per_pod(rss, idle, pods))
    res.set("full_creates_per_s", full_rate)
    res.set("full_vs_api", full_rate / rate)
    res.set("full_idle_rss_mb", full_idle)
    res.set("full_rss_mb", full_rss)
    res.set("full_kb_per_pod", kb_per_pod(full_rss, full_idle, pods))
    res.set("full_restart_rss_mb", rss_restart)
    res.set("full_restart_kb_per_pod", kb_per_pod(rss_restart, full_idle, pods))
    res.set("full_restart_peak_rss_mb", hwm_restart)
    res.set("full_restart_more_rss_mb", rss_more)
    res.set("onto_api_pods", stored)
    res.set("onto_api_rss_mb", rss_onto)
    res.set("onto_api_kb_per_pod", kb_per_pod(rss_onto, full_idle, stored))
    res.set("cold_start_fresh_s", cold_fresh)
    res.set("cold_start_existing_s", cold_warm)

    print("== lite API benchmark (2 KB pods, 64 concurrent clients, TLS) ==")
    print("-- API server alone (--disable-scheduler --disable-controller-manager), like the baseline --")
    print(f"baseline (aiohttp + group-committed SQLite insert): {b_rate:8.0f} creates/s  "
          f"p50 {ms(pct(b_lat, 50))}  p99 {ms(pct(b_lat, 99))}")
    print(f"lite creates:                                        {rate:8.0f} creates/s  "
          f"p50 {ms(pct(lat, 50))}  p99 {ms(pct(lat, 99))}")
    print(f"ratio lite/baseline:                                 {ratio:8.2f}   (median of per-round ratios "
          f"{pairs_api:.2f}; rounds lite/baseline: "
          f"{' '.join(f'{x:.0f}/{y:.0f}' for x, y in zip(rates['api'], rates['base'], strict=True))})")
    print(f"paced 1,000 creates/s:                               p50 {ms(pct(paced, 50))}  "
          f"p99 {ms(pct(paced, 99))}  (baseline: p50 {ms(pct(b_paced, 50))}  p99 {ms(pct(b_paced, 99))})")
    print(f"gets/s:                                              {get_rate:8.0f}")
    print(f"list {pods} pods (limit=500 pages):                 {ms(list_s)}")
    print(f"watch delivery, 100 watchers, POST start -> event:   p50 {ms(pct(wlat, 50))}  "
          f"p99 {ms(pct(wlat, 99))}  (n={len(wlat)})")
    print(f"server RSS idle {idle:.0f} MB, after {pods} pods {rss:.0f} MB: "
          f"{kb_per_pod(rss, idle, pods):.1f} KB/pod above idle")
    print("-- whole control plane (controllers, scheduler, informers; no nodes, so every pod stays Pending) --")
    print(f"creates/s:                                           {full_rate:8.0f}  p50 {ms(pct(full_lat, 50))}  "
          f"p99 {ms(pct(full_lat, 99))}  ({full_rate / rate:.2f} of the API alone; median of per-round ratios "
          f"{pairs_full:.2f})")
    print(f"server RSS idle {full_idle:.0f} MB; with {pods} pods, settled ({full_settle:.1f} s): {full_rss:.0f} MB "
          f"({kb_per_pod(full_rss, full_idle, pods):.1f} KB/pod above idle)")
    settled = f"settled ({again_settle:.1f} s)" if again_settle < 60.0 else "NOT settled after 60 s"
    print(f"after a restart on them, {settled}: {rss_restart:.0f} MB "
          f"({kb_per_pod(rss_restart, full_idle, pods):.1f} KB/pod above idle; peak {hwm_restart:.0f} MB); "
          f"after {more} more: {rss_more:.0f} MB")
    print(f"started on the API alone's {stored} pods (never scheduled), settled ({onto_settle:.1f} s): "
          f"{rss_onto:.0f} MB ({kb_per_pod(rss_onto, full_idle, stored):.1f} KB/pod above idle)")
    print(f"cold start to /readyz: fresh data dir {cold_fresh:.2f} s, existing data dir {cold_warm:.2f} s, "
          f"first {cold_first:.2f} s")
    print(f"median create latency lite/baseline: {statistics.median(lat) / statistics.median(b_lat):.2f}")


async def memory_only(args: argparse.Namespace, res: benchlib.Results) -> None:
    """Only the API-alone memory figure, measured as `main` does (RSS above the settled idle server after
    --pods creates with 64 clients), with the creates/s, gets/s and list time on the same server."""
    path = "/api/v1/namespaces/bench/pods"
    with tempfile.TemporaryDirectory(prefix="lite-bench-") as tmp:
        lite, _ = await start_lite(Path(tmp) / "lite", *API_ONLY)
        try:
            await ensure_namespace(lite, "bench")
            await settle(lite)
            idle = rss_mb(lite.proc.pid)
            rate, lat = await create_burst(lite, path, args.pods, 64, "m")
            list_s = await list_time(lite, path, expect=args.pods)
            rss = rss_mb(lite.proc.pid)
            get_rate = await gets(lite, path, [f"m-{i}" for i in range(args.pods)], 5000, 64)
        finally:
            lite.stop()
    res.set("api_idle_rss_mb", idle)
    res.set("api_rss_mb", rss)
    res.set("api_kb_per_pod", kb_per_pod(rss, idle, args.pods))
    res.set("api_creates_per_s", rate)
    res.set("gets_per_s", get_rate)
    res.set("list_pods_ms", list_s * 1000)
    print(f"API alone: {args.pods} creates at {rate:.0f}/s (p99 {ms(pct(lat, 99))}), list (limit=500 pages) "
          f"{ms(list_s)}, {get_rate:.0f} gets/s")
    print(f"server RSS idle {idle:.1f} MB, after {args.pods} pods {rss:.1f} MB: "
          f"{kb_per_pod(rss, idle, args.pods):.2f} KB/pod above idle")


async def cp_memory_only(args: argparse.Namespace, res: benchlib.Results) -> None:
    """The whole control plane's RSS per pod above its idle RSS: --pods pods created and settled; restarted on
    them and settled; and started on an API-alone data dir of --onto-pods pods it never saw, settled."""
    path = "/api/v1/namespaces/bench/pods"
    pods, onto_pods = args.pods, args.onto_pods or args.pods * 13 // 10
    with tempfile.TemporaryDirectory(prefix="lite-bench-") as tmp:
        work = Path(tmp)
        full, _ = await start_lite(work / "full")
        try:
            await ensure_namespace(full, "bench")
            await settle(full)
            full_idle = rss_mb(full.proc.pid)
            t0 = time.perf_counter()
            rate, _ = await create_burst(full, path, pods, 64, "m")
            full_settle = await settle(full, limit=60.0)
            full_rss = rss_mb(full.proc.pid)
        finally:
            full.stop()
        again, _ = await start_lite(work / "full")
        try:
            await list_time(again, path, repeat=1, expect=pods)
            again_settle = await settle(again, limit=60.0)
            rss_restart = rss_mb(again.proc.pid)
        finally:
            again.stop()
        api, _ = await start_lite(work / "api", *API_ONLY)
        try:
            await ensure_namespace(api, "bench")
            await create_burst(api, path, onto_pods, 64, "a")
        finally:
            api.stop()
        onto, _ = await start_lite(work / "api")
        try:
            stored = await count_pods(onto)
            onto_settle = await settle(onto, limit=60.0)
            rss_onto = rss_mb(onto.proc.pid)
        finally:
            onto.stop()
    res.set("pods", pods)
    res.set("full_creates_per_s", rate)
    res.set("full_idle_rss_mb", full_idle)
    res.set("full_rss_mb", full_rss)
    res.set("full_kb_per_pod", kb_per_pod(full_rss, full_idle, pods))
    res.set("full_restart_rss_mb", rss_restart)
    res.set("full_restart_kb_per_pod", kb_per_pod(rss_restart, full_idle, pods))
    res.set("onto_api_pods", stored)
    res.set("onto_api_rss_mb", rss_onto)
    res.set("onto_api_kb_per_pod", kb_per_pod(rss_onto, full_idle, stored))
    print("== lite whole control plane memory (2 KB pods; no nodes, so every pod stays Pending) ==")
    print(f"idle {full_idle:.0f} MB; {pods} pods created ({rate:.0f}/s, {time.perf_counter() - t0:.0f} s in all), "
          f"settled ({full_settle:.1f} s): {full_rss:.0f} MB ({kb_per_pod(full_rss, full_idle, pods):.1f} KB/pod "
          "above idle)")
    settled = f"settled ({again_settle:.1f} s)" if again_settle < 60.0 else "NOT settled after 60 s"
    print(f"after a restart on them, {settled}: {rss_restart:.0f} MB "
          f"({kb_per_pod(rss_restart, full_idle, pods):.1f} KB/pod above idle)")
    print(f"started on an API-alone data dir of {stored} pods (never scheduled), settled ({onto_settle:.1f} s): "
          f"{rss_onto:.0f} MB ({kb_per_pod(rss_onto, full_idle, stored):.1f} KB/pod above idle)")


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--pods", type=int, default=10000)
    ap.add_argument("--quick", action="store_true", help="smaller bursts (the 10,000 pods stay)")
    ap.add_argument("--creates-only", action="store_true",
                    help="only the create throughput of the API alone against the baseline, with CPU per create")
    ap.add_argument("--paced-only", action="store_true",
                    help="only the paced 1,000 creates/s figure, baseline and API alone alternating")
    ap.add_argument("--cp-only", action="store_true",
                    help="only the create throughput of the whole control plane (no nodes) against the API alone, "
                         "with CPU per create")
    ap.add_argument("--cp-variant", default="", metavar="NAME=VALUE",
                    help="--cp-only: also a whole control plane started with this environment variable")
    ap.add_argument("--rounds", type=int, default=0, help="alternating rounds with --creates-only (default 6; 4 "
                                                          "with --quick) or --paced-only (default 3)")
    ap.add_argument("--memory-only", action="store_true",
                    help="only the API-alone RSS per stored pod (with its creates/s, gets/s, list time)")
    ap.add_argument("--only", choices=("all", "memory"), default="all",
                    help="memory: only the whole control plane's RSS per pod (see the module doc)")
    ap.add_argument("--onto-pods", type=int, default=0, help="--only memory: pods of the API-alone data dir "
                    "the whole control plane starts on (default 1.3 x --pods)")
    benchlib.add_args(ap)
    cli = ap.parse_args()
    results = benchlib.Results.from_args("api", cli)
    run = cp_memory_only if cli.only == "memory" else memory_only if cli.memory_only else main
    benchlib.run(results, lambda: asyncio.run(run(cli, results)))
