"""ServiceAccountTokens over live objects: issuing, validating, the signature cache, the existence checks."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import jwt
import pytest

from lite.errors import ApiError
from lite.objects import Obj
from lite.server.authn.claims import DEFAULT_ISSUER, TokenInvalid
from lite.server.authn.serviceaccounts import ServiceAccountTokens
from lite.server.authn.signer import TokenSigner, ensure_signing_key

NOW = 1_800_000_000.0


class CountingSigner(TokenSigner):
    """The real signer, counting signature verifications."""

    verified = 0

    def verify(self, token: str) -> dict[str, Any] | None:
        self.verified += 1
        return super().verify(token)


@pytest.fixture(scope="module")
def key_pem(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    path = tmp_path_factory.mktemp("authn-key") / "service.key"
    pem = ensure_signing_key(path)
    assert (path.stat().st_mode & 0o777) == 0o600 and ensure_signing_key(path) == pem
    return pem


class World:
    """Objects by (plural, namespace, name), as the store would answer."""

    def __init__(self) -> None:
        self.objs: dict[tuple[str, str, str], Obj] = {}

    def add(self, plural: str, ns: str, name: str, uid: str, **rest: Any) -> Obj:
        obj: Obj = {"metadata": {"name": name, "namespace": ns, "uid": uid}, **rest}
        self.objs[(plural, ns, name)] = obj
        return obj

    def __call__(self, plural: str, ns: str, name: str) -> Obj | None:
        return self.objs.get((plural, ns, name))


@pytest.fixture
def world() -> World:
    w = World()
    w.add("serviceaccounts", "ns", "bob", "sa-1")
    w.add("pods", "ns", "p", "pod-1", spec={"serviceAccountName": "bob", "nodeName": "n1"})
    w.add("nodes", "", "n1", "node-1")
    w.add("secrets", "ns", "s", "sec-1")
    return w


@pytest.fixture
def tokens(key_pem: bytes, world: World) -> ServiceAccountTokens:
    return ServiceAccountTokens(CountingSigner(key_pem), DEFAULT_ISSUER, (DEFAULT_ISSUER,), lookup=world)


def issue(tokens: ServiceAccountTokens, world: World, ref: Obj | None = None, seconds: int = 3600,
          audiences: list[str] | None = None) -> str:
    spec: Obj = {"expirationSeconds": seconds, "audiences": audiences or []}
    if ref is not None:
        spec["boundObjectRef"] = ref
    token, exp = tokens.issue("ns", world("serviceaccounts", "ns", "bob") or {}, spec, now=NOW)
    assert exp == int(NOW) + seconds and spec["audiences"] == (audiences or [DEFAULT_ISSUER])
    return token


def test_a_token_names_its_service_account(tokens: ServiceAccountTokens, world: World) -> None:
    user = tokens.authenticate(issue(tokens, world), now=NOW + 1)
    assert (user.name, user.uid) == ("system:serviceaccount:ns:bob", "sa-1")
    assert user.groups == ("system:serviceaccounts", "system:serviceaccounts:ns")


def test_header_and_claims(tokens: ServiceAccountTokens, world: World) -> None:
    token = issue(tokens, world, {"kind": "Pod", "apiVersion": "v1", "name": "p"})
    header = jwt.get_unverified_header(token)
    assert header["alg"] == "RS256" and header["kid"] == tokens.signer.kid
    claims = jwt.decode(token, options={"verify_signature": False})
    assert claims["kubernetes.io"]["pod"] == {"name": "p", "uid": "pod-1"}
    assert claims["kubernetes.io"]["node"] == {"name": "n1", "uid": "node-1"}
    jwks = tokens.signer.jwks()["keys"][0]
    public = jwt.PyJWK(jwks).key
    assert jwt.decode(token, public, algorithms=["RS256"], audience=DEFAULT_ISSUER,
                      options={"verify_exp": False, "verify_iat": False, "verify_nbf": False})


def test_the_signature_is_verified_once_but_objects_every_time(tokens: ServiceAccountTokens, world: World) -> None:
    signer = tokens.signer
    assert isinstance(signer, CountingSigner)
    token = issue(tokens, world, {"kind": "Pod", "apiVersion": "v1", "name": "p"})
    for _ in range(3):
        tokens.authenticate(token, now=NOW + 1)
    assert signer.verified == 1
    del world.objs[("pods", "ns", "p")]  # the bound pod is gone: refused at once, though the signature is cached
    with pytest.raises(TokenInvalid, match='pod "ns/p" has been deleted'):
        tokens.authenticate(token, now=NOW + 1)


def test_uncached_verifies_every_time(key_pem: bytes, world: World) -> None:
    signer = CountingSigner(key_pem)
    tokens = ServiceAccountTokens(signer, DEFAULT_ISSUER, (DEFAULT_ISSUER,), lookup=world, cache=False)
    token = issue(tokens, world)
    tokens.authenticate(token, now=NOW)
    tokens.authenticate(token, now=NOW)
    assert signer.verified == 2


def _recreate(world: World, plural: str, name: str, uid: str) -> None:
    old = world.objs[(plural, "ns", name)]
    world.objs[(plural, "ns", name)] = {**old, "metadata": {**old["metadata"], "uid": uid}}


@pytest.mark.parametrize("ref,change,why", [
    (None, lambda w: w.objs.pop(("serviceaccounts", "ns", "bob")), "has been deleted"),
    (None, lambda w: _recreate(w, "serviceaccounts", "bob", "sa-2"), "does not match claim"),
    ({"kind": "Pod", "apiVersion": "v1", "name": "p"}, lambda w: _recreate(w, "pods", "p", "pod-2"),
     "pod UID"),
    ({"kind": "Secret", "apiVersion": "v1", "name": "s"}, lambda w: w.objs.pop(("secrets", "ns", "s")),
     'secret "ns/s" has been deleted'),
    ({"kind": "Secret", "apiVersion": "v1", "name": "s"}, lambda w: _recreate(w, "secrets", "s", "sec-2"),
     "secret UID"),
    ({"kind": "Pod", "apiVersion": "v1", "name": "p"},
     lambda w: w.objs[("pods", "ns", "p")]["metadata"].update(deletionTimestamp="2020-01-01T00:00:00Z"),
     "has been deleted"),
])
def test_refused_once_an_object_changes(tokens: ServiceAccountTokens, world: World, ref: Obj | None, change: Any,
                                        why: str) -> None:
    token = issue(tokens, world, ref)
    tokens.authenticate(token, now=NOW + 1)
    change(world)
    with pytest.raises(TokenInvalid, match=why):
        tokens.authenticate(token, now=NOW + 1)


def test_a_deleting_pod_keeps_its_token_for_a_grace_minute(tokens: ServiceAccountTokens, world: World) -> None:
    token = issue(tokens, world, {"kind": "Pod", "apiVersion": "v1", "name": "p"})
    world.objs[("pods", "ns", "p")]["metadata"]["deletionTimestamp"] = "2027-01-15T08:00:00Z"
    deleting = 1_800_000_000  # 2027-01-15T08:00:00Z
    tokens.authenticate(token, now=deleting + 30)
    with pytest.raises(TokenInvalid, match="has been deleted"):
        tokens.authenticate(token, now=deleting + 61)


@pytest.mark.parametrize("token,why", [
    ("not-a-jwt", "invalid bearer token"),
    ("a.b.c", "invalid bearer token"),
])
def test_garbage(tokens: ServiceAccountTokens, token: str, why: str) -> None:
    with pytest.raises(TokenInvalid, match=why):
        tokens.authenticate(token, now=NOW)


def test_other_keys_and_expiry_and_audience(tokens: ServiceAccountTokens, world: World, tmp_path: Path) -> None:
    other = ServiceAccountTokens(TokenSigner(ensure_signing_key(tmp_path / "other.key")), DEFAULT_ISSUER,
                                 (DEFAULT_ISSUER,), lookup=world)
    with pytest.raises(TokenInvalid, match="invalid bearer token"):
        tokens.authenticate(issue(other, world), now=NOW)
    token = issue(tokens, world, seconds=600, audiences=["vault"])
    with pytest.raises(TokenInvalid, match="audiences is invalid"):
        tokens.authenticate(token, now=NOW)
    assert tokens.authenticate(token, ("vault",), now=NOW).name == "system:serviceaccount:ns:bob"
    with pytest.raises(TokenInvalid, match="expired"):
        tokens.authenticate(token, ("vault",), now=NOW + 600)


def test_an_unsigned_token_is_refused(tokens: ServiceAccountTokens, world: World) -> None:
    claims = jwt.decode(issue(tokens, world), options={"verify_signature": False})
    for forged in (jwt.encode(claims, None, algorithm="none"), jwt.encode(claims, "s" * 40, algorithm="HS256")):
        with pytest.raises(TokenInvalid, match="invalid bearer token"):
            tokens.authenticate(forged, now=NOW)


def test_legacy_token_lives_as_long_as_its_secret_holds_it(tokens: ServiceAccountTokens, world: World) -> None:
    token = tokens.legacy_token("ns", "bob", "sa-1", "bob-token")
    secret = world.add("secrets", "ns", "bob-token", "lt-1", data={"token": base64.b64encode(token.encode()).decode()})
    assert tokens.authenticate(token, now=NOW + 10**9).name == "system:serviceaccount:ns:bob"
    secret["data"]["token"] = base64.b64encode(b"something else").decode()
    with pytest.raises(TokenInvalid, match="does not match the token held"):
        tokens.authenticate(token, now=NOW)


@pytest.mark.parametrize("ref,code,reason,message", [
    ({"kind": "Node", "apiVersion": "v1", "name": "n1"}, 400, "BadRequest",
     "cannot bind token to object of type /v1, Kind=Node"),
    ({"kind": "Pod", "apiVersion": "v1", "name": "gone"}, 404, "NotFound", 'pods "gone" not found'),
    ({"kind": "Pod", "apiVersion": "v1", "name": "p", "uid": "nope"}, 409, "Conflict",
     "the UID in the bound object reference (nope) does not match the UID in record (pod-1)"),
])
def test_binding_refusals(tokens: ServiceAccountTokens, world: World, ref: Obj, code: int, reason: str,
                          message: str) -> None:
    with pytest.raises(ApiError) as e:
        issue(tokens, world, ref)
    assert (e.value.code, e.value.reason) == (code, reason) and message in str(e.value)


def test_a_pod_of_another_service_account(tokens: ServiceAccountTokens, world: World) -> None:
    world.add("pods", "ns", "q", "pod-9", spec={"serviceAccountName": "alice"})
    with pytest.raises(ApiError, match='cannot bind token for serviceaccount "bob" to pod running with '
                                       'serviceaccount "alice"'):
        issue(tokens, world, {"kind": "Pod", "apiVersion": "v1", "name": "q"})
