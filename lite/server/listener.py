"""The API port's listener: connection limits applied before aiohttp sees a byte.

Role: `Listener` accepts TCP connections for the aiohttp application and, for each one:

1. refuses it at once, before any TLS work, when its client address already holds `per_address` open
   connections or the process holds `max_total` (counted by `AddressCounts`, a pure table). A refused
   connection costs one accept and one close: an idle-connection flood from one address cannot lock out
   the others, nor exhaust the file descriptors (`raise_nofile_limit` lifts the soft limit to the hard
   one at start, and `max_total` keeps a reserve below it for the store and the agent);
2. waits for the client's first byte (until then a connection holds no TLS state, only its socket),
   then runs the TLS handshake (`loop.connect_accepted_socket`); both within `handshake_timeout`;
3. hands the TLS stream to an aiohttp request handler (`StatusRequestHandler`: a request aiohttp cannot
   parse, such as one with an oversized header, is answered with a Kubernetes Status, not plain text);
4. aborts it when a request head has been arriving for longer than `header_timeout` (slowloris). The
   clock starts at the first byte received while no request is being served and stops when the
   application starts serving one (`middleware`); bytes pipelined during a request are left to the
   idle timeout.

Idle connections (none in flight, nothing arriving; also a connection that never sends a request) are
closed by aiohttp's own keep-alive timer, set to `idle_timeout`. The defaults are kube-apiserver's: a
32 s header timeout (ReadHeaderTimeout) and a 90 s idle timeout (IdleTimeout).

Invariants: a connection is counted from accept until it is closed, exactly once (also when a handler took
the transport over and swallowed its connection_lost); the aiohttp handler is attached before the first
decrypted byte arrives; everything runs on the event loop, nothing blocks.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import resource
import socket
import ssl
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from aiohttp import web
from aiohttp.http_exceptions import LineTooLong
from aiohttp.web_protocol import RequestHandler

from lite.errors import ApiError
from lite.server.config import ConnectionLimits

log = logging.getLogger("lite.server.listener")

# Header bounds handed to aiohttp's parser (its default is 8190 bytes a line; Go allows 1 MiB in all).
HANDLER_ARGS: dict[str, Any] = {"max_line_size": 16 * 1024, "max_field_size": 16 * 1024, "max_headers": 128}
FD_RESERVE = 256  # descriptors kept free for the store, the agent, logs and outgoing connections
NOFILE_CEILING = 1 << 20
REAP_DELAY = 1.0  # seconds given to a closed transport's own connection_lost before counting it out


class AddressCounts:
    """Open connections per client address and in total; `admit` counts one in or says why not."""

    def __init__(self, per_address: int, max_total: int) -> None:
        self.per_address, self.max_total = per_address, max_total
        self.total = 0
        self._open: dict[str, int] = {}

    def admit(self, addr: str) -> str | None:
        if self.max_total and self.total >= self.max_total:
            return f"{self.total} connections are open (limit {self.max_total})"
        n = self._open.get(addr, 0)
        if self.per_address and n >= self.per_address:
            return f"{n} connections are open from this address (limit {self.per_address})"
        self._open[addr] = n + 1
        self.total += 1
        return None

    def release(self, addr: str) -> None:
        n = self._open.get(addr, 0) - 1
        if n > 0:
            self._open[addr] = n
        else:
            self._open.pop(addr, None)
        self.total -= 1

    def open_from(self, addr: str) -> int:
        return self._open.get(addr, 0)


def raise_nofile_limit(ceiling: int = NOFILE_CEILING) -> tuple[int, int]:
    """Lift the soft RLIMIT_NOFILE to the hard limit (at most `ceiling`); (before, after)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = ceiling if hard == resource.RLIM_INFINITY else min(hard, ceiling)
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError) as e:  # e.g. a container forbidding it: keep what we have
            log.warning("could not raise the open-file limit from %d to %d: %s", soft, target, e)
            return soft, soft
        return soft, target
    return soft, soft


