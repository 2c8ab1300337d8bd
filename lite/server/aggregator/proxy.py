"""Forwarding one API request to an extension API server (upstream kube-aggregator's proxy handler).

The request goes to `https://<endpoint>/<same path and query>` with its method, body and headers, except
credentials and hop-by-hop headers; the user is passed as upstream does, in `X-Remote-User` and one
`X-Remote-Group` header per group (the extension server trusts them the way it trusts the aggregator).
The answer streams back chunk by chunk as it arrives, so watches pass through; nothing is buffered whole.

Invariants: the client's own `Authorization` and any `Impersonate-*`/`X-Remote-*` headers are never forwarded;
a backend that cannot be reached answers 503 ServiceUnavailable (upstream's text), never a 5xx of our own
making beyond that.
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping

import aiohttp
from aiohttp import web

from lite import errors
from lite.server.aggregator.resolve import Backend
from lite.server.requestuser import current_user

_HOP = frozenset({"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer",
                  "transfer-encoding", "upgrade", "host", "content-length", "authorization"})
UNAVAILABLE = "the server is currently unable to handle the request"


def ssl_context(b: Backend, client_cert: tuple[str, str] | None = None) -> ssl.SSLContext:
    """TLS to the backend: its caBundle (else system trust), or no verification when insecure; presenting
    the front-proxy client certificate when there is one."""
    ctx = ssl.create_default_context(cadata=b.ca_pem.decode("latin-1") if b.ca_pem else None)
    if client_cert is not None:
        ctx.load_cert_chain(*client_cert)
    if b.insecure:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    return ctx


def forward_headers(headers: Mapping[str, str]) -> list[tuple[str, str]]:
    """The request headers to send on: the client's minus credentials and hop-by-hop, plus the user."""
    out: list[tuple[str, str]] = []
    for k, v in headers.items():
        low = str(k).lower()
        if low in _HOP or low.startswith(("impersonate-", "x-remote-")):
            continue
        out.append((str(k), str(v)))
    user = current_user()
    if user is not None:
        out.append(("X-Remote-User", user.name))
        out += [("X-Remote-Group", g) for g in user.groups]
    return out


async def proxy(session: aiohttp.ClientSession, request: web.Request, b: Backend, tls: ssl.SSLContext,
                connect_timeout: float = 5.0) -> web.StreamResponse:
    """Forward `request` to `b` over `tls` (reuse one context per backend CA: the session pools connections
    per context, so a fresh context per request would cost a TLS handshake each time)."""
    url = f"https://{b.host}:{b.port}{request.rel_url}"
    body = request.content if request.can_read_body else None
    timeout = aiohttp.ClientTimeout(total=None, connect=connect_timeout, sock_connect=connect_timeout)
    try:
        upstream = await session.request(request.method, url, headers=forward_headers(request.headers), data=body,
                                         ssl=tls, server_hostname=b.server_name, timeout=timeout,
                                         allow_redirects=False, auto_decompress=False)
    except (TimeoutError, aiohttp.ClientError, OSError, ssl.SSLError) as e:
        raise errors.service_unavailable(f"{UNAVAILABLE}: {type(e).__name__}") from None
    async with upstream:
        resp = web.StreamResponse(status=upstream.status, reason=upstream.reason)
        for k, v in upstream.headers.items():
            if k.lower() not in _HOP:
                resp.headers.add(k, v)
        await resp.prepare(request)
        try:
            async for chunk in upstream.content.iter_any():
                await resp.write(chunk)
        except (TimeoutError, aiohttp.ClientError, ConnectionResetError):
            pass  # the backend or the client went away mid-stream: end our side too
        await resp.write_eof()
        return resp
