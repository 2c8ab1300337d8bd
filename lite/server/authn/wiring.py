"""Wiring of authentication into the server: the authenticator chain, TokenRequest signing, reviews, OIDC.

Role: `build_authenticator(config, creds)` (blocking: it may create the signing key) returns the
`ClusterAuthenticator` for `lite.server.main.build`; `attach_authn(app, resources, authenticator, config)`
connects it to the API once `Resources` exist: object lookups for the token checks, the TokenRequest
issuer hook, the TokenReview/SelfSubjectReview resources, and OIDC discovery
(`/.well-known/openid-configuration`, `/openid/v1/jwks`, authenticated like other non-resource paths).

Invariants: the signing key lives at `<data-dir>/server/tls/service.key` (0600) and never changes for a
data dir, so tokens survive restarts; the API audiences default to the issuer, as kube-apiserver's.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import orjson
from aiohttp import web

from lite.errors import ApiError
from lite.objects import Obj
from lite.server.api.resources import Resources
from lite.server.auth import TokenAuthenticator
from lite.server.authn.authenticator import ClusterAuthenticator
from lite.server.authn.reviews import add_authn_reviews
from lite.server.authn.serviceaccounts import Lookup, ServiceAccountTokens
from lite.server.authn.signer import ALGORITHM, TokenSigner, ensure_signing_key
from lite.server.certs import Credentials
from lite.server.config import ServerConfig

OIDC_CONFIG_PATH = "/.well-known/openid-configuration"
JWKS_PATH = "/openid/v1/jwks"


def api_audiences(config: ServerConfig) -> tuple[str, ...]:
    return config.api_audiences or (config.service_account_issuer,)


def build_authenticator(config: ServerConfig, creds: Credentials) -> ClusterAuthenticator:
    key = ensure_signing_key(config.paths.tls / "service.key")
    tokens = ServiceAccountTokens(TokenSigner(key), config.service_account_issuer, api_audiences(config))
    return ClusterAuthenticator(TokenAuthenticator(creds.admin_token, creds.join_secret), tokens)


def resources_lookup(resources: Resources) -> Lookup:
    kinds = {p: resources.core_kind(p) for p in ("serviceaccounts", "pods", "secrets", "nodes")}

    def lookup(plural: str, namespace: str, name: str) -> Obj | None:
        try:
            return resources.read(kinds[plural], namespace, name)[1]
        except ApiError:
            return None

    return lookup


def oidc_configuration(issuer: str) -> dict[str, object]:
    """The OpenID provider metadata kube-apiserver serves (jwks_uri below the issuer)."""
    return {"issuer": issuer, "jwks_uri": issuer.rstrip("/") + JWKS_PATH,
            "response_types_supported": ["id_token"], "subject_types_supported": ["public"],
            "id_token_signing_alg_values_supported": [ALGORITHM]}


def attach_authn(app: web.Application, resources: Resources, authenticator: ClusterAuthenticator,
                 config: ServerConfig) -> None:
    from lite.server.api.http import api_handler

    tokens = authenticator.sa_tokens
    if tokens is None:
        return
    tokens.lookup = resources_lookup(resources)
    resources.token_issuer = tokens.issue
    add_authn_reviews(app, authenticator, api_audiences(config))
    config_body = orjson.dumps(oidc_configuration(config.service_account_issuer))
    jwks_body = orjson.dumps(tokens.signer.jwks())

    def fixed(body: bytes, content_type: str) -> Callable[[web.Request, object], Awaitable[web.StreamResponse]]:
        async def serve(request: web.Request, ctx: object) -> web.StreamResponse:
            return web.Response(body=body, headers={"Content-Type": content_type})
        return serve

    app.router.add_route("*", OIDC_CONFIG_PATH, api_handler(fixed(config_body, "application/json"),
                                                            methods=("GET",)))
    app.router.add_route("*", JWKS_PATH, api_handler(fixed(jwks_body, "application/jwk-set+json"),
                                                     methods=("GET",)))
