"""The CSR signer and cleaner controllers over a real registry: an approved kube-apiserver-client request
gets a certificate from the client CA, a bad one a Failed condition; finished requests are cleaned up."""

from __future__ import annotations

import base64
import datetime as dt
from typing import Any

import pytest
from conftest import Kit
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from lite.server.controllers.csrcleaner import CSRCleanerController, expired
from lite.server.controllers.csrsigning import ClientCA, CSRSigningController
from lite.server.controllers.runtime import builtin
from tests.helpers.csr import csr_body

CSR = builtin("certificates.k8s.io", "CertificateSigningRequest")
NOW = dt.datetime(2026, 6, 1, 12, 0, tzinfo=dt.UTC)


def ca() -> ClientCA:
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "ca")])
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(1).not_valid_before(now - dt.timedelta(days=1)).not_valid_after(now + dt.timedelta(days=9))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True).sign(key, hashes.SHA256()))
    return ClientCA(cert.public_bytes(serialization.Encoding.PEM), key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))


async def approve(kit: Kit, name: str) -> None:
    obj = await kit.api.get(CSR, "", name)
    obj["status"] = {"conditions": [{"type": "Approved", "status": "True", "reason": "Test"}]}
    await kit.api.update(CSR, "", name, obj, subresource="approval")


async def test_signer_issues_and_fails(kit: Kit) -> None:
    authority = ca()
    await kit.api.create(CSR, "", csr_body("good", cn="carol"))
    await kit.api.create(CSR, "", csr_body("bad", usages=["server auth", "client auth"]))
    await kit.api.create(CSR, "", csr_body("pending"))
    await approve(kit, "good")
    await approve(kit, "bad")
    c = CSRSigningController(kit.api, kit.informers, ca=authority)
    await kit.settle(c)
    for name in ("good", "bad", "pending"):
        await c.reconcile(name)
    good = await kit.api.get(CSR, "", "good")
    cert = x509.load_pem_x509_certificate(base64.b64decode(good["status"]["certificate"]))
    cert.verify_directly_issued_by(x509.load_pem_x509_certificate(authority.cert_pem))
    bad = await kit.api.get(CSR, "", "bad")
    failed = [c for c in bad["status"]["conditions"] if c["type"] == "Failed"]
    assert failed[0]["reason"] == "SignerValidationFailure" and "certificate" not in bad["status"]
    assert "status" not in await kit.api.get(CSR, "", "pending")


def _at(delta: dt.timedelta) -> str:
    return (NOW - delta).strftime("%Y-%m-%dT%H:%M:%SZ")


def _csr(created: dt.timedelta, cond: str = "", since: dt.timedelta = dt.timedelta(0),
         cert: bytes = b"") -> dict[str, Any]:
    obj: dict[str, Any] = {"metadata": {"name": "c", "creationTimestamp": _at(created)}}
    status: dict[str, Any] = {}
    if cond:
        status["conditions"] = [{"type": cond, "status": "True", "lastUpdateTime": _at(since)}]
    if cert:
        status["certificate"] = base64.b64encode(cert).decode()
    if status:
        obj["status"] = status
    return obj


def _cert(not_after: dt.datetime) -> bytes:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "x")])
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(1).not_valid_before(not_after - dt.timedelta(days=30)).not_valid_after(not_after)
            .sign(key, hashes.SHA256()))
    return cert.public_bytes(serialization.Encoding.PEM)


H = dt.timedelta(hours=1)
CASES = [
    ("fresh pending", _csr(H), False),
    ("old pending", _csr(25 * H), True),
    ("approved not issued", _csr(30 * H, "Approved", 2 * H), False),
    ("issued recently", _csr(2 * H, "Approved", H / 2, _cert(NOW + 100 * H)), False),
    ("issued an hour ago", _csr(2 * H, "Approved", 2 * H, _cert(NOW + 100 * H)), True),
    ("issued, certificate expired", _csr(2 * H, "Approved", H / 2, _cert(NOW - H)), True),
    ("denied recently", _csr(2 * H, "Denied", H / 2), False),
    ("denied long ago", _csr(3 * H, "Denied", 2 * H), True),
    ("failed long ago", _csr(3 * H, "Failed", 2 * H), True),
]


@pytest.mark.parametrize(("case", "csr", "want"), CASES, ids=[c[0] for c in CASES])
def test_cleaner_decision(case: str, csr: dict[str, Any], want: bool) -> None:
    assert expired(csr, NOW) is want


async def test_cleaner_deletes_only_finished_requests(kit: Kit) -> None:
    await kit.api.create(CSR, "", csr_body("keep"))
    obj = await kit.api.create(CSR, "", csr_body("denied"))
    obj["status"] = {"conditions": [{"type": "Denied", "status": "True", "lastUpdateTime": "2020-01-01T00:00:00Z"}]}
    await kit.api.update(CSR, "", "denied", obj, subresource="approval")
    c = CSRCleanerController(kit.api, kit.informers, period=7)
    await kit.settle(c)
    assert await c.reconcile("csrcleaner") == 7
    names = [i["metadata"]["name"] for i in (await kit.api.list(CSR))["items"]]
    assert names == ["keep"]
