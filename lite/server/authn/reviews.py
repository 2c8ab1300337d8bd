"""TokenReview and SelfSubjectReview (authentication.k8s.io/v1): who a token, or the caller, is.

Role: `add_authn_reviews(app, authenticator)` registers the two review resources with `lite.server.api.reviews`.
A TokenReview authenticates `spec.token` with the server's own token authenticators (static tokens and
ServiceAccount JWTs, checked against `spec.audiences` or, when empty, the API audiences) and answers
`status.authenticated`, `status.user`, `status.audiences` (or `status.error`); a SelfSubjectReview answers the
caller's own user info (`kubectl auth whoami`).

Invariants: pure over the authenticator's answer; nothing is stored; an unauthenticated token is a 201 with
`authenticated: false`, not an error (only a missing token is a 400, as upstream).
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from lite.errors import bad_request, unauthorized
from lite.kinds import Kind
from lite.objects import Obj
from lite.server.api import reviews
from lite.server.authn.authenticator import ClusterAuthenticator
from lite.server.requestuser import UserInfo, current_user, user_info


def user_json(user: UserInfo) -> dict[str, Any]:
    """A `UserInfo` in the API's shape (authentication/v1 UserInfo)."""
    out: dict[str, Any] = {"username": user.name}
    if user.uid:
        out["uid"] = user.uid
    if user.groups:
        out["groups"] = list(user.groups)
    if user.extra:
        out["extra"] = {k: list(v) for k, v in user.extra}
    return out


def token_review_status(user: UserInfo | str | None, requested: list[str], api_audiences: tuple[str, ...],
                        token_audiences: tuple[str, ...] = ()) -> dict[str, Any]:
    """The status of a TokenReview given what the authenticator said."""
    if not user:
        return {"authenticated": False, "user": {}, "error": "[invalid bearer token, token lookup failed]"}
    wanted = requested or list(api_audiences)
    matched = [a for a in wanted if a in token_audiences] if token_audiences else wanted
    return {"authenticated": True, "user": user_json(user_info(user)), "audiences": matched}


def add_authn_reviews(app: web.Application, authenticator: ClusterAuthenticator,
                      api_audiences: tuple[str, ...], *, authorizing: bool = True) -> None:
    async def token_review(request: web.Request, kind: Kind, obj: Obj) -> Obj:
        raw_spec = obj.get("spec")
        spec: dict[str, Any] = raw_spec if isinstance(raw_spec, dict) else {}
        token = spec.get("token")
        if not isinstance(token, str) or not token:
            raise bad_request("token is required for TokenReview in authentication")
        requested = [str(a) for a in (spec.get("audiences") or [])]
        user = authenticator.token_user(token, tuple(requested) if requested else None)
        token_auds = authenticator.sa_tokens.token_audiences(token) \
            if authenticator.sa_tokens is not None and isinstance(user, UserInfo) else ()
        obj["status"] = token_review_status(user, requested, api_audiences, token_auds)
        return obj

    async def self_subject_review(request: web.Request, kind: Kind, obj: Obj) -> Obj:
        user = current_user()
        if user is None:
            raise unauthorized()
        obj["status"] = {"userInfo": user_json(user)}
        obj["metadata"].setdefault("creationTimestamp", None)
        return obj

    reviews.register(app, "tokenreviews.authentication.k8s.io", token_review)
    if not authorizing:  # with an authorizer, `authz.reviews` answers SelfSubjectReview (same user info)
        reviews.register(app, "selfsubjectreviews.authentication.k8s.io", self_subject_review)
