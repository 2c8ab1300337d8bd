"""Bearer-token authentication: admin, node (join token, full or bare secret), everything else None."""

from __future__ import annotations

import pytest

from lite.server.auth import TokenAuthenticator, bearer_token
from lite.server.certs import format_join_token


class Req:
    def __init__(self, auth: str | None) -> None:
        self.headers = {} if auth is None else {"Authorization": auth}


AUTH = TokenAuthenticator("a" * 64, "joinsecret")


@pytest.mark.parametrize(("header", "user"), [
    ("Bearer " + "a" * 64, "admin"),
    ("bearer " + "a" * 64, "admin"),
    ("Bearer joinsecret", "node"),
    ("Bearer " + format_join_token(b"ca", "joinsecret"), "node"),
    ("Bearer " + "a" * 63, None),
    ("Bearer " + "a" * 65, None),
    ("Bearer wrong", None),
    ("Basic " + "a" * 64, None),
    ("Bearer ", None),
    (None, None),
])
def test_users(header: str | None, user: str | None) -> None:
    assert AUTH(Req(header)) == user


def test_bearer_token_parsing() -> None:
    assert bearer_token({"Authorization": "Bearer  tok "}) == "tok"
    assert bearer_token({}) is None


def test_empty_tokens_are_refused() -> None:
    with pytest.raises(ValueError):
        TokenAuthenticator("", "x")
