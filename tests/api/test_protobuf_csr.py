"""The protobuf body of `kubectl certificate approve` (a PUT of the whole CertificateSigningRequest to
`/approval`, typed client): its fields decode to the JSON a JSON client would send."""

from __future__ import annotations

import base64

from lite.server.api.protobuf import decode
from tests.api.test_protobuf import envelope, fld


def test_csr_approval_body_decodes() -> None:
    pem = b"-----BEGIN CERTIFICATE REQUEST-----\nMIIB\n-----END CERTIFICATE REQUEST-----\n"
    meta = fld(1, "bob") + fld(6, "42")
    spec = (fld(1, pem) + fld(2, "admin") + fld(4, "system:masters") + fld(4, "system:authenticated")
            + fld(5, "client auth") + fld(7, "kubernetes.io/kube-apiserver-client") + fld(8, 3600))
    time = fld(1, 1767225600)  # 2026-01-01T00:00:00Z
    cond = fld(1, "Approved") + fld(6, "True") + fld(2, "KubectlApprove") + fld(3, "by kubectl") + fld(4, time)
    raw = fld(1, meta) + fld(2, spec) + fld(3, fld(1, cond))
    got = decode(envelope("certificates.k8s.io/v1", "CertificateSigningRequest", raw))
    assert got["apiVersion"] == "certificates.k8s.io/v1" and got["kind"] == "CertificateSigningRequest"
    assert got["metadata"]["name"] == "bob" and got["metadata"]["resourceVersion"] == "42"
    assert got["spec"] == {"request": base64.b64encode(pem).decode(), "username": "admin",
                           "groups": ["system:masters", "system:authenticated"], "usages": ["client auth"],
                           "signerName": "kubernetes.io/kube-apiserver-client", "expirationSeconds": 3600}
    assert got["status"] == {"conditions": [{"type": "Approved", "status": "True", "reason": "KubectlApprove",
                                             "message": "by kubectl", "lastUpdateTime": "2026-01-01T00:00:00Z"}]}
