"""Service-account tokens while the server is away (lite.agent.satokens with the desired-state cache as its
memory): issued tokens are kept encrypted per pod and request, answered from there at once when offline (an
expired one too, logged once, with a renewal soon after), and never in place of an answer that is an error."""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path
from typing import Any

import pytest

from lite import wire
from lite.agent.cache import DesiredCache
from lite.agent.satokens import OFFLINE_RECHECK, TokenClient, TokenError, offline_expiry, renew_at, token_key

Obj = dict[str, Any]
pytestmark = pytest.mark.timeout(30)
POD: Obj = {"metadata": {"name": "p", "namespace": "t", "uid": "u1"}, "spec": {"containers": [{"name": "c"}]}}


class Server:
    """The server end of the session: answers each TokenRequest as told (or not at all)."""

    def __init__(self) -> None:
        self.client: TokenClient | None = None
        self.online = True
        self.answer: wire.TokenResponse | None = None
        self.asked = 0

    def post(self, msg: wire.Message) -> None:
        assert isinstance(msg, wire.TokenRequest) and self.client is not None
        self.asked += 1
        if self.online and self.answer is not None:
            asyncio.get_running_loop().call_soon(self.client.deliver,
                                                 wire.TokenResponse(msg.id, self.answer.token, self.answer.expires,
                                                                    self.answer.error))


def _client(tmp_path: Path, server: Server, timeout: float = 0.2) -> tuple[TokenClient, DesiredCache]:
    cache = DesiredCache(tmp_path / "cache", tmp_path / "cache.key")
    cache.record(wire.PodUpsert(POD))
    client = TokenClient(server.post, timeout, memory=cache, online=lambda: server.online)
    server.client = client
    return client, cache


async def test_issued_tokens_are_kept_and_served_offline_without_asking(tmp_path: Path) -> None:
    server = Server()
    client, cache = _client(tmp_path, server)
    expires = time.time() + 3600
    server.answer = wire.TokenResponse(0, "fresh.jwt", expires)
    assert await client.request(POD, "", 3600) == ("fresh.jwt", expires)
    assert cache.token("u1", token_key("", 3600)) == ("fresh.jwt", expires)
    await cache.flush()
    assert b"fresh.jwt" not in b"".join(p.read_bytes() for p in (tmp_path / "cache").iterdir())  # encrypted
    server.online = False
    asked = server.asked
    assert await client.request(POD, "", 3600) == ("fresh.jwt", expires)  # still valid: its own expiry
    assert server.asked == asked  # offline: not even asked


async def test_an_expired_cached_token_is_given_logged_once_and_renewed_soon(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    server = Server()
    client, cache = _client(tmp_path, server)
    cache.keep_token("u1", token_key("api", 600), "old.jwt", time.time() - 5)
    server.online = False
    with caplog.at_level(logging.WARNING, "lite.agent.satokens"):
        token, expires = await client.request(POD, "api", 600)
        await client.request(POD, "api", 600)
    assert token == "old.jwt"
    assert caplog.text.count("cached service account token") == 1
    now = time.time()
    assert now + OFFLINE_RECHECK - 1 <= renew_at(now, expires) <= now + OFFLINE_RECHECK + 1
    # back online: a fresh token replaces it
    server.online, server.answer = True, wire.TokenResponse(0, "new.jwt", now + 600)
    assert (await client.request(POD, "api", 600))[0] == "new.jwt"
    assert cache.token("u1", token_key("api", 600)) == ("new.jwt", now + 600)


async def test_a_timeout_falls_back_to_the_cache_an_error_does_not(tmp_path: Path) -> None:
    server = Server()
    client, cache = _client(tmp_path, server)
    cache.keep_token("u1", token_key("", 3600), "kept.jwt", time.time() + 100)
    assert (await client.request(POD, "", 3600))[0] == "kept.jwt"  # online, but no answer within the timeout
    server.answer = wire.TokenResponse(0, "", 0.0, "pod not bound to this node")
    with pytest.raises(TokenError, match="not bound"):
        await client.request(POD, "", 3600)
    server.answer = None
    with pytest.raises(TokenError, match="timed out"):  # nothing kept for this request
        await client.request({**POD, "metadata": {**POD["metadata"], "uid": "other"}}, "", 3600)


@pytest.mark.parametrize(("expires_in", "want_in"), [(-100.0, OFFLINE_RECHECK / 0.8), (10.0, OFFLINE_RECHECK / 0.8),
                                                     (3600.0, 3600.0)])
def test_offline_expiry(expires_in: float, want_in: float) -> None:
    assert offline_expiry(1000.0 + expires_in, 1000.0) == 1000.0 + want_in
