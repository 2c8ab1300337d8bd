"""Bearer-token authentication of API requests.

Role: `TokenAuthenticator` is the `authenticate(request) -> str | None` callable that `build_api_app` takes.
The admin token (from the kubeconfig) maps to user "admin"; the join token that agents present maps to
"node"; anything else (or no token) is None, which the API layer answers with 401.

Invariants:
- Tokens are compared in constant time (`hmac.compare_digest`), each candidate against every known token,
  so timing reveals neither which token nor how much of it matched.
- The join token is accepted in its full `K10...::server:<secret>` form or as the bare secret.
- Pure and cheap: no I/O, safe to call on the event loop for every request.
"""

from __future__ import annotations

import hmac
from collections.abc import Mapping
from typing import Protocol

from lite.server.certs import parse_join_token

ADMIN_USER = "admin"
NODE_USER = "node"


class HasHeaders(Protocol):
    """The part of an aiohttp request the authenticator reads."""

    @property
    def headers(self) -> Mapping[str, str]: ...


def bearer_token(headers: Mapping[str, str]) -> str | None:
    """The token of an `Authorization: Bearer <token>` header (scheme case-insensitive), else None."""
    value = headers.get("Authorization", "")
    scheme, _, token = value.strip().partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


class TokenAuthenticator:
    """Maps a request's bearer token to a user name, or None."""

    def __init__(self, admin_token: str, join_secret: str) -> None:
        if not admin_token or not join_secret:
            raise ValueError("admin token and join secret must be non-empty")
        self._tokens: tuple[tuple[bytes, str], ...] = (
            (admin_token.encode(), ADMIN_USER),
            (join_secret.encode(), NODE_USER),
        )

    def user_for_token(self, token: str) -> str | None:
        candidates = {token.encode(), parse_join_token(token)[1].encode()}
        user: str | None = None
        for known, name in self._tokens:
            for cand in candidates:
                # No early exit: every comparison runs whatever matched before.
                if hmac.compare_digest(cand, known) and user is None:
                    user = name
        return user

    def __call__(self, request: HasHeaders) -> str | None:
        token = bearer_token(request.headers)
        return None if token is None else self.user_for_token(token)
