"""The ServiceAccount token signing key: signing JWTs, verifying them, and publishing the public key.

Role: `ensure_signing_key(path)` creates the server's RSA key (`server/tls/service.key`, mode 0600) on first
start and returns its PEM; `TokenSigner` signs claim sets as RS256 JWTs with the key id in the header,
verifies a token's signature (`verify`, the expensive part of authentication) and renders the JSON Web Key
Set served at `/openid/v1/jwks`.

Invariants:
- The key id is upstream's: base64url (no padding) of the SHA-256 of the DER SubjectPublicKeyInfo, so a
  relying party that matches `kid` against the JWKS finds the key.
- `verify` checks the signature and the algorithm only (RS256, never `none`, never HMAC with the public key);
  time and audience rules live in `claims.check_claims` so a cached verification stays valid to reuse.
- Key generation is blocking (~0.1 s): `ensure_signing_key` runs in a thread or before the loop starts.
"""

from __future__ import annotations

import base64
import hashlib
from pathlib import Path
from typing import Any

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

ALGORITHM = "RS256"
KEY_BITS = 2048


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def ensure_signing_key(path: Path) -> bytes:
    """The PEM of the RSA signing key at `path`, created (0600) when missing."""
    from lite.server.certs import write_private

    if path.exists():
        data = path.read_bytes()
        if data.strip():
            return data
    key = rsa.generate_private_key(public_exponent=65537, key_size=KEY_BITS)
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption())
    write_private(path, pem)
    return pem


class TokenSigner:
    """Signs and verifies ServiceAccount JWTs with one RSA key."""

    def __init__(self, key_pem: bytes) -> None:
        key = serialization.load_pem_private_key(key_pem, password=None)
        if not isinstance(key, rsa.RSAPrivateKey):
            raise ValueError("the service account signing key must be an RSA key")
        self._key = key
        self._public = key.public_key()
        der = self._public.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
        self.kid = _b64url(hashlib.sha256(der).digest())

    def sign(self, claims: dict[str, Any]) -> str:
        return jwt.encode(claims, self._key, algorithm=ALGORITHM, headers={"kid": self.kid})

    def verify(self, token: str) -> dict[str, Any] | None:
        """The claims of a token this key signed, else None (bad signature, wrong algorithm, not a JWT)."""
        try:
            claims = jwt.decode(token, self._public, algorithms=[ALGORITHM],
                                options={"verify_exp": False, "verify_nbf": False, "verify_iat": False,
                                         "verify_aud": False, "verify_iss": False})
        except jwt.PyJWTError:
            return None
        return claims if isinstance(claims, dict) else None

    def jwks(self) -> dict[str, Any]:
        """The JSON Web Key Set with this key's public half."""
        numbers = self._public.public_numbers()
        n = numbers.n.to_bytes((numbers.n.bit_length() + 7) // 8, "big")
        e = numbers.e.to_bytes((numbers.e.bit_length() + 7) // 8, "big")
        return {"keys": [{"use": "sig", "kty": "RSA", "kid": self.kid, "alg": ALGORITHM,
                          "n": _b64url(n), "e": _b64url(e)}]}


def looks_like_jwt(token: str) -> bool:
    """Three dot-separated parts: worth trying as a ServiceAccount token (cheap pre-check)."""
    return token.count(".") == 2
