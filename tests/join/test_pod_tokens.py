"""Pod-bound ServiceAccount tokens over the join session: the agent's `TokenClient` asks, the hub answers only
for pods bound to the asking node, and the token names the pod and its node."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from joinstack import POD, Stack, TestAgent, joined, pod, serve_join

from lite import wire
from lite.agent.satokens import TokenClient, TokenError
from lite.server.authn.claims import DEFAULT_ISSUER
from lite.server.authn.serviceaccounts import ServiceAccountTokens
from lite.server.authn.signer import TokenSigner, ensure_signing_key
from lite.server.authn.wiring import resources_lookup


@dataclass
class TokenAgent(TestAgent):
    __test__ = False
    client: TokenClient | None = field(default=None)

    async def handle(self, msg: wire.Message) -> None:
        if isinstance(msg, wire.TokenResponse) and self.client is not None:
            self.client.deliver(msg)
        await super().handle(msg)


@pytest.fixture
async def stack(tmp_path: Path, free_port: int) -> AsyncIterator[Stack]:
    async with serve_join(tmp_path, free_port) as s:
        yield s


async def test_tokens_only_for_pods_of_the_node(stack: Stack, tmp_path: Path) -> None:
    r = stack.resources
    tokens = ServiceAccountTokens(TokenSigner(ensure_signing_key(tmp_path / "service.key")), DEFAULT_ISSUER,
                                  (DEFAULT_ISSUER,), lookup=resources_lookup(r))
    r.token_issuer = tokens.issue
    sa_kind = r.core_kind("serviceaccounts")
    await r.create(sa_kind, "default", {"metadata": {"name": "robot"}})
    mine = await r.create(POD, "default", pod("mine", "n1", serviceAccountName="robot"))
    theirs = await r.create(POD, "default", pod("theirs", "n2", serviceAccountName="robot"))
    agent = TokenAgent()
    async with joined(stack, "n1", agent) as session:
        client = agent.client = TokenClient(session.post, timeout=10)
        token, expires = await client.request(mine, "", 3607)
        user = tokens.authenticate(token)
        extra = dict(user.extra)
        assert user.name == "system:serviceaccount:default:robot"
        assert extra["authentication.kubernetes.io/pod-name"] == ("mine",)
        assert extra["authentication.kubernetes.io/pod-uid"] == (mine["metadata"]["uid"],)
        assert extra["authentication.kubernetes.io/node-name"] == ("n1",)
        assert expires > 0
        vault = (await client.request(mine, "vault", 600))[0]
        assert tokens.authenticate(vault, ("vault",)).name == user.name
        with pytest.raises(TokenError, match='is not bound to node "n1"'):
            await client.request(theirs, "", 3607)
        forged = {**mine, "metadata": {**mine["metadata"], "uid": "not-the-uid"}}
        with pytest.raises(TokenError, match="not bound"):
            await client.request(forged, "", 3607)
        with pytest.raises(TokenError, match='pods "gone" not found'):
            await client.request(pod("gone"), "", 3607)
