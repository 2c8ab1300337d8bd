"""Pin glibc malloc's mmap threshold, so that memory a long-running process frees goes back to the system.

glibc raises its mmap threshold each time a large mmapped block is freed (up to 32 MB): after one image pull,
one large list response or one big request body, later buffers of that size are carved from the heap, which
can only shrink from its top, so a server that once handled a burst keeps that memory for good (measured: a
`lite server` with its agent held 10 MB more after starting its first two pods). Pinning the threshold at its
initial 128 KiB (`mallopt(M_MMAP_THRESHOLD)`, which also turns the dynamic adjustment off) keeps every larger
buffer in its own mapping, returned on free. Python's small objects are unaffected (pymalloc has its own arenas).

`limit_arenas()`, called beside it before the process starts any thread, keeps every thread on glibc's main
arena (`mallopt(M_ARENA_MAX, 1)`). glibc otherwise gives each new thread that mallocs an arena of its own (up
to 8 per core): the threads `asyncio.to_thread` runs (image pulls and layer unpacking, node status, cgroup
samples), the store's writer and checkpointer. A block freed in such an arena is reused only by the threads
that share it, and the arena shrinks only from its top, so what a pull or an unpack once held stays resident
(measured: `lite server` with its agent and 2 pods, 68.8 MiB with per-thread arenas, 66.9-67.0 MiB with one).
Under the GIL few allocations can race for the one arena's lock: Python objects up to 512 bytes never take it
(pymalloc), and only C code that releases the GIL (SQLite, zlib, hashing) mallocs beside the loop.

Called once by the `lite server` and `lite agent` commands at start; no import-time side effect. Elsewhere
(a C library without this mallopt) it does nothing and returns False.

`QuietTrim` (the server runs it): once the process goes quiet after a stretch of work, `malloc_trim(0)` gives
the free pages inside glibc's heaps back to the system. Buffers under the threshold freed in the middle of a
heap (request bodies, JSON, packed values, large dict tables) otherwise stay resident for good: measured on a
whole control plane with 10,000 pending pods, 3 MB of free heap after building them, 7 to 28 MB after a
restart on them. A trim walks every heap (tens of ms on a 50 MB heap, holding each arena's lock in turn),
so it runs in a thread, only when the process has been quiet for an interval (`quiet`: under 5 % of a core)
after at least `min_busy` CPU seconds of work since the last one: never under load, at most once per burst.
Python's own small objects (pymalloc's arenas) are not affected. Before trimming it awaits `release` (the server
passes its store's `release_memory`: SQLite's page cache, up to 2 MB of pages a burst of commits or a restart's
full read left there, measured 2.1 MB with 10,000 pods stored and ~1.9 MB more RSS given back by the trim).

`shrink_tls_reads()`, called beside it, lowers asyncio's TLS read size (`asyncio.sslproto.SSLProtocol.max_size`)
from 256 KiB to 16 KiB, below the pinned threshold. asyncio gives every TLS connection a zero-filled receive
buffer of that size for its whole life (256 KiB resident per connection: every joined node's session, every
watch and client; the agent `lite server` embeds joins in process, with no connection), and asks OpenSSL
for that many bytes on each read, allocating a bytes object of that size first: above the threshold, one mmap
and munmap per read of any request. A TLS record carries 16 KiB of data at most and the read loop goes on until
the socket is drained, so 16 KiB loses nothing: measured on one TLS connection over loopback, 2.5 to 3 times
fewer CPU seconds per round trip (1.5 KB echoes) than at 256 KiB, and the same CPU at 16 and 64 KiB for 1.5 KB
echoes and for a 64 MB echo (within 5 %, the run's noise).
"""

from __future__ import annotations

import asyncio
import ctypes
import logging
import time
from collections.abc import Awaitable, Callable

log = logging.getLogger(__name__)
M_MMAP_THRESHOLD = -3  # glibc's <malloc.h>
M_ARENA_MAX = -8
THRESHOLD = 128 * 1024  # glibc's initial value (DEFAULT_MMAP_THRESHOLD_MIN)


def _mallopt(param: int, value: int) -> bool:
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return bool(mallopt(param, value))


def pin_mmap_threshold(size: int = THRESHOLD) -> bool:
    """Fix the threshold at `size` bytes; True when the C library took it."""
    return _mallopt(M_MMAP_THRESHOLD, size)


def limit_arenas(count: int = 1) -> bool:
    """At most `count` malloc arenas for the threads started from now on (see the module docstring); True
    when the C library took it. Threads that already have an arena keep it: call it before starting any."""
    return _mallopt(M_ARENA_MAX, count)


TLS_READ_SIZE = 16 * 1024


def shrink_tls_reads(size: int = TLS_READ_SIZE) -> None:
    """Set asyncio's per-connection TLS read buffer and read size (see the module docstring) for connections
    made from now on, in this process."""
    from asyncio import sslproto

    sslproto.SSLProtocol.max_size = size


def trim() -> bool:
    """`malloc_trim(0)`: free heap pages back to the system; False when the C library has no such call."""
    try:
        malloc_trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return False
    malloc_trim.argtypes = [ctypes.c_size_t]
    malloc_trim.restype = ctypes.c_int
    malloc_trim(0)
    return True


class QuietTrim:
    """Trim the heap when the process goes quiet after work (see the module docstring).

    `observe(cpu)` takes the CPU seconds used over one `interval` and says whether to trim now: the interval
    was quiet (`cpu` under `quiet` x `interval`) and at least `min_busy` seconds of CPU were used since the last
    trim. `run()` samples the process's CPU time every `interval` seconds and, when `observe` says so, awaits
`release` (when given; a failure is logged) and trims in a thread, until cancelled.
    """

    def __init__(self, interval: float = 0.25, quiet: float = 0.05, min_busy: float = 0.5,
                 cpu: Callable[[], float] = time.process_time, trimmer: Callable[[], bool] = trim,
                 release: Callable[[], Awaitable[object]] | None = None) -> None:
        self.interval = interval
        self.release = release
        self.quiet = quiet
        self.min_busy = min_busy
        self.cpu = cpu
        self.trimmer = trimmer
        self.busy = 0.0  # CPU seconds since the last trim
        self.trims = 0

    def observe(self, cpu: float) -> bool:
        self.busy += cpu
        if cpu >= self.quiet * self.interval or self.busy < self.min_busy:
            return False
        self.busy = 0.0
        return True

    async def run(self) -> None:
        last = self.cpu()
        while True:
            await asyncio.sleep(self.interval)
            now = self.cpu()
            if self.observe(now - last):
                if self.release is not None:
                    try:
                        await self.release()
                    except Exception:  # the trim still runs, and so does this loop
                        log.exception("releasing cached memory failed")
                await asyncio.to_thread(self.trimmer)
                self.trims += 1
                now = self.cpu()  # the trim's own CPU is not work to trim after
            last = now
