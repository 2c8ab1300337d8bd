"""Attach: the shim serves the container's stdio on `<state_dir>/attach.sock` (unix stream socket).

Frames both ways are `kind:u8 length:u32be payload`. Shim → client: STDOUT / STDERR output (from the moment the
client connected; earlier output is in the log file). Client → shim: STDIN data, CLOSE_STDIN, RESIZE (rows:u16
cols:u16, tty only). When the container ends the shim closes every connection. A client that does not keep up
(socket buffer full) is dropped rather than stalling the container's output; input the container does not
read yet is buffered in the shim (written without blocking). With `stdin_once`, stdin is closed
when the first attached client goes away (Kubernetes stdinOnce).

Paths longer than sun_path (108 bytes) work because both sides go through `/proc/self/fd/<dir fd>/attach.sock`.
The server is used by the single-threaded shim (selectors); `connect_path` is shared with the asyncio client.
"""

from __future__ import annotations

import fcntl
import os
import socket
import struct
import termios
from collections.abc import Iterator
from contextlib import contextmanager

SOCKET = "attach.sock"
STDIN, STDOUT, STDERR, RESIZE, CLOSE_STDIN = 0, 1, 2, 3, 4
HEADER = struct.Struct(">BI")
STREAMS = {"stdout": STDOUT, "stderr": STDERR}


def frame(kind: int, payload: bytes = b"") -> bytes:
    return HEADER.pack(kind, len(payload)) + payload


@contextmanager
def short_path(state_dir: str) -> Iterator[str]:
    """A path to the attach socket short enough for sun_path, valid while the context is open."""
    fd = os.open(state_dir, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        yield f"/proc/self/fd/{fd}/{SOCKET}"
    finally:
        os.close(fd)


class AttachServer:
    def __init__(self, state_dir: str, stdin_fd: int | None, tty_fd: int | None, stdin_once: bool) -> None:
        self.stdin_fd, self.tty_fd, self.stdin_once = stdin_fd, tty_fd, stdin_once
        self.clients: dict[int, tuple[socket.socket, bytearray]] = {}
        self.pending = bytearray()
        self.close_pending = False
        if stdin_fd is not None:
            os.set_blocking(stdin_fd, False)
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        path = os.path.join(state_dir, SOCKET)
        if os.path.exists(path):
            os.unlink(path)
        with short_path(state_dir) as short:
            self.listener.bind(short)
        self.listener.listen(8)
        self.listener.setblocking(False)

    def accept(self) -> socket.socket | None:
        try:
            conn, _ = self.listener.accept()
        except BlockingIOError:
            return None
        conn.setblocking(False)
        self.clients[conn.fileno()] = (conn, bytearray())
        return conn

    def broadcast(self, stream: str, data: bytes) -> list[int]:
        """Send output to every client; returns the fds of clients dropped for not keeping up."""
        dropped = []
        msg = frame(STREAMS[stream], data)
        for fd, (conn, _buf) in list(self.clients.items()):
            try:
                if conn.send(msg) != len(msg):
                    raise BlockingIOError
            except OSError:
                dropped.append(fd)
                self.drop(fd)
        return dropped

    def readable(self, fd: int) -> bool:
        """Handle input from a client; False when it went away (it has been dropped)."""
        conn, buf = self.clients[fd]
        try:
            data = conn.recv(65536)
        except BlockingIOError:
            return True
        except OSError:
            data = b""
        if not data:
            self.drop(fd)
            if self.stdin_once:
                self._close_stdin()
            return False
        buf += data
        while len(buf) >= HEADER.size:
            kind, length = HEADER.unpack_from(buf)
            if len(buf) < HEADER.size + length:
                break
            payload = bytes(buf[HEADER.size:HEADER.size + length])
            del buf[:HEADER.size + length]
            self._input(kind, payload)
        return True

    def _input(self, kind: int, payload: bytes) -> None:
        if kind == STDIN and self.stdin_fd is not None:
            self.pending += payload
            self.flush_stdin()
        elif kind == CLOSE_STDIN:
            self._close_stdin()
        elif kind == RESIZE and self.tty_fd is not None and len(payload) == 4:
            rows, cols = struct.unpack(">HH", payload)
            fcntl.ioctl(self.tty_fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))

    def flush_stdin(self) -> None:
        """Write buffered input without blocking (a container that does not read must not stall the shim)."""
        if self.stdin_fd is None:
            self.pending.clear()
            return
        while self.pending:
            try:
                written = os.write(self.stdin_fd, self.pending)
            except BlockingIOError:
                return
            except OSError:  # the reader is gone
                self.pending.clear()
                return
            del self.pending[:written]
        if self.close_pending:
            self._close_stdin()

    def _close_stdin(self) -> None:
        if self.stdin_fd is None:
            return
        if self.pending:
            self.close_pending = True  # after the buffered input
            return
        if self.stdin_fd == self.tty_fd:
            os.write(self.stdin_fd, b"\x04")  # a pty has no half-close: send EOF (^D) instead
        else:
            os.close(self.stdin_fd)
        self.stdin_fd = None

    def drop(self, fd: int) -> None:
        conn, _ = self.clients.pop(fd)
        conn.close()

    def close(self) -> None:
        for fd in list(self.clients):
            self.drop(fd)
        self.listener.close()
