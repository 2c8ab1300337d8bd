"""ServiceAccount tokens: issuing bound tokens (TokenRequest) and authenticating any ServiceAccount JWT.

Role: `ServiceAccountTokens` holds the signer, the issuer and the API audiences. `issue` answers a TokenRequest
(`serviceaccounts/<name>/token`, called by `Resources.request_token`), optionally bound to a Pod (then also
naming the pod's node) or a Secret; `legacy_token` makes the token of a `kubernetes.io/service-account-token`
Secret; `authenticate(token, audiences)` returns the `UserInfo` a token names or raises `TokenInvalid`.

Invariants:
- The expensive step (signature verification, then parsing the claims) is cached per token in a bounded LRU;
  the cheap steps run on every call, cached or not: expiry and audience, and the existence checks against
  the live objects (the ServiceAccount with the token's uid, the bound Pod or Secret with its uid; for a
  legacy token the Secret still holding exactly this token). So a token stops working the moment its
  ServiceAccount, Pod or Secret is deleted, even while its signature is cached.
- A pod being deleted keeps its tokens valid for `DELETING_GRACE` seconds past its deletionTimestamp, as
  upstream, so its containers can finish their shutdown calls.
- Lookups read the in-process store (`lookup` is set once the API's Resources exist); nothing here writes.
"""

from __future__ import annotations

import datetime as dt
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from lite import errors
from lite.objects import Obj
from lite.server.authn.claims import (
    Ref,
    TokenClaims,
    TokenInvalid,
    bound_claims,
    check_claims,
    legacy_claims,
    parse_claims,
    user_of,
)
from lite.server.authn.signer import TokenSigner, looks_like_jwt
from lite.server.requestuser import UserInfo

# lookup(plural, namespace, name) -> the live object or None. Plurals: serviceaccounts, pods, secrets, nodes.
Lookup = Callable[[str, str, str], "Obj | None"]

CACHE_SIZE = 10_000
DELETING_GRACE = 60.0


def _meta(obj: Obj) -> dict[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, dict) else {}


def _deleted_before(obj: Obj, cutoff: float) -> bool:
    ts = _meta(obj).get("deletionTimestamp")
    if not isinstance(ts, str) or not ts:
        return False
    try:
        when = dt.datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return True
    return when < cutoff


