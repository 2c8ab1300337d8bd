"""Hostile-client benchmark: what bombs and connection floods cost a real `lite server`, next to a baseline.

Prints, never asserts (issue 7 targets in brackets):
- patch bomb (a JSON patch of 40 doubling `copy` operations) and YAML bombs (the CVE-2019-11253 body,
  billion laughs): time to the refusal, next to an ordinary patch/create of the same object in the same
  run [< 100 ms], and the server's RSS before and after [< 300 MB];
- 2,000 idle TCP connections (no TLS, no token) from 127.0.0.2 while a client on 127.0.0.1 does GETs:
  its p50/p99 latency, next to the same client with no idle connections, same run [p99 < 100 ms];
  and how many of the 2,000 the server kept;
- 200 slowloris connections (TLS, a request head trickled forever) from 127.0.0.4: how many are still
  open after the header timeout (3 s in this run), and GET p99 meanwhile;
- then (section `watch`) bench/hostile_watch.py: RSS through 2,000 updates of a 1 MiB ConfigMap with 4
  stalled watchers and through 10 x 1,000 watch reconnects, each next to its same-run baseline [< 300 MB].

Usage: python bench/hostile.py [--idle 2000] [--gets 300] [--sections patch,yaml,idle,slowloris,watch]
Importable: `main(argv)` runs the named `SECTIONS` (each `async (Target) -> list[str]` of report lines)
against one server, so another benchmark (e.g. hostile_watch.py) can add its own sections.
Traffic goes only to 127.0.0.0/8; the server is a child process stopped at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import ssl
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import aiohttp
import benchlib
import orjson
from api import API_ONLY, Target, pct, rss_mb, start_lite
from benchlib import BenchFailed

Section = Callable[[Target], Awaitable[list[str]]]
CM = "/api/v1/namespaces/default/configmaps"

CVE_2019_11253 = b"""apiVersion: v1
data:
  a: &a ["web","web","web","web","web","web","web","web","web"]
  b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
  c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
  d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
  e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
  f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]
  g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]
  h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]
  i: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h]
kind: ConfigMap
metadata:
  name: yaml-bomb
  namespace: default
