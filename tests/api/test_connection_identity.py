"""The caller's identity remembered on its connection (`http._authenticate` with `StatusRequestHandler`):
only a client certificate's or a static token's user, only for the Authorization header it was given for, and a
revocable (ServiceAccount) token is authenticated on every request, so its revocation is seen at once."""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web
from helpers.tls import make_pki

from lite.kinds import BUILTIN_KINDS, KindRegistry
from lite.server.api.http import build_api_app
from lite.server.config import ConnectionLimits
from lite.server.listener import Listener
from lite.server.requestuser import UserInfo


class _Authenticator:
    """`identify` as `ClusterAuthenticator`'s: "static" is stable, "sa" is revocable, anything else is nobody."""

    def __init__(self) -> None:
        self.calls = 0
        self.sa_revoked = False

    def identify(self, request: web.Request) -> tuple[UserInfo | None, bool]:
        self.calls += 1
        token = request.headers.get("Authorization", "")
        if token == "Bearer static":
            return UserInfo("admin", ("system:masters",)), True
        if token == "Bearer sa" and not self.sa_revoked:
            return UserInfo("system:serviceaccount:ns:sa"), False
        return None, False

    def __call__(self, request: web.Request) -> UserInfo | None:
        return self.identify(request)[0]


class _NoClient:
    """Discovery never touches the resource layer: any call here is a test failure."""

    def __getattr__(self, name: str) -> object:
        if name not in ("get", "list", "watch", "create", "update", "patch", "delete", "delete_collection"):
            raise AttributeError(name)

        def called(*args: object, **kwargs: object) -> object:
            raise AssertionError(f"unexpected Client.{name} call")
        return called


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[tuple[Listener, _Authenticator, str, ssl.SSLContext]]:
    pki = make_pki(tmp_path)
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_ctx.load_cert_chain(pki.cert_file, pki.key_file)
    client_ctx = ssl.create_default_context(cafile=str(pki.ca_file))
    auth = _Authenticator()
    app = build_api_app(_NoClient(), KindRegistry(BUILTIN_KINDS), auth)  # type: ignore[arg-type]
    listener = Listener(server_ctx, ConnectionLimits(), max_total=1000)
    runner = web.AppRunner(app, handle_signals=False, access_log=None)
    await runner.setup()
    listener.server = runner.server
    srv = await listener.start("127.0.0.1", 0)
    try:
        yield listener, auth, f"https://127.0.0.1:{srv.port}", client_ctx
    finally:
        srv.close()
        listener.abort_handshakes()
        await runner.cleanup()


async def test_identity_is_remembered_only_for_its_header_and_never_for_a_revocable_token(
        served: tuple[Listener, _Authenticator, str, ssl.SSLContext]) -> None:
    listener, auth, url, ctx = served
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=1, ssl=ctx)) as s:
        async def status(token: str) -> int:
            async with s.get(f"{url}/api", headers={"Authorization": f"Bearer {token}"}) as r:
                await r.read()
                return r.status

        assert await status("static") == 200
        assert await status("static") == 200
        assert auth.calls == 1  # the second request on the connection took the remembered identity
        assert await status("wrong") == 401  # another header: authenticated afresh, and refused
        assert await status("static") == 200
        assert auth.calls == 2  # still the header the identity was remembered for
        assert await status("sa") == 200
        assert await status("sa") == 200
        assert auth.calls == 4  # a revocable token is authenticated on every request
        auth.sa_revoked = True
        assert await status("sa") == 401  # revocation is seen by the very next request on the connection
        assert await status("static") == 200
        assert auth.calls == 6  # the revocable token's request forgot the remembered one
    assert listener.table.total <= 1  # all of it on one connection
