"""CertificateSigningRequest through the real registry: requester from the request's user, immutable spec,
`approval` and `status` rules as upstream validates them, the subject-restriction admission, and the
kube-apiserver-client signer (pure signing checked against the CA)."""

from __future__ import annotations

import base64
import datetime as dt
from collections.abc import Iterator
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from lite.errors import ApiError
from lite.kinds import Kind
from lite.server.admission.certsubjectrestriction import subject_restriction
from lite.server.api.resources import Resources
from lite.server.api.strategies.base import Admission
from lite.server.controllers.csrsigning import ClientCA, sign_request, wants_signing
from lite.server.requestuser import CURRENT_USER, user_info
from tests.helpers.csr import csr_body

CSR = "certificatesigningrequests"


def kind(res: Resources) -> Kind:
    k = res.kinds.by_resource("certificates.k8s.io", "v1", CSR)
    assert k is not None
    return k


@pytest.fixture
def as_alice() -> Iterator[None]:
    token = CURRENT_USER.set(user_info("alice"))
    yield
    CURRENT_USER.reset(token)


async def approve(res: Resources, name: str, ctype: str = "Approved") -> dict[str, Any]:
    obj = await res.get(kind(res), "", name)
    obj.setdefault("status", {}).setdefault("conditions", []).append(
        {"type": ctype, "status": "True", "reason": "Test", "message": "by test"})
    return await res.update(kind(res), "", name, obj, subresource="approval")


async def test_requester_comes_from_the_request_user_not_the_body(res: Resources, as_alice: None) -> None:
    body = csr_body("req")
    body["spec"].update(username="mallory", groups=["system:masters"], uid="x")  # type: ignore[union-attr]
    out = await res.create(kind(res), "", body)
    assert out["spec"]["username"] == "alice"
    assert out["spec"]["groups"] == ["system:authenticated"]
    assert "uid" not in out["spec"] and "status" not in out


async def test_spec_is_kept_on_update_and_status_ignored(res: Resources) -> None:
    out = await res.create(kind(res), "", csr_body("imm"))
    out["spec"]["usages"] = ["digital signature", "client auth"]
    out["status"] = {"conditions": [{"type": "Approved", "status": "True"}]}
    out["metadata"]["labels"] = {"a": "b"}
    got = await res.update(kind(res), "", "imm", out)
    assert got["spec"]["usages"] == ["client auth"]
    assert "status" not in got and got["metadata"]["labels"] == {"a": "b"}


async def test_approval_sets_condition_times_and_keeps_spec(res: Resources) -> None:
    await res.create(kind(res), "", csr_body("ap"))
    got = await approve(res, "ap")
    cond = got["status"]["conditions"][0]
    assert cond["type"] == "Approved" and cond["lastUpdateTime"] and cond["lastTransitionTime"]
    assert wants_signing(got)


@pytest.mark.parametrize(("first", "second"), [("Approved", "Denied"), ("Denied", "Approved")])
async def test_approved_and_denied_are_exclusive(res: Resources, first: str, second: str) -> None:
    await res.create(kind(res), "", csr_body("ex"))
    await approve(res, "ex", first)
    with pytest.raises(ApiError) as e:
        await approve(res, "ex", second)
    assert e.value.code == 422
    assert "Approved and Denied conditions are mutually exclusive" in e.value.status()["message"]


async def test_approval_condition_cannot_be_removed(res: Resources) -> None:
    await res.create(kind(res), "", csr_body("rm"))
    got = await approve(res, "rm")
    got["status"]["conditions"] = []
    with pytest.raises(ApiError) as e:
        await res.update(kind(res), "", "rm", got, subresource="approval")
    assert e.value.code == 422 and 'updates may not remove a condition of type "Approved"' in str(e.value.status())


async def test_status_may_not_approve(res: Resources) -> None:
    out = await res.create(kind(res), "", csr_body("st"))
    out["status"] = {"conditions": [{"type": "Approved", "status": "True"}]}
    with pytest.raises(ApiError) as e:
        await res.update(kind(res), "", "st", out, subresource="status")
    assert e.value.code == 422 and 'updates may not add a condition of type "Approved"' in str(e.value.status())


async def test_certificate_only_through_status_and_only_once(res: Resources, tmp_path: Any) -> None:
    ca = _ca()
    await res.create(kind(res), "", csr_body("cert"))
    got = await approve(res, "cert")
    pem = sign_request(got, ca, dt.datetime.now(dt.UTC))
    got["status"]["certificate"] = base64.b64encode(pem).decode()
    ignored = await res.update(kind(res), "", "cert", got, subresource="approval")  # approval: conditions only
    assert "certificate" not in ignored["status"]
    issued = await res.update(kind(res), "", "cert", got, subresource="status")
    assert issued["status"]["certificate"]
    issued["status"]["certificate"] = base64.b64encode(sign_request(got, ca, dt.datetime.now(dt.UTC))).decode()
    with pytest.raises(ApiError) as e:
        await res.update(kind(res), "", "cert", issued, subresource="status")
    assert "updates may not modify existing certificate content" in str(e.value.status())


async def test_status_certificate_must_be_pem_certificates(res: Resources) -> None:
    await res.create(kind(res), "", csr_body("bad"))
    got = await approve(res, "bad")
    got["status"]["certificate"] = base64.b64encode(b"-----BEGIN PRIVATE KEY-----\nAA==\n-----END PRIVATE KEY-----\n"
                                                    ).decode()
    with pytest.raises(ApiError) as e:
        await res.update(kind(res), "", "bad", got, subresource="status")
    assert e.value.code == 422
    assert 'only CERTIFICATE PEM blocks are allowed, found "PRIVATE KEY"' in str(e.value.status())


