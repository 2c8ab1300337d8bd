"""A real registry for tests: Debian's `docker-registry` (CNCF distribution 2.8) on loopback, plus an
aiohttp proxy in front of it that counts requests and can demand bearer/basic auth or corrupt blobs.

`RegistryServer.start(tmp)` spawns the binary on 127.0.0.1:<free port> with its storage in `tmp`, waits
for `GET /v2/` to answer 200, and `stop()` kills it by PID. Nothing listens beyond loopback.
"""

from __future__ import annotations

import base64
import os
import secrets
import shutil
import socket
import ssl
import subprocess
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from aiohttp import ClientSession, web

REGISTRY_BIN = "/usr/bin/docker-registry"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class RegistryServer:
    proc: subprocess.Popen[bytes]
    port: int
    scheme: str = "http"

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        return f"{self.scheme}://{self.host}"

    @classmethod
    def available(cls) -> bool:
        return shutil.which(REGISTRY_BIN) is not None

    @classmethod
    def start(cls, workdir: Path, *, tls: tuple[Path, Path] | None = None) -> RegistryServer:
        """Start on a free loopback port; `tls=(cert_file, key_file)` serves https instead of http."""
        port = free_port()
        (workdir / "data").mkdir(parents=True, exist_ok=True)
        config = workdir / "config.yml"
        tls_yaml = f", tls: {{certificate: {tls[0]}, key: {tls[1]}}}" if tls else ""
        config.write_text(
            "version: 0.1\n"
            "log: {level: error, fields: {service: registry}}\n"
            f"storage: {{cache: {{blobdescriptor: inmemory}}, filesystem: {{rootdirectory: {workdir}/data}},"
            " delete: {enabled: true}}\n"
            f"http: {{addr: '127.0.0.1:{port}', headers: {{X-Content-Type-Options: [nosniff]}}{tls_yaml}}}\n"
        )
        env = {**os.environ, "REGISTRY_HTTP_SECRET": secrets.token_hex(16)}
        with (workdir / "registry.log").open("wb") as log:  # the child keeps its own copy of the fd
            proc = subprocess.Popen([REGISTRY_BIN, "serve", str(config)], stdout=log, stderr=subprocess.STDOUT, env=env)
        server = cls(proc, port, "https" if tls else "http")
        context = ssl.create_default_context(cafile=None)
        context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"{server.url}/v2/", timeout=2, context=context) as r:
                    if r.status == 200:
                        return server
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                server.stop()
                raise RuntimeError(f"docker-registry did not start: {(workdir / 'registry.log').read_text()}")
            time.sleep(0.02)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@dataclass
