"""Credentials in a real data dir: created once with private modes, reused on restart, verifiable TLS."""

from __future__ import annotations

import base64
import hashlib
import ipaddress
import socket
import stat
from pathlib import Path

import yaml
from cryptography import x509

from lite.server.certs import (
    ensure_credentials,
    format_join_token,
    parse_join_token,
    server_ssl_context,
    write_kubeconfig,
)
from lite.server.config import ServerConfig


def _mode(p: Path) -> int:
    return stat.S_IMODE(p.stat().st_mode)


def test_first_start_creates_private_credentials(tmp_path: Path) -> None:
    cfg = ServerConfig.create(tmp_path / "d", port=7443)
    creds = ensure_credentials(cfg)
    paths = cfg.paths
    for secret in (paths.tls / "ca.key", paths.tls / "serving.key", paths.admin_token, paths.token):
        assert _mode(secret) == 0o600, secret
    assert _mode(paths.root) == 0o700
    assert paths.token.read_text().strip() == creds.join_token
    assert creds.join_token.startswith("K10" + hashlib.sha256(creds.ca_pem).hexdigest() + "::server:")
    assert len(creds.admin_token) == 64 and creds.admin_token != creds.join_secret


def test_serving_cert_is_issued_by_ca_with_sans(tmp_path: Path) -> None:
    cfg = ServerConfig.create(tmp_path / "d", bind_address="127.0.0.2", tls_sans=("lite.example",))
    creds = ensure_credentials(cfg)
    ca = x509.load_pem_x509_certificate(creds.ca_pem)
    cert = x509.load_pem_x509_certificate(creds.serving_cert.read_bytes())
    cert.verify_directly_issued_by(ca)
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    ips = {str(ip) for ip in san.get_values_for_type(x509.IPAddress)}
    names = set(san.get_values_for_type(x509.DNSName))
    assert {"127.0.0.1", "::1", "127.0.0.2"} <= ips
    assert {"localhost", socket.gethostname(), "lite.example", "kubernetes.default.svc"} <= names
    assert all(ipaddress.ip_address(ip) for ip in ips)


def test_serving_cert_names_what_in_cluster_clients_dial(tmp_path: Path) -> None:
    """A pod's client dials https://$KUBERNETES_SERVICE_HOST (the service CIDR's first address), which the
    service proxy forwards to the advertise address: both must be in the certificate, as upstream's are."""
    cfg = ServerConfig.create(tmp_path / "d", service_cidr="10.96.0.0/12", advertise_address="192.0.2.7",
                              cluster_domain="corp.example")
    cert = x509.load_pem_x509_certificate(ensure_credentials(cfg).serving_cert.read_bytes())
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    ips = {str(ip) for ip in san.get_values_for_type(x509.IPAddress)}
    assert {"10.96.0.1", "192.0.2.7"} <= ips
    assert "10.43.0.1" not in ips
    assert "kubernetes.default.svc.corp.example" in san.get_values_for_type(x509.DNSName)
    # the default service CIDR gives the default ClusterIP of the `kubernetes` Service
    default = x509.load_pem_x509_certificate(ensure_credentials(ServerConfig.create(tmp_path / "e"))
                                             .serving_cert.read_bytes())
    default_ips = default.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert ipaddress.ip_address("10.43.0.1") in default_ips.get_values_for_type(x509.IPAddress)


def test_restart_reuses_everything(tmp_path: Path) -> None:
    cfg = ServerConfig.create(tmp_path / "d")
    first = ensure_credentials(cfg)
    cert_before = first.serving_cert.read_bytes()
    second = ensure_credentials(cfg)
    assert second == first
    assert second.serving_cert.read_bytes() == cert_before


