"""A client that opens a fresh TLS connection for every request, as `@kubernetes/client-node` 2.x does (a new
agent per request): each connection sends one GET, reads the whole answer, then stays open and idle for
`linger` seconds (Node's keep-alive agent keeps a socket 5 s) before the client closes it. Requests start
paced at `rate` a second from one source address, whatever the answers take.

`run` counts answers and errors (a reset, an EOF before the answer, a non-200 status, a hang past `guard`)
and the most connections it held open at once, so a test can check that it really did hold more than a
server's per-address threshold."""

from __future__ import annotations

import asyncio
import re
import resource
import ssl
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

GUARD = 120.0  # seconds one request may take before it is counted as an error (a hang guard, for busy hosts)


@dataclass
class Outcome:
    ok: int = 0
    errors: list[str] = field(default_factory=list)
    peak_open: int = 0
    elapsed: float = 0.0


@contextmanager
def open_files(n: int) -> Iterator[None]:
    """This process may hold `n` descriptors (as far as the hard limit allows) while inside."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = n if hard == resource.RLIM_INFINITY else min(n, hard)
    if soft != resource.RLIM_INFINITY and soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


async def run(port: int, ctx: ssl.SSLContext, token: str, path: str, *, rate: float, seconds: float,
              linger: float = 5.0, source: str = "127.0.0.1") -> Outcome:
    loop = asyncio.get_running_loop()
    out = Outcome()
    held = 0
    head = f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {token}\r\n\r\n".encode()

    async def one(i: int, at: float) -> None:
        nonlocal held
        await asyncio.sleep(max(0.0, at - loop.time()))
        writer: asyncio.StreamWriter | None = None
        try:
            async with asyncio.timeout(GUARD):
                reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=ctx,
                                                               server_hostname="127.0.0.1", local_addr=(source, 0))
                held += 1
                out.peak_open = max(out.peak_open, held)
                writer.write(head)
                got = await reader.readuntil(b"\r\n\r\n")
                length = re.search(rb"(?i)\r\ncontent-length: *(\d+)", got)
                body = await reader.readexactly(int(length.group(1))) if length else b""
                status = int(got.split(b" ", 2)[1])
            if status == 200:
                out.ok += 1
            else:
                out.errors.append(f"request {i}: {status} {body[:200]!r}")
            await asyncio.sleep(linger)
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError) as e:
            out.errors.append(f"request {i}: {e!r}")
        finally:
            if writer is not None:
                held -= 1
                writer.close()

    start = loop.time() + 0.1
    n = int(rate * seconds)
    await asyncio.gather(*(one(i, start + i / rate) for i in range(n)))
    out.elapsed = loop.time() - start
    return out
