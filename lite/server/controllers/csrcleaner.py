"""CSR cleaner (upstream pkg/controller/certificates/cleaner): one pass at start and then every `period`
(an hour) deletes the CertificateSigningRequests that are done with:

    issued, certificate expired          → deleted (whatever its age)
    issued (Approved + certificate)      → deleted 1 h after approval
    denied or failed                     → deleted 1 h after that condition
    pending (no Approved/Denied)         → deleted 24 h after creation

Invariants: `expired(csr, now)` is the pure decision; the only work-queue key is "csrcleaner"; NotFound on
delete is success.
"""

from __future__ import annotations

import base64
import datetime as dt
from typing import Any, ClassVar

from lite.client import Client
from lite.errors import ApiError
from lite.events import EventRecorder
from lite.informer import SharedInformers
from lite.objects import name_of
from lite.server.controllers.runtime import Controller, builtin

Obj = dict[str, Any]
KEY = "csrcleaner"
PERIOD = 3600.0
PENDING = dt.timedelta(hours=24)
DONE = dt.timedelta(hours=1)


def _time(value: Any) -> dt.datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def _condition(csr: Obj, ctype: str) -> Obj | None:
    return next((c for c in (csr.get("status") or {}).get("conditions") or []
                 if isinstance(c, dict) and c.get("type") == ctype), None)


def _cert_expired(csr: Obj, now: dt.datetime) -> bool:
    raw = (csr.get("status") or {}).get("certificate")
    if not raw:
        return False
    from cryptography import x509

    try:
        cert = x509.load_pem_x509_certificate(base64.b64decode(raw))
    except ValueError:
        return False
    return cert.not_valid_after_utc < now


def expired(csr: Obj, now: dt.datetime) -> bool:
    """Whether the cleaner deletes `csr` at `now`."""
    if _cert_expired(csr, now):
        return True
    for ctype in ("Denied", "Failed"):
        cond = _condition(csr, ctype)
        if cond is not None:
            at = _time(cond.get("lastUpdateTime")) or _time(cond.get("lastTransitionTime"))
            return at is not None and at + DONE < now
    approved = _condition(csr, "Approved")
    if approved is not None:
        at = _time(approved.get("lastUpdateTime")) or _time(approved.get("lastTransitionTime"))
        issued = bool((csr.get("status") or {}).get("certificate"))
        return issued and at is not None and at + DONE < now
    created = _time((csr.get("metadata") or {}).get("creationTimestamp"))
    return created is not None and created + PENDING < now


class CSRCleanerController(Controller):
    name: ClassVar[str] = "csrcleaner"

    def __init__(self, client: Client, informers: SharedInformers, recorder: EventRecorder | None = None, *,
                 period: float = PERIOD) -> None:
        super().__init__(client, informers, recorder)
        self.kind = builtin("certificates.k8s.io", "CertificateSigningRequest")
        self.csrs = self.informer(self.kind)
        self.period = period

    def initial_keys(self) -> list[str]:
        return [KEY]

    async def reconcile(self, key: str) -> float | None:
        now = dt.datetime.now(dt.UTC)
        for csr in self.csrs.list():
            if expired(csr, now):
                try:
                    await self.client.delete(self.kind, "", name_of(csr))
                except ApiError as e:
                    if e.code != 404:
                        raise
        return self.period