def test_new_san_reissues_serving_cert_with_same_ca(tmp_path: Path) -> None:
    first = ensure_credentials(ServerConfig.create(tmp_path / "d"))
    before = first.serving_cert.read_bytes()
    second = ensure_credentials(ServerConfig.create(tmp_path / "d", tls_sans=("10.9.8.7",)))
    assert second.ca_pem == first.ca_pem and second.admin_token == first.admin_token
    assert second.serving_cert.read_bytes() != before
    cert = x509.load_pem_x509_certificate(second.serving_cert.read_bytes())
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert ipaddress.ip_address("10.9.8.7") in san.get_values_for_type(x509.IPAddress)


def test_given_token_is_used_and_persisted(tmp_path: Path) -> None:
    cfg = ServerConfig.create(tmp_path / "d", token="my-secret")
    creds = ensure_credentials(cfg)
    assert creds.join_secret == "my-secret"
    assert creds.join_token == format_join_token(creds.ca_pem, "my-secret")
    # Without --token the next start keeps the stored one.
    again = ensure_credentials(ServerConfig.create(tmp_path / "d"))
    assert again.join_token == creds.join_token


def test_parse_join_token() -> None:
    assert parse_join_token("K10abc::server:s3cret") == ("abc", "s3cret")
    assert parse_join_token("plain\n") == (None, "plain")


def test_kubeconfig_points_at_loopback_with_ca_and_token(tmp_path: Path) -> None:
    cfg = ServerConfig.create(tmp_path / "d", port=7443, kubeconfig_path=tmp_path / "out" / "kc.yaml")
    creds = ensure_credentials(cfg)
    path = write_kubeconfig(cfg, creds)
    assert path == tmp_path / "out" / "kc.yaml" and _mode(path) == 0o600
    assert cfg.paths.admin_kubeconfig.read_text() == path.read_text()
    kc = yaml.safe_load(path.read_text())
    cluster = kc["clusters"][0]["cluster"]
    assert cluster["server"] == "https://127.0.0.1:7443"
    assert base64.b64decode(cluster["certificate-authority-data"]) == creds.ca_pem
    assert "insecure-skip-tls-verify" not in cluster
    assert kc["users"][0]["user"]["token"] == creds.admin_token
    assert kc["current-context"] == kc["contexts"][0]["name"]


def test_specific_bind_address_is_used_in_kubeconfig() -> None:
    assert ServerConfig.create("/x", bind_address="10.1.2.3", port=1).server_url == "https://10.1.2.3:1"
    assert ServerConfig.create("/x", bind_address="::1", port=1).server_url == "https://[::1]:1"
    assert ServerConfig.create("/x", bind_address="0.0.0.0", port=1).server_url == "https://127.0.0.1:1"


def test_ssl_context_is_tls12_plus_http11_only(tmp_path: Path) -> None:
    ctx = server_ssl_context(ensure_credentials(ServerConfig.create(tmp_path / "d")))
    import ssl

    assert ctx.minimum_version == ssl.TLSVersion.TLSv1_2


def test_client_and_front_proxy_cas_are_created_once(tmp_path: Path) -> None:
    cfg = ServerConfig.create(tmp_path / "d", port=7443)
    creds = ensure_credentials(cfg)
    files = [creds.client_ca_cert, creds.client_ca_key, creds.front_proxy_ca, creds.front_proxy_cert,
             creds.front_proxy_key]
    assert all(f is not None and f.exists() and _mode(f) == 0o600 for f in files)
    assert creds.client_ca_cert is not None and creds.front_proxy_ca is not None and creds.front_proxy_cert is not None
    client_ca = x509.load_pem_x509_certificate(creds.client_ca_cert.read_bytes())
    assert client_ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    proxy = x509.load_pem_x509_certificate(creds.front_proxy_cert.read_bytes())
    proxy.verify_directly_issued_by(x509.load_pem_x509_certificate(creds.front_proxy_ca.read_bytes()))
    assert proxy.subject.rfc4514_string() == "CN=front-proxy-client"
    before = [f.read_bytes() for f in files if f is not None]
    again = ensure_credentials(cfg)
    assert [f.read_bytes() for f in (again.client_ca_cert, again.client_ca_key, again.front_proxy_ca,
                                     again.front_proxy_cert, again.front_proxy_key) if f is not None] == before
