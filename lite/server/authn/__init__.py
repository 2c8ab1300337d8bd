"""Authentication of API callers: x509 client certificates, static tokens, ServiceAccount JWTs.

Modules: `x509` (peer certificate → user, issuing user certificates), `claims` (ServiceAccount token claims,
pure), `signer` (RS256 signing key, JWKS), `serviceaccounts` (TokenRequest issuing, token validation with a
signature cache and live-object checks), `authenticator` (the chain the HTTP layer calls), `reviews`
(TokenReview, SelfSubjectReview), `wiring` (connecting it all to the server). Authorization is not here
(`lite.server.authz`): this package only says who a caller is.
"""
