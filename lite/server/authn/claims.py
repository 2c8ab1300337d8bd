"""ServiceAccount token claims: building them as kube-apiserver does, and reading them back.

Role: pure functions over JSON claim sets. `bound_claims` makes the claims of a TokenRequest token (upstream's
`serviceaccount.Claims`: iss, sub, aud, exp, iat, nbf, jti, and the private `kubernetes.io` claim naming the
namespace, the ServiceAccount and the object the token is bound to: a pod (plus the node it runs on) or a
secret); `legacy_claims` makes those of a `kubernetes.io/service-account-token` Secret. `parse_claims` reads
either form into a `TokenClaims`, refusing anything malformed; `check_claims` applies the time and audience
rules; `user_of` gives the user a valid token names (upstream's `UserInfo` for service accounts).

Invariants:
- Nothing here verifies a signature or looks an object up: `signer.py` and `serviceaccounts.py` do that.
- Every refusal is a `TokenInvalid` with a message in upstream's wording, never a bare exception.
- Times are whole seconds since the epoch (NumericDate), as JWT wants.
"""

from __future__ import annotations

import uuid
from typing import Any

from lite.records import dataclass
from lite.server.requestuser import UserInfo

DEFAULT_ISSUER = "https://kubernetes.default.svc.cluster.local"
LEGACY_ISSUER = "kubernetes/serviceaccount"
SA_PREFIX = "system:serviceaccount:"
SA_GROUP = "system:serviceaccounts"
PRIVATE = "kubernetes.io"
_LEGACY = "kubernetes.io/serviceaccount/"
# The extra keys upstream puts in a service account's user info (authentication.kubernetes.io/...).
EXTRA_POD_NAME = "authentication.kubernetes.io/pod-name"
EXTRA_POD_UID = "authentication.kubernetes.io/pod-uid"
EXTRA_NODE_NAME = "authentication.kubernetes.io/node-name"
EXTRA_NODE_UID = "authentication.kubernetes.io/node-uid"
EXTRA_CREDENTIAL_ID = "authentication.kubernetes.io/credential-id"


class TokenInvalid(Exception):
    """A token that does not authenticate; `str()` says why."""


@dataclass(frozen=True)
class Ref:
    """A named object with its uid, as tokens carry them."""

    name: str
    uid: str = ""


@dataclass(frozen=True)
class TokenClaims:
    """What a verified ServiceAccount token says."""

    issuer: str
    namespace: str
    service_account: Ref
    audiences: tuple[str, ...] = ()
    expires: int | None = None  # None: a legacy token, which never expires
    not_before: int | None = None
    pod: Ref | None = None
    secret: Ref | None = None
    node: Ref | None = None
    jti: str = ""

    @property
    def legacy(self) -> bool:
        return self.issuer == LEGACY_ISSUER


def sa_username(namespace: str, name: str) -> str:
    return f"{SA_PREFIX}{namespace}:{name}"


def split_username(user: str) -> tuple[str, str] | None:
    """(namespace, name) of a `system:serviceaccount:<ns>:<name>` user, else None."""
    if not user.startswith(SA_PREFIX):
        return None
    ns, sep, name = user[len(SA_PREFIX):].partition(":")
    return (ns, name) if sep and ns and name and ":" not in name else None


def bound_claims(*, issuer: str, audiences: list[str], now: int, seconds: int, namespace: str, sa: Ref,
                 pod: Ref | None = None, secret: Ref | None = None, node: Ref | None = None,
                 jti: str = "") -> dict[str, Any]:
    """The claims of a TokenRequest token valid `seconds` from `now`."""
    private: dict[str, Any] = {"namespace": namespace, "serviceaccount": {"name": sa.name, "uid": sa.uid}}
    if pod is not None:
        private["pod"] = {"name": pod.name, "uid": pod.uid}
        if node is not None:
            private["node"] = {"name": node.name, "uid": node.uid}
    if secret is not None:
        private["secret"] = {"name": secret.name, "uid": secret.uid}
    return {"aud": list(audiences), "exp": now + seconds, "iat": now, "iss": issuer, "jti": jti or str(uuid.uuid4()),
            PRIVATE: private, "nbf": now, "sub": sa_username(namespace, sa.name)}


def legacy_claims(namespace: str, sa: Ref, secret_name: str) -> dict[str, Any]:
    """The claims of a legacy Secret-based token (no expiry, no audience), as upstream's LegacyClaims."""
    return {"iss": LEGACY_ISSUER, _LEGACY + "namespace": namespace, _LEGACY + "secret.name": secret_name,
            _LEGACY + "service-account.name": sa.name, _LEGACY + "service-account.uid": sa.uid,
            "sub": sa_username(namespace, sa.name)}


