"""The API port's listener: connection limits applied before aiohttp sees a byte.

Role: `Listener` accepts TCP connections for the aiohttp application and, for each one:

1. refuses it at once, before any TLS work, when its client address already holds `per_address` open
   connections or the process holds `max_total` (counted by `AddressCounts`, a pure table). A refused
   connection costs one accept and one close: an idle-connection flood from one address cannot lock out
   the others, nor exhaust the file descriptors (`raise_nofile_limit` lifts the soft limit to the hard
   one at start, and `max_total` keeps a reserve below it for the store and the agent);
2. runs the TLS handshake itself (`loop.start_tls`), aborted after `handshake_timeout`;
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
the transport over and swallowed its connection_lost); no data is lost
between the handshake and aiohttp (it is buffered until the handler is attached); everything runs on
the event loop, nothing blocks.
"""

from __future__ import annotations

import asyncio
import logging
import resource
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
    """One accepted connection: count, handshake, then a transparent pipe into the aiohttp handler."""

    def __init__(self, listener: Listener) -> None:
        self._l = listener
        self._addr: str | None = None  # set once counted in
        self._tls: asyncio.Transport | None = None
        self._inner: RequestHandler | None = None
        self._pending: list[bytes] = []
        self._eof = False
        self._closed = False
        self._busy = False
        self._head_timer: asyncio.TimerHandle | None = None

    # -- from the TCP transport (before the handshake) or the TLS transport (after it) --

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        tcp = transport
        assert isinstance(tcp, asyncio.Transport)
        peer = tcp.get_extra_info("peername")
        addr = str(peer[0]) if peer else ""
        refusal = self._l.counts.admit(addr)
        if refusal is not None:
            self._closed = True
            log.warning("refused a connection from %s: %s", addr, refusal)
            tcp.abort()
            return
        self._addr = addr
        tcp.pause_reading()  # the ClientHello is for the TLS layer, not for this protocol
        self._l.handshakes.add(asyncio.get_running_loop().create_task(self._handshake(tcp)))

    async def _handshake(self, tcp: asyncio.Transport) -> None:
        task = asyncio.current_task()
        try:
            if self._closed or tcp.is_closing():
                return
            loop = asyncio.get_running_loop()
            try:
                tls = await loop.start_tls(tcp, self, self._l.ssl_context, server_side=True,
                                           ssl_handshake_timeout=self._l.limits.handshake_timeout)
            except (OSError, ssl.SSLError, TimeoutError, ConnectionError) as e:
                log.debug("TLS handshake with %s failed: %r", self._addr, e)
                tcp.abort()
                self._lost()
                return
            except asyncio.CancelledError:
                tcp.abort()
                self._lost()
                raise
            if tls is None or self._closed:
                return
            self._tls = tls
            self._attach(tls)
        finally:
            if task is not None:
                self._l.handshakes.discard(task)

    def _attach(self, tls: asyncio.Transport) -> None:
        inner = self._l.make_handler()
        self._inner = inner
        self._l.conns[inner] = self
        inner.connection_made(tls)
        pending, self._pending = self._pending, []
        for chunk in pending:
            self._feed(chunk)
        if self._eof:
            inner.eof_received()

    def data_received(self, data: bytes) -> None:
        if self._inner is None:
            self._pending.append(data)
        else:
            self._feed(data)

    def _feed(self, data: bytes) -> None:
        assert self._inner is not None
        if not self._busy and self._head_timer is None and self._tls is not None:
            self._head_timer = asyncio.get_running_loop().call_later(
                self._l.limits.header_timeout, self._head_expired)
        self._inner.data_received(data)

    def eof_received(self) -> bool | None:
        if self._inner is None:
            self._eof = True
            return True  # keep the transport open until the handler is attached
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

    def protocol(self) -> asyncio.Protocol:
        return _Conn(self)

    async def start(self, host: str | None, port: int, *, backlog: int = 1024) -> asyncio.Server:
        loop = asyncio.get_running_loop()
        return await loop.create_server(self.protocol, host, port, reuse_address=True, backlog=backlog)

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
