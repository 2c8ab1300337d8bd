"""Watch memory under hostile load (issue 7 item 3), against a real `lite server` on 127.0.0.1.

Prints, never asserts (target in brackets: server RSS under 300 MB throughout):
1. big updates: `--updates` (2,000) PUTs of one 1 MiB ConfigMap, with `--stalled` (4) watchers that never
   read (raw TLS sockets with a 4 KiB receive buffer), next to the same load with no watcher (baseline),
   each on a fresh server: RSS before, after, and peak (VmHWM).
2. reconnects: `--rounds` (10) x `--reconnects` (1,000) watches on an idle resource, each opened and then
   dropped by the client without reading, next to the same number of plain GETs (baseline): RSS after
   every round.

Usage: python bench/hostile_watch.py [--updates 2000] [--stalled 4] [--rounds 10] [--reconnects 1000]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import socket
import ssl
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
import benchlib
from benchlib import BenchFailed
from scheduler import free_port, lite_command, rss_mb, stop

from lite.httpclient import HttpClient
from lite.kinds import BUILTIN_KINDS

CM = next(k for k in BUILTIN_KINDS if k.kind == "ConfigMap")
MIB = 1 << 20


@dataclass
class Server:
    proc: subprocess.Popen[bytes]
    port: int
    token: str
    tls: ssl.SSLContext
    admin: HttpClient

    def rss(self) -> tuple[float, float]:
        return rss_mb(self.proc.pid)


@contextlib.asynccontextmanager
async def server(tag: str) -> AsyncIterator[Server]:
    with tempfile.TemporaryDirectory(prefix=f"lite-bench-{tag}-") as tmp:
        base, port = Path(tmp), free_port()
        with open(base / "server.log", "ab") as log:
            proc = subprocess.Popen([*lite_command(), "server", "--data-dir", str(base / "data"),
                                     "--https-listen-port", str(port), "--bind-address", "127.0.0.1",
                                     "--disable-agent", "--log-level", "warning"],
                                    stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        try:
            kubeconfig = base / "data" / "kubeconfig.yaml"
            deadline = time.monotonic() + 60
            while not kubeconfig.exists():
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"server did not start:\n{(base / 'server.log').read_text()[-2000:]}")
                await asyncio.sleep(0.05)
            cfg = yaml.safe_load(kubeconfig.read_text())
            ca = base64.b64decode(cfg["clusters"][0]["cluster"]["certificate-authority-data"]).decode()
            tls = ssl.create_default_context(cadata=ca)
            async with HttpClient.from_kubeconfig(str(kubeconfig)) as admin:
                await asyncio.sleep(1.0)  # let start-up settle before the first RSS reading
                yield Server(proc, port, str(cfg["users"][0]["user"]["token"]), tls, admin)
        finally:
            stop(proc)


async def open_watch(s: Server, path: str, rcvbuf: int = 0) -> asyncio.StreamWriter:
    """A watch request on a raw TLS socket; returns once the response headers arrived."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if rcvbuf:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", s.port))
    reader, writer = await asyncio.open_connection(sock=sock, ssl=s.tls, server_hostname="127.0.0.1")
    writer.write(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {s.token}\r\n\r\n".encode())
    await writer.drain()
    head = await reader.readuntil(b"\r\n\r\n")
    if not head.startswith(b"HTTP/1.1 200"):
        writer.close()
        status = head.splitlines()[0].decode(errors="replace")
        raise BenchFailed(f"watch {path}: {status}")
    return writer


def configmap(n: int) -> dict[str, object]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "big", "namespace": "default"},
            "data": {"blob": chr(ord("a") + n % 26) * (MIB - 200), "n": str(n)}}


async def big_updates(updates: int, stalled: int) -> None:
    label = f"{stalled} stalled watchers" if stalled else "no watcher (baseline)"
    async with server("watch-big") as s:
        before = s.rss()[0]
        await s.admin.create(CM, "default", configmap(0))
        watchers = [await open_watch(s, "/api/v1/namespaces/default/configmaps?watch=true", rcvbuf=4096)
                    for _ in range(stalled)]
        start, peak = time.monotonic(), 0.0
        for i in range(1, updates + 1):
            await s.admin.update(CM, "default", "big", configmap(i))
            if i % 50 == 0:
                peak = max(peak, s.rss()[0])
        elapsed = time.monotonic() - start
        after, hwm = s.rss()
        print(f"  {updates} x 1 MiB updates, {label:24}: RSS before {before:4.0f} MB, after {after:4.0f} MB, "
              f"max sampled {peak:4.0f} MB, peak {hwm:4.0f} MB; {updates / elapsed:.0f} updates/s "
              f"(target: under 300 MB)")
        for w in watchers:
            w.close()


async def reconnects(rounds: int, per_round: int, watch: bool) -> None:
    label = "watch reconnects" if watch else "plain GETs (baseline)"
    path = "/api/v1/namespaces/default/secrets"
    async with server("watch-reconnect") as s:
        readings = [s.rss()[0]]

        async def once() -> None:
            if watch:
                w = await open_watch(s, path + "?watch=true")
                w.transport.abort()  # the client vanishes; the resource stays idle
            else:
                await s.admin.list(CM, "default")

        for _ in range(rounds):
            await _bounded(per_round, 16, once)
            readings.append(s.rss()[0])
        await asyncio.sleep(3.0)  # disconnect checks run every second
        readings.append(s.rss()[0])
        steps = " ".join(f"{r:.0f}" for r in readings)
        print(f"  {rounds} x {per_round} {label:22}: RSS MB at start, after each round, 3 s later: {steps} "
              f"(+{readings[-1] - readings[0]:.0f} MB; target: under 300 MB)")


async def _bounded(n: int, concurrency: int, fn: Callable[[], Awaitable[None]]) -> None:
    left = iter(range(n))

    async def worker() -> None:
        for _ in left:
            await fn()

    await asyncio.gather(*(worker() for _ in range(concurrency)))


async def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--updates", type=int, default=2000)
    ap.add_argument("--stalled", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--reconnects", type=int, default=1000)
    args = ap.parse_args(argv)
    print("1 MiB ConfigMap updates:")
    await big_updates(args.updates, 0)
    await big_updates(args.updates, args.stalled)
    print("watch reconnects on an idle resource:")
    await reconnects(args.rounds, args.reconnects, watch=False)
    await reconnects(args.rounds, args.reconnects, watch=True)


if __name__ == "__main__":
    benchlib.run(benchlib.Results("hostile_watch"), lambda: asyncio.run(main()))