def _ref(value: Any, what: str) -> Ref | None:
    if value is None:
        return None
    if not isinstance(value, dict) or not isinstance(value.get("name"), str) or not value["name"]:
        raise TokenInvalid(f"service account token has a malformed {what} reference")
    return Ref(value["name"], str(value.get("uid") or ""))


def _int(claims: dict[str, Any], key: str) -> int | None:
    v = claims.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise TokenInvalid(f"service account token has a malformed {key} claim")
    return int(v)


def _audiences(claims: dict[str, Any]) -> tuple[str, ...]:
    aud = claims.get("aud")
    if aud is None:
        return ()
    if isinstance(aud, str):
        return (aud,)
    if isinstance(aud, list) and all(isinstance(a, str) for a in aud):
        return tuple(aud)
    raise TokenInvalid("service account token has a malformed aud claim")


def parse_claims(claims: dict[str, Any], issuers: tuple[str, ...]) -> TokenClaims:
    """Read a claim set into `TokenClaims`; refuse foreign issuers and malformed or inconsistent claims."""
    iss = claims.get("iss")
    if iss == LEGACY_ISSUER:
        return _parse_legacy(claims)
    if not isinstance(iss, str) or iss not in issuers:
        raise TokenInvalid("token issuer is not trusted")
    private = claims.get(PRIVATE)
    if not isinstance(private, dict):
        raise TokenInvalid("service account token claims are missing kubernetes.io")
    ns = private.get("namespace")
    sa = _ref(private.get("serviceaccount"), "serviceaccount")
    if not isinstance(ns, str) or not ns or sa is None:
        raise TokenInvalid("service account token claims are missing the namespace or service account")
    if claims.get("sub") != sa_username(ns, sa.name):
        raise TokenInvalid("service account token subject does not match its service account")
    expires = _int(claims, "exp")
    if expires is None:
        raise TokenInvalid("service account token has no expiry")
    jti = claims.get("jti")
    return TokenClaims(issuer=iss, namespace=ns, service_account=sa, audiences=_audiences(claims),
                       expires=expires, not_before=_int(claims, "nbf"), pod=_ref(private.get("pod"), "pod"),
                       secret=_ref(private.get("secret"), "secret"), node=_ref(private.get("node"), "node"),
                       jti=jti if isinstance(jti, str) else "")


def _parse_legacy(claims: dict[str, Any]) -> TokenClaims:
    ns = claims.get(_LEGACY + "namespace")
    name = claims.get(_LEGACY + "service-account.name")
    uid = claims.get(_LEGACY + "service-account.uid")
    secret = claims.get(_LEGACY + "secret.name")
    if not all(isinstance(v, str) and v for v in (ns, name, uid, secret)):
        raise TokenInvalid("legacy service account token claims are incomplete")
    assert isinstance(ns, str) and isinstance(name, str) and isinstance(uid, str) and isinstance(secret, str)
    if claims.get("sub") != sa_username(ns, name):
        raise TokenInvalid("service account token subject does not match its service account")
    return TokenClaims(issuer=LEGACY_ISSUER, namespace=ns, service_account=Ref(name, uid), secret=Ref(secret))


def check_claims(c: TokenClaims, now: float, audiences: tuple[str, ...]) -> None:
    """Time and audience rules (a legacy token has neither). `audiences`: the ones the caller accepts; the
    token must name at least one of them."""
    if c.legacy:
        return
    if c.expires is not None and now >= c.expires:
        raise TokenInvalid("service account token has expired")
    if c.not_before is not None and now < c.not_before:
        raise TokenInvalid("service account token is not valid yet")
    if audiences and not set(audiences) & set(c.audiences):
        raise TokenInvalid("token audiences is invalid for the target audiences")


def user_of(c: TokenClaims) -> UserInfo:
    """The user a valid token authenticates as: the service account, its groups, and the bound objects as
    extra values."""
    extra: list[tuple[str, tuple[str, ...]]] = []
    if c.pod is not None:
        extra += [(EXTRA_POD_NAME, (c.pod.name,)), (EXTRA_POD_UID, (c.pod.uid,))]
    if c.node is not None:
        extra += [(EXTRA_NODE_NAME, (c.node.name,)), (EXTRA_NODE_UID, (c.node.uid,))]
    if c.jti:
        extra.append((EXTRA_CREDENTIAL_ID, (f"JTI={c.jti}",)))
    return UserInfo(sa_username(c.namespace, c.service_account.name),
                    (SA_GROUP, f"{SA_GROUP}:{c.namespace}"), c.service_account.uid, tuple(sorted(extra)))
