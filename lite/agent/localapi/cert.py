"""The local API's own TLS: a self-signed P-256 certificate for 127.0.0.1, made at each start.

kubectl (client-go) sends a bearer token only over TLS (over plain http it sends no credentials at all), so
the node-local API serves HTTPS with a certificate that the kubeconfig it writes trusts
(`certificate-authority-data`). The certificate is its own CA (CA:TRUE, keyCertSign) and names only
IP 127.0.0.1 and "localhost"; the key never leaves `<agent-dir>/local-api/` (0600). `new_serving_pair` makes
it in a short-lived forked child (`lite.forkcall`), so the agent never maps `cryptography` (measured: +7.7 MB
RSS once imported, never unloaded; the fork costs a few milliseconds per start). Blocking: call from a thread.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import logging
import ssl
import sys
from pathlib import Path

from lite import atomicfile
from lite.forkcall import ChildFailed, call_in_child

log = logging.getLogger("lite.agent.localapi")
VALID_DAYS = 3650


def new_serving_pair(node: str) -> tuple[bytes, bytes]:
    """`make_serving_pair(node)`, computed in a forked child unless `cryptography` is loaded here already (or
    the child fails: then here, as it always could)."""
    if "cryptography" not in sys.modules:
        try:
            cert, _, key = call_in_child(lambda: b"\0".join(make_serving_pair(node))).partition(b"\0")
            return cert, key
        except ChildFailed as e:
            log.warning("making the local API's certificate in a child process failed, making it here: %s", e)
    return make_serving_pair(node)


def make_serving_pair(node: str) -> tuple[bytes, bytes]:
    """(certificate PEM, key PEM) of a new self-signed serving certificate for 127.0.0.1."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"lite-node-local-api@{node}"[:64])])
    now = dt.datetime.now(dt.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=VALID_DAYS))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, content_commitment=False,
                                         key_encipherment=False, data_encipherment=False, key_agreement=False,
                                         crl_sign=False, encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                                                        x509.DNSName("localhost")]), critical=False)
            .sign(key, hashes.SHA256()))
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    return cert.public_bytes(serialization.Encoding.PEM), key_pem


def server_context(directory: Path, cert_pem: bytes, key_pem: bytes) -> ssl.SSLContext:
    """A TLS server context with the pair (written to `directory`, which must be private: 0700)."""
    atomicfile.write(directory / "serving.crt", cert_pem, mode=0o600)  # 0600 from the start, never readable by others
    atomicfile.write(directory / "serving.key", key_pem, mode=0o600)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(directory / "serving.crt", directory / "serving.key")
    return ctx
