"""The API listener's TLS context against the hellos real clients send, in memory (no socket, no server).

Issue 18, item 13: busybox wget's own TLS code (busybox before 1.36, the one a pod without an `openssl` binary
uses) sends a TLS 1.2 ClientHello without the signature_algorithms extension, so RFC 5246 leaves the server only
SHA-1 signatures; OpenSSL 3 at its default security level refused them (NO_SHARED_CIPHER, the connection closed
before any TLS byte), while Go's TLS (kube-apiserver) serves such a client. The context must serve it, keep SHA-2
for every client that names its algorithms, offer no weaker suite, and still refuse client certificates that do
not verify against the client CA.
"""

from __future__ import annotations

import datetime as dt
import os
import ssl
import struct
from collections.abc import Iterator
from pathlib import Path

import pytest

from lite.server.certs import Credentials, ensure_credentials, server_ssl_context
from lite.server.config import ServerConfig

ECDHE_ECDSA_AES128_GCM_SHA256, ECDHE_RSA_AES128_GCM_SHA256 = 0xC02B, 0xC02F
ECDHE_ECDSA_AES128_CBC_SHA, ECDHE_RSA_AES128_CBC_SHA = 0xC009, 0xC013
X25519, SECP256R1 = 0x001D, 0x0017
ECDSA_SHA1, ECDSA_SHA256 = 0x0203, 0x0403


def _ext(kind: int, data: bytes) -> bytes:
    return struct.pack(">HH", kind, len(data)) + data


def client_hello(groups: tuple[int, ...], sigalgs: tuple[int, ...] | None) -> bytes:
    """One TLS record holding a TLS 1.2 ClientHello: the ECDHE AES-128 GCM and CBC-SHA suites, the given
    supported_groups, uncompressed ec_point_formats, and signature_algorithms only when `sigalgs` is given."""
    suites = b"".join(struct.pack(">H", s) for s in (ECDHE_ECDSA_AES128_GCM_SHA256, ECDHE_RSA_AES128_GCM_SHA256,
                                                       ECDHE_ECDSA_AES128_CBC_SHA, ECDHE_RSA_AES128_CBC_SHA))
    group_list = b"".join(struct.pack(">H", g) for g in groups)
    ext = _ext(0x000A, struct.pack(">H", len(group_list)) + group_list) + _ext(0x000B, b"\x01\x00")
    if sigalgs is not None:
        algs = b"".join(struct.pack(">H", a) for a in sigalgs)
        ext += _ext(0x000D, struct.pack(">H", len(algs)) + algs)
    body = (b"\x03\x03" + os.urandom(32) + b"\x00" + struct.pack(">H", len(suites)) + suites + b"\x01\x00"
            + struct.pack(">H", len(ext)) + ext)
    hello = b"\x01" + struct.pack(">I", len(body))[1:] + body
    return b"\x16\x03\x01" + struct.pack(">H", len(hello)) + hello


def handshake_messages(records: bytes) -> Iterator[tuple[int, bytes]]:
    """(type, body) of each handshake message in a stream of plaintext TLS records; stops at any other record."""
    data = b""
    while len(records) >= 5 and records[0] == 0x16:
        (length,) = struct.unpack(">H", records[3:5])
        data, records = data + records[5:5 + length], records[5 + length:]
    while len(data) >= 4:
        length = int.from_bytes(data[1:4], "big")
        yield data[0], data[4:4 + length]
        data = data[4 + length:]


def server_flight(ctx: ssl.SSLContext, hello: bytes) -> bytes:
    """What the server writes back to `hello` (records), or b"" when it refuses it (an alert only)."""
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    conn = ctx.wrap_bio(incoming, outgoing, server_side=True)
    incoming.write(hello)
    try:
        conn.do_handshake()
    except ssl.SSLWantReadError:
        pass
    except ssl.SSLError:
        return b""
    return outgoing.read()


def key_exchange_signature(flight: bytes) -> int:
    """The signature algorithm of the ServerKeyExchange (ECDHE, named curve) in a server's first flight."""
    kx = dict(handshake_messages(flight))[12]
    assert kx[0] == 3, kx[:4].hex()  # named_curve
    point_len = kx[3]
    return int(struct.unpack(">H", kx[4 + point_len:6 + point_len])[0])


@pytest.fixture(scope="module")
def creds(tmp_path_factory: pytest.TempPathFactory) -> Credentials:
    return ensure_credentials(ServerConfig.create(tmp_path_factory.mktemp("tls") / "d"))


@pytest.fixture(scope="module")
def ctx(creds: Credentials) -> ssl.SSLContext:
    return server_ssl_context(creds)


@pytest.mark.parametrize("groups", [(SECP256R1, X25519), (X25519, SECP256R1), (SECP256R1,)])
def test_hello_without_signature_algorithms_gets_a_server_hello(ctx: ssl.SSLContext, groups: tuple[int, ...]) -> None:
    flight = server_flight(ctx, client_hello(groups, None))
    types = [t for t, _ in handshake_messages(flight)]
    assert types[:1] == [2], flight[:16].hex()  # ServerHello, not an alert
    assert 12 in types and types[-1] == 14  # ServerKeyExchange ... ServerHelloDone
    assert key_exchange_signature(flight) == ECDSA_SHA1  # the only one RFC 5246 leaves, as Go signs