class AuthProxy:
    """Proxy to `upstream` on loopback. Records every request as (method, path).

    - `bearer=(user, password)`: registry paths need `Bearer <token>`; 401 carries a Docker Hub-style
      challenge whose realm is this server's `/token`, which hands out the token to those credentials.
    - `basic=(user, password)`: registry paths need HTTP basic auth.
    - `identity_token`: `POST /token` with `grant_type=refresh_token` and this refresh token also gets it.
    - `fail_status`: answer every manifest GET with this status and a Docker Hub-style rate-limit error body.
    - `corrupt_blobs`: flip one byte in every blob body (the digest no longer matches).
    - `redirect_blobs`: answer blob GETs with 307 to `http://localhost:<port>/_redirected/…` (another
      origin, as blob storage would be), which serves them without auth and records the Authorization
      header it got in `redirected_auth`.
    """

    upstream: str
    bearer: tuple[str, str] | None = None
    basic: tuple[str, str] | None = None
    identity_token: str | None = None
    corrupt_blobs: bool = False
    fail_status: int = 0
    redirect_blobs: bool = False
    redirected_auth: list[str | None] = field(default_factory=list)
    requests: list[tuple[str, str]] = field(default_factory=list)
    token_requests: list[dict[str, str]] = field(default_factory=list)
    token: str = field(default_factory=lambda: secrets.token_hex(8))
    _runner: web.AppRunner | None = None
    _session: ClientSession | None = None
    port: int = 0

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        return f"http://{self.host}"

    async def start(self) -> AuthProxy:
        app = web.Application()
        app.router.add_get("/token", self._token)
        app.router.add_post("/token", self._oauth_token)
        app.router.add_get("/_redirected/{tail:.*}", self._redirected)
        app.router.add_route("*", "/{tail:.*}", self._proxy)
        self._session = ClientSession()
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        return self

    async def stop(self) -> None:
        if self._runner:
            await self._runner.cleanup()
        if self._session:
            await self._session.close()

    def count(self, kind: str, method: str = "") -> int:
        """Requests whose path contains `/manifests/` or `/blobs/` (kind = 'manifests' or 'blobs')."""
        return sum(1 for m, path in self.requests if f"/{kind}/" in path and method in ("", m))

    async def _token(self, request: web.Request) -> web.Response:
        self.token_requests.append(dict(request.query))
        assert self.bearer is not None
        if request.headers.get("Authorization") != _basic(*self.bearer):
            return web.json_response({"errors": [{"code": "UNAUTHORIZED"}]}, status=401)
        return web.json_response({"token": self.token, "expires_in": 300})

    async def _oauth_token(self, request: web.Request) -> web.Response:
        form = await request.post()
        self.token_requests.append({k: str(v) for k, v in form.items()})
        ok = form.get("grant_type") == "refresh_token" and form.get("refresh_token") == self.identity_token
        if not ok or self.identity_token is None:
            return web.json_response({"error": "invalid_grant"}, status=401)
        return web.json_response({"access_token": self.token, "expires_in": 300})

    async def _redirected(self, request: web.Request) -> web.StreamResponse:
        self.redirected_auth.append(request.headers.get("Authorization"))
        return await self._forward(request, request.path.removeprefix("/_redirected"))

    def _authorized(self, request: web.Request) -> bool:
        got = request.headers.get("Authorization")
        if self.bearer:
            return got == f"Bearer {self.token}"
        if self.basic:
            return got == _basic(*self.basic)
        return True

    async def _proxy(self, request: web.Request) -> web.StreamResponse:
        self.requests.append((request.method, request.path))
        if not self._authorized(request):
            repo = request.path.removeprefix("/v2/").split("/manifests/")[0].split("/blobs/")[0]
            if self.bearer:
                challenge = f'Bearer realm="{self.url}/token",service="lite-test",scope="repository:{repo}:pull"'
            else:
                challenge = 'Basic realm="lite-test"'
            return web.json_response(
                {"errors": [{"code": "UNAUTHORIZED"}]}, status=401, headers={"WWW-Authenticate": challenge}
            )
        if self.fail_status and "/manifests/" in request.path:
            error = {"code": "TOOMANYREQUESTS", "message": "You have reached your pull rate limit."}
            return web.json_response({"errors": [error]}, status=self.fail_status)
        if self.redirect_blobs and "/blobs/sha256:" in request.path and request.method == "GET":
            raise web.HTTPTemporaryRedirect(f"http://localhost:{self.port}/_redirected{request.path}")
        return await self._forward(request, request.path_qs)

    async def _forward(self, request: web.Request, path_qs: str) -> web.StreamResponse:
        assert self._session is not None
        headers = {k: v for k, v in request.headers.items() if k in ("Accept",)}
        async with self._session.request(
            request.method, self.upstream + path_qs, headers=headers, data=await request.read(), allow_redirects=False
        ) as up:
            body = await up.read()
            keep = ("Content-Type", "Docker-Content-Digest", "Location")
            out = {k: v for k, v in up.headers.items() if k in keep}
        if self.corrupt_blobs and "/blobs/" in path_qs and body:
            body = bytes([body[0] ^ 0xFF]) + body[1:]
        return web.Response(body=body, status=up.status, headers=out)


def _basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
