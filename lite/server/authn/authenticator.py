"""The authenticator chain of API requests: client certificate, then bearer token.

Role: `ClusterAuthenticator` is the `authenticate(request)` callable `build_api_app` and the join route take.
In kube-apiserver's order: a verified client certificate names the user (CN, groups from O); otherwise the
bearer token is tried against the static tokens (admin token → "admin", join token → "node", see
`lite.server.auth`), then as a ServiceAccount JWT. `token_user` is the token half alone, which TokenReview
uses.

Invariants:
- Returns a `UserInfo` or None (the HTTP layer answers 401); `token_user` may return a bare static user name.
  A static user's `UserInfo` (`user_info` of its name) is built once per authenticator and shared: it is
  frozen, and a pure function of the name (what the token maps to never changes while the process runs).
  Never raises for a bad credential; a token that fails every authenticator is simply nobody.
- A request whose client certificate names a user is that user whatever bearer token it also carries (the
  admin kubeconfig carries both), as upstream's union authenticator stops at the first success.
- Synchronous and cheap (in-memory lookups, cached signature checks): safe on the event loop per request.
"""

from __future__ import annotations

import logging
from typing import Any, Protocol

from lite.server.auth import bearer_token
from lite.server.authn.claims import TokenInvalid
from lite.server.authn.serviceaccounts import ServiceAccountTokens
from lite.server.authn.signer import looks_like_jwt
from lite.server.authn.x509 import user_from_peercert
from lite.server.requestuser import UserInfo, user_info

log = logging.getLogger(__name__)


class StaticTokens(Protocol):
    def user_for_token(self, token: str) -> str | None: ...


class _Request(Protocol):
    @property
    def headers(self) -> Any: ...

    @property
    def transport(self) -> Any: ...


def peercert(request: _Request) -> dict[str, Any] | None:
    """The verified client certificate of the request's TLS connection, if it presented one."""
    transport = request.transport
    if transport is None:
        return None
    cert = transport.get_extra_info("peercert")
    return cert if isinstance(cert, dict) and cert else None


class ClusterAuthenticator:
    """Client certificate, static tokens, ServiceAccount tokens; see the module doc."""

    def __init__(self, static: StaticTokens, sa_tokens: ServiceAccountTokens | None = None) -> None:
        self.static, self.sa_tokens = static, sa_tokens
        self._static_infos: dict[str, UserInfo] = {}  # static user name -> its UserInfo (see the module doc)

    def __call__(self, request: _Request) -> UserInfo | str | None:
        return self.identify(request)[0]

    def identify(self, request: _Request) -> tuple[UserInfo | None, bool]:
        """(the user, whether that answer holds for the connection's life): True for a user named by the
        connection's verified client certificate (fixed at the handshake) or by a static token (the static
        tokens never change while the process runs), given the same Authorization header; False for a
        ServiceAccount token (revocable at any moment: checked on every request) and for nobody."""
        user = user_from_peercert(peercert(request))
        if user is not None:
            return user, True
        token = bearer_token(request.headers)
        if token is None:
            return None, False
        found = self.token_user(token)
        if not isinstance(found, str):
            return found, False
        info = self._static_infos.get(found)
        if info is None:
            info = self._static_infos[found] = user_info(found)
        return info, True

    def token_user(self, token: str, audiences: tuple[str, ...] | None = None) -> UserInfo | str | None:
        """The user a bearer token names (ServiceAccount tokens checked against `audiences`, default the
        API's), or None."""
        static = self.static.user_for_token(token)
        if static is not None:
            return static
        if self.sa_tokens is None or not looks_like_jwt(token):
            return None
        try:
            return self.sa_tokens.authenticate(token, audiences)
        except TokenInvalid as e:
            log.debug("refused a service account token: %s", e)
            return None
