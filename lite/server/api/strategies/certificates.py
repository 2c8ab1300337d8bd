"""certificates.k8s.io/v1 CertificateSigningRequest: strategy (upstream `pkg/registry/certificates` and
`pkg/apis/certificates/validation`); the CertificateSubjectRestriction admission plugin that reads
`subject_organizations` is `lite.server.admission.certsubjectrestriction`.

- Create: status is cleared; spec.username/uid/groups/extra come from the requesting user (never the body)
  when there is one (HTTP requests); in-process callers keep what they wrote.
- Update of the object: spec and status stay as stored (only metadata changes).
- `status`: may set status.certificate once (PEM CERTIFICATE blocks) and add conditions other than
  Approved/Denied; `approval`: may change only status.conditions (Approved/Denied, mutually exclusive).
  Conditions of type Approved/Denied/Failed are never removed. Timestamps are filled as upstream does.
- Validation: the request is a PEM `CERTIFICATE REQUEST` whose signature verifies; usages present, known,
  unique; signerName `domain/path`, not `kubernetes.io/legacy-unknown`; expirationSeconds >= 600.

Pure apart from reading the request's user (a ContextVar); `cryptography` is imported only to parse.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

from lite import errors
from lite.errors import Cause, field_duplicate, field_forbidden, field_invalid, field_not_supported, field_required
from lite.objects import deep_copy, rfc3339
from lite.server.api.strategies.base import Obj, Strategy
from lite.server.requestuser import current_user
from lite.validation import is_dns1123_label, is_dns1123_subdomain

GROUP = "certificates.k8s.io"
KIND = "CertificateSigningRequest"
API_CLIENT_SIGNER = "kubernetes.io/kube-apiserver-client"
LEGACY_SIGNER = "kubernetes.io/legacy-unknown"
VALID_USAGES = sorted([
    "signing", "digital signature", "content commitment", "key encipherment", "key agreement",
    "data encipherment", "cert sign", "crl sign", "encipher only", "decipher only", "any", "server auth",
    "client auth", "code signing", "email protection", "s/mime", "ipsec end system", "ipsec tunnel",
    "ipsec user", "timestamping", "ocsp signing", "microsoft sgc", "netscape sgc"])
_TRUE_ONLY = ("Approved", "Denied", "Failed")
_STATUSES = ["False", "True", "Unknown"]
_SIGNER_MAX = 253 + 253 + 63 + 1 + 1
_MIN_SECONDS = 600
_EXCLUSIVE = "Approved and Denied conditions are mutually exclusive"


def decode_bytes(value: Any, path: str) -> bytes:
    """A JSON `[]byte` field: base64 text, as Go's decoder reads it (400 when it is not)."""
    if value is None:
        return b""
    if not isinstance(value, str):
        raise errors.bad_request(f"{KIND} in version \"v1\" cannot be handled as a {KIND}: {path}: "
                                 f"expected a base64 string")
    try:
        return base64.b64decode(value.encode(), validate=True)
    except (binascii.Error, ValueError):
        raise errors.bad_request(f"{KIND} in version \"v1\" cannot be handled as a {KIND}: {path}: "
                                 f"illegal base64 data") from None


def parse_csr(pem: bytes) -> Any:
    """The x509 CertificateSigningRequest of a PEM block, checked; raises ValueError with upstream's text."""
    from cryptography import x509

    text = pem.decode("latin-1")
    begin = text.find("-----BEGIN ")
    if begin < 0 or "-----BEGIN CERTIFICATE REQUEST-----" not in text[begin:begin + 40]:
        raise ValueError("PEM block type must be CERTIFICATE REQUEST")
    try:
        csr = x509.load_pem_x509_csr(pem)
    except ValueError as e:
        raise ValueError(f"asn1: structure error: {e}") from None
    if not csr.is_signature_valid:
        raise ValueError("x509: signature verification failure")
    return csr


def _spec(obj: Obj) -> dict[str, Any]:
    spec = obj.get("spec")
    return spec if isinstance(spec, dict) else {}


def _conditions(obj: Obj) -> list[Any]:
    status = obj.get("status")
    conds = status.get("conditions") if isinstance(status, dict) else None
    return conds if isinstance(conds, list) else []


# ---- create / update preparation -------------------------------------------------------------------

def prepare_create(obj: Obj) -> None:
    obj.pop("status", None)
    spec = obj.get("spec")
    user = current_user()
    if user is None or not isinstance(spec, dict):
        return
    for k in ("username", "uid", "groups", "extra"):
        spec.pop(k, None)
    spec["username"] = user.name
    if user.uid:
        spec["uid"] = user.uid
    if user.groups:
        spec["groups"] = list(user.groups)