@pytest.mark.parametrize("sigalgs", [(ECDSA_SHA256,), (ECDSA_SHA1, ECDSA_SHA256), (ECDSA_SHA256, ECDSA_SHA1)])
def test_a_client_naming_sha256_gets_sha256(ctx: ssl.SSLContext, sigalgs: tuple[int, ...]) -> None:
    flight = server_flight(ctx, client_hello((X25519, SECP256R1), sigalgs))
    assert key_exchange_signature(flight) == ECDSA_SHA256


def test_a_client_naming_only_sha1_is_served_with_sha1(ctx: ssl.SSLContext) -> None:
    assert key_exchange_signature(server_flight(ctx, client_hello((SECP256R1,), (ECDSA_SHA1,)))) == ECDSA_SHA1


def test_offered_suites_stay_ecdhe_aead_or_sha2(ctx: ssl.SSLContext) -> None:
    for suite in ctx.get_ciphers():
        if suite["protocol"] == "TLSv1.3":
            continue
        assert suite["kea"] == "kx-ecdhe" and suite["strength_bits"] >= 128, suite
        assert suite["aead"] or suite["digest"] in ("sha256", "sha384"), suite
    assert ctx.minimum_version == ssl.TLSVersion.TLSv1_2
    assert ctx.options & ssl.OP_NO_COMPRESSION


def _client_cert(tmp: Path, name: str, issuer: tuple[bytes, bytes] | None,
                 not_after: dt.datetime | None = None) -> tuple[Path, Path]:
    """A clientAuth certificate for CN=`name`: signed by `issuer` (cert, key PEM), else by a CA of its own."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = dt.datetime.now(dt.UTC)
    if issuer is None:
        ca_key = ec.generate_private_key(ec.SECP256R1())
        ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "someone-else-ca")])
    else:
        loaded = serialization.load_pem_private_key(issuer[1], password=None)
        assert isinstance(loaded, ec.EllipticCurvePrivateKey)
        ca_key, ca_name = loaded, x509.load_pem_x509_certificate(issuer[0]).subject
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])).issuer_name(ca_name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(days=2)).not_valid_after(not_after or now + dt.timedelta(days=1))
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
            .sign(ca_key, hashes.SHA256()))
    crt, pem = tmp / f"{name}.crt", tmp / f"{name}.key"
    crt.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    pem.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                      serialization.NoEncryption()))
    return crt, pem


def _handshake(server_ctx: ssl.SSLContext, client_ctx: ssl.SSLContext) -> dict[str, object] | str:
    """Run a full handshake in memory: the server's view of the peer certificate, or the error's reason."""
    c_in, c_out, s_in, s_out = ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO()
    client = client_ctx.wrap_bio(c_in, c_out, server_side=False)
    server = server_ctx.wrap_bio(s_in, s_out, server_side=True)
    done = {"c": False, "s": False}
    for _ in range(20):
        for side, obj in (("c", client), ("s", server)):
            if not done[side]:
                try:
                    obj.do_handshake()
                    done[side] = True
                except ssl.SSLWantReadError:
                    pass
                except ssl.SSLError as e:
                    return str(e.reason)
        s_in.write(c_out.read())
        c_in.write(s_out.read())
        if all(done.values()):
            try:  # TLS 1.3: the server judges the client's certificate after its own handshake returned
                client.write(b"x")
                s_in.write(c_out.read())
                server.read(1)
            except ssl.SSLError as e:
                return str(e.reason)
            return server.getpeercert() or {}
    raise AssertionError("handshake did not finish")


@pytest.mark.parametrize("version", [ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3])
def test_client_certificates_are_verified_against_the_client_ca(ctx: ssl.SSLContext, creds: Credentials,
                                                                tmp_path: Path, version: ssl.TLSVersion) -> None:
    assert creds.client_ca_cert is not None and creds.client_ca_key is not None
    ca = (creds.client_ca_cert.read_bytes(), creds.client_ca_key.read_bytes())

    def client(cert: tuple[Path, Path] | None) -> ssl.SSLContext:
        c = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        c.load_verify_locations(cadata=creds.ca_pem.decode())
        c.check_hostname = False
        c.minimum_version = c.maximum_version = version
        if cert:
            c.load_cert_chain(*cert)
        return c

    good = _handshake(ctx, client(_client_cert(tmp_path, "alice", ca)))
    assert isinstance(good, dict) and good["subject"] == ((("commonName", "alice"),),)
    assert _handshake(ctx, client(None)) == {}  # optional: none is fine
    assert _handshake(ctx, client(_client_cert(tmp_path, "mallory", None))) == "CERTIFICATE_VERIFY_FAILED"
    expired = _client_cert(tmp_path, "late", ca, dt.datetime.now(dt.UTC) - dt.timedelta(days=1))
    assert _handshake(ctx, client(expired)) == "CERTIFICATE_VERIFY_FAILED"
