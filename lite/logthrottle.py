"""Rate limiting of repeated log lines: a flood of one message costs a few lines, not megabytes a second.

Role: `RepeatFilter` is a `logging.Filter` for the process's handlers. Records are grouped by what makes
them "the same message": logger name, level, exception type and, for warnings and errors, the unformatted
message template (so "refused %s" with a thousand different addresses is one message); below WARNING only
exact repeats group, so bursts of distinct routine events are logged in full. In each window of `window`
seconds, the first `burst` records of a group pass; the rest are counted and dropped. The next record
of that group after the window passes with "(N similar messages suppressed in the last Ws)" appended,
so the log says what was dropped; `flush()` emits those summaries without waiting for one.

Invariants: pure bookkeeping plus the one `logging` call of `flush`; the clock is injectable (tests);
memory is bounded by `max_groups` (the oldest group is forgotten first); thread-safe (one lock), since
logging may be called from executor threads.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable

from lite.records import dataclass

Key = tuple[str, int, str, str]


@dataclass
class _Group:
    start: float
    passed: int = 0
    suppressed: int = 0
    name: str = ""
    level: int = logging.INFO
    sample: str = ""


class RepeatFilter(logging.Filter):
    """See the module docstring. `window` <= 0 disables it (every record passes)."""

    def __init__(self, window: float = 10.0, burst: int = 5, *, max_groups: int = 1024,
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.window, self.burst, self.max_groups, self.clock = window, burst, max_groups, clock
        self._groups: OrderedDict[Key, _Group] = OrderedDict()
        self._lock = threading.Lock()

    @staticmethod
    def key(record: logging.LogRecord) -> Key:
        exc = record.exc_info[0].__name__ if record.exc_info and record.exc_info[0] else ""
        # Warnings and errors group by template (a flood varies in its arguments); routine lines only when
        # they are exact repeats, so a burst of distinct events (pods started) is still logged in full.
        text = str(record.msg) if record.levelno >= logging.WARNING else record.getMessage()
        return record.name, record.levelno, text, exc

    def filter(self, record: logging.LogRecord) -> bool:
        if self.window <= 0 or getattr(record, "repeat_summary", False):
            return True
        now, key = self.clock(), self.key(record)
        with self._lock:
            group = self._groups.get(key)
            if group is None:
                group = self._groups[key] = _Group(now, name=record.name, level=record.levelno)
                while len(self._groups) > self.max_groups:
                    self._groups.popitem(last=False)
            elif now - group.start >= self.window:
                suppressed, elapsed = group.suppressed, now - group.start
                group.start, group.passed, group.suppressed, group.sample = now, 0, 0, ""
                if suppressed:
                    record.msg = f"{record.getMessage()} ({suppressed} similar messages suppressed in the last " \
                                 f"{elapsed:.0f}s)"
                    record.args = None
            self._groups.move_to_end(key)
            if group.passed < self.burst:
                group.passed += 1
                return True
            group.suppressed += 1
            if not group.sample:
                group.sample = record.getMessage()
            return False

    def flush(self) -> None:
        """Log a summary for every group whose window is over and that dropped records."""
        now = self.clock()
        out: list[tuple[str, int, str]] = []
        with self._lock:
            for group in self._groups.values():
                if group.suppressed and now - group.start >= self.window:
                    out.append((group.name, group.level,
                                f"{group.suppressed} similar messages suppressed in the last "
                                f"{now - group.start:.0f}s, the first: {group.sample}"))
                    group.start, group.passed, group.suppressed, group.sample = now, 0, 0, ""
        for name, level, text in out:
            logging.getLogger(name).log(level, "%s", text, extra={"repeat_summary": True})


async def flush_every(flt: RepeatFilter) -> None:
    """Eternal task: `flush()` once a window, so a flood that stopped still gets its summary line."""
    while True:
        await asyncio.sleep(max(flt.window, 0.1))
        flt.flush()


def install(window: float = 10.0, burst: int = 5) -> RepeatFilter:
    """Attach one `RepeatFilter` to every handler of the root logger; returns it (for `flush`)."""
    flt = RepeatFilter(window, burst)
    for handler in logging.getLogger().handlers:
        handler.addFilter(flt)
    return flt
