"""Cluster credentials in the data dir: CA, serving certificate, admin token, join token, kubeconfig.

Role: `ensure_credentials(config)` makes sure every credential exists (creating what is missing on first
start) and returns them; `write_kubeconfig` writes the admin kubeconfig; `server_ssl_context` builds the TLS
context of the API listener.

Invariants:
- Everything is created once and reused on restart: the CA and the admin token never change for a data dir.
  The client CA (`tls/client-ca.{crt,key}`) signs client certificates issued through CSRs; the front-proxy
  CA (`tls/front-proxy-ca.*`) signs `tls/front-proxy-client.*`, which the aggregator presents to extension
  API servers (they trust its X-Remote-* headers through `kube-system/extension-apiserver-authentication`).
  The admin's client certificate (`tls/client-admin.*`, CN=system:admin, O=system:masters, k3s's admin
  identity) is signed by the client CA and goes into the admin kubeconfig beside the admin token.
  The serving certificate is re-issued (by the same CA) only when its SAN list changes or it nears expiry.
- Secrets (keys, tokens, kubeconfigs) are written atomically with mode 0600; directories are 0700.
- The join token has the k3s shape `K10<sha256 of the CA PEM>::server:<secret>`, so an agent given only the
  token can pin the server's CA. Authentication compares the secret part.
- `cryptography` is imported only when something must be generated (reading a certificate's expiry does not
  need it): a restart does not pay for it, and `lite server` generates in a short-lived child process.
- Blocking (file I/O, key generation): call from a thread or before the event loop runs.
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import ipaddress
import json
import secrets
import socket
import ssl
from pathlib import Path
from typing import Any

from lite import atomicfile
from lite.der import pem_certificate_validity
from lite.records import dataclass
from lite.server.config import ServerConfig

CA_DAYS = 3650
SERVING_DAYS = 365
RENEW_BEFORE_DAYS = 90  # k3s's rule: leaf certificates this close to expiry are renewed at start
TOKEN_PREFIX = "K10"
FRONT_PROXY_CLIENT = "front-proxy-client"
CLIENT_DAYS = 365
ADMIN_CERT_USER = "system:admin"  # k3s's admin kubeconfig identity
ADMIN_CERT_GROUPS = ("system:masters",)
IN_CLUSTER_NAMES = ("kubernetes", "kubernetes.default", "kubernetes.default.svc",
                    "kubernetes.default.svc.cluster.local")


@dataclass(frozen=True)
class Credentials:
    """Paths and secrets of one server instance."""

    ca_pem: bytes
    ca_cert: Path
    serving_cert: Path
    serving_key: Path
    admin_token: str
    join_token: str  # full K10 form, what `lite token` prints
    # The client CA that signs CertificateSigningRequests for kubernetes.io/kube-apiserver-client.
    client_ca_cert: Path | None = None
    client_ca_key: Path | None = None
    # The aggregator's front-proxy CA and the client certificate it presents to extension API servers.
    front_proxy_ca: Path | None = None
    front_proxy_cert: Path | None = None
    front_proxy_key: Path | None = None
    # The admin's client certificate (CN=system:admin, O=system:masters), signed by the client CA.
    admin_cert: Path | None = None
    admin_key: Path | None = None

    @property
    def join_secret(self) -> str:
        return parse_join_token(self.join_token)[1]


def parse_join_token(token: str) -> tuple[str | None, str]:
    """Split a join token into (CA hash or None, secret). A bare secret is accepted as such."""
    token = token.strip()
    if token.startswith(TOKEN_PREFIX) and "::" in token:
        ca_hash, _, rest = token[len(TOKEN_PREFIX):].partition("::")
        return ca_hash, rest.rpartition(":")[2]
    return None, token


def format_join_token(ca_pem: bytes, secret: str) -> str:
    return f"{TOKEN_PREFIX}{hashlib.sha256(ca_pem).hexdigest()}::server:{secret}"


def write_private(path: Path, data: bytes) -> None:
    """Write `data` to `path` atomically and durably, readable by the owner only (0600; the directory is made
    0700 when missing): `lite.atomicfile`."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    atomicfile.write(path, data, mode=0o600)


