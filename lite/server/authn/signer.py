"""The ServiceAccount token signing key: signing JWTs, verifying them, and publishing the public key.

Role: `ensure_signing_key(path)` creates the server's RSA key (`server/tls/service.key`, mode 0600) on first
start and returns its PEM; `TokenSigner` signs claim sets as RS256 JWTs (JWS compact serialization, header
`{"alg","kid","typ"}` with sorted keys as PyJWT wrote them) with the key id in the header, verifies a token's
signature (`verify`, the expensive part of authentication) and renders the JSON Web Key Set served at
`/openid/v1/jwks`. The RSA operations go through `rsakey` (the OpenSSL the `ssl` module loaded); only key
generation imports `cryptography`, so a server that finds its key on disk never loads it.

Invariants:
- The key id is upstream's: base64url (no padding) of the SHA-256 of the DER SubjectPublicKeyInfo, so a
  relying party that matches `kid` against the JWKS finds the key.
- `verify` checks the signature and the algorithm only (RS256, never `none`, never HMAC with the public key);
  time and audience rules live in `claims.check_claims` so a cached verification stays valid to reuse. A
  token's parts are unpadded base64url (RFC 7515), its header and payload JSON objects: anything else is not
  a token this key signed.
- Key generation is blocking (~0.1 s): `ensure_signing_key` runs in a thread or before the loop starts.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
from pathlib import Path
from typing import Any

from lite.der import rsa_public_numbers
from lite.server.authn.rsakey import load_rsa_key

ALGORITHM = "RS256"
KEY_BITS = 2048


_B64URL = re.compile(r"[A-Za-z0-9_-]*")


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64url(part: str) -> bytes:
    """The bytes of one unpadded base64url part; ValueError if it is not one."""
    if not _B64URL.fullmatch(part) or len(part) % 4 == 1:
        raise ValueError("not base64url")
    try:
        return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))
    except binascii.Error as e:
        raise ValueError("not base64url") from e


def _json_object(part: str) -> dict[str, Any]:
    value = json.loads(_unb64url(part))
    if not isinstance(value, dict):
        raise ValueError("not a JSON object")
    return value


def ensure_signing_key(path: Path) -> bytes:
    """The PEM of the RSA signing key at `path`, created (0600) when missing."""
    from lite.server.certs import write_private

    if path.exists():
        data = path.read_bytes()
        if data.strip():
            return data
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=KEY_BITS)
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption())
    write_private(path, pem)
    return pem


class TokenSigner:
    """Signs and verifies ServiceAccount JWTs with one RSA key."""

    def __init__(self, key_pem: bytes) -> None:
        self._key = load_rsa_key(key_pem)
        der = self._key.spki_der()
        self._n, self._e = rsa_public_numbers(der)
        self.kid = _b64url(hashlib.sha256(der).digest())
        header = json.dumps({"alg": ALGORITHM, "kid": self.kid, "typ": "JWT"}, separators=(",", ":"),
                            sort_keys=True)
        self._header = _b64url(header.encode())

    def sign(self, claims: dict[str, Any]) -> str:
        payload = _b64url(json.dumps(claims, separators=(",", ":")).encode())
        signing_input = f"{self._header}.{payload}"
        return f"{signing_input}.{_b64url(self._key.sign(signing_input.encode()))}"

    def verify(self, token: str) -> dict[str, Any] | None:
        """The claims of a token this key signed, else None (bad signature, wrong algorithm, not a JWT)."""
        parts = token.split(".")
        if len(parts) != 3:
            return None
        try:
            header = _json_object(parts[0])
            if header.get("alg") != ALGORITHM:
                return None
            signature = _unb64url(parts[2])
            if not self._key.verify(f"{parts[0]}.{parts[1]}".encode("ascii"), signature):
                return None
            return _json_object(parts[1])
        except (ValueError, UnicodeError):
            return None

    def jwks(self) -> dict[str, Any]:
        """The JSON Web Key Set with this key's public half."""
        n = self._n.to_bytes((self._n.bit_length() + 7) // 8, "big")
        e = self._e.to_bytes((self._e.bit_length() + 7) // 8, "big")
        return {"keys": [{"use": "sig", "kty": "RSA", "kid": self.kid, "alg": ALGORITHM,
                          "n": _b64url(n), "e": _b64url(e)}]}


def looks_like_jwt(token: str) -> bool:
    """Three dot-separated parts: worth trying as a ServiceAccount token (cheap pre-check)."""
    return token.count(".") == 2
