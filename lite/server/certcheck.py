"""`lite certificate check|rotate`: what the certificates in `<data-dir>/server/tls/` are and when they end,
and renewing the leaf certificates (k3s's `certificate rotate`).

- `check` lists every certificate with its subject, issuer, expiry and days left, and says which the next
  start renews (leaf certificates within RENEW_BEFORE_DAYS of expiry; CAs are never renewed here).
- `rotate` re-issues the leaf certificates now (the serving certificate, the front-proxy client and the admin's
  client certificate, which the kubeconfig written at the next start carries) from the
  same CAs; the running server uses them after its next start. Clients and agents trust the CA, not the
  leaf, so kubectl and joined agents keep working, and the join token (which carries the CA's hash) stays.

Invariants: CA keys are read, never written; every file written is 0600 (through `certs.write_private`).
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from lite.records import dataclass
from lite.server.certs import RENEW_BEFORE_DAYS, Credentials, ensure_credentials
from lite.server.config import ServerConfig

LEAVES = ("serving.crt", "front-proxy-client.crt", "client-admin.crt")


@dataclass(frozen=True)
class CertInfo:
    file: str
    subject: str
    issuer: str
    not_after: dt.datetime
    is_ca: bool

    @property
    def days_left(self) -> float:
        return (self.not_after - dt.datetime.now(dt.UTC)).total_seconds() / 86400

    @property
    def renews_at_start(self) -> bool:
        return not self.is_ca and self.days_left < RENEW_BEFORE_DAYS


def inspect(tls_dir: Path) -> list[CertInfo]:
    from cryptography import x509

    out = []
    for path in sorted(tls_dir.glob("*.crt")):
        cert = x509.load_pem_x509_certificate(path.read_bytes())
        try:
            ca = cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
        except x509.ExtensionNotFound:
            ca = False
        out.append(CertInfo(path.name, cert.subject.rfc4514_string(), cert.issuer.rfc4514_string(),
                            cert.not_valid_after_utc, ca))
    return out


def rotate(config: ServerConfig) -> tuple[list[str], Credentials]:
    """Re-issue the leaf certificates; returns their file names and the credentials now on disk."""
    tls = config.paths.tls
    rotated = []
    for name in LEAVES:
        crt = tls / name
        if crt.exists():
            crt.unlink()
            rotated.append(name)
    (tls / "serving.json").unlink(missing_ok=True)
    return rotated, ensure_credentials(config)
