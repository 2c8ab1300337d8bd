"""x509 client certificates: who a verified peer certificate names, and issuing certificates for users.

Role: `user_from_peercert` maps the subject of a client certificate (already verified against the client CA by
the TLS listener, see `lite.server.certs.server_ssl_context`) to a `UserInfo`: CN is the user name, each O is a
group, as kube-apiserver's x509 authenticator (`CommonNameUserConversion`). `issue_client_cert` makes a
certificate and key for a user signed by the client CA: the admin kubeconfig's `system:admin` in
`system:masters`, and `lite certificate issue-user`.

Invariants:
- `user_from_peercert` is pure: it trusts its input only because the TLS layer verified the chain (signature,
  validity period, clientAuth purpose) before any byte of the request was read. A certificate without a CN
  names nobody (None: the request falls through to token authentication, then 401).
- `cryptography` is imported inside `issue_client_cert` only; authenticating a request never needs it, and
  `issue_client_cert_apart` (what the running server calls) imports it in a short-lived child process
  (`lite.forkcall`) while this one has not loaded it, with the same result.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import sys
from collections.abc import Sequence
from typing import Any

from lite.forkcall import ChildFailed, call_in_child
from lite.server.requestuser import UserInfo

log = logging.getLogger("lite.server.authn")

PeerCert = dict[str, Any]  # what ssl.SSLSocket.getpeercert() returns for a verified peer


def subject_fields(peercert: PeerCert | None) -> list[tuple[str, str]]:
    """The (attribute, value) pairs of a getpeercert() subject, in order."""
    out: list[tuple[str, str]] = []
    for rdn in (peercert or {}).get("subject") or ():
        for pair in rdn:
            if isinstance(pair, (tuple, list)) and len(pair) == 2:
                out.append((str(pair[0]), str(pair[1])))
    return out


def user_from_peercert(peercert: PeerCert | None) -> UserInfo | None:
    """CN = user, O = groups (in certificate order); None without a CN."""
    fields = subject_fields(peercert)
    names = [v for k, v in fields if k == "commonName"]
    if not names or not names[0]:
        return None
    groups = tuple(v for k, v in fields if k == "organizationName")
    return UserInfo(names[0], groups)


def _check_user(user: str) -> None:
    if not user:
        raise ValueError("a client certificate needs a user name (its CN)")


def issue_client_cert(ca_cert_pem: bytes, ca_key_pem: bytes, user: str, groups: Sequence[str] = (),
                      days: float = 365) -> tuple[bytes, bytes]:
    """(certificate PEM, key PEM) for `user` in `groups`, clientAuth, signed by the given CA, valid `days`
    (never beyond the CA). Blocking (key generation): call from a thread or the CLI."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    _check_user(user)
    ca = x509.load_pem_x509_certificate(ca_cert_pem)
    signer = serialization.load_pem_private_key(ca_key_pem, password=None)
    if not isinstance(signer, ec.EllipticCurvePrivateKey):
        raise ValueError("the client CA key is not an EC key")
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, g) for g in groups]
    attrs.append(x509.NameAttribute(NameOID.COMMON_NAME, user))
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name(attrs))
        .issuer_name(ca.subject).public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(min(now + dt.timedelta(days=days), ca.not_valid_after_utc))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, key_encipherment=False, content_commitment=False,
                                     data_encipherment=False, key_agreement=False, key_cert_sign=False,
                                     crl_sign=False, encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(signer.public_key()), critical=False)
        .sign(signer, hashes.SHA256())
    )
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    return cert.public_bytes(serialization.Encoding.PEM), key_pem


def issue_client_cert_apart(ca_cert_pem: bytes, ca_key_pem: bytes, user: str, groups: Sequence[str] = (),
                            days: float = 365) -> tuple[bytes, bytes]:
    """`issue_client_cert`, run in a forked child while this process has not loaded `cryptography` (so a
    running server never maps it); in-process otherwise or if the child fails (its errors are the same).
    Blocking: call from a thread."""
    _check_user(user)
    if "cryptography" in sys.modules:
        return issue_client_cert(ca_cert_pem, ca_key_pem, user, groups, days)

    def issue() -> bytes:
        cert, key = issue_client_cert(ca_cert_pem, ca_key_pem, user, groups, days)
        return json.dumps([cert.decode(), key.decode()]).encode()

    try:
        cert, key = json.loads(call_in_child(issue))
    except ChildFailed as e:
        log.warning("issuing a client certificate in a child process failed, issuing it here: %s", e)
        return issue_client_cert(ca_cert_pem, ca_key_pem, user, groups, days)
    return str(cert).encode(), str(key).encode()
