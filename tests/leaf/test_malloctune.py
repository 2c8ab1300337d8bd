"""`pin_mmap_threshold` in a fresh interpreter: after a large block is freed, a 300 KB buffer still gets a
mapping of its own (glibc's `mallinfo2().hblks` counts them) instead of heap that never shrinks."""

from __future__ import annotations

import subprocess
import sys

import pytest

SCRIPT = r'''
import ctypes, sys
from lite.malloctune import pin_mmap_threshold

class MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
                 "keepcost")]

mallinfo2 = ctypes.CDLL(None).mallinfo2
mallinfo2.restype = MallInfo2
if sys.argv[1] == "pin":
    assert pin_mmap_threshold()
big = bytearray(4 << 20)
del big  # without the pin, freeing this raises glibc's threshold to 4 MB
before = mallinfo2().hblks
buf = bytearray(int(sys.argv[2]))
print(mallinfo2().hblks - before)
'''


def mapped_after_a_large_free(mode: str, size: int = 300_000) -> int:
    out = subprocess.run([sys.executable, "-c", SCRIPT, mode, str(size)], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    return int(out.stdout)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt and mallinfo2")
def test_a_large_buffer_keeps_its_own_mapping_once_pinned() -> None:
    assert mapped_after_a_large_free("default") == 0  # glibc's dynamic threshold: the buffer came from the heap
    assert mapped_after_a_large_free("pin") == 1


TLS_SCRIPT = r'''
import asyncio, ssl, sys, tempfile, tracemalloc
from pathlib import Path
from lite.malloctune import pin_mmap_threshold, shrink_tls_reads
from lite.server.certs import ensure_credentials
from lite.server.config import ServerConfig

pin_mmap_threshold()
if sys.argv[1] == "shrink":
    shrink_tls_reads()
creds = ensure_credentials(ServerConfig.create(Path(tempfile.mkdtemp())))
sctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
sctx.load_cert_chain(creds.serving_cert, creds.serving_key)
cctx = ssl.create_default_context(cadata=creds.ca_pem.decode())

async def main():
    buffers = []
    async def echo(r, w):
        buffers.append(len(w.transport._ssl_protocol._ssl_buffer))
        while data := await r.read(65536):
            w.write(data)
            await w.drain()
        w.close()
    srv = await asyncio.start_server(echo, "127.0.0.1", 0, ssl=sctx)
    r, w = await asyncio.open_connection("127.0.0.1", srv.sockets[0].getsockname()[1], ssl=cctx,
                                        server_hostname="localhost")
    w.write(b"warm"); await r.readexactly(4)
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    for _ in range(20):
        w.write(b"x" * 1500); await w.drain(); await r.readexactly(1500)
    peak = tracemalloc.get_traced_memory()[1] - base
    tracemalloc.stop()
    big = b"y" * (3 << 20)
    w.write(big)
    assert await r.readexactly(len(big)) == big  # bulk data still flows whole
    w.close(); srv.close()
    print(buffers[0], peak)
asyncio.run(main())
'''


def tls_buffer_and_read_peak(mode: str) -> tuple[int, int]:
    out = subprocess.run([sys.executable, "-c", TLS_SCRIPT, mode], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    buffer, peak = out.stdout.split()
    return int(buffer), int(peak)


def test_tls_reads_use_a_16k_buffer_and_allocate_below_the_mmap_threshold() -> None:
    buffer, peak = tls_buffer_and_read_peak("default")
    assert buffer == 256 * 1024 and peak >= 256 * 1024  # asyncio's: each read allocates its 256 KiB bytes first
    buffer, peak = tls_buffer_and_read_peak("shrink")
    assert buffer == 16 * 1024 and peak < 64 * 1024  # below the pinned threshold: no mapping per read


ARENA_SCRIPT = r'''
import ctypes, os, sys, tempfile, threading
from lite.malloctune import limit_arenas

if sys.argv[1] == "limit":
    assert limit_arenas()
held = []

def work() -> None:
    held.append([bytearray(4096) for _ in range(64)])  # above pymalloc's 512 bytes: glibc malloc

threads = [threading.Thread(target=work) for _ in range(4)]
for t in threads:
    t.start()
for t in threads:
    t.join()
libc = ctypes.CDLL(None)
libc.fopen.restype = ctypes.c_void_p
libc.fopen.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
libc.malloc_info.argtypes = [ctypes.c_int, ctypes.c_void_p]
libc.fclose.argtypes = [ctypes.c_void_p]
path = os.path.join(tempfile.mkdtemp(), "malloc.xml")
fp = libc.fopen(path.encode(), b"w")
assert libc.malloc_info(0, fp) == 0
libc.fclose(fp)
with open(path) as f:
    print(f.read().count("<heap nr="))
os.remove(path)
os.rmdir(os.path.dirname(path))
'''


def arenas_after_threads(mode: str) -> int:
    out = subprocess.run([sys.executable, "-c", ARENA_SCRIPT, mode], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return int(out.stdout)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt and malloc_info")
def test_threads_share_the_main_arena_once_limited() -> None:
    assert arenas_after_threads("default") > 1  # glibc: each new thread that mallocs gets an arena of its own
    assert arenas_after_threads("limit") == 1


def test_quiet_trim_trims_once_per_burst_and_never_under_load() -> None:
    from lite.malloctune import QuietTrim

    t = QuietTrim(interval=0.25, quiet=0.05, min_busy=0.5)
    # CPU seconds per 0.25 s interval: idle, a burst of work, quiet again (trim once), quiet, a small blip
    steps = [0.0, 0.001, 0.2, 0.25, 0.25, 0.1, 0.01, 0.0, 0.0, 0.1, 0.005, 0.0]
    assert [t.observe(c) for c in steps] == [False, False, False, False, False, False, True, False, False, False,
                                             False, False]
    assert [t.observe(c) for c in [0.25, 0.25, 0.0125]] == [False, False, False]  # 5 % of the interval: not quiet
    assert t.observe(0.0) is True


async def test_quiet_trim_runs_the_trim_in_a_thread_after_work() -> None:
    import asyncio
    import threading

    from lite.malloctune import QuietTrim, trim

    clock = iter([0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0] + [1.0] * 100)
    threads: list[str] = []

    def trimmer() -> bool:
        threads.append(threading.current_thread().name)
        return True

    q = QuietTrim(interval=0.001, cpu=lambda: next(clock), trimmer=trimmer)
    task = asyncio.create_task(q.run())
    async with asyncio.timeout(5):
        while not q.trims:
            await asyncio.sleep(0.001)
    task.cancel()
    assert q.trims == 1 and threads and threads[0] != threading.current_thread().name
    if sys.platform.startswith("linux"):
        assert trim() is True  # glibc's malloc_trim is there and callable


async def test_quiet_trim_awaits_release_before_trimming_and_survives_its_failure() -> None:
    import asyncio

    from lite.malloctune import QuietTrim

    clock = iter([0.0, 0.0, 1.0, 1.0, 1.0] + [1.0, 2.0, 2.0, 2.0] * 50)
    order: list[str] = []

    async def release() -> None:
        order.append("release")
        if len(order) == 1:
            raise OSError("the first one fails")

    def trimmer() -> bool:
        order.append("trim")
        return True

    q = QuietTrim(interval=0.001, cpu=lambda: next(clock), trimmer=trimmer, release=release)
    task = asyncio.create_task(q.run())
    async with asyncio.timeout(5):
        while q.trims < 2:
            await asyncio.sleep(0.001)
    task.cancel()
    assert order[:4] == ["release", "trim", "release", "trim"]