class StatusRequestHandler(RequestHandler):
    """aiohttp's per-connection handler, answering unparseable requests with a Kubernetes Status."""

    def handle_error(self, request: Any, status: int = 500, exc: BaseException | None = None,
                     message: str | None = None) -> web.StreamResponse:
        if status == 500:
            return super().handle_error(request, status, exc, message)
        text = message or (str(exc) if exc else "Bad Request")
        if isinstance(exc, LineTooLong) or "Too many headers" in text:
            err = ApiError(f"request header fields too large: {text}", 431, "RequestHeaderFieldsTooLarge")
        else:
            err = ApiError(f"the request could not be parsed: {text}", 400, "BadRequest")
        log.debug("refused an unparseable request from %s: %s", request.remote, text)
        resp = web.Response(status=err.code, body=orjson.dumps(err.status()), content_type="application/json")
        resp.force_close()
        return resp


class _Conn(asyncio.Protocol):
    """One connection past its TLS handshake: a transparent pipe into the aiohttp handler, plus the header
    timer and the count."""

    def __init__(self, listener: Listener, addr: str) -> None:
        self._l = listener
        self._addr: str | None = addr  # None once counted out
        self._tls: asyncio.Transport | None = None
        self._inner: RequestHandler | None = None
        self._closed = False
        self._busy = False
        self._head_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._tls = transport
        inner = self._inner = self._l.make_handler()
        self._l.conns[inner] = self
        inner.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        assert self._inner is not None
        if not self._busy and self._head_timer is None:
            self._head_timer = asyncio.get_running_loop().call_later(
                self._l.limits.header_timeout, self._head_expired)
        self._inner.data_received(data)

    def eof_received(self) -> bool | None:
        if self._inner is not None:
            self._inner.eof_received()  # aiohttp's returns None: the transport closes itself
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        inner = self._inner
        self._lost()
        if inner is not None:
            inner.connection_lost(exc)

    def pause_writing(self) -> None:
        if self._inner is not None:
            self._inner.pause_writing()

    def resume_writing(self) -> None:
        if self._inner is not None:
            self._inner.resume_writing()

    # -- bookkeeping --

    def _lost(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None
        if self._inner is not None:
            self._l.conns.pop(self._inner, None)
        self._closed = True
        if self._addr is not None:
            self._l.counts.release(self._addr)
            self._addr = None

    def _head_expired(self) -> None:
        self._head_timer = None
        if self._busy or self._tls is None:
            return
        log.warning("closed a connection from %s: no complete request head within %gs", self._addr,
                    self._l.limits.header_timeout)
        self._tls.abort()

    def request_started(self) -> None:
        self._busy = True
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def request_finished(self) -> None:
        self._busy = False
        if self._tls is not None and self._tls.is_closing() and not self._closed:
            # A handler that took the transport over (raw SPDY upgrades point it at their own protocol) gets
            # its connection_lost; once the handler is done, a closed transport must still be counted out.
            asyncio.get_running_loop().call_later(REAP_DELAY, self._reap)

    def _reap(self) -> None:
        if not self._closed:
            self.connection_lost(None)


class Listener:
    """Accepts connections for `server` (aiohttp's low-level server of the runner); see the module doc."""

    def __init__(self, ssl_context: ssl.SSLContext, limits: ConnectionLimits, max_total: int) -> None:
        self.ssl_context, self.limits = ssl_context, limits
        self.server: web.Server | None = None  # the runner's, set once it is set up
        self.counts = AddressCounts(limits.per_address, limits.max_total or max_total)
        self.conns: dict[RequestHandler, _Conn] = {}
        self.handshakes: set[asyncio.Task[None]] = set()

    def make_handler(self) -> RequestHandler:
        assert self.server is not None, "Listener.server is set before the listener starts"
        return StatusRequestHandler(self.server, loop=asyncio.get_running_loop(),
                                    keepalive_timeout=self.limits.idle_timeout, **HANDLER_ARGS)

    async def start(self, host: str | None, port: int, *, backlog: int = 1024) -> Listening:
        """Listen on `host` (None: every address, IPv4 and IPv6) and accept until `close()`."""
        sock = _listen_socket(host, port, backlog)
        task = asyncio.get_running_loop().create_task(self._accept(sock), name="lite-api-accept")
        return Listening(sock, task)

    async def _accept(self, listening: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                sock, peer = await loop.sock_accept(listening)
            except OSError as e:
                if e.errno in _ACCEPT_TRANSIENT:
                    continue
                # Out of descriptors or memory: wait a moment rather than spin (asyncio's servers do the same).
                log.error("accepting a connection failed: %s; retrying in 1s", e)
                await asyncio.sleep(1)
                continue
            addr = _address(peer)
            refusal = self.counts.admit(addr)
            if refusal is not None:
                log.warning("refused a connection from %s: %s", addr, refusal)
                sock.close()
                continue
            task = loop.create_task(self._handshake(sock, addr))
            self.handshakes.add(task)
            task.add_done_callback(self.handshakes.discard)

    async def _handshake(self, sock: socket.socket, addr: str) -> None:
        """Wait for the client's first byte (an idle socket costs no TLS state), then shake hands; the
        whole of it within the handshake timeout."""
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self.limits.handshake_timeout):
                await _readable(loop, sock)
                await loop.connect_accepted_socket(lambda: _Conn(self, addr), sock, ssl=self.ssl_context,
                                                   ssl_handshake_timeout=self.limits.handshake_timeout)
        except (OSError, TimeoutError) as e:  # ssl.SSLError is an OSError
            # A client whose hello the server cannot accept (no common version, cipher, curve or signature
            # algorithm) gets no answer (asyncio drops the alert): say why here, or nobody can tell. Silent
            # closes and resets (TCP probes, port scans) and timeouts stay at debug.
            if isinstance(e, ssl.SSLError) and not isinstance(e, ssl.SSLEOFError):
                log.warning("TLS handshake with %s failed: %s", addr, e.reason or e)
            else:
                log.debug("TLS handshake with %s failed: %r", addr, e)
            sock.close()
            self.counts.release(addr)
        except asyncio.CancelledError:
            sock.close()
            self.counts.release(addr)
            raise

    def abort_handshakes(self) -> None:
        for task in list(self.handshakes):
            task.cancel()

    @web.middleware
    async def middleware(self, request: web.Request,
                         handler: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> web.StreamResponse:
        """Marks the connection busy while a request is served (no header timeout meanwhile)."""
        conn = self.conns.get(request.protocol)
        if conn is None:
            return await handler(request)
        conn.request_started()
        try:
            return await handler(request)
        finally:
            conn.request_finished()


class Listening:
    """A listening socket and its accept task; `close()` stops accepting (open connections stay)."""

    def __init__(self, sock: socket.socket, task: asyncio.Task[None]) -> None:
        self.sock, self._task = sock, task

    @property
    def port(self) -> int:
        return int(self.sock.getsockname()[1])

    def close(self) -> None:
        self._task.cancel()
        self.sock.close()


_ACCEPT_TRANSIENT = frozenset({errno.EAGAIN, errno.EWOULDBLOCK, errno.ECONNABORTED, errno.EPROTO, errno.EINTR})


def _listen_socket(host: str | None, port: int, backlog: int) -> socket.socket:
    if host is None and socket.has_dualstack_ipv6():
        sock = socket.create_server(("", port), family=socket.AF_INET6, backlog=backlog, dualstack_ipv6=True)
    else:
        family = socket.AF_INET6 if host and ":" in host else socket.AF_INET
        sock = socket.create_server((host or "", port), family=family, backlog=backlog)
    sock.setblocking(False)
    return sock


def _address(peer: Any) -> str:
    """The client's IP; an IPv4 client of a dual-stack socket is counted as its IPv4 address."""
    host = str(peer[0]) if isinstance(peer, tuple) and peer else ""
    return host.removeprefix("::ffff:") if "." in host else host


async def _readable(loop: asyncio.AbstractEventLoop, sock: socket.socket) -> None:
    ready: asyncio.Future[None] = loop.create_future()
    fd = sock.fileno()

    def wake() -> None:
        if not ready.done():
            ready.set_result(None)

    loop.add_reader(fd, wake)
    try:
        await ready
    finally:
        loop.remove_reader(fd)
