"""`ClusterAuthenticator.identify`: which answers hold for a connection's life (the HTTP layer remembers those on
the connection) and which must be asked again on every request."""

from __future__ import annotations

from typing import Any

from multidict import CIMultiDict

from lite.server.auth import TokenAuthenticator
from lite.server.authn.authenticator import ClusterAuthenticator
from lite.server.authn.claims import TokenInvalid
from lite.server.requestuser import AUTHENTICATED, UserInfo


class _Request:
    def __init__(self, token: str = "", cert: dict[str, Any] | None = None) -> None:
        self.headers = CIMultiDict({"Authorization": f"Bearer {token}"} if token else {})
        self.cert = cert

    @property
    def transport(self) -> Any:
        cert = self.cert

        class _T:
            def get_extra_info(self, name: str) -> Any:
                return cert if name == "peercert" else None
        return _T()


class _SATokens:
    """Any token looking like a JWT is a ServiceAccount's while `revoked` is False."""

    revoked = False

    def authenticate(self, token: str, audiences: Any = None) -> UserInfo:
        if self.revoked:
            raise TokenInvalid("revoked")
        return UserInfo("system:serviceaccount:ns:sa", ("system:serviceaccounts", AUTHENTICATED))


def test_identify() -> None:
    sa = _SATokens()
    auth = ClusterAuthenticator(TokenAuthenticator("admin-token", "join-secret"), sa)  # type: ignore[arg-type]
    admin, stable = auth.identify(_Request("admin-token"))
    assert stable and admin is not None and admin.name == "admin" and AUTHENTICATED in admin.groups
    assert auth.identify(_Request("admin-token"))[0] is admin  # one shared, frozen UserInfo
    assert auth(_Request("admin-token")) is admin
    assert auth.identify(_Request("wrong")) == (None, False)
    assert auth.identify(_Request()) == (None, False)
    jwt_like = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJ4In0.c2ln"
    user, stable = auth.identify(_Request(jwt_like))
    assert user is not None and user.name == "system:serviceaccount:ns:sa" and not stable  # revocable
    sa.revoked = True
    assert auth.identify(_Request(jwt_like)) == (None, False)
    cert = {"subject": ((("commonName", "alice"),), (("organizationName", "dev"),))}
    user, stable = auth.identify(_Request("wrong", cert=cert))
    assert stable and user == UserInfo("alice", ("dev",))  # fixed at the handshake, whatever token comes along