async def test_system_masters_refused_for_the_client_signer() -> None:
    from lite.kinds import BUILTIN_KINDS
    k = next(k for k in BUILTIN_KINDS if k.plural == CSR)
    body = csr_body("root", orgs=("system:masters",))
    with pytest.raises(ApiError) as e:
        await subject_restriction(Admission("CREATE", k, "", "root", body, None))
    assert e.value.code == 403
    assert "use of kubernetes.io/kube-apiserver-client signer with system:masters group is not allowed" \
        in e.value.status()["message"]
    other = csr_body("other", orgs=("system:masters",), signer="example.com/custom")
    await subject_restriction(Admission("CREATE", k, "", "other", other, None))


def _ca(now: dt.datetime | None = None) -> ClientCA:
    from cryptography.hazmat.primitives import hashes, serialization

    key = ec.generate_private_key(ec.SECP256R1())
    now = now or dt.datetime.now(dt.UTC)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "test-client-ca")])
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(1).not_valid_before(now - dt.timedelta(days=1))
            .not_valid_after(now + dt.timedelta(days=30))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    return ClientCA(cert.public_bytes(serialization.Encoding.PEM),
                    key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                      serialization.NoEncryption()))


def _approved(body: dict[str, Any]) -> dict[str, Any]:
    return {**body, "status": {"conditions": [{"type": "Approved", "status": "True"}]}}


def test_signed_certificate_carries_subject_usage_and_expiry() -> None:
    now = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    ca = _ca(now)
    body = _approved(csr_body("s", cn="bob", orgs=("dev", "ops"), usages=["digital signature", "client auth"],
                              seconds=3600))
    cert = x509.load_pem_x509_certificate(sign_request(body, ca, now))
    assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "bob"
    assert [a.value for a in cert.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)] == ["dev", "ops"]
    assert cert.not_valid_after_utc == now + dt.timedelta(hours=1)
    assert cert.not_valid_before_utc == now - dt.timedelta(minutes=5)
    eku = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(eku) == [ExtendedKeyUsageOID.CLIENT_AUTH]
    assert cert.extensions.get_extension_for_class(x509.KeyUsage).value.digital_signature
    ca_cert = x509.load_pem_x509_certificate(ca.cert_pem)
    cert.verify_directly_issued_by(ca_cert)


def test_long_lived_certificates_are_not_extended_by_the_backdate() -> None:
    now = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    cert = x509.load_pem_x509_certificate(sign_request(_approved(csr_body("l", seconds=86400)), _ca(now), now))
    assert cert.not_valid_after_utc - cert.not_valid_before_utc == dt.timedelta(days=1)


def test_expired_ca_refuses() -> None:
    now = dt.datetime.now(dt.UTC) + dt.timedelta(days=60)
    with pytest.raises(ValueError, match="refusing to sign a certificate that expired in the past"):
        sign_request(_approved(csr_body("e")), _ca(), now)


def test_expiry_is_capped_by_the_ca() -> None:
    ca = _ca()
    now = dt.datetime.now(dt.UTC)
    cert = x509.load_pem_x509_certificate(sign_request(_approved(csr_body("c", seconds=10**8)), ca, now))
    assert cert.not_valid_after_utc == x509.load_pem_x509_certificate(ca.cert_pem).not_valid_after_utc


@pytest.mark.parametrize(("usages", "message"), [
    (["server auth", "client auth"], "invalid usage for client certificate: server auth"),
    (["digital signature"], "missing required usage for client certificate: client auth"),
])
def test_bad_client_usages_fail(usages: list[str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        sign_request(_approved(csr_body("u", usages=usages)), _ca(), dt.datetime.now(dt.UTC))


@pytest.mark.parametrize(("conds", "signer", "wanted"), [
    ([{"type": "Approved", "status": "True"}], "kubernetes.io/kube-apiserver-client", True),
    ([], "kubernetes.io/kube-apiserver-client", False),
    ([{"type": "Denied", "status": "True"}], "kubernetes.io/kube-apiserver-client", False),
    ([{"type": "Approved", "status": "True"}, {"type": "Failed", "status": "True"}],
     "kubernetes.io/kube-apiserver-client", False),
    ([{"type": "Approved", "status": "True"}], "kubernetes.io/kubelet-serving", False),
    ([{"type": "Approved", "status": "True"}], "example.com/other", False),
])
def test_which_requests_the_signer_takes(conds: list[Any], signer: str, wanted: bool) -> None:
    body = csr_body("w", signer=signer)
    body["status"] = {"conditions": conds}
    assert wants_signing(body) is wanted


async def test_list_by_signer_name(res: Resources) -> None:
    await res.create(kind(res), "", csr_body("a1"))
    await res.create(kind(res), "", csr_body("a2", signer="example.com/other"))
    got = await res.list(kind(res), field_selector="spec.signerName=example.com/other")
    assert [i["metadata"]["name"] for i in got["items"]] == ["a2"]


def test_discovery_lists_approval_as_writable() -> None:
    from lite.kinds import KindRegistry
    from lite.server.api.discovery import Discovery

    doc = Discovery(KindRegistry()).resource_list("certificates.k8s.io/v1")
    assert doc is not None
    approval = next(r for r in doc["resources"] if r["name"] == "certificatesigningrequests/approval")
    assert approval["verbs"] == ["get", "patch", "update"] and approval["kind"] == "CertificateSigningRequest"
