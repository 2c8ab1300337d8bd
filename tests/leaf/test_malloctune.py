"""`pin_mmap_threshold` in a fresh interpreter: after a large block is freed, a 300 KB buffer still gets a
mapping of its own (glibc's `mallinfo2().hblks` counts them) instead of heap that never shrinks; the 256 KiB
buffer of each asyncio TLS read comes from the heap."""

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


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt and mallinfo2")
def test_a_tls_read_buffer_comes_from_the_heap() -> None:
    import asyncio.sslproto

    # what asyncio's TLS transport allocates for each read (SSLObject.read(max_size)), with its object header
    assert mapped_after_a_large_free("pin", asyncio.sslproto.SSLProtocol.max_size + 64) == 0
