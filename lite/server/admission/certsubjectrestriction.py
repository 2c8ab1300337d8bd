"""Upstream's CertificateSubjectRestriction admission plugin: the API client signer
(`kubernetes.io/kube-apiserver-client`) never signs a certificate for the `system:masters` group.

Invariants: validating only (never mutates); reads nothing but the request's CertificateSigningRequest.
"""

from __future__ import annotations

from lite import errors
from lite.server.api.strategies.base import Admission
from lite.server.api.strategies.certificates import API_CLIENT_SIGNER, GROUP, KIND, subject_organizations


async def subject_restriction(review: Admission) -> None:
    """Upstream's CertificateSubjectRestriction admission: no system:masters certificates from the API
    client signer (403 Forbidden at create)."""
    if review.operation != "CREATE" or review.kind.gk != f"{KIND}.{GROUP}" or review.obj is None:
        return
    if (review.obj.get("spec") or {}).get("signerName") != API_CLIENT_SIGNER:
        return
    if "system:masters" in subject_organizations(review.obj):
        raise errors.forbidden(f'certificatesigningrequests.{GROUP} "{review.name}" is forbidden: use of '
                               f"{API_CLIENT_SIGNER} signer with system:masters group is not allowed",
                               "certificatesigningrequests", GROUP, review.name)
