"""CRI container log files: `<RFC3339Nano> <stdout|stderr> <F|P> <line>` with size rotation.

A complete line ends with "F" (full); a chunk cut because the line is longer than `max_line` or the stream ended
without a newline ends with "P" (partial), as kubelet's reader expects. Rotation: when the file would pass
`max_bytes`, `log` becomes `log.1`, `log.1` becomes `log.2`, ... and the oldest beyond `max_files - 1` is removed.
Used only by the shim (single-threaded, one writer per file). Buffered per stream: a partial line waits for its
newline until `flush()`.
"""

from __future__ import annotations

import os
import time
from datetime import UTC, datetime

MAX_LINE = 16 * 1024


def rfc3339nano(ns: int | None = None) -> str:
    ns = time.time_ns() if ns is None else ns
    secs, frac = divmod(ns, 1_000_000_000)
    stamp = datetime.fromtimestamp(secs, UTC).strftime("%Y-%m-%dT%H:%M:%S")
    return f"{stamp}.{frac:09d}Z"


class CriLogWriter:
    def __init__(self, path: str, *, max_bytes: int = 10 * 1024 * 1024, max_files: int = 3,
                 max_line: int = MAX_LINE) -> None:
        self.path = path
        self.max_bytes = max_bytes
        self.max_files = max(1, max_files)
        self.max_line = max_line
        self._pending: dict[str, bytes] = {"stdout": b"", "stderr": b""}
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o640)
        self._size = os.fstat(self._fd).st_size

    def write(self, stream: str, data: bytes) -> None:
        buf = self._pending[stream] + data
        out: list[bytes] = []
        while True:
            nl = buf.find(b"\n")
            if nl < 0 or nl > self.max_line:
                if len(buf) >= self.max_line:
                    out.append(self._line(stream, b"P", buf[: self.max_line]))
                    buf = buf[self.max_line:]
                    continue
                break
            out.append(self._line(stream, b"F", buf[:nl]))
            buf = buf[nl + 1:]
        self._pending[stream] = buf
        for line in out:
            self._emit(line)

    def flush(self) -> None:
        """Write any unterminated tail as a partial line (the stream ended)."""
        for stream, buf in self._pending.items():
            if buf:
                self._emit(self._line(stream, b"P", buf))
                self._pending[stream] = b""

    def close(self) -> None:
        self.flush()
        os.close(self._fd)

    @staticmethod
    def _line(stream: str, tag: bytes, body: bytes) -> bytes:
        return b"%s %s %s %s\n" % (rfc3339nano().encode(), stream.encode(), tag, body)

    def _emit(self, line: bytes) -> None:
        if self._size and self._size + len(line) > self.max_bytes:
            self._rotate()
        os.write(self._fd, line)
        self._size += len(line)

    def _rotate(self) -> None:
        os.close(self._fd)
        keep = self.max_files - 1
        if keep <= 0:
            os.unlink(self.path)
        else:
            for i in range(keep, 0, -1):
                src = self.path if i == 1 else f"{self.path}.{i - 1}"
                if os.path.exists(src):
                    os.replace(src, f"{self.path}.{i}")
        self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o640)
        self._size = 0
