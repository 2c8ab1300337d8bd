"""The API port's listener: connection limits applied before aiohttp sees a byte.

Role: `Listener` accepts TCP connections for the aiohttp application and, for each one:

1. counts it in a `ConnectionTable` (pure) and, when that says so, first closes another, idle, connection
   to make room: under fd pressure (`max_total` open: the soft RLIMIT_NOFILE, which `raise_nofile_limit`
   lifts to the hard one at start, less a reserve for the store and the agent) the longest-idle one of the
   address holding the most; past `per_address` from its own address, that address's longest-idle one
   idle for a second or more. A connection is refused (closed before any TLS work) only when the budget is
   full and every open connection is busy serving a request; no address is refused for the connections
   it holds, as kube-apiserver refuses none (its limits are on requests: `api/inflight.py`'s 429s);
2. waits for the client's first byte (until then a connection holds no TLS state, only its socket),
   then runs the TLS handshake (`loop.connect_accepted_socket`); both within `handshake_timeout`;
3. hands the TLS stream to an aiohttp request handler (`StatusRequestHandler`: a request aiohttp cannot
   parse, such as one with an oversized header, is answered with a Kubernetes Status, not plain text);
4. aborts it when a request head has been arriving for longer than `header_timeout` (slowloris). The
   clock starts at the first byte received while no request is being served and stops when the
   application starts serving one (`StatusRequestHandler`); bytes pipelined during a request are left to the
   idle timeout.

Idle connections (none in flight, nothing arriving; also a connection that never sends a request) are
closed by aiohttp's own keep-alive timer, set to `idle_timeout`. The defaults are kube-apiserver's: a
32 s header timeout (ReadHeaderTimeout) and a 90 s idle timeout (IdleTimeout).

Invariants: a connection is counted from accept until it is closed or chosen as a victim, exactly once (also
when a handler took the transport over and swallowed its connection_lost); it is idle in the table except
while the middleware serves a request on it, so watches, exec sessions and requests are never closed to make
room; an evicted connection's socket is closed even when its handshake task never ran; the aiohttp handler
is attached before the first decrypted byte arrives; everything runs on the event loop, nothing blocks.
"""

from __future__ import annotations

import asyncio
import errno
import functools
import logging
import resource
import socket
import ssl
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from aiohttp import hdrs, web
from aiohttp.http_exceptions import LineTooLong
from aiohttp.web_protocol import RequestHandler

from lite.errors import ApiError
from lite.server.config import ConnectionLimits
from lite.server.conntable import ConnectionTable

log = logging.getLogger("lite.server.listener")

# Header bounds handed to aiohttp's parser (its default is 8190 bytes a line; Go allows 1 MiB in all).
HANDLER_ARGS: dict[str, Any] = {"max_line_size": 16 * 1024, "max_field_size": 16 * 1024, "max_headers": 128}
FD_RESERVE = 256  # descriptors kept free for the store, the agent, logs and outgoing connections
NOFILE_CEILING = 1 << 20
REAP_DELAY = 1.0  # seconds given to a closed transport's own connection_lost before counting it out


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
    """aiohttp's per-connection handler, answering unparseable requests with a Kubernetes Status, and marking
    its connection (`lite_conn`, when the listener accepted it) busy while a request is served: from the
    application's first step to the end of writing the answer. (Done here rather than in an application
    middleware: aiohttp then runs no middleware chain at all, two coroutines a request fewer.)"""

    lite_conn: _Conn | None = None
    # (the application's own request handler, `_routed` bound to that application) when the application runs no
    # middleware: its handler's first step asks asyncio.get_event_loop(), a getpid() system call on Python 3.11
    # (microseconds in a sandboxed kernel), for nothing but a debug-mode type check.
    lite_direct: tuple[Any, Callable[[Any], Awaitable[web.StreamResponse]]] | None = None
    # (Authorization header, UserInfo) of the connection's caller when its identity holds for the connection's
    # life (`http._connection_identity`); None: authenticated on each request.
    lite_identity: tuple[str | None, Any] | None = None

    async def _handle_request(self, request: Any, start_time: float | None,
                              request_handler: Callable[[Any], Awaitable[web.StreamResponse]]
                              ) -> tuple[web.StreamResponse, bool]:
        direct = self.lite_direct
        if direct is not None and request_handler is direct[0]:
            request_handler = direct[1]
        conn = self.lite_conn
        if conn is None:
            return await super()._handle_request(request, start_time, request_handler)
        conn.request_started()
        try:
            return await super()._handle_request(request, start_time, request_handler)
        finally:
            conn.request_finished()

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


