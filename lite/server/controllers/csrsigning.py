"""The CSR signer for `kubernetes.io/kube-apiserver-client` (upstream kube-controller-manager `csrsigning`).

reconcile(name): a CertificateSigningRequest that is Approved, not Failed, has no certificate yet and names
the kube-apiserver-client signer gets one, signed by the cluster's client CA: subject (CN, O, ...) and public
key (and SANs) from the request, key usages and `client auth` from `spec.usages`, valid from five minutes ago
for min(expirationSeconds, one year) (less the five minutes when that is 8 hours or more, as upstream's
PermissiveSigningPolicy), never past the CA's own expiry. Usages a client certificate may not have
(or no `client auth`) give a `Failed` condition (reason SignerValidationFailure) instead, as upstream.

Other signer names are left alone: `kubernetes.io/kube-apiserver-client-kubelet` and
`kubernetes.io/kubelet-serving` stay pending (lite has no kubelet certificates to issue), custom signers are
someone else's, and `kubernetes.io/legacy-unknown` is refused at create by validation.

Invariants: `sign_request` is pure apart from `cryptography`; the controller writes only through `/status`
and only once per request (an issued certificate or a Failed condition ends its interest). Signing is a
few milliseconds of CPU for one EC or RSA signature: bounded, so it runs on the loop.
"""

from __future__ import annotations

import base64
import datetime as dt
from typing import Any, ClassVar

from lite.client import Client
from lite.errors import ApiError
from lite.events import EventRecorder
from lite.informer import SharedInformers
from lite.objects import rfc3339
from lite.records import dataclass
from lite.server.controllers.runtime import Controller, builtin

Obj = dict[str, Any]
API_CLIENT_SIGNER = "kubernetes.io/kube-apiserver-client"
DEFAULT_TTL = dt.timedelta(days=365)  # upstream --cluster-signing-duration default
BACKDATE = dt.timedelta(minutes=5)
SHORT = dt.timedelta(hours=8)  # shorter certificates keep their whole lifetime after now (not backdated)
_OPTIONAL_USAGES = ("digital signature", "key encipherment")


@dataclass(frozen=True)
class ClientCA:
    """The client CA's PEM certificate and key."""

    cert_pem: bytes
    key_pem: bytes


def client_usage_error(usages: list[Any]) -> str | None:
    """Upstream validAPIServerClientUsages: only digital signature, key encipherment and client auth,
    and client auth must be there."""
    for u in usages:
        if u not in (*_OPTIONAL_USAGES, "client auth"):
            return f"invalid usage for client certificate: {u}"
    if "client auth" not in usages:
        return "missing required usage for client certificate: client auth"
    return None


def _condition(csr: Obj, ctype: str) -> bool:
    return any(isinstance(c, dict) and c.get("type") == ctype and c.get("status") == "True"
               for c in (csr.get("status") or {}).get("conditions") or [])


def wants_signing(csr: Obj) -> bool:
    """Approved, not Failed, no certificate, and for this signer."""
    status = csr.get("status") or {}
    return ((csr.get("spec") or {}).get("signerName") == API_CLIENT_SIGNER and _condition(csr, "Approved")
            and not _condition(csr, "Denied") and not _condition(csr, "Failed") and not status.get("certificate"))


def sign_request(csr: Obj, ca: ClientCA, now: dt.datetime, max_ttl: dt.timedelta = DEFAULT_TTL) -> bytes:
    """The PEM certificate for an approved request; ValueError (upstream's message) when it cannot be issued."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.x509.oid import ExtendedKeyUsageOID

    spec = csr.get("spec") or {}
    usages = list(spec.get("usages") or [])
    problem = client_usage_error(usages)
    if problem:
        raise ValueError(problem)
    try:
        req = x509.load_pem_x509_csr(base64.b64decode(str(spec.get("request") or "")))
    except ValueError as e:
        raise ValueError(f"unable to parse csr: {e}") from None
    ca_cert = x509.load_pem_x509_certificate(ca.cert_pem)
    ca_key = serialization.load_pem_private_key(ca.key_pem, password=None)
    ttl = max_ttl
    seconds = spec.get("expirationSeconds")
    if isinstance(seconds, int) and not isinstance(seconds, bool) and seconds > 0:
        ttl = min(ttl, dt.timedelta(seconds=seconds))
    signer_end = ca_cert.not_valid_after_utc
    if now >= signer_end:
        raise ValueError(f"refusing to sign a certificate that expired in the past: NotAfter={signer_end}")
    not_after = min(now + ttl if ttl < SHORT else now + ttl - BACKDATE, signer_end)
    key_usage = x509.KeyUsage(digital_signature="digital signature" in usages,
                              key_encipherment="key encipherment" in usages, content_commitment=False,
                              data_encipherment=False, key_agreement=False, key_cert_sign=False, crl_sign=False,
                              encipher_only=False, decipher_only=False)
    builder = (
        x509.CertificateBuilder()
        .subject_name(req.subject).issuer_name(ca_cert.subject).public_key(req.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - BACKDATE).not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),  # type: ignore[arg-type]
                       critical=False)
    )
    if key_usage.digital_signature or key_usage.key_encipherment:
        builder = builder.add_extension(key_usage, critical=True)
    try:  # SANs of the request are carried over, as upstream's signer does
        sans = req.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        builder = builder.add_extension(sans, critical=False)
    except x509.ExtensionNotFound:
        pass
    cert = builder.sign(ca_key, hashes.SHA256())  # type: ignore[arg-type]
    return cert.public_bytes(serialization.Encoding.PEM)


class CSRSigningController(Controller):
    name: ClassVar[str] = "csrsigning"

    def __init__(self, client: Client, informers: SharedInformers, recorder: EventRecorder | None = None, *,
                 ca: ClientCA) -> None:
        super().__init__(client, informers, recorder)
        self.kind = builtin("certificates.k8s.io", "CertificateSigningRequest")
        self.ca = ca
        self.csrs = self.informer(self.kind, primary=True)
        self.csrs.add_handlers(on_add=self.enqueue, on_update=lambda old, new: self.enqueue(new))

    async def reconcile(self, key: str) -> float | None:
        csr = self.csrs.get(key)
        if csr is None or not wants_signing(csr):
            return None
        new = {**csr, "status": dict(csr.get("status") or {})}
        try:
            pem = sign_request(csr, self.ca, dt.datetime.now(dt.UTC))
            new["status"]["certificate"] = base64.b64encode(pem).decode()
        except ValueError as e:
            now = rfc3339()
            new["status"]["conditions"] = [*(new["status"].get("conditions") or []), {
                "type": "Failed", "status": "True", "reason": "SignerValidationFailure", "message": str(e),
                "lastUpdateTime": now, "lastTransitionTime": now}]
        try:
            await self.client.update(self.kind, "", key, new, subresource="status")
        except ApiError as e:
            if e.code not in (404, 409):
                raise
            return 1.0 if e.code == 409 else None
        return None
