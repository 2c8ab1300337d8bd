"""`HttpClient`: the `lite.client.Client` protocol over HTTP(S), for simulated nodes, tools and tests.

One aiohttp session per client (open lazily on first use, closed by `close()`); bearer-token auth and/or a
client certificate (`client_cert`: PEM certificate and key, or a kubeconfig's `client-certificate(-data)` and
`client-key(-data)`); TLS verified against the given CA (bytes or file), the system store, or not at all with
`insecure=True`.
Requests and answers are JSON; patches use the content types of `lite.client.PATCH_CONTENT_TYPES`.

Invariants:
- Every non-2xx answer raises `lite.errors.ApiError` rebuilt from the Status body (`from_status`); a body that
  is not a Status gives an ApiError with the HTTP code and the reason Kubernetes uses for that code.
  Failures to reach the server (connect/read errors, timeouts) raise ApiError 503 ServiceUnavailable whose
  message starts with "connection to server failed", so callers handle one exception type.
- 429 answers with Retry-After are retried (bounded), as client-go does; nothing else is retried.
- `watch` yields `WatchEvent`s parsed line by line; each event keeps the exact bytes of its object in `raw`
  when the line has the standard `{"type":..,"object":..}` layout. A watch refused with HTTP 410 yields one
  ERROR event carrying that Status and ends, the same as a 410 sent inside the stream. Close a watch you
  abandon early (`contextlib.aclosing`) to release its connection at once.
"""

from __future__ import annotations

import asyncio
import base64
import os
import ssl
from collections.abc import AsyncIterator, Mapping
from typing import TYPE_CHECKING, Any

import aiohttp
import orjson
import yaml

from lite.client import PATCH_CONTENT_TYPES, Client, Obj, PatchType, WatchEvent
from lite.errors import ApiError, from_status
from lite.kinds import Kind

_REASONS = {
    400: "BadRequest", 401: "Unauthorized", 403: "Forbidden", 404: "NotFound", 405: "MethodNotAllowed",
    406: "NotAcceptable", 409: "Conflict", 410: "Gone", 413: "RequestEntityTooLarge",
    415: "UnsupportedMediaType", 422: "Invalid", 429: "TooManyRequests", 500: "InternalError",
    503: "ServiceUnavailable", 504: "Timeout",
}
_CONTENT_TYPE: dict[str, str] = {}
for _ct, _pt in PATCH_CONTENT_TYPES.items():
    _CONTENT_TYPE.setdefault(_pt, _ct)
del _ct, _pt

MAX_429_RETRIES = 5
_WATCH_PREFIX = b'{"type":"'
_WATCH_OBJECT = b'","object":'


def _error_from_body(code: int, body: bytes) -> ApiError:
    try:
        status = orjson.loads(body)
    except orjson.JSONDecodeError:
        status = None
    if isinstance(status, dict) and status.get("kind") == "Status":
        err = from_status(status)
        err.code = code  # the HTTP status is authoritative
        return err
    text = body.decode("utf-8", "replace").strip() or f"HTTP {code}"
    return ApiError(text, code, _REASONS.get(code, "Unknown"))


def _unreachable(e: BaseException) -> ApiError:
    return ApiError(f"connection to server failed: {e!r}", 503, "ServiceUnavailable")


def parse_watch_line(line: bytes) -> WatchEvent:
    """One watch line (`{"type":..,"object":..}`) as a WatchEvent keeping the object's own bytes."""
    doc = orjson.loads(line)
    if not isinstance(doc, dict) or "type" not in doc or not isinstance(doc.get("object"), dict):
        raise ApiError(f"malformed watch event: {line[:200]!r}", 500, "InternalError")
    etype = str(doc["type"])
    raw: bytes | None = None
    head = _WATCH_PREFIX + etype.encode() + _WATCH_OBJECT
    stripped = line.strip()
    if len(doc) == 2 and stripped.startswith(head) and stripped.endswith(b"}"):
        raw = stripped[len(head):-1]
    return WatchEvent(etype, doc["object"], raw)