def prepare_update(new: Obj, old: Obj) -> None:
    if "spec" in old:
        new["spec"] = deep_copy(old["spec"])
    else:
        new.pop("spec", None)


def populate_condition_times(new: Obj, old: Obj, now: str) -> None:
    old_conds = [c for c in _conditions(old) if isinstance(c, dict)]
    for c in _conditions(new):
        if not isinstance(c, dict):
            continue
        if not c.get("lastUpdateTime"):
            c["lastUpdateTime"] = now
        if not c.get("lastTransitionTime"):
            prev = next((o for o in old_conds if o.get("type") == c.get("type")
                         and o.get("status") == c.get("status") and o.get("lastTransitionTime")), None)
            c["lastTransitionTime"] = prev["lastTransitionTime"] if prev else now


def prepare_subresource(subresource: str, new: Obj, old: Obj) -> None:
    prepare_update(new, old)
    if subresource == "approval":
        conds = (new.get("status") or {}).get("conditions") if isinstance(new.get("status"), dict) else None
        status = deep_copy(old.get("status") or {})
        if conds is None:
            status.pop("conditions", None)
        else:
            status["conditions"] = conds
        new["status"] = status
    if isinstance(new.get("status"), dict):
        populate_condition_times(new, old, rfc3339())


# ---- validation ------------------------------------------------------------------------------------

def csr_name(name: str, prefix: bool) -> list[str]:
    """Upstream ValidateCertificateRequestName accepts any name; only the path-segment rules apply."""
    if not prefix and name in (".", ".."):
        return [f"may not be '{name}'"]
    return [f"may not contain '{c}'" for c in "/%" if c in name]


def validate_signer_name(name: Any, path: str = "spec.signerName") -> list[Cause]:
    if not name:
        return [field_required(path, "signerName must be provided")]
    if not isinstance(name, str):
        return [field_invalid(path, name, "must be a string")]
    segments = name.split("/")
    if len(segments) != 2:
        return [field_invalid(path, name, "must be a fully qualified domain and path of the form "
                                          "'example.com/signer-name'")]
    causes: list[Cause] = []
    domain, rest = segments
    if len(domain) > 253:
        causes.append(errors.field_too_long(path, domain, 253))
    labels = domain.split(".")
    for lbl in labels:
        errs = is_dns1123_label(lbl)
        if errs:
            causes += [field_invalid(path, domain, f'validating label "{lbl}": {e}') for e in errs]
            break
    if len(labels) < 2:
        causes.append(field_invalid(path, domain, "should be a domain with at least two segments separated by dots"))
    for lbl in rest.split("."):
        errs = is_dns1123_subdomain(lbl)
        if errs:
            causes += [field_invalid(path, rest, f'validating label "{lbl}": {e}') for e in errs]
            break
    if len(name) > _SIGNER_MAX:
        causes.append(errors.field_too_long(path, name, _SIGNER_MAX))
    return causes


def _validate_spec(spec: dict[str, Any]) -> list[Cause]:
    causes: list[Cause] = []
    try:
        parse_csr(decode_bytes(spec.get("request"), "spec.request"))
    except ValueError as e:
        causes.append(field_invalid("spec.request", "<request data>", str(e)))
    usages = spec.get("usages")
    if not isinstance(usages, list) or not usages:
        causes.append(field_required("spec.usages", "usages must be provided"))
        usages = []
    seen: set[str] = set()
    for i, u in enumerate(usages):
        if u not in VALID_USAGES:
            causes.append(field_not_supported(f"spec.usages[{i}]", u, VALID_USAGES))
        elif u in seen:
            causes.append(field_duplicate(f"spec.usages[{i}]", u))
        else:
            seen.add(u)
    signer = spec.get("signerName")
    if signer == LEGACY_SIGNER:
        causes.append(field_invalid("spec.signerName", signer,
                                    "the legacy signerName is not allowed via this API version"))
    else:
        causes += validate_signer_name(signer)
    seconds = spec.get("expirationSeconds")
    if seconds is not None and (not isinstance(seconds, int) or isinstance(seconds, bool) or seconds < _MIN_SECONDS):
        causes.append(field_invalid("spec.expirationSeconds", seconds,
                                    "may not specify a duration less than 600 seconds (10 minutes)"))
    return causes