def serving_sans(config: ServerConfig) -> list[str]:
    """The SANs of the serving certificate: loopback, localhost, the hostname, a specific bind address, the
    advertise address, and what in-cluster clients dial (as kube-apiserver's): the `kubernetes` Service's
    ClusterIP (the service CIDR's first address, `KUBERNETES_SERVICE_HOST`) and its DNS names."""
    domain = f"kubernetes.default.svc.{config.cluster_domain.strip('.')}" if config.cluster_domain else ""
    sans = ["127.0.0.1", "::1", "localhost", socket.gethostname(), *IN_CLUSTER_NAMES, *config.tls_sans,
            api_service_ip(config.service_cidr)]
    for extra in (config.bind_address, config.advertise_address, domain):
        if extra not in ("", "0.0.0.0", "::"):
            sans.append(extra)
    return sorted(set(sans))


def api_service_ip(service_cidr: str) -> str:
    """The `kubernetes` Service's ClusterIP: the first address of the (first) service CIDR."""
    network = ipaddress.ip_network(service_cidr.split(",")[0].strip(), strict=False)
    return str(network.network_address + 1)


def ensure_credentials(config: ServerConfig) -> Credentials:
    """Create what is missing, reuse what exists, and return the instance's credentials."""
    paths = config.paths
    for d in (paths.root, paths.tls, paths.cred):
        d.mkdir(parents=True, exist_ok=True, mode=0o700)
    ca_cert, ca_key = paths.tls / "ca.crt", paths.tls / "ca.key"
    if not (ca_cert.exists() and ca_key.exists()):
        _write_ca(ca_cert, ca_key)
    ca_pem = ca_cert.read_bytes()
    client_crt, client_key = paths.tls / "client-ca.crt", paths.tls / "client-ca.key"
    if not (client_crt.exists() and client_key.exists()):
        _write_ca(client_crt, client_key, "lite-client-ca")
    fp_ca, fp_ca_key = paths.tls / "front-proxy-ca.crt", paths.tls / "front-proxy-ca.key"
    fp_crt, fp_key = paths.tls / "front-proxy-client.crt", paths.tls / "front-proxy-client.key"
    if not (fp_ca.exists() and fp_ca_key.exists()):
        _write_ca(fp_ca, fp_ca_key, "lite-front-proxy-ca")
        fp_crt.unlink(missing_ok=True)
    if not (fp_crt.exists() and fp_key.exists()) or expires_within(fp_crt, RENEW_BEFORE_DAYS):
        _write_client(fp_ca, fp_ca_key, fp_crt, fp_key, FRONT_PROXY_CLIENT)
    crt, key, meta = paths.tls / "serving.crt", paths.tls / "serving.key", paths.tls / "serving.json"
    sans = serving_sans(config)
    if _serving_stale(crt, key, meta, sans):
        _write_serving(ca_cert, ca_key, crt, key, meta, sans)
    admin = _ensure_secret(paths.admin_token)
    join = _join_token(config, ca_pem)
    admin_crt, admin_key = paths.tls / "client-admin.crt", paths.tls / "client-admin.key"
    if _client_stale(admin_crt, admin_key, client_crt):
        _write_user_client(client_crt, client_key, admin_crt, admin_key, ADMIN_CERT_USER, ADMIN_CERT_GROUPS)
    return Credentials(ca_pem=ca_pem, ca_cert=ca_cert, serving_cert=crt, serving_key=key,
                       admin_token=admin, join_token=join, client_ca_cert=client_crt, client_ca_key=client_key,
                       front_proxy_ca=fp_ca, front_proxy_cert=fp_crt, front_proxy_key=fp_key,
                       admin_cert=admin_crt, admin_key=admin_key)


def _client_stale(crt: Path, key: Path, ca: Path) -> bool:
    """A client certificate must be (re)made: missing, near expiry, or older than the CA that signs it."""
    if not (crt.exists() and key.exists()) or expires_within(crt, RENEW_BEFORE_DAYS):
        return True
    return crt.stat().st_mtime < ca.stat().st_mtime


def _write_user_client(ca_cert: Path, ca_key: Path, crt: Path, key_path: Path, user: str,
                       groups: tuple[str, ...]) -> None:
    from lite.server.authn.x509 import issue_client_cert

    cert_pem, key_pem = issue_client_cert(ca_cert.read_bytes(), ca_key.read_bytes(), user, groups, CLIENT_DAYS)
    write_private(key_path, key_pem)
    write_private(crt, cert_pem)


def _ensure_secret(path: Path) -> str:
    if path.exists():
        value = path.read_text().strip()
        if value:
            return value
    value = secrets.token_hex(32)
    write_private(path, (value + "\n").encode())
    return value


