"""Pin glibc malloc's mmap threshold, so that memory a long-running process frees goes back to the system.

glibc raises its mmap threshold each time a large mmapped block is freed (up to 32 MB): after one image pull,
one large list response or one big request body, later buffers of that size are carved from the heap, which
can only shrink from its top, so a server that once handled a burst keeps that memory for good (measured: a
`lite server` with its agent held 10 MB more after starting its first two pods). Pinning the threshold at its
initial 128 KiB (`mallopt(M_MMAP_THRESHOLD)`, which also turns the dynamic adjustment off) keeps every large
buffer in its own mapping, returned on free. Python's small objects are unaffected (pymalloc has its own arenas).

Called once by the `lite server` and `lite agent` commands at start; no import-time side effect. Elsewhere
(a C library without this mallopt) it does nothing and returns False.
"""

from __future__ import annotations

import ctypes

M_MMAP_THRESHOLD = -3  # glibc's <malloc.h>
THRESHOLD = 128 * 1024  # glibc's initial value (DEFAULT_MMAP_THRESHOLD_MIN)


def pin_mmap_threshold(size: int = THRESHOLD) -> bool:
    """Fix the threshold at `size` bytes; True when the C library took it."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, size))
