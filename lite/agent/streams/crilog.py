"""Reader and follower of CRI container log files, with the options of `kubectl logs`.

A CRI log file holds one record per line: `<RFC3339Nano timestamp> <stdout|stderr> <F|P> <message>`; `P`
marks a partial record whose message continues in the next record (no newline), `F` a full one (the
newline is the record's own). `read_log(path, options)` yields the bytes `kubectl logs` prints:
messages (with `F` newlines restored), optionally prefixed by the record's timestamp, after `tailLines`
(last N records), `sinceSeconds`/`sinceTime`, the `stream` filter, truncated at `limitBytes`; with
`follow`, it keeps reading appended records (and a rotated file's successor) until `running()` is false and
the file is drained.

Blocking I/O: the backlog (which may be a large file, read whole for `tailLines`) is read in a worker thread;
following reads at most 64 KiB per step on the loop (bounded and tiny). Malformed lines are passed through
as stdout text rather than dropped, so nothing a container wrote is lost.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import os
import re
import time
from collections import deque
from collections.abc import AsyncIterator, Callable

from lite.records import dataclass

FOLLOW_POLL = 0.2
CHUNK = 64 * 1024
_TS = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)$")


@dataclass(frozen=True)
class Record:
    timestamp: str
    stream: str
    full: bool
    message: bytes

    def ns(self) -> int:
        return parse_ns(self.timestamp)


@dataclass(frozen=True)
class LogOptions:
    follow: bool = False
    timestamps: bool = False
    tail_lines: int | None = None
    since_ns: int | None = None  # records older than this (ns since the epoch) are skipped
    limit_bytes: int | None = None
    stream: str = "All"  # All | Stdout | Stderr

    @classmethod
    def from_params(cls, params: dict[str, object], now: float | None = None) -> LogOptions:
        since: int | None = None
        if params.get("sinceSeconds"):
            since = int(((now if now is not None else time.time()) - int(str(params["sinceSeconds"]))) * 1e9)
        elif params.get("sinceTime"):
            since = parse_ns(str(params["sinceTime"]))
        tail = params.get("tailLines")
        limit = params.get("limitBytes")
        return cls(follow=bool(params.get("follow")), timestamps=bool(params.get("timestamps")),
                   tail_lines=int(str(tail)) if tail is not None else None, since_ns=since,
                   limit_bytes=int(str(limit)) if limit is not None else None,
                   stream=str(params.get("stream") or "All"))


def parse_ns(ts: str) -> int:
    """RFC 3339 (nanosecond precision kept) → ns since the epoch; ValueError when malformed."""
    m = _TS.match(ts)
    if m is None:
        raise ValueError(f"bad timestamp {ts!r}")
    base, frac, zone = m.groups()
    t = dt.datetime.fromisoformat(base + ("+00:00" if zone == "Z" else zone))
    nanos = int((frac or "0")[:9].ljust(9, "0"))
    return int(t.timestamp()) * 1_000_000_000 + nanos


def parse_line(line: bytes) -> Record:
    """One file line (without its trailing newline) as a Record."""
    parts = line.split(b" ", 3)
    if len(parts) >= 3 and parts[1] in (b"stdout", b"stderr") and parts[2] in (b"F", b"P"):
        try:
            parse_ns(parts[0].decode())
            return Record(parts[0].decode(), parts[1].decode(), parts[2] == b"F", parts[3] if len(parts) > 3 else b"")
        except (ValueError, UnicodeDecodeError):
            pass
    return Record("", "stdout", True, line)


class _Formatter:
    """Applies since/stream filters, timestamps and limitBytes; counts what is left to write."""

    def __init__(self, opts: LogOptions) -> None:
        self.opts = opts
        self.left = opts.limit_bytes

    def render(self, rec: Record) -> bytes:
        o = self.opts
        if (o.stream == "Stdout" and rec.stream != "stdout") or (o.stream == "Stderr" and rec.stream != "stderr"):
            return b""
        if o.since_ns is not None and rec.timestamp and rec.ns() < o.since_ns:
            return b""
        out = rec.message + (b"\n" if rec.full else b"")
        if o.timestamps and rec.timestamp:
            out = rec.timestamp.encode() + b" " + out
        if self.left is not None:
            out = out[:self.left]
            self.left -= len(out)
        return out

    @property
    def exhausted(self) -> bool:
        return self.left is not None and self.left <= 0


def _backlog(path: str, tail: int | None) -> tuple[list[bytes], int, int]:
    """Whole lines of the file (the last `tail` ones), the offset after them, and the file's inode."""
    with open(path, "rb") as f:
        ino = os.fstat(f.fileno()).st_ino
        data = f.read()
    end = data.rfind(b"\n") + 1
    lines = data[:end].split(b"\n")[:-1] if end else []
    if tail is not None:
        lines = list(deque(lines, maxlen=tail)) if tail > 0 else []
    return lines, end, ino


async def read_log(path: str, opts: LogOptions, running: Callable[[], bool] = lambda: False
                   ) -> AsyncIterator[bytes]:
    """The log's bytes as `kubectl logs` shows them (see the module docstring)."""
    fmt = _Formatter(opts)
    lines, offset, ino = await asyncio.to_thread(_backlog, path, opts.tail_lines)
    for line in lines:
        out = fmt.render(parse_line(line))
        if out:
            yield out
        if fmt.exhausted:
            return
    if not opts.follow:
        return
    async for line in _follow(path, offset, ino, running):
        out = fmt.render(parse_line(line))
        if out:
            yield out
        if fmt.exhausted:
            return


async def _follow(path: str, offset: int, ino: int, running: Callable[[], bool]) -> AsyncIterator[bytes]:
    """Lines appended after `offset`; switches to a new file at `path` when the old one was rotated away."""
    f = open(path, "rb")  # noqa: SIM115, ASYNC230 - a local file opens at once; held across yields
    try:
        f.seek(offset)
        buf = b""
        while True:
            chunk = f.read(CHUNK)
            if chunk:
                buf += chunk
                *whole, buf = buf.split(b"\n")
                for line in whole:
                    yield line
                continue
            alive = running()
            try:
                st = os.stat(path)
                rotated = st.st_ino != ino
            except FileNotFoundError:
                rotated = False
            if rotated:  # finish the old file (done: read to EOF above), then read the new one from 0
                f.close()
                f = open(path, "rb")  # noqa: SIM115, ASYNC230
                ino = os.fstat(f.fileno()).st_ino
                buf = b""
                continue
            if not alive:
                # It may have written its last lines between our empty read and the check: drain them.
                buf += f.read()
                for line in buf.split(b"\n"):
                    if line:
                        yield line
                return
            await asyncio.sleep(FOLLOW_POLL)
    finally:
        f.close()
