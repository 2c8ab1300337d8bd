"""OCI distribution client (pull side) over aiohttp: manifests, blobs, token and basic auth.

Contract:
- `get_manifest` returns the raw bytes, media type and sha256 digest; when asked by digest the bytes must hash
  to it (`DigestMismatchError` otherwise); manifests are capped at 4 MiB.
- `fetch_blob` streams a blob to a temp file (file writes in a worker thread), checks size and sha256 and
  only then hands the file back; on mismatch the file is deleted and `DigestMismatchError` raised.
- A 401 is answered the way Docker Hub expects: `WWW-Authenticate: Bearer realm=…,service=…,scope=…` → GET
  the realm (HTTP basic with the endpoint's credentials when it has any; an identity token is exchanged by
  POST as an OAuth2 refresh token) → retry once with `Authorization: Bearer <token>`; tokens are cached
  per (host, scope) until they expire. `Basic` challenges are answered with the credentials.
- Redirects are followed (aiohttp drops `Authorization` when the redirect leaves the host, which blob
  stores such as S3 require). A loopback default endpoint that fails over TLS is retried over plain http.
One client per aiohttp session; safe for concurrent use from one event loop.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import json
import os
import re
import ssl
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import aiohttp

from lite.agent.images.errors import DigestMismatchError, ImageNotFoundError, ImagePullError
from lite.agent.images.reference import SHA256_DIGEST
from lite.agent.images.registries import Credentials, Endpoint, TLSConfig
from lite.records import dataclass

OCI_INDEX = "application/vnd.oci.image.index.v1+json"
DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
INDEX_TYPES = (OCI_INDEX, DOCKER_LIST)
MANIFEST_TYPES = (OCI_MANIFEST, DOCKER_MANIFEST)
ACCEPT = ", ".join((*INDEX_TYPES, *MANIFEST_TYPES))
MAX_MANIFEST = 4 << 20
_FLUSH = 1 << 20
_CHALLENGE_PARAM = re.compile(r'(\w+)="([^"]*)"')


@dataclass(frozen=True)
class Manifest:
    data: bytes
    media_type: str
    digest: str

    def json(self) -> dict[str, Any]:
        doc = json.loads(self.data)
        if not isinstance(doc, dict):
            raise ImagePullError(f"manifest {self.digest} is not a JSON object")
        return doc


class RegistryClient:
    def __init__(self, session: aiohttp.ClientSession, *, user_agent: str = "lite-agent") -> None:
        self.session = session
        self.user_agent = user_agent
        self._tokens: dict[tuple[str, str], tuple[str, float]] = {}
        self._plain_http: set[str] = set()
        self._ssl: dict[TLSConfig, ssl.SSLContext | bool] = {}
        self.requests = 0  # for tests and metrics: HTTP requests sent

    async def get_manifest(self, ep: Endpoint, reference: str) -> Manifest:
        url = f"{self._base(ep)}/{ep.repository}/manifests/{reference}"
        async with await self._request("GET", ep, url, {"Accept": ACCEPT}) as resp:
            await _check_status(resp, f"{ep.repository}:{reference}")
            data = await resp.content.read(MAX_MANIFEST + 1)
            media_type = resp.headers.get("Content-Type", "").split(";")[0].strip()
        if len(data) > MAX_MANIFEST:
            raise ImagePullError(f"manifest {reference} is larger than {MAX_MANIFEST} bytes")
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        if reference.startswith("sha256:") and digest != reference:
            raise DigestMismatchError(f"manifest {reference}: content digest is {digest}")
        if media_type not in (*INDEX_TYPES, *MANIFEST_TYPES):
            media_type = str(Manifest(data, "", digest).json().get("mediaType") or media_type)
        return Manifest(data, media_type, digest)

    async def head_manifest(self, ep: Endpoint, reference: str) -> str | None:
        """The digest a tag points at, from a HEAD (no manifest body; free of Docker Hub pull limits).

        None when the registry does not say (then GET the manifest); `ImageNotFoundError` on 404.
        """
        url = f"{self._base(ep)}/{ep.repository}/manifests/{reference}"
        async with await self._request("HEAD", ep, url, {"Accept": ACCEPT}) as resp:
            if resp.status == 404:
                await _check_status(resp, f"{ep.repository}:{reference}")
            digest = resp.headers.get("Docker-Content-Digest", "")
            return digest if resp.status == 200 and SHA256_DIGEST.fullmatch(digest) else None

    async def fetch_blob(self, ep: Endpoint, digest: str, size: int, dest: Path) -> None:
        """Download blob `digest` into `dest` (an existing temp file), verified."""
        url = f"{self._base(ep)}/{ep.repository}/blobs/{digest}"
        sha, got = hashlib.sha256(), 0
        try:
            async with await self._request("GET", ep, url, {}) as resp:
                await _check_status(resp, f"blob {digest}")
                with await asyncio.to_thread(dest.open, "wb") as f:
                    buf = bytearray()
                    async for chunk in resp.content.iter_chunked(1 << 16):
                        sha.update(chunk)
                        got += len(chunk)
                        if size >= 0 and got > size:
                            raise DigestMismatchError(f"blob {digest}: more than the {size} bytes announced")
                        buf += chunk
                        if len(buf) >= _FLUSH:
                            await asyncio.to_thread(f.write, bytes(buf))
                            buf.clear()
                    await asyncio.to_thread(f.write, bytes(buf))
                    await asyncio.to_thread(_flush_sync, f)
            actual = "sha256:" + sha.hexdigest()
            if actual != digest:
                raise DigestMismatchError(f"blob {digest}: content digest is {actual} (rejected)")
            if size >= 0 and got != size:
                raise DigestMismatchError(f"blob {digest}: got {got} bytes, expected {size}")
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(dest)  # tiny; must also run when cancelled, so no await here
            raise

    # -- transport
    def _base(self, ep: Endpoint) -> str:
        if ep.host in self._plain_http and ep.base.startswith("https://"):
            return "http://" + ep.base[8:]
        return ep.base

    async def _request(self, method: str, ep: Endpoint, url: str, headers: Mapping[str, str]) -> aiohttp.ClientResponse:
        scope = f"repository:{ep.repository}:pull"
        # identity: a content-encoded body would no longer hash to its digest
        hdrs = {"User-Agent": self.user_agent, "Accept-Encoding": "identity", **headers}
        cached = self._tokens.get((ep.host, scope))
        if cached and cached[1] > time.monotonic():
            hdrs["Authorization"] = cached[0]
        resp = await self._send(method, ep, url, hdrs)
        if resp.status != 401:
            return resp
        challenge = resp.headers.get("WWW-Authenticate", "")
        resp.release()
        hdrs["Authorization"] = await self._authorize(ep, challenge, scope)
        return await self._send(method, ep, url, hdrs)

    async def _send(self, method: str, ep: Endpoint, url: str, headers: Mapping[str, str]) -> aiohttp.ClientResponse:
        self.requests += 1
        try:
            return await self.session.request(method, url, headers=headers, ssl=self._ssl_for(url, ep.tls))
        except aiohttp.ClientConnectorCertificateError as e:
            raise ImagePullError(f"{ep.base}: {e}") from e  # a real TLS server: never downgrade to http
        except aiohttp.ClientError as e:
            if ep.http_fallback and url.startswith("https://") and ep.host not in self._plain_http:
                self._plain_http.add(ep.host)
                return await self._send(method, ep, "http://" + url[8:], headers)
            raise ImagePullError(f"{ep.base}: {type(e).__name__}: {e}") from e

    def _ssl_for(self, url: str, tls: TLSConfig) -> ssl.SSLContext | bool:
        if not url.startswith("https://"):
            return True
        if tls not in self._ssl:
            self._ssl[tls] = _ssl_context(tls)
        return self._ssl[tls]

    # -- auth
    async def _authorize(self, ep: Endpoint, challenge: str, scope: str) -> str:
        scheme, _, rest = challenge.partition(" ")
        params = dict(_CHALLENGE_PARAM.findall(rest))
        creds = ep.credentials
        if scheme.lower() == "basic":
            if not creds or not creds.username:
                raise ImagePullError(f"{ep.host}: unauthorized: authentication required")
            return basic_auth(creds)
        if scheme.lower() != "bearer" or "realm" not in params:
            raise ImagePullError(f"{ep.host}: unauthorized: unsupported challenge {challenge!r}")
        token, expires_in = await self._fetch_token(ep, params, params.get("scope", scope), creds)
        value = f"Bearer {token}"
        self._tokens[(ep.host, scope)] = (value, time.monotonic() + max(expires_in - 10, 10))
        return value

    async def _fetch_token(
        self, ep: Endpoint, params: Mapping[str, str], scope: str, creds: Credentials | None
    ) -> tuple[str, int]:
        realm, service = params["realm"], params.get("service", "")
        self.requests += 1
        tls = self._ssl_for(realm, ep.tls)
        if creds and creds.identity_token:
            form = {
                "grant_type": "refresh_token",
                "refresh_token": creds.identity_token,
                "service": service,
                "scope": scope,
                "client_id": self.user_agent,
            }
            req = self.session.post(realm, data=form, ssl=tls)
        else:
            headers = {"Authorization": basic_auth(creds)} if creds and creds.username else {}
            query = {"service": service, "scope": scope} if service else {"scope": scope}
            req = self.session.get(realm, params=query, headers=headers, ssl=tls)
        try:
            async with req as resp:
                if resp.status != 200:
                    raise ImagePullError(f"{ep.host}: token request to {realm} failed: HTTP {resp.status}")
                body = await resp.json(content_type=None)
        except aiohttp.ClientError as e:
            raise ImagePullError(f"{ep.host}: token request to {realm} failed: {e}") from e
        token = body.get("token") or body.get("access_token")
        if not token:
            raise ImagePullError(f"{ep.host}: token response from {realm} has no token")
        return str(token), int(body.get("expires_in") or 60)


def _flush_sync(f: Any) -> None:
    f.flush()
    os.fsync(f.fileno())  # a blob is trusted by its name forever: its bytes must be on disk before the rename


def basic_auth(creds: Credentials) -> str:
    return "Basic " + base64.b64encode(f"{creds.username}:{creds.password}".encode()).decode()


async def _check_status(resp: aiohttp.ClientResponse, what: str) -> None:
    """Raise the error for a non-200 answer, with the registry's own error codes when it sent any."""
    if resp.status == 200:
        return
    if resp.status == 404:
        raise ImageNotFoundError(f"{what}: not found")
    detail = await _registry_errors(resp)
    if resp.status in (401, 403):
        word = "unauthorized" if resp.status == 401 else "denied"
        raise ImagePullError(f"{what}: {word}: HTTP {resp.status}{detail}")
    raise ImagePullError(f"{what}: unexpected HTTP status {resp.status} {resp.reason or ''}".rstrip() + detail)


async def _registry_errors(resp: aiohttp.ClientResponse) -> str:
    """`: CODE: message` parts of a distribution-spec error body (e.g. Docker Hub's toomanyrequests)."""
    if resp.request_info.method == "HEAD":
        return ""
    try:
        body = json.loads(await resp.content.read(8192))
        errors = body.get("errors") or []
        parts = [f"{e.get('code', '')}: {e.get('message', '')}".strip(": ") for e in errors if isinstance(e, dict)]
    except (ValueError, AttributeError, aiohttp.ClientError):
        return ""
    return "".join(f": {p}" for p in parts if p)


def _ssl_context(tls: TLSConfig) -> ssl.SSLContext | bool:
    if tls.insecure_skip_verify:
        return False
    if not (tls.ca_file or tls.cert_file):
        return True
    ctx = ssl.create_default_context(cafile=tls.ca_file or None)
    if tls.cert_file:
        ctx.load_cert_chain(tls.cert_file, tls.key_file or None)
    return ctx
