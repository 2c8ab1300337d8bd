"""ServiceAccount token claims: their shape, the refusals of `parse_claims`/`check_claims`, the user named."""

from __future__ import annotations

from typing import Any

import pytest

from lite.server.authn.claims import (
    DEFAULT_ISSUER,
    LEGACY_ISSUER,
    Ref,
    TokenInvalid,
    bound_claims,
    check_claims,
    legacy_claims,
    parse_claims,
    split_username,
    user_of,
)

SA = Ref("bob", "sa-uid")
ISSUERS = (DEFAULT_ISSUER,)


def pod_claims(**kw: Any) -> dict[str, Any]:
    return bound_claims(issuer=DEFAULT_ISSUER, audiences=["api"], now=1000, seconds=600, namespace="ns", sa=SA,
                        pod=Ref("p", "pod-uid"), node=Ref("n1", "node-uid"), jti="j-1", **kw)


def test_bound_claims_have_upstreams_shape() -> None:
    assert pod_claims() == {
        "aud": ["api"], "exp": 1600, "iat": 1000, "nbf": 1000, "iss": DEFAULT_ISSUER, "jti": "j-1",
        "sub": "system:serviceaccount:ns:bob",
        "kubernetes.io": {"namespace": "ns", "serviceaccount": {"name": "bob", "uid": "sa-uid"},
                          "pod": {"name": "p", "uid": "pod-uid"}, "node": {"name": "n1", "uid": "node-uid"}},
    }


def test_secret_bound_claims_name_no_node() -> None:
    c = bound_claims(issuer=DEFAULT_ISSUER, audiences=["a"], now=5, seconds=10, namespace="ns", sa=SA,
                     secret=Ref("s", "s-uid"), node=Ref("n1", "x"))
    assert c["kubernetes.io"]["secret"] == {"name": "s", "uid": "s-uid"}
    assert "node" not in c["kubernetes.io"] and "pod" not in c["kubernetes.io"]


def test_round_trip() -> None:
    parsed = parse_claims(pod_claims(), ISSUERS)
    assert (parsed.namespace, parsed.service_account, parsed.pod, parsed.node, parsed.audiences,
            parsed.expires, parsed.not_before, parsed.jti, parsed.legacy) == (
        "ns", SA, Ref("p", "pod-uid"), Ref("n1", "node-uid"), ("api",), 1600, 1000, "j-1", False)


def test_legacy_round_trip() -> None:
    c = legacy_claims("ns", SA, "bob-token")
    assert c["iss"] == LEGACY_ISSUER and c["sub"] == "system:serviceaccount:ns:bob"
    parsed = parse_claims(c, ISSUERS)
    assert parsed.legacy and parsed.secret == Ref("bob-token") and parsed.service_account == SA
    check_claims(parsed, 10**12, ("anything",))  # no expiry, no audience


def _drop(key: str, inner: str = "") -> dict[str, Any]:
    c = pod_claims()
    if inner:
        del c[key][inner]
    else:
        del c[key]
    return c


def _set(key: str, value: Any) -> dict[str, Any]:
    c = pod_claims()
    c[key] = value
    return c


@pytest.mark.parametrize("claims,why", [
    (_set("iss", "https://elsewhere"), "issuer is not trusted"),
    (_drop("iss"), "issuer is not trusted"),
    (_drop("kubernetes.io"), "missing kubernetes.io"),
    (_drop("kubernetes.io", "namespace"), "missing the namespace"),
    (_drop("kubernetes.io", "serviceaccount"), "missing the namespace"),
    (_set("sub", "system:serviceaccount:ns:other"), "subject does not match"),
    (_drop("exp"), "no expiry"),
    (_set("exp", "soon"), "malformed exp"),
    (_set("exp", True), "malformed exp"),
    (_set("aud", [1]), "malformed aud"),
    ({**legacy_claims("ns", SA, "t"), "kubernetes.io/serviceaccount/secret.name": ""}, "incomplete"),
    ({**legacy_claims("ns", SA, "t"), "sub": "system:serviceaccount:ns:eve"}, "subject does not match"),
])
def test_parse_refuses(claims: dict[str, Any], why: str) -> None:
    with pytest.raises(TokenInvalid, match=why):
        parse_claims(claims, ISSUERS)


def test_malformed_pod_reference() -> None:
    c = pod_claims()
    c["kubernetes.io"]["pod"] = {"uid": "x"}
    with pytest.raises(TokenInvalid, match="malformed pod"):
        parse_claims(c, ISSUERS)


def test_aud_may_be_a_string() -> None:
    assert parse_claims(_set("aud", "api"), ISSUERS).audiences == ("api",)


@pytest.mark.parametrize("now,audiences,why", [
    (1599, ("api",), None),
    (1600, ("api",), "expired"),
    (999, ("api",), "not valid yet"),
    (1200, ("other",), "audiences is invalid"),
    (1200, ("other", "api"), None),
    (1200, (), None),
])
def test_check_claims(now: int, audiences: tuple[str, ...], why: str | None) -> None:
    parsed = parse_claims(pod_claims(), ISSUERS)
    if why is None:
        check_claims(parsed, now, audiences)
    else:
        with pytest.raises(TokenInvalid, match=why):
            check_claims(parsed, now, audiences)


def test_user_of_a_pod_token() -> None:
    user = user_of(parse_claims(pod_claims(), ISSUERS))
    assert (user.name, user.uid, user.groups) == (
        "system:serviceaccount:ns:bob", "sa-uid", ("system:serviceaccounts", "system:serviceaccounts:ns"))
    assert dict(user.extra) == {
        "authentication.kubernetes.io/credential-id": ("JTI=j-1",),
        "authentication.kubernetes.io/node-name": ("n1",), "authentication.kubernetes.io/node-uid": ("node-uid",),
        "authentication.kubernetes.io/pod-name": ("p",), "authentication.kubernetes.io/pod-uid": ("pod-uid",)}


@pytest.mark.parametrize("user,want", [
    ("system:serviceaccount:ns:bob", ("ns", "bob")),
    ("system:serviceaccount:ns", None),
    ("system:serviceaccount::bob", None),
    ("system:serviceaccount:ns:a:b", None),
    ("alice", None),
])
def test_split_username(user: str, want: tuple[str, str] | None) -> None:
    assert split_username(user) == want