class ServiceAccountTokens:
    """Issues and authenticates ServiceAccount JWTs; see the module doc."""

    def __init__(self, signer: TokenSigner, issuer: str, audiences: tuple[str, ...], *,
                 lookup: Lookup | None = None, cache_size: int = CACHE_SIZE, cache: bool = True) -> None:
        self.signer, self.issuer, self.audiences = signer, issuer, audiences
        self.lookup = lookup
        self._cache: OrderedDict[str, TokenClaims] = OrderedDict()
        self._cache_size = cache_size if cache else 0

    # ---- issuing --------------------------------------------------------------------------------

    def issue(self, namespace: str, sa: Obj, spec: Obj, now: float | None = None) -> tuple[str, int]:
        """(token, expiry in epoch seconds) for a validated TokenRequest spec on ServiceAccount `sa`; empty
        `spec.audiences` are set to the API audiences."""
        issued = int(now if now is not None else time.time())
        pod = secret = node = None
        ref = spec.get("boundObjectRef")
        if isinstance(ref, dict) and ref:
            pod, secret, node = self._bound(namespace, str(_meta(sa).get("name", "")), ref)
        audiences = [str(a) for a in spec.get("audiences") or []] or list(self.audiences)
        spec["audiences"] = audiences  # the response shows the audiences the token carries
        claims = bound_claims(issuer=self.issuer, audiences=audiences, now=issued,
                              seconds=int(spec["expirationSeconds"]), namespace=namespace,
                              sa=Ref(str(_meta(sa).get("name", "")), str(_meta(sa).get("uid", ""))),
                              pod=pod, secret=secret, node=node)
        return self.signer.sign(claims), int(claims["exp"])

    def _bound(self, namespace: str, sa_name: str, ref: dict[str, Any]) -> tuple[Ref | None, Ref | None, Ref | None]:
        kind, name = str(ref.get("kind") or ""), str(ref.get("name") or "")
        api_version = str(ref.get("apiVersion") or "v1")
        if kind not in ("Pod", "Secret") or api_version != "v1":
            group = api_version.rpartition("/")[0] if "/" in api_version else ""
            version = api_version.rpartition("/")[2]
            raise errors.bad_request(f"cannot bind token to object of type {group}/{version}, Kind={kind}")
        plural = "pods" if kind == "Pod" else "secrets"
        obj = self._lookup(plural, namespace, name)
        if obj is None:
            raise errors.not_found(plural, name)
        uid = str(_meta(obj).get("uid", ""))
        if ref.get("uid") and ref["uid"] != uid:
            raise errors.conflict(kind, name, detail=f"the UID in the bound object reference ({ref['uid']}) does not "
                                  f"match the UID in record ({uid}). The object might have been deleted and then "
                                  "recreated")
        if kind == "Secret":
            return None, Ref(name, uid), None
        spec = obj.get("spec") or {}
        if spec.get("serviceAccountName", "default") != sa_name:
            raise errors.bad_request(f'cannot bind token for serviceaccount "{sa_name}" to pod running with '
                                     f'serviceaccount "{spec.get("serviceAccountName", "default")}"')
        node = None
        node_name = str(spec.get("nodeName") or "")
        if node_name:
            node_obj = self._lookup("nodes", "", node_name)
            node = Ref(node_name, str(_meta(node_obj).get("uid", "")) if node_obj is not None else "")
        return Ref(name, uid), None, node

    def legacy_token(self, namespace: str, sa_name: str, sa_uid: str, secret_name: str) -> str:
        return self.signer.sign(legacy_claims(namespace, Ref(sa_name, sa_uid), secret_name))

    # ---- authenticating ------------------------------------------------------------------------

    def authenticate(self, token: str, audiences: tuple[str, ...] | None = None,
                     now: float | None = None) -> UserInfo:
        """The user `token` names, or TokenInvalid. `audiences`: accepted audiences (default: the API's)."""
        claims = self._verified(token)
        moment = now if now is not None else time.time()
        check_claims(claims, moment, self.audiences if audiences is None else audiences)
        self._check_live(claims, token, moment)
        return user_of(claims)

    def token_audiences(self, token: str) -> tuple[str, ...]:
        """The audiences of a token that verified before (empty for anything else)."""
        cached = self._cache.get(token)
        return cached.audiences if cached is not None else ()

    def _verified(self, token: str) -> TokenClaims:
        cached = self._cache.get(token)
        if cached is not None:
            self._cache.move_to_end(token)
            return cached
        raw = self.signer.verify(token) if looks_like_jwt(token) else None
        if raw is None:
            raise TokenInvalid("invalid bearer token")
        claims = parse_claims(raw, (self.issuer,))
        if self._cache_size:
            self._cache[token] = claims
            while len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
        return claims

    def _lookup(self, plural: str, namespace: str, name: str) -> Obj | None:
        if self.lookup is None:
            raise TokenInvalid("service account tokens cannot be checked yet")
        return self.lookup(plural, namespace, name)

    def _check_live(self, c: TokenClaims, token: str, now: float) -> None:
        ns, sa_ref = c.namespace, c.service_account
        sa = self._lookup("serviceaccounts", ns, sa_ref.name)
        if sa is None or _meta(sa).get("deletionTimestamp"):
            raise TokenInvalid(f'service account "{ns}/{sa_ref.name}" has been deleted')
        if sa_ref.uid and _meta(sa).get("uid") != sa_ref.uid:
            raise TokenInvalid(f"service account UID ({_meta(sa).get('uid')}) does not match claim ({sa_ref.uid})")
        if c.secret is not None:
            secret = self._lookup("secrets", ns, c.secret.name)
            if secret is None or _meta(secret).get("deletionTimestamp"):
                raise TokenInvalid(f'secret "{ns}/{c.secret.name}" has been deleted')
            if c.legacy:
                if not _holds_token(secret, token):
                    raise TokenInvalid("token does not match the token held by its secret")
            elif c.secret.uid and _meta(secret).get("uid") != c.secret.uid:
                raise TokenInvalid(f"secret UID ({_meta(secret).get('uid')}) does not match claim ({c.secret.uid})")
        if c.pod is not None:
            pod = self._lookup("pods", ns, c.pod.name)
            if pod is None or _deleted_before(pod, now - DELETING_GRACE):
                raise TokenInvalid(f'pod "{ns}/{c.pod.name}" has been deleted')
            if c.pod.uid and _meta(pod).get("uid") != c.pod.uid:
                raise TokenInvalid(f"pod UID ({_meta(pod).get('uid')}) does not match claim ({c.pod.uid})")


def _holds_token(secret: Obj, token: str) -> bool:
    import base64
    import hmac

    data = secret.get("data") or {}
    held = data.get("token") if isinstance(data, dict) else None
    if not isinstance(held, str):
        return False
    try:
        raw = base64.b64decode(held, validate=True)
    except ValueError:
        return False
    return hmac.compare_digest(raw, token.encode())