def _join_token(config: ServerConfig, ca_pem: bytes) -> str:
    """The join token: --token if given (its secret part), else the stored one, else a new one."""
    path = config.paths.token
    if config.token:
        secret = parse_join_token(config.token)[1]
    elif path.exists() and (stored := path.read_text().strip()):
        secret = parse_join_token(stored)[1]
    else:
        secret = secrets.token_hex(32)
    token = format_join_token(ca_pem, secret)
    if not path.exists() or path.read_text().strip() != token:
        write_private(path, (token + "\n").encode())
    return token


def _serving_stale(crt: Path, key: Path, meta: Path, sans: list[str]) -> bool:
    if not (crt.exists() and key.exists() and meta.exists()):
        return True
    try:
        info: dict[str, Any] = json.loads(meta.read_text())
    except ValueError:
        return True
    renew_at = float(info.get("not_after", 0)) - RENEW_BEFORE_DAYS * 86400
    return bool(info.get("sans") != sans or renew_at < dt.datetime.now(dt.UTC).timestamp())


def expires_within(crt: Path, days: float) -> bool:
    """The certificate at `crt` ends within `days` (or cannot be read: then it must be made again)."""
    try:
        not_after = pem_certificate_validity(crt.read_bytes())[1]
    except (OSError, ValueError):
        return True
    return not_after - dt.datetime.now(dt.UTC).timestamp() < days * 86400


def _write_ca(cert_path: Path, key_path: Path, cn: str = "lite-server-ca") -> None:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"{cn}@{int(now.timestamp())}")])
    cert = (
        x509.CertificateBuilder()
        .subject_name(name).issuer_name(name).public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=CA_DAYS))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                     content_commitment=False, key_encipherment=False,
                                     data_encipherment=False, key_agreement=False,
                                     encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    write_private(key_path, key.private_bytes(serialization.Encoding.PEM,
                                              serialization.PrivateFormat.PKCS8,
                                              serialization.NoEncryption()))
    write_private(cert_path, cert.public_bytes(serialization.Encoding.PEM))


def _write_serving(ca_cert: Path, ca_key: Path, crt: Path, key_path: Path, meta: Path,
                   sans: list[str]) -> None:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    ca = x509.load_pem_x509_certificate(ca_cert.read_bytes())
    signer = serialization.load_pem_private_key(ca_key.read_bytes(), password=None)
    assert isinstance(signer, ec.EllipticCurvePrivateKey)
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    not_after = now + dt.timedelta(days=SERVING_DAYS)
    alt: list[x509.GeneralName] = []
    for san in sans:
        try:
            alt.append(x509.IPAddress(ipaddress.ip_address(san)))
        except ValueError:
            alt.append(x509.DNSName(san))
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "lite-server")]))
        .issuer_name(ca.subject).public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectAlternativeName(alt), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(signer.public_key()),
                       critical=False)
        .sign(signer, hashes.SHA256())
    )
    write_private(key_path, key.private_bytes(serialization.Encoding.PEM,
                                              serialization.PrivateFormat.PKCS8,
                                              serialization.NoEncryption()))
    write_private(crt, cert.public_bytes(serialization.Encoding.PEM))
    write_private(meta, json.dumps({"sans": sans, "not_after": not_after.timestamp()}).encode())


