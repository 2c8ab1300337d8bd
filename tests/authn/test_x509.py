"""x509 client certificates: the user a verified peer certificate names, and issued certificates."""

from __future__ import annotations

import ssl
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from lite.server.authn.x509 import issue_client_cert, user_from_peercert
from lite.server.certs import ensure_credentials, kubeconfig_text, server_ssl_context
from lite.server.config import ServerConfig
from lite.server.requestuser import UserInfo


def subject(*pairs: tuple[str, str]) -> dict[str, Any]:
    return {"subject": tuple(((k, v),) for k, v in pairs)}


@pytest.mark.parametrize("cert,want", [
    (subject(("commonName", "alice")), UserInfo("alice")),
    (subject(("organizationName", "dev"), ("organizationName", "ops"), ("commonName", "alice")),
     UserInfo("alice", ("dev", "ops"))),
    (subject(("commonName", "system:node:n1"), ("organizationName", "system:nodes")),
     UserInfo("system:node:n1", ("system:nodes",))),
    (subject(("organizationName", "dev")), None),  # no CN: nobody
    (subject(("commonName", "")), None),
    ({}, None),
    (None, None),
])
def test_user_from_peercert(cert: dict[str, Any] | None, want: UserInfo | None) -> None:
    assert user_from_peercert(cert) == want


def test_issued_certificate(tmp_path: Path) -> None:
    creds = ensure_credentials(ServerConfig.create(tmp_path / "d"))
    assert creds.client_ca_cert is not None and creds.client_ca_key is not None
    pem, key = issue_client_cert(creds.client_ca_cert.read_bytes(), creds.client_ca_key.read_bytes(), "alice",
                                 ("dev",), days=2)
    cert = x509.load_pem_x509_certificate(pem)
    assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "alice"
    assert [a.value for a in cert.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)] == ["dev"]
    eku = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(eku) == [ExtendedKeyUsageOID.CLIENT_AUTH]
    assert b"PRIVATE KEY" in key
    ca = x509.load_pem_x509_certificate(creds.client_ca_cert.read_bytes())
    cert.verify_directly_issued_by(ca)


def test_admin_certificate_and_kubeconfig(tmp_path: Path) -> None:
    cfg = ServerConfig.create(tmp_path / "d")
    creds = ensure_credentials(cfg)
    assert creds.admin_cert is not None and creds.admin_key is not None
    cert = x509.load_pem_x509_certificate(creds.admin_cert.read_bytes())
    assert cert.subject.rfc4514_string() == "CN=system:admin,O=system:masters"
    assert (creds.admin_key.stat().st_mode & 0o777) == 0o600
    again = ensure_credentials(cfg)  # reused, not re-made
    assert again.admin_cert is not None and again.admin_cert.read_bytes() == creds.admin_cert.read_bytes()
    text = kubeconfig_text("https://127.0.0.1:1", creds.ca_pem, "tok", (b"C", b"K"))
    assert "client-certificate-data: Qw==" in text and "client-key-data: Sw==" in text and "token: tok" in text
    assert "token:" not in kubeconfig_text("https://127.0.0.1:1", creds.ca_pem, "", (b"C", b"K"), user="u")


def test_serving_context_asks_for_an_optional_client_certificate(tmp_path: Path) -> None:
    ctx = server_ssl_context(ensure_credentials(ServerConfig.create(tmp_path / "d")))
    assert ctx.verify_mode == ssl.CERT_OPTIONAL
    assert any("lite-client-ca" in str(c.get("subject")) for c in ctx.get_ca_certs())


def test_rotate_reissues_the_admin_certificate(tmp_path: Path) -> None:
    from lite.server.certcheck import rotate

    cfg = ServerConfig.create(tmp_path / "d")
    creds = ensure_credentials(cfg)
    assert creds.admin_cert is not None
    before = creds.admin_cert.read_bytes()
    rotated, again = rotate(cfg)
    assert "client-admin.crt" in rotated
    assert again.admin_cert is not None and again.admin_cert.read_bytes() != before
    cert = x509.load_pem_x509_certificate(again.admin_cert.read_bytes())
    assert cert.subject.rfc4514_string() == "CN=system:admin,O=system:masters"
