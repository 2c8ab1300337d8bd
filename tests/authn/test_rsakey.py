"""The ServiceAccount key's RSA operations without `cryptography` in the server: `rsakey` (OpenSSL through
the `ssl` module's libcrypto) against `cryptography`, tokens against PyJWT, and the DER readers."""

from __future__ import annotations

import base64
import datetime as dt
import json

import jwt
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
from cryptography.x509.oid import NameOID

from lite import der
from lite.server.authn import rsakey
from lite.server.authn.signer import TokenSigner, ensure_signing_key


@pytest.fixture(scope="module")
def key_pem(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    return ensure_signing_key(tmp_path_factory.mktemp("rsakey") / "service.key")


def openssl_key(pem: bytes) -> rsakey.RsaKey:
    key = rsakey.load_rsa_key(pem)
    assert type(key).__name__ == "_OpenSslKey"  # the path a server takes: no cryptography
    return key


def test_openssl_and_cryptography_agree(key_pem: bytes) -> None:
    ours, theirs = openssl_key(key_pem), rsakey._CryptographyKey(key_pem)
    private = serialization.load_pem_private_key(key_pem, password=None)
    assert isinstance(private, rsa.RSAPrivateKey)
    data = b"header.payload"
    # PKCS#1 v1.5 signatures are deterministic: both produce the same bytes, and each verifies the other's
    assert ours.sign(data) == theirs.sign(data) == private.sign(data, padding.PKCS1v15(), hashes.SHA256())
    assert ours.verify(data, theirs.sign(data)) and theirs.verify(data, ours.sign(data))
    assert ours.spki_der() == theirs.spki_der() == private.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    for key in (ours, theirs):
        good = key.sign(data)
        assert not key.verify(b"header.payloaD", good)
        assert not key.verify(data, good[:-1] + bytes([good[-1] ^ 1]))
        assert not key.verify(data, b"")
        assert not key.verify(data, good + b"\0")


def test_only_rsa_keys_load() -> None:
    ec_pem = ec.generate_private_key(ec.SECP256R1()).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    for load in (rsakey.load_rsa_key, rsakey._CryptographyKey):
        with pytest.raises(ValueError, match="must be an RSA key"):
            load(ec_pem)
    with pytest.raises(ValueError, match="not a PEM private key"):
        rsakey.load_rsa_key(b"-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n")


def test_tokens_interoperate_with_pyjwt(key_pem: bytes) -> None:
    signer = TokenSigner(key_pem)
    private = serialization.load_pem_private_key(key_pem, password=None)
    assert isinstance(private, rsa.RSAPrivateKey)
    claims = {"iss": "x", "sub": "system:serviceaccount:ns:sa", "exp": 2_000_000_000, "n": "é"}
    token = signer.sign(claims)
    # the same bytes PyJWT wrote for this key (sorted header with typ, compact JSON)
    assert token == jwt.encode(claims, private, algorithm="RS256", headers={"kid": signer.kid})
    public = jwt.PyJWK(signer.jwks()["keys"][0]).key
    assert jwt.decode(token, public, algorithms=["RS256"], options={"verify_aud": False}) == claims
    assert signer.verify(token) == claims
    assert signer.verify(jwt.encode({"a": 1}, private, algorithm="RS256")) == {"a": 1}


@pytest.mark.parametrize("mangle", [
    lambda t: t + "=",                                     # padded: not unpadded base64url
    lambda t: t.replace(".", "..", 1),                     # four parts
    lambda t: t.rsplit(".", 1)[0],                         # no signature
    lambda t: t[:-2] + ("A" if t[-2] != "A" else "B") + t[-1],  # another signature
    lambda t: "e30." + t.split(".", 1)[1],                 # header {} (no alg)
    lambda t: t.split(".")[0] + ".WzFd." + t.split(".")[2],  # payload [1]: signature no longer matches
])
def test_mangled_tokens_are_refused(key_pem: bytes, mangle: object) -> None:
    signer = TokenSigner(key_pem)
    token = signer.sign({"sub": "a"})
    assert callable(mangle)
    assert signer.verify(mangle(token)) is None


def test_a_signed_non_object_payload_is_refused(key_pem: bytes) -> None:
    signer = TokenSigner(key_pem)
    header = base64.urlsafe_b64encode(json.dumps({"alg": "RS256"}).encode()).rstrip(b"=").decode()
    payload = base64.urlsafe_b64encode(b"[1]").rstrip(b"=").decode()
    key = rsakey.load_rsa_key(key_pem)
    sig = base64.urlsafe_b64encode(key.sign(f"{header}.{payload}".encode())).rstrip(b"=").decode()
    assert signer.verify(f"{header}.{payload}.{sig}") is None
    assert signer.verify(f"{header}.{base64.urlsafe_b64encode(b'{}').rstrip(b'=').decode()}.{sig}") is None


def _cert(not_before: dt.datetime, not_after: dt.datetime) -> bytes:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "t")])
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(not_before).not_valid_after(not_after)
            .sign(key, hashes.SHA256()))
    return cert.public_bytes(serialization.Encoding.PEM)


@pytest.mark.parametrize("before,after", [
    (dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=dt.UTC), dt.datetime(2034, 12, 31, 23, 59, 59, tzinfo=dt.UTC)),
    # from 2050 on a certificate holds GeneralizedTime
    (dt.datetime(1999, 6, 1, tzinfo=dt.UTC), dt.datetime(2061, 2, 28, 12, tzinfo=dt.UTC)),
])
def test_certificate_validity(before: dt.datetime, after: dt.datetime) -> None:
    assert der.pem_certificate_validity(_cert(before, after)) == (before.timestamp(), after.timestamp())


def test_der_refuses_what_it_cannot_read(key_pem: bytes) -> None:
    with pytest.raises(ValueError, match="no PEM CERTIFICATE"):
        der.pem_certificate_validity(key_pem)
    for bad in (b"", b"\x30", b"\x30\x05\x02\x01", b"\x02\x01\x01", b"\x30\x84\xff\xff\xff\xff"):
        with pytest.raises(ValueError):
            der.certificate_validity(bad)
    ec_spki = ec.generate_private_key(ec.SECP256R1()).public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    with pytest.raises(ValueError, match="not an RSA public key"):
        der.rsa_public_numbers(ec_spki)


def test_rsa_public_numbers(key_pem: bytes) -> None:
    private = serialization.load_pem_private_key(key_pem, password=None)
    assert isinstance(private, rsa.RSAPrivateKey)
    numbers = private.public_key().public_numbers()
    assert der.rsa_public_numbers(rsakey.load_rsa_key(key_pem).spki_der()) == (numbers.n, numbers.e)