def _write_client(ca_cert: Path, ca_key: Path, crt: Path, key_path: Path, cn: str,
                  not_after: dt.datetime | None = None) -> None:
    """A client certificate (clientAuth) for `cn`, signed by the given CA, valid as long as the CA (or until
    `not_after`)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    ca = x509.load_pem_x509_certificate(ca_cert.read_bytes())
    signer = serialization.load_pem_private_key(ca_key.read_bytes(), password=None)
    assert isinstance(signer, ec.EllipticCurvePrivateKey)
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)]))
        .issuer_name(ca.subject).public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(min(not_after, ca.not_valid_after_utc) if not_after else ca.not_valid_after_utc)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(signer.public_key()), critical=False)
        .sign(signer, hashes.SHA256())
    )
    write_private(key_path, key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                              serialization.NoEncryption()))
    write_private(crt, cert.public_bytes(serialization.Encoding.PEM))


def kubeconfig_text(server_url: str, ca_pem: bytes, token: str,
                    client_cert: tuple[bytes, bytes] | None = None, user: str = "lite-admin") -> str:
    """An admin kubeconfig: verified HTTPS against the cluster CA; the client certificate (cert PEM, key PEM)
    when given, which kube-apiserver-style authentication tries before the bearer token (kept for clients
    that only speak tokens, lite's own among them)."""
    ca_b64 = base64.b64encode(ca_pem).decode()
    cert_lines = ""
    if client_cert is not None:
        cert_lines = (f"    client-certificate-data: {base64.b64encode(client_cert[0]).decode()}\n"
                      f"    client-key-data: {base64.b64encode(client_cert[1]).decode()}\n")
    return (
        "apiVersion: v1\n"
        "kind: Config\n"
        "clusters:\n"
        "- name: lite\n"
        "  cluster:\n"
        f"    server: {server_url}\n"
        f"    certificate-authority-data: {ca_b64}\n"
        "users:\n"
        f"- name: {user}\n"
        "  user:\n"
        f"{cert_lines}"
        f"{f'    token: {token}' + chr(10) if token else ''}"
        "contexts:\n"
        "- name: lite\n"
        "  context:\n"
        "    cluster: lite\n"
        f"    user: {user}\n"
        "current-context: lite\n"
        "preferences: {}\n"
    )


def write_kubeconfig(config: ServerConfig, creds: Credentials) -> Path:
    """Write the kubeconfig to its configured path and the copy `lite kubeconfig` prints; return the path."""
    pair = None
    if creds.admin_cert is not None and creds.admin_key is not None:
        pair = (creds.admin_cert.read_bytes(), creds.admin_key.read_bytes())
    text = kubeconfig_text(config.server_url, creds.ca_pem, creds.admin_token, pair).encode()
    write_private(config.paths.admin_kubeconfig, text)
    write_private(config.kubeconfig, text)
    return config.kubeconfig


def user_kubeconfig(config: ServerConfig, user: str, groups: tuple[str, ...], days: float = CLIENT_DAYS) -> str:
    """A kubeconfig for `user` in `groups` with a fresh client certificate from the data dir's client CA
    (`lite certificate issue-user`); the server URL is the one of the admin kubeconfig. Blocking."""
    import yaml

    from lite.server.authn.x509 import issue_client_cert

    tls = config.paths.tls
    admin = yaml.safe_load(config.paths.admin_kubeconfig.read_text())
    server = str(admin["clusters"][0]["cluster"]["server"])
    pair = issue_client_cert((tls / "client-ca.crt").read_bytes(), (tls / "client-ca.key").read_bytes(), user,
                             groups, days)
    return kubeconfig_text(server, (tls / "ca.crt").read_bytes(), "", pair, user=user)


# The TLS 1.2 suites the API listener offers: ECDHE key exchange with AES-GCM, ChaCha20-Poly1305 or AES-CBC
# with a SHA-2 MAC (Python's default list less the inert DHE ones). `@SECLEVEL=0` does not widen this list (it
# names no weak suite): it lets OpenSSL sign with SHA-1 for a TLS 1.2 client that sends no signature_algorithms
# extension. RFC 5246 (7.4.1.4.1) then allows the server nothing but SHA-1, and busybox wget's own TLS code
# (before busybox 1.36) sends none; at OpenSSL 3's default levels (1 and up) such a hello fails with
# NO_SHARED_CIPHER, while Go's crypto/tls (kube-apiserver, k3s; Go before 1.25) signs with SHA-1 and serves it.
# What the level also decides is held by other means: TLS 1.2 at least (`minimum_version`), no compression
# (Python's default options), keys of our own making (P-256) and client certificates only from lite's client CA,
# which signs with SHA-256. Clients that send the extension get a SHA-2 signature as before (OpenSSL prefers
# the strongest shared algorithm).
TLS12_CIPHERS = "@SECLEVEL=0:ECDHE+AESGCM:ECDHE+CHACHA20:ECDHE+AES:!aNULL:!eNULL:!aDSS:!SHA1:!AESCCM"


def server_ssl_context(creds: Credentials) -> ssl.SSLContext:
    """TLS 1.2+ server context; ALPN offers only http/1.1 because upgrades (exec, watch) need it. A client
    certificate is asked for but optional; one that is presented must verify against the client CA (OpenSSL
    checks chain, validity and the clientAuth purpose during the handshake), and then names the user. The
    TLS 1.2 suites and signature rule are `TLS12_CIPHERS`'s (a hello without signature_algorithms is served,
    as by Go's TLS)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.set_ciphers(TLS12_CIPHERS)
    ctx.load_cert_chain(creds.serving_cert, creds.serving_key)
    if creds.client_ca_cert is not None:
        ctx.verify_mode = ssl.CERT_OPTIONAL
        ctx.load_verify_locations(cafile=str(creds.client_ca_cert))
    ctx.set_alpn_protocols(["http/1.1"])
    return ctx