"""


def laughs(levels: int = 10) -> bytes:
    lines = ["apiVersion: v1", "kind: ConfigMap", "metadata: {name: laughs}", "x:", '  l0: &l0 "lol"']
    lines += [f"  l{n}: &l{n} [" + ",".join([f"*l{n - 1}"] * 10) + "]" for n in range(1, levels)]
    return ("\n".join(lines) + "\n").encode()


def copy_bomb(ops: int = 40) -> bytes:
    return orjson.dumps([{"op": "add", "path": "/metadata/annotations", "value": {"a": "x" * 1000}}] + [
        {"op": "copy", "from": "/metadata/annotations", "path": f"/metadata/annotations/c{i}"} for i in range(ops)])


def ms(x: float) -> str:
    return f"{x * 1000:.1f} ms"


async def timed(s: aiohttp.ClientSession, t: Target, method: str, path: str, body: bytes,
                content_type: str, refused: bool = False) -> tuple[float, int]:
    """(seconds, status) of one request; BenchFailed unless it succeeded (2xx) or, `refused`, was refused with
    a 4xx (a bomb the server accepted or failed on is no refusal to time)."""
    headers = {**t.headers, "Content-Type": content_type}
    t0 = time.perf_counter()
    async with s.request(method, t.url + path, data=body, headers=headers, ssl=t.ctx) as r:
        text = await r.read()
        took = time.perf_counter() - t0
    if (400 <= r.status < 500) if refused else (200 <= r.status < 300):
        return took, r.status
    raise BenchFailed(f"{method} {path}: {r.status} {text[:300]!r} ({'a refusal' if refused else 'success'} "
                      "expected)")


async def section_patch(t: Target) -> list[str]:
    async with aiohttp.ClientSession() as s:
        await timed(s, t, "POST", CM, orjson.dumps({"metadata": {"name": "victim"}, "data": {"a": "1"}}),
                    "application/json")
        rss0 = rss_mb(t.proc.pid)
        normal = min([(await timed(s, t, "PATCH", f"{CM}/victim", orjson.dumps(
            [{"op": "add", "path": f"/data/k{i}", "value": "v"}]), "application/json-patch+json"))[0]
            for i in range(5)])
        bomb, code = min([await timed(s, t, "PATCH", f"{CM}/victim", copy_bomb(), "application/json-patch+json",
                                             refused=True)
                          for _ in range(5)])
        rss1 = rss_mb(t.proc.pid)
    return [f"patch bomb (40 doubling copies): refused {code} in {ms(bomb)}  (baseline: a 1-op JSON patch "
            f"{ms(normal)})  RSS {rss0:.0f} -> {rss1:.0f} MB"]


async def section_yaml(t: Target) -> list[str]:
    out = []
    async with aiohttp.ClientSession() as s:
        normal = min([(await timed(s, t, "POST", CM, f"apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: y{i}}}\n"
                                   f"data: {{a: '1'}}\n".encode(), "application/yaml"))[0] for i in range(5)])
        for name, body in (("CVE-2019-11253 (533 B)", CVE_2019_11253), ("billion laughs", laughs())):
            rss0 = rss_mb(t.proc.pid)
            took, code = min([await timed(s, t, "POST", CM, body, "application/yaml", refused=True)
                              for _ in range(5)])
            rss1 = rss_mb(t.proc.pid)
            out.append(f"yaml bomb {name}: refused {code} in {ms(took)}  (baseline: a YAML create "
                       f"{ms(normal)})  RSS {rss0:.0f} -> {rss1:.0f} MB")
    return out


async def _gets(t: Target, n: int) -> list[float]:
    lat = []
    conn = aiohttp.TCPConnector(limit=1, local_addr=("127.0.0.1", 0))
    async with aiohttp.ClientSession(connector=conn) as s:
        for _ in range(n):
            t0 = time.perf_counter()
            async with s.get(t.url + "/api/v1/namespaces/default", headers=t.headers, ssl=t.ctx) as r:
                text = await r.read()
                if r.status != 200:
                    raise BenchFailed(f"GET namespace default: {r.status} {text[:300]!r}")
            lat.append(time.perf_counter() - t0)
    return lat


async def _open_idle(t: Target, n: int, source: str) -> list[socket.socket]:
    port = int(t.url.rsplit(":", 1)[1])
    loop = asyncio.get_running_loop()
    socks = []
    for _ in range(n):
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setblocking(False)
        sock.bind((source, 0))
        try:
            await asyncio.wait_for(loop.sock_connect(sock, ("127.0.0.1", port)), 5)
        except (OSError, TimeoutError):
            sock.close()
            continue
        socks.append(sock)
    return socks


def _alive(socks: list[socket.socket]) -> int:
    n = 0
    for sock in socks:
        try:
            n += sock.recv(1, socket.MSG_PEEK) != b""
        except BlockingIOError:
            n += 1  # nothing to read and not closed
        except OSError:
            pass
    return n


async def section_idle(t: Target, idle: int = 2000, gets: int = 300) -> list[str]:
    await _gets(t, 20)  # warm up
    quiet = await _gets(t, gets)
    rss0 = rss_mb(t.proc.pid)
    socks = await _open_idle(t, idle, "127.0.0.2")
    try:
        await asyncio.sleep(0.5)
        loaded = await _gets(t, gets)
        kept = _alive(socks)
        rss1 = rss_mb(t.proc.pid)
    finally:
        for sock in socks:
            sock.close()
    return [f"GET latency with {idle} idle connections from 127.0.0.2: p50 {ms(pct(loaded, 50))} p99 "
            f"{ms(pct(loaded, 99))}  (baseline, none: p50 {ms(pct(quiet, 50))} p99 {ms(pct(quiet, 99))})",
            f"  idle connections the server kept open: {kept} of {len(socks)} connected; "
            f"RSS {rss0:.0f} -> {rss1:.0f} MB"]


HEADER_TIMEOUT = 3.0  # the bench server's --request-header-timeout


async def section_slowloris(t: Target, conns: int = 200) -> list[str]:
    """`conns` TLS connections from 127.0.0.4 trickling a request head that never ends."""
    port = int(t.url.rsplit(":", 1)[1])
    ctx = ssl.create_default_context()
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
    writers: list[asyncio.StreamWriter] = []
    for _ in range(conns):
        try:
            _, w = await asyncio.open_connection("127.0.0.1", port, ssl=ctx, local_addr=("127.0.0.4", 0))
        except OSError:
            continue
        w.write(b"GET /api HTTP/1.1\r\nHost: x\r\n")
        writers.append(w)
    started = time.perf_counter()
    during: list[float] = []
    open_early = -1
    while time.perf_counter() - started < HEADER_TIMEOUT + 2:
        for w in writers:
            if not w.is_closing():
                w.write(b"X-Slow: 1\r\n")
        during += await _gets(t, 10)
        if open_early < 0 and time.perf_counter() - started >= 1:
            open_early = sum(not w.is_closing() for w in writers)
        await asyncio.sleep(0.5)
    open_late = sum(not w.is_closing() for w in writers)
    for w in writers:
        w.close()
    return [f"slowloris: {len(writers)} connections trickling a head from 127.0.0.4: open after 1s {open_early}, "
            f"after {HEADER_TIMEOUT + 2:.0f}s {open_late} (header timeout {HEADER_TIMEOUT:.0f}s); "
            f"GET p99 meanwhile {ms(pct(during, 99))}"]


SECTIONS: dict[str, Section] = {"patch": section_patch, "yaml": section_yaml, "idle": section_idle,
                                "slowloris": section_slowloris}


async def run(names: list[str], flags: tuple[str, ...] = (), sections: dict[str, Section] | None = None) -> None:
    table = sections or SECTIONS
    with tempfile.TemporaryDirectory(prefix="lite-hostile-") as tmp:
        t, _ = await start_lite(Path(tmp) / "data", *API_ONLY, "--request-header-timeout", str(HEADER_TIMEOUT),
                                *flags)
        try:
            print(f"lite server pid {t.proc.pid}, RSS at start {rss_mb(t.proc.pid):.0f} MB")
            for name in names:
                for line in await table[name](t):
                    print(line, flush=True)
        finally:
            t.stop()


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--idle", type=int, default=2000)
    p.add_argument("--gets", type=int, default=300)
    p.add_argument("--sections", default=",".join([*SECTIONS, "watch"]),
                   help="comma-separated; 'watch' runs bench/hostile_watch.py (memory under watch load) after the rest")
    args = p.parse_args(argv)

    async def idle(t: Target) -> list[str]:
        return await section_idle(t, args.idle, args.gets)

    names = args.sections.split(",")

    def body() -> None:
        asyncio.run(run([n for n in names if n != "watch"], sections={**SECTIONS, "idle": idle}))
        if "watch" in names:
            import hostile_watch  # bench/ is on sys.path when run as a script

            asyncio.run(hostile_watch.main([]))

    benchlib.run(benchlib.Results("hostile"), body)


if __name__ == "__main__":
    main()