def _load_client_cert(ctx: ssl.SSLContext, cert_pem: bytes, key_pem: bytes) -> None:
    """ssl loads a certificate chain only from files: a private temporary file (0600), removed at once."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="lite-client-") as d:
        path = os.path.join(d, "client.pem")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(cert_pem.rstrip(b"\n") + b"\n" + key_pem)
        try:
            ctx.load_cert_chain(path)
        except ssl.SSLError as e:
            raise ValueError(f"the client certificate and key cannot be loaded: {e}") from None


def _ssl_context(ca_data: bytes | None, ca_file: str | None, insecure: bool,
                 client_cert: tuple[bytes, bytes] | None = None) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=ca_file, cadata=ca_data.decode() if ca_data else None)
    if client_cert is not None:
        _load_client_cert(ctx, *client_cert)
    if insecure:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    # Watches and upgrades are HTTP/1.1 only.
    ctx.set_alpn_protocols(["http/1.1"])
    return ctx


class HttpClient:
    """The Client protocol over HTTP(S). See the module docstring for errors, retries and watches."""

    def __init__(self, server_url: str, *, token: str = "", ca_data: bytes | None = None,
                 ca_file: str | None = None, insecure: bool = False, timeout: float = 60.0,
                 user_agent: str = "lite-httpclient", client_cert: tuple[bytes, bytes] | None = None) -> None:
        self.server_url = server_url.rstrip("/")
        self._headers = {"Accept": "application/json", "User-Agent": user_agent}
        if token:
            self._headers["Authorization"] = f"Bearer {token}"
        self._ssl: ssl.SSLContext | bool = False
        if self.server_url.startswith("https://"):
            self._ssl = _ssl_context(ca_data, ca_file, insecure, client_cert)
        self._timeout = aiohttp.ClientTimeout(total=timeout)
        self._session: aiohttp.ClientSession | None = None

    @classmethod
    def from_kubeconfig(cls, path: str, *, context: str = "", timeout: float = 60.0,
                        user_agent: str = "lite-httpclient") -> HttpClient:
        """A client for the kubeconfig's current (or named) context: server, CA, and the user's token (or token
        file) and client certificate (inline `-data` or file paths, relative to the kubeconfig's folder)."""
        with open(path, encoding="utf-8") as f:
            cfg: dict[str, Any] = yaml.safe_load(f) or {}
        ctx_name = context or cfg.get("current-context", "")
        ctx = _named(cfg, "contexts", ctx_name, "context")
        cluster = _named(cfg, "clusters", ctx.get("cluster", ""), "cluster")
        user = _named(cfg, "users", ctx.get("user", ""), "user") if ctx.get("user") else {}
        base = os.path.dirname(os.path.abspath(path))
        ca_data = base64.b64decode(cluster["certificate-authority-data"]) \
            if cluster.get("certificate-authority-data") else None
        ca_file = os.path.join(base, cluster["certificate-authority"]) \
            if cluster.get("certificate-authority") else None
        token = str(user.get("token") or "")
        if not token and user.get("tokenFile"):
            with open(os.path.join(base, user["tokenFile"]), encoding="utf-8") as f:
                token = f.read().strip()
        cert, key = _pem(user, "client-certificate", base), _pem(user, "client-key", base)
        if (cert is None) != (key is None):
            raise ValueError(f"{path}: a client certificate needs both client-certificate and client-key")
        client_cert = (cert, key) if cert is not None and key is not None else None
        return cls(str(cluster["server"]), token=token, ca_data=ca_data, ca_file=ca_file,
                   insecure=bool(cluster.get("insecure-skip-tls-verify")), client_cert=client_cert,
                   timeout=timeout, user_agent=user_agent)

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def __aenter__(self) -> HttpClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def _http(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(headers=self._headers, timeout=self._timeout,
                                                  connector=aiohttp.TCPConnector(ssl=self._ssl))
        return self._session

    async def request(self, method: str, path: str, *, params: Mapping[str, str] | None = None,
                      body: Any = None, content_type: str = "application/json") -> Obj:
        """One API call; the decoded JSON answer. Public for paths outside the Client protocol."""
        data = orjson.dumps(body) if body is not None else None
        headers = {"Content-Type": content_type} if data is not None else None
        url = self.server_url + path
        for attempt in range(MAX_429_RETRIES + 1):
            try:
                async with self._http().request(method, url, params=params, data=data, headers=headers) as resp:
                    payload = await resp.read()
                    retry_after = resp.headers.get("Retry-After", "")
                    status = resp.status
            except (TimeoutError, aiohttp.ClientError) as e:
                raise _unreachable(e) from e
            if status == 429 and retry_after.isdigit() and attempt < MAX_429_RETRIES:
                await asyncio.sleep(min(int(retry_after), 10))
                continue
            if status >= 300:
                raise _error_from_body(status, payload)
            out: Obj = orjson.loads(payload) if payload else {}
            return out
        raise AssertionError("unreachable")

    # -- the Client protocol --

    async def get(self, kind: Kind, namespace: str, name: str, *, subresource: str = "") -> Obj:
        return await self.request("GET", _obj_path(kind, namespace, name, subresource))

    async def list(self, kind: Kind, namespace: str = "", *, label_selector: str = "",
                   field_selector: str = "", limit: int = 0, continue_: str = "",
                   resource_version: str = "", resource_version_match: str = "") -> Obj:
        params = _params(labelSelector=label_selector, fieldSelector=field_selector,
                         limit=str(limit) if limit else "", resourceVersion=resource_version,
                         resourceVersionMatch=resource_version_match)
        params["continue"] = continue_
        return await self.request("GET", kind.path(namespace), params=_params(**params))

    async def watch(self, kind: Kind, namespace: str = "", *, resource_version: str = "",
                    label_selector: str = "", field_selector: str = "", allow_bookmarks: bool = False,
                    timeout_seconds: float | None = None,
                    send_initial_events: bool = False) -> AsyncIterator[WatchEvent]:
        params = _params(watch="true", resourceVersion=resource_version, labelSelector=label_selector,
                         fieldSelector=field_selector, allowWatchBookmarks="true" if allow_bookmarks else "",
                         timeoutSeconds=str(max(1, int(timeout_seconds))) if timeout_seconds else "",
                         sendInitialEvents="true" if send_initial_events else "",
                         resourceVersionMatch="NotOlderThan" if send_initial_events else "")
        # A watch lives as long as the server keeps it; only connecting is bounded.
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=self._timeout.total)
        try:
            async with self._http().get(self.server_url + kind.path(namespace), params=params,
                                        timeout=timeout) as resp:
                if resp.status >= 300:
                    err = _error_from_body(resp.status, await resp.read())
                    if err.code == 410:
                        yield WatchEvent("ERROR", err.status())
                        return
                    raise err
                async for line in _lines(resp.content):
                    yield parse_watch_line(line)
        except (TimeoutError, aiohttp.ClientError) as e:
            raise _unreachable(e) from e

    async def create(self, kind: Kind, namespace: str, obj: Obj, *, name: str = "", subresource: str = "",
                     dry_run: bool = False, field_manager: str = "") -> Obj:
        path = _obj_path(kind, namespace, name, subresource) if subresource else kind.path(namespace)
        return await self.request("POST", path, body=obj, params=_write_params(dry_run, field_manager))

    async def update(self, kind: Kind, namespace: str, name: str, obj: Obj, *, subresource: str = "",
                     dry_run: bool = False, field_manager: str = "") -> Obj:
        return await self.request("PUT", _obj_path(kind, namespace, name, subresource), body=obj,
                                  params=_write_params(dry_run, field_manager))

    async def patch(self, kind: Kind, namespace: str, name: str, patch: Any, *,
                    patch_type: PatchType = "merge", subresource: str = "", dry_run: bool = False,
                    field_manager: str = "", force: bool = False) -> Obj:
        params = _write_params(dry_run, field_manager)
        if force:
            params["force"] = "true"
        return await self.request("PATCH", _obj_path(kind, namespace, name, subresource), body=patch,
                                  params=params, content_type=_CONTENT_TYPE[patch_type])

    async def delete(self, kind: Kind, namespace: str, name: str, *,
                     propagation_policy: str | None = None, grace_period_seconds: int | None = None,
                     preconditions: Obj | None = None, dry_run: bool = False) -> Obj:
        body = _delete_options(propagation_policy, grace_period_seconds, preconditions, dry_run)
        return await self.request("DELETE", _obj_path(kind, namespace, name, ""), body=body)

    async def delete_collection(self, kind: Kind, namespace: str = "", *, label_selector: str = "",
                                field_selector: str = "", propagation_policy: str | None = None,
                                grace_period_seconds: int | None = None, dry_run: bool = False) -> Obj:
        body = _delete_options(propagation_policy, grace_period_seconds, None, dry_run)
        params = _params(labelSelector=label_selector, fieldSelector=field_selector)
        return await self.request("DELETE", kind.path(namespace), params=params, body=body)


def _pem(user: Mapping[str, Any], field: str, base: str) -> bytes | None:
    """A kubeconfig user's `<field>-data` (base64 PEM) or `<field>` (a file, relative to `base`), else None."""
    if user.get(f"{field}-data"):
        return base64.b64decode(user[f"{field}-data"])
    if user.get(field):
        with open(os.path.join(base, str(user[field])), "rb") as f:
            return f.read()
    return None


def _named(cfg: dict[str, Any], section: str, name: str, field: str) -> dict[str, Any]:
    for entry in cfg.get(section) or []:
        if entry.get("name") == name:
            value: dict[str, Any] = entry.get(field) or {}
            return value
    raise ValueError(f"kubeconfig has no {section[:-1]} named {name!r}")


def _obj_path(kind: Kind, namespace: str, name: str, subresource: str) -> str:
    path = kind.path(namespace, name)
    return f"{path}/{subresource}" if subresource else path


def _params(**values: str) -> dict[str, str]:
    return {k: v for k, v in values.items() if v}


def _write_params(dry_run: bool, field_manager: str) -> dict[str, str]:
    return _params(dryRun="All" if dry_run else "", fieldManager=field_manager)


def _delete_options(propagation_policy: str | None, grace_period_seconds: int | None,
                    preconditions: Obj | None, dry_run: bool) -> Obj:
    body: Obj = {"kind": "DeleteOptions", "apiVersion": "v1"}
    if propagation_policy:
        body["propagationPolicy"] = propagation_policy
    if grace_period_seconds is not None:
        body["gracePeriodSeconds"] = grace_period_seconds
    if preconditions:
        body["preconditions"] = preconditions
    if dry_run:
        body["dryRun"] = ["All"]
    return body


async def _lines(stream: aiohttp.StreamReader) -> AsyncIterator[bytes]:
    """Non-empty lines of a stream, of any length (aiohttp's readline caps line size)."""
    buf = bytearray()
    async for chunk in stream.iter_any():
        start = 0
        while (nl := chunk.find(b"\n", start)) >= 0:
            buf += chunk[start:nl]
            if buf.strip():
                yield bytes(buf)
            buf.clear()
            start = nl + 1
        buf += chunk[start:]
    if buf.strip():
        yield bytes(buf)


if TYPE_CHECKING:
    def _implements_client(c: HttpClient) -> Client:  # mypy proves HttpClient satisfies the protocol
        return c