async def _routed(app: web.Application, request: web.Request) -> web.StreamResponse:
    """`web.Application._handle` for an application without middleware, step for step, less its debug-mode check
    (and the event-loop lookup that check needs)."""
    match_info = await app.router.resolve(request)
    match_info.add_app(app)
    match_info.freeze()
    request._match_info = match_info  # what Application._handle sets
    if request.headers.get(hdrs.EXPECT):
        resp = await match_info.expect_handler(request)
        await request.writer.drain()
        if resp is not None:
            return resp
    return await match_info.handler(request)


class _Conn(asyncio.Protocol):
    """One accepted connection: its socket until the TLS handshake, then a transparent pipe into the aiohttp
    handler, plus the header timer and its row in the listener's `ConnectionTable`."""

    def __init__(self, listener: Listener, addr: str, sock: socket.socket, loop: asyncio.AbstractEventLoop) -> None:
        self._l = listener
        # Kept: on Python 3.11 every asyncio.get_running_loop() is a getpid() system call (microseconds in a
        # sandboxed kernel), and every request asked for it twice.
        self._loop = loop
        self.addr = addr
        self.sock: socket.socket | None = sock  # until the handshake task hands it to the TLS transport
        self.handshake: asyncio.Task[None] | None = None
        self._tls: asyncio.Transport | None = None
        self._inner: RequestHandler | None = None
        self._closed = False
        self._busy = False
        self._head_since: float | None = None  # loop time the request head now arriving began; None: none is
        self._head_timer: asyncio.TimerHandle | None = None  # armed for the oldest head it may have to cut

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._tls = transport
        self.sock = None
        inner = self._inner = self._l.make_handler()
        self._l.conns[inner] = self
        if isinstance(inner, StatusRequestHandler):
            inner.lite_conn = self
        inner.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        assert self._inner is not None
        if not self._busy and self._head_since is None:
            loop = self._loop
            now = self._head_since = loop.time()
            if self._head_timer is None:
                self._head_timer = loop.call_at(now + self._l.limits.header_timeout, self._head_expired)
            self._l.table.idle(self, now)  # a head ages from its first byte, not from the last
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
        self._head_since = None
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None
        if self._inner is not None:
            self._l.conns.pop(self._inner, None)
            if isinstance(self._inner, StatusRequestHandler):
                self._inner.lite_conn = None  # no cycle left for the GC to find (it may not look for minutes)
        self._closed = True
        self._l.table.remove(self)

    def evict(self) -> None:
        """Close this idle connection to make room for another (the table has counted it out already)."""
        if self._tls is not None:
            self._tls.close()  # TLS close_notify, then FIN: nothing is in flight on an idle connection
        elif self.handshake is not None:
            self.handshake.cancel()  # closes the socket
        elif self.sock is not None:
            self.sock.close()

    def _head_expired(self) -> None:
        # The timer is not cancelled when a head completes (a timer armed and cancelled on every request cost
        # more than the request's routing): it lapses when no head is arriving, and is armed again for a head
        # that began after the one it was armed for.
        self._head_timer = None
        since = self._head_since
        if since is None or self._busy or self._tls is None:
            return
        loop = self._loop
        due = since + self._l.limits.header_timeout
        if loop.time() < due:
            self._head_timer = loop.call_at(due, self._head_expired)
            return
        log.warning("closed a connection from %s: no complete request head within %gs", self.addr,
                    self._l.limits.header_timeout)
        self._tls.abort()

    def request_started(self) -> None:
        self._busy = True
        self._l.table.busy(self)
        self._head_since = None  # the head is complete: an armed timer finds none and lapses

    def request_finished(self) -> None:
        self._busy = False
        self._l.table.idle(self, self._loop.time())
        if self._tls is not None and self._tls.is_closing() and not self._closed:
            # A handler that took the transport over (raw SPDY upgrades point it at their own protocol) gets
            # its connection_lost; once the handler is done, a closed transport must still be counted out.
            self._loop.call_later(REAP_DELAY, self._reap)

    def _reap(self) -> None:
        if not self._closed:
            self.connection_lost(None)