def _validate_conditions(obj: Obj) -> list[Cause]:
    causes: list[Cause] = []
    seen: set[str] = set()
    approved = denied = False
    for i, c in enumerate(_conditions(obj)):
        path = f"status.conditions[{i}]"
        if not isinstance(c, dict):
            causes.append(field_invalid(path, c, "must be an object"))
            continue
        ctype, status = c.get("type") or "", c.get("status") or ""
        if not ctype:
            causes.append(field_required(f"{path}.type", ""))
        allowed = ["True"] if ctype in _TRUE_ONLY else _STATUSES
        if not status:
            causes.append(field_required(f"{path}.status", ""))
        elif status not in allowed:
            causes.append(field_not_supported(f"{path}.status", status, allowed))
        if ctype == "Approved":
            approved = True
            if denied:
                causes.append(field_invalid(f"{path}.type", ctype, _EXCLUSIVE))
        elif ctype == "Denied":
            denied = True
            if approved:
                causes.append(field_invalid(f"{path}.type", ctype, _EXCLUSIVE))
        if ctype in seen:
            causes.append(field_duplicate(f"{path}.type", ctype))
        seen.add(str(ctype))
    return causes


def validate_certificate(pem: bytes) -> str | None:
    """Upstream validateCertificate: None if `pem` is empty or only CERTIFICATE blocks, else the reason."""
    from cryptography import x509

    if not pem:
        return None
    text = pem.decode("latin-1")
    blocks = 0
    pos = 0
    while (start := text.find("-----BEGIN ", pos)) >= 0:
        head_end = text.find("-----", start + 11)
        block_type = text[start + 11:head_end] if head_end > 0 else ""
        end_marker = f"-----END {block_type}-----"
        end = text.find(end_marker, head_end)
        if head_end < 0 or end < 0:
            break
        if block_type != "CERTIFICATE":
            return f'only CERTIFICATE PEM blocks are allowed, found "{block_type}"'
        body = text[head_end + 5:end]
        if ":" in body:
            return "no PEM block headers are permitted"
        try:
            x509.load_pem_x509_certificate(text[start:end + len(end_marker)].encode("latin-1"))
        except ValueError as e:
            return f"x509: malformed certificate: {e}"
        blocks += 1
        pos = end + len(end_marker)
    return None if blocks else "must contain at least one CERTIFICATE PEM block"


def validate(obj: Obj) -> list[Cause]:
    causes = _validate_spec(_spec(obj)) + _validate_conditions(obj)
    status = obj.get("status")
    if isinstance(status, dict) and status.get("certificate") is not None:
        reason = validate_certificate(decode_bytes(status.get("certificate"), "status.certificate"))
        if reason:
            causes.append(field_invalid("status.certificate", "<certificate data>", reason))
    return causes


def _of_type(obj: Obj, ctype: str) -> list[Any]:
    return [c for c in _conditions(obj) if isinstance(c, dict) and c.get("type") == ctype]


def _validate_change(new: Obj, old: Obj, subresource: str) -> list[Cause]:
    causes: list[Cause] = []
    for t in _TRUE_ONLY:
        if len(_of_type(new, t)) < len(_of_type(old, t)):
            causes.append(field_forbidden("status.conditions", f'updates may not remove a condition of type "{t}"'))
    if subresource != "approval":
        for t in ("Approved", "Denied"):
            n, o = _of_type(new, t), _of_type(old, t)
            if len(n) > len(o):
                causes.append(field_forbidden("status.conditions", f'updates may not add a condition of type "{t}"'))
            elif len(n) == len(o) and n != o:
                causes.append(field_forbidden("status.conditions",
                                              f'updates may not modify a condition of type "{t}"'))
    new_cert = (new.get("status") or {}).get("certificate") if isinstance(new.get("status"), dict) else None
    old_cert = (old.get("status") or {}).get("certificate") if isinstance(old.get("status"), dict) else None
    if (new_cert or "") != (old_cert or ""):
        if subresource != "status":
            causes.append(field_forbidden("status.certificate", "updates may not set certificate content"))
        elif old_cert:
            causes.append(field_forbidden("status.certificate", "updates may not modify existing certificate content"))
    return causes


def validate_update(new: Obj, old: Obj) -> list[Cause]:
    return _validate_change(new, old, "")


def validate_subresource(subresource: str, new: Obj, old: Obj) -> list[Cause]:
    return _validate_change(new, old, subresource)


CSR = Strategy(prepare_create=prepare_create, prepare_update=prepare_update, validate=validate,
               validate_update=validate_update, prepare_subresource=prepare_subresource,
               validate_subresource=validate_subresource, name_fn=csr_name)


# ---- admission -------------------------------------------------------------------------------------

def subject_organizations(obj: Obj) -> list[str]:
    """The O= values of the request's subject (empty when the request does not parse)."""
    from cryptography.x509.oid import NameOID

    try:
        csr = parse_csr(decode_bytes(_spec(obj).get("request"), "spec.request"))
    except (ValueError, errors.ApiError):
        return []
    return [str(a.value) for a in csr.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)]
