"""One log line when the server goes away, one when it is back: never one per retry.

Role: an agent cut off from its server retries with backoff (the join session every ≤15 s) for as long as the
outage lasts, hours at an edge site. `Away(log, doing)` turns those retries into two lines: `failed(url, error)` logs
"server URL unreachable (error); retrying every ≤<cap> s, <doing>" the first time after a success (or at
start), and only at DEBUG while the outage lasts; `back(url)` logs "server URL is back after N s" once, when
the first attempt succeeds after failures (nothing when there was no outage). `away` tells whether the last
attempt failed.

Invariants: pure bookkeeping and `logging` calls; the clock is injectable (tests); one instance per retry
loop (the join session's, the CA fetch's), never shared between loops.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable

RUNNING = "running from what this node holds"


def describe(error: BaseException) -> str:
    """A short reason for a failed attempt: for a failed connect the system's words ("Connection refused"),
    else the error's text, else its type (a bare TimeoutError has none)."""
    cause = getattr(error, "os_error", None)  # aiohttp's ClientConnectorError wraps the connect's OSError
    if isinstance(cause, OSError) and cause.errno:
        return os.strerror(cause.errno)
    text = str(error).strip()
    return text or type(error).__name__


class Away:
    """See the module docstring."""

    def __init__(self, log: logging.Logger, doing: str = RUNNING, cap: float = 30.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.log, self.doing, self.cap, self.clock = log, doing, cap, clock
        self.since: float | None = None  # when the current outage began (None: no outage)

    @property
    def away(self) -> bool:
        return self.since is not None

    def failed(self, url: str, error: BaseException | str) -> None:
        reason = error if isinstance(error, str) else describe(error)
        if self.since is None:
            self.since = self.clock()
            self.log.warning("server %s unreachable (%s); retrying every ≤%g s, %s", url, reason, self.cap,
                             self.doing)
        else:
            self.log.debug("server %s still unreachable (%s)", url, reason)

    def back(self, url: str) -> None:
        if self.since is not None:
            self.log.info("server %s is back after %.0f s", url, self.clock() - self.since)
            self.since = None