class Listener:
    """Accepts connections for `server` (aiohttp's low-level server of the runner); see the module doc."""

    def __init__(self, ssl_context: ssl.SSLContext, limits: ConnectionLimits, max_total: int) -> None:
        self.ssl_context, self.limits = ssl_context, limits
        self.server: web.Server | None = None  # the runner's, set once it is set up
        self.table: ConnectionTable[_Conn] = ConnectionTable(limits.per_address, limits.max_total or max_total)
        self.conns: dict[RequestHandler, _Conn] = {}
        self.handshakes: set[asyncio.Task[None]] = set()
        self._direct: tuple[Any, Callable[[Any], Awaitable[web.StreamResponse]]] | tuple[()] | None = None

    def make_handler(self) -> RequestHandler:
        assert self.server is not None, "Listener.server is set before the listener starts"
        handler = StatusRequestHandler(self.server, loop=asyncio.get_running_loop(),
                                       keepalive_timeout=self.limits.idle_timeout, **HANDLER_ARGS)
        if self._direct is None:
            self._direct = _direct_route(self.server)
        handler.lite_direct = self._direct or None
        return handler

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
            self._admit(loop, sock, _address(peer))

    def _admit(self, loop: asyncio.AbstractEventLoop, sock: socket.socket, addr: str) -> None:
        now = loop.time()
        room = self.table.admit(addr, now)
        if room.refused is not None:
            log.warning("refused a connection from %s: %s", addr, room.refused)
            sock.close()
            return
        if room.victim is not None:
            victim = room.victim
            # Under fd pressure the server is at capacity: say so. Trimming one address's idle connections
            # is routine (a client opening a connection per request leaves hundreds idle).
            log.log(logging.WARNING if room.pressure else logging.DEBUG,
                    "closed the longest-idle connection from %s to admit one from %s: %s",
                    victim.addr, addr, room.reason)
            victim.evict()
        conn = _Conn(self, addr, sock, loop)
        self.table.add(conn, addr, now)
        task = conn.handshake = loop.create_task(self._handshake(conn, sock))
        self.handshakes.add(task)
        task.add_done_callback(lambda t: self._handshake_done(t, conn, sock))

    def _handshake_done(self, task: asyncio.Task[None], conn: _Conn, sock: socket.socket) -> None:
        # A task cancelled before its first step never runs its body (an eviction during a burst of accepts):
        # close and count out here too.
        self.handshakes.discard(task)
        conn.handshake = None
        if task.cancelled() or task.exception() is not None:
            sock.close()
            self.table.remove(conn)

    async def _handshake(self, conn: _Conn, sock: socket.socket) -> None:
        """Wait for the client's first byte (an idle socket costs no TLS state), then shake hands; the
        whole of it within the handshake timeout."""
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self.limits.handshake_timeout):
                await _readable(loop, sock)
                self.table.idle(conn, loop.time())  # a handshake ages from its first byte
                await loop.connect_accepted_socket(lambda: conn, sock, ssl=self.ssl_context,
                                                   ssl_handshake_timeout=self.limits.handshake_timeout)
        except (OSError, TimeoutError) as e:  # ssl.SSLError is an OSError
            # A client whose hello the server cannot accept (no common version, cipher, curve or signature
            # algorithm) gets no answer (asyncio drops the alert): say why here, or nobody can tell. Silent
            # closes and resets (TCP probes, port scans) and timeouts stay at debug.
            if isinstance(e, ssl.SSLError) and not isinstance(e, ssl.SSLEOFError):
                log.warning("TLS handshake with %s failed: %s", conn.addr, e.reason or e)
            else:
                log.debug("TLS handshake with %s failed: %r", conn.addr, e)
            sock.close()
            self.table.remove(conn)
        except asyncio.CancelledError:
            sock.close()
            self.table.remove(conn)
            raise

    def abort_handshakes(self) -> None:
        for task in list(self.handshakes):
            task.cancel()

    @web.middleware
    async def middleware(self, request: web.Request,
                         handler: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> web.StreamResponse:
        """Marks the connection busy while a request is served (no header timeout meanwhile, never closed to
        make room). The listener's own handlers (`StatusRequestHandler`) do this themselves, so an application
        served only through the listener needs no middleware; this one is for handlers that do not (a
        connection already marked is left to its handler)."""
        conn = self.conns.get(request.protocol)
        if isinstance(request.protocol, StatusRequestHandler) and request.protocol.lite_conn is not None:
            return await handler(request)
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


def _direct_route(server: web.Server) -> tuple[Any, Callable[[Any], Awaitable[web.StreamResponse]]] | tuple[()]:
    """(the server's request handler, `_routed` for its application) when that handler is a started plain
    `web.Application`'s own, running no middleware; () otherwise (its own handler serves)."""
    handler = server.request_handler
    app = getattr(handler, "__self__", None)
    if type(app) is not web.Application or getattr(handler, "__func__", None) is not web.Application._handle:
        return ()
    if app._run_middlewares is not False:  # None until the application is frozen
        return ()
    return handler, functools.partial(_routed, app)


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
