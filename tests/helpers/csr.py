"""Test helper: PEM certificate signing requests made with `cryptography` (a key and a CSR per call)."""

from __future__ import annotations

import base64

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


def make_csr(cn: str = "alice", orgs: tuple[str, ...] = (), dns: tuple[str, ...] = ()) -> tuple[bytes, bytes]:
    """(PEM CSR, PEM private key)."""
    key = ec.generate_private_key(ec.SECP256R1())
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, cn)]
    attrs += [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in orgs]
    builder = x509.CertificateSigningRequestBuilder().subject_name(x509.Name(attrs))
    if dns:
        builder = builder.add_extension(x509.SubjectAlternativeName([x509.DNSName(d) for d in dns]), critical=False)
    csr = builder.sign(key, hashes.SHA256())
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    return csr.public_bytes(serialization.Encoding.PEM), key_pem


def csr_body(name: str, *, cn: str = "alice", orgs: tuple[str, ...] = (), usages: list[str] | None = None,
             signer: str = "kubernetes.io/kube-apiserver-client", seconds: int | None = None) -> dict[str, object]:
    """A CertificateSigningRequest object for `name` with a fresh request."""
    pem, _ = make_csr(cn, orgs)
    spec: dict[str, object] = {"request": base64.b64encode(pem).decode(), "signerName": signer,
                               "usages": usages if usages is not None else ["client auth"]}
    if seconds is not None:
        spec["expirationSeconds"] = seconds
    return {"apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest",
            "metadata": {"name": name}, "spec": spec}
