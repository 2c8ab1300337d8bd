"""Connection benchmark: a client that opens a fresh TLS connection per request, against a keep-alive client,
same server, same run (issue 18, item 8).

The connection-per-request client behaves as `@kubernetes/client-node` 2.x does: each request gets a new TLS
connection, and the connection then stays open and idle for 5 s (Node's keep-alive agent) before the client
closes it, so one address soon holds far more connections than lite's per-address threshold (256). Prints:
- closed loop, `--workers` concurrent requests for `--seconds` each: requests/s over keep-alive connections
  (the baseline) and with a fresh connection per request, and their ratio;
- paced: `--rate` fresh-connection requests/s for `--paced-seconds` (the issue's 200/s for 30 s): answered,
  failed, the most connections the client held open at once, the achieved rate;
every figure against lite at its default limits (`lite server` with no limit flag). Exits 1 when any request
fails (a reset, an EOF, a status other than 200).

Usage: python bench/connections.py [--workers 16] [--seconds 15] [--rate 200] [--paced-seconds 30]
Traffic goes only to 127.0.0.1; the server is a child process stopped at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import resource
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from api import Target, start_lite

PATH = "/api/v1/namespaces/default"
LINGER = 5.0  # seconds a used connection stays open and idle, as Node's keep-alive agent keeps it
GUARD = 30.0


@dataclass
class Tally:
    ok: int = 0
    errors: list[str] = field(default_factory=list)
    held: int = 0
    peak: int = 0
    lingering: set[asyncio.Task[None]] = field(default_factory=set)


def _head(t: Target) -> bytes:
    return f"GET {PATH} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {t.token}\r\n\r\n".encode()


async def _exchange(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, head: bytes) -> int:
    writer.write(head)
    got = await reader.readuntil(b"\r\n\r\n")
    length = re.search(rb"(?i)\r\ncontent-length: *(\d+)", got)
    await reader.readexactly(int(length.group(1)) if length else 0)
    return int(got.split(b" ", 2)[1])


async def _connect(t: Target, tally: Tally) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    port = int(t.url.rsplit(":", 1)[1])
    reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=t.ctx, server_hostname="127.0.0.1")
    tally.held += 1
    tally.peak = max(tally.peak, tally.held)
    return reader, writer


def _close(writer: asyncio.StreamWriter, tally: Tally) -> None:
    tally.held -= 1
    writer.close()


async def _linger(writer: asyncio.StreamWriter, tally: Tally) -> None:
    await asyncio.sleep(LINGER)
    _close(writer, tally)


async def fresh_request(t: Target, tally: Tally, i: int) -> None:
    """One request on a new connection, left open and idle for LINGER seconds."""
    writer: asyncio.StreamWriter | None = None
    try:
        async with asyncio.timeout(GUARD):
            reader, writer = await _connect(t, tally)
            status = await _exchange(reader, writer, _head(t))
        if status == 200:
            tally.ok += 1
        else:
            tally.errors.append(f"request {i}: status {status}")
    except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError) as e:
        tally.errors.append(f"request {i}: {e!r}")
    if writer is not None:
        task = asyncio.get_running_loop().create_task(_linger(writer, tally))
        tally.lingering.add(task)
        task.add_done_callback(tally.lingering.discard)


async def closed_loop(t: Target, workers: int, seconds: float, fresh: bool) -> tuple[float, Tally]:
    tally = Tally()
    stop = time.perf_counter() + seconds
    head = _head(t)

    async def keepalive_worker() -> None:
        reader, writer = await _connect(t, tally)
        try:
            while time.perf_counter() < stop:
                status = await _exchange(reader, writer, head)
                if status == 200:
                    tally.ok += 1
                else:
                    tally.errors.append(f"status {status}")
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError) as e:
            tally.errors.append(repr(e))
        finally:
            _close(writer, tally)

    async def fresh_worker(w: int) -> None:
        n = 0
        while time.perf_counter() < stop:
            await fresh_request(t, tally, w * 1_000_000 + n)
            n += 1

    t0 = time.perf_counter()
    await asyncio.gather(*(fresh_worker(w) if fresh else keepalive_worker() for w in range(workers)))
    elapsed = time.perf_counter() - t0
    rate = tally.ok / elapsed
    await asyncio.gather(*tally.lingering)
    return rate, tally


async def paced(t: Target, rate: float, seconds: float) -> tuple[float, Tally]:
    tally = Tally()
    loop = asyncio.get_running_loop()
    start = loop.time() + 0.1

    async def at(i: int) -> None:
        await asyncio.sleep(max(0.0, start + i / rate - loop.time()))
        await fresh_request(t, tally, i)

    await asyncio.gather(*(at(i) for i in range(int(rate * seconds))))
    achieved = (tally.ok + len(tally.errors)) / (loop.time() - start)
    await asyncio.gather(*tally.lingering)
    return achieved, tally


def _raise_nofile() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = 65536 if hard == resource.RLIM_INFINITY else min(hard, 65536)
    if soft != resource.RLIM_INFINITY and soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))


async def main(argv: list[str]) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workers", type=int, default=16)
    p.add_argument("--seconds", type=float, default=15.0)
    p.add_argument("--rate", type=float, default=200.0)
    p.add_argument("--paced-seconds", type=float, default=30.0)
    args = p.parse_args(argv)
    _raise_nofile()  # the client holds a thousand lingering connections and more
    failures: list[str] = []
    with tempfile.TemporaryDirectory(prefix="lite-bench-conn-") as tmp:
        lite, _ = await start_lite(Path(tmp) / "data")
        try:
            await closed_loop(lite, args.workers, 2.0, fresh=False)  # warm-up
            keep, kt = await closed_loop(lite, args.workers, args.seconds, fresh=False)
            fresh, ft = await closed_loop(lite, args.workers, args.seconds, fresh=True)
            achieved, pt = await paced(lite, args.rate, args.paced_seconds)
        finally:
            lite.stop()
    print(f"closed loop, {args.workers} concurrent, {args.seconds:g}s each, GET {PATH}, lite at default limits:")
    print(f"  keep-alive connections (baseline): {keep:8.1f} requests/s  ({kt.ok} answered, {len(kt.errors)} failed)")
    print(f"  a fresh TLS connection per request: {fresh:7.1f} requests/s  ({ft.ok} answered, {len(ft.errors)} "
          f"failed; up to {ft.peak} connections open from one address)")
    print(f"  ratio fresh/keep-alive: {fresh / keep:.2f}")
    print(f"paced, a fresh TLS connection per request at {args.rate:g}/s for {args.paced_seconds:g}s: "
          f"{pt.ok} answered, {len(pt.errors)} failed, {achieved:.1f} requests/s achieved, up to {pt.peak} "
          f"connections open from one address")
    for name, tally in (("keep-alive", kt), ("fresh", ft), ("paced", pt)):
        failures += [f"{name}: {e}" for e in tally.errors]
    if failures:
        raise RuntimeError(f"{len(failures)} requests failed, e.g. {failures[:5]}")


if __name__ == "__main__":
    import benchlib  # bench/ is on sys.path: the script's own directory

    benchlib.run(benchlib.Results("connections"), lambda: asyncio.run(main(sys.argv[1:])))
