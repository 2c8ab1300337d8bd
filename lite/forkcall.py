"""Run a one-off, import-heavy step in a short-lived forked child, so the long-running process never maps
what only that step needs.

Role: `lite server` generates its keys and certificates, and issues node client certificates, with
`cryptography`, whose native library alone is about 8 MB resident once loaded and is never unloaded. Doing
that in a child keeps it out of the server: `call_in_child(fn)` forks, runs `fn()` in the child, hands its
bytes back through a pipe and reaps the child.

Invariants:
- The child runs only `fn`: Python code plus native libraries the parent has not loaded (`cryptography`
  links its own OpenSSL statically), so no lock that another thread of the parent held at fork time is ever
  taken in the child (CPython re-initialises its own locks, GIL, import lock and logging's, after a fork,
  and glibc's malloc is fork-safe). Callers check that the heavy library is not loaded in the parent yet
  (where it is, they just call `fn` there: nothing is left to save).
- The child never returns into the caller's code: it exits with `os._exit` (no atexit handlers, no flushing
  of the parent's buffers), with SIGTERM/SIGINT back at their defaults and the parent's signal wakeup fd
  detached, so a signal to the child cannot wake the parent's event loop.
- Success is decided by what the child wrote (a status byte, then the result), not only its exit status.
- Blocking (fork, the child's work, the wait): call from a thread or before the event loop runs.
"""

from __future__ import annotations

import contextlib
import os
import signal
import traceback
from collections.abc import Callable

OK, FAILED = b"0", b"1"


class ChildFailed(Exception):
    """The child could not be forked, or `fn` raised there (the message says what)."""


def call_in_child(fn: Callable[[], bytes]) -> bytes:
    """`fn()`'s result, computed in a forked child; ChildFailed if that did not work."""
    if not hasattr(os, "fork"):
        raise ChildFailed("fork is not available here")
    r, w = os.pipe()
    try:
        pid = os.fork()
    except OSError as e:
        os.close(r)
        os.close(w)
        raise ChildFailed(f"fork: {e}") from e
    if pid == 0:  # the child: never leaves this block
        code = 0
        try:
            os.close(r)
            with contextlib.suppress(ValueError, OSError):
                signal.set_wakeup_fd(-1)
                for sig in (signal.SIGTERM, signal.SIGINT):
                    signal.signal(sig, signal.SIG_DFL)
            _write_all(w, OK + fn())
        except BaseException:
            code = 1
            with contextlib.suppress(BaseException):
                _write_all(w, FAILED + traceback.format_exc(limit=-3).encode(errors="replace")[-4000:])
        finally:
            os._exit(code)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        out = f.read()
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)
    if out[:1] == OK:
        return out[1:]
    raise ChildFailed(out[1:].decode(errors="replace").strip() or "the child exited without an answer")


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
