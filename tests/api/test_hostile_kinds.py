"""Hostile input for the kinds of issue 7 (CertificateSigningRequest, RuntimeClass, CSIStorageCapacity,
APIService, flowcontrol), over HTTP through the real stack: every case gets upstream's code and reason, no
5xx, and a refused write leaves nothing behind that a GET would return."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from lite.kinds import KindRegistry
from lite.server.admission.certsubjectrestriction import subject_restriction
from lite.server.admission.runtimeclass import RuntimeClassAdmission
from lite.server.aggregator import Aggregator
from lite.server.api.http import build_api_app
from lite.server.api.resources import Resources
from lite.server.api.strategies import default_strategies
from lite.server.bootstrap import ensure_bootstrap_objects
from lite.server.store import Store
from tests.helpers.csr import csr_body, make_csr

HEADERS = {"Authorization": "Bearer t0ken", "Content-Type": "application/json"}
CSRS = "/apis/certificates.k8s.io/v1/certificatesigningrequests"
RCS = "/apis/node.k8s.io/v1/runtimeclasses"
CAPS = "/apis/storage.k8s.io/v1/namespaces/default/csistoragecapacities"
APISVCS = "/apis/apiregistration.k8s.io/v1/apiservices"
FLOW = "/apis/flowcontrol.apiserver.k8s.io/v1"


def _auth(request: web.Request) -> str | None:
    return "admin" if request.headers.get("Authorization") == HEADERS["Authorization"] else None


@pytest.fixture
async def client(tmp_path: Path) -> AsyncIterator[TestClient[web.Request, web.Application]]:
    store = await Store.open(str(tmp_path / "lite.db"))
    try:
        kinds = KindRegistry()
        strategies = default_strategies()
        resources = Resources(store, kinds, strategies)
        strategies.add_admission(subject_restriction)
        rc_kind = kinds.by_resource("node.k8s.io", "v1", "runtimeclasses")
        assert rc_kind is not None
        strategies.add_admission(RuntimeClassAdmission(resources, rc_kind).admit)
        await resources.start()
        await ensure_bootstrap_objects(resources, kinds)
        app = build_api_app(resources, kinds, _auth, aggregator=Aggregator(resources, kinds))
        async with TestClient(TestServer(app)) as c:
            yield c
    finally:
        await store.close()


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def csr(name: str = "h", **spec: Any) -> dict[str, Any]:
    body = csr_body(name)
    body["spec"].update(spec)  # type: ignore[union-attr]
    for k in [k for k, v in spec.items() if v is _DROP]:
        del body["spec"][k]  # type: ignore[union-attr]
    return body


_DROP = object()
_PEM, _ = make_csr("x")
_TAMPERED = _PEM.replace(_PEM.splitlines()[3][:8], b"AAAAAAAA")  # body bytes changed: signature no longer holds


def rc(name: str = "h", **extra: Any) -> dict[str, Any]:
    return {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": name}, "handler": "runc",
            **extra}


def cap(name: str = "h", **extra: Any) -> dict[str, Any]:
    obj = {"apiVersion": "storage.k8s.io/v1", "kind": "CSIStorageCapacity", "metadata": {"name": name},
           "storageClassName": "standard", "capacity": "10Gi", **extra}
    return {k: v for k, v in obj.items() if v is not _DROP}


def apisvc(name: str = "v1.h.example.com", **spec: Any) -> dict[str, Any]:
    base = {"group": "h.example.com", "version": "v1", "groupPriorityMinimum": 1000, "versionPriority": 15,
            "service": {"namespace": "default", "name": "ext", "port": 443}}
    base.update(spec)
    return {"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService", "metadata": {"name": name},
            "spec": {k: v for k, v in base.items() if v is not _DROP}}


def pod(name: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"containers": [{"name": "c", "image": "busybox"}], **spec}}


@dataclass
class Case:
    id: str
    method: str
    path: str
    body: Any
    code: int
    reason: str
    cause: str = ""  # the field a cause must name
    setup: list[tuple[str, str, Any]] = field(default_factory=list)
    gone: str = ""  # a path that must still answer 404 afterwards


def create(id: str, path: str, body: dict[str, Any], code: int, reason: str, fld: str = "") -> Case:
    return Case(id, "POST", path, body, code, reason, fld, gone=f"{path}/{body['metadata']['name']}")


BAD_PEM = b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
CASES: list[Case] = [
    # CertificateSigningRequest create
    create("csr-request-not-base64", CSRS, csr(request="%%%"), 400, "BadRequest"),
    create("csr-request-number", CSRS, csr(request=12), 400, "BadRequest"),
    create("csr-request-garbage", CSRS, csr(request=b64(b"hello")), 422, "Invalid", "spec.request"),
    create("csr-request-is-a-certificate", CSRS, csr(request=b64(BAD_PEM)), 422, "Invalid", "spec.request"),
    create("csr-request-bad-signature", CSRS, csr(request=b64(_TAMPERED)), 422, "Invalid", "spec.request"),
    create("csr-usages-missing", CSRS, csr(usages=_DROP), 422, "Invalid", "spec.usages"),
    create("csr-usages-empty", CSRS, csr(usages=[]), 422, "Invalid", "spec.usages"),
    create("csr-usage-unknown", CSRS, csr(usages=["fly"]), 422, "Invalid", "spec.usages[0]"),
    create("csr-usage-duplicate", CSRS, csr(usages=["client auth", "client auth"]), 422, "Invalid",
           "spec.usages[1]"),
    create("csr-signer-missing", CSRS, csr(signerName=_DROP), 422, "Invalid", "spec.signerName"),
    create("csr-signer-no-slash", CSRS, csr(signerName="example.com"), 422, "Invalid", "spec.signerName"),
    create("csr-signer-two-slashes", CSRS, csr(signerName="example.com/a/b"), 422, "Invalid", "spec.signerName"),
    create("csr-signer-legacy", CSRS, csr(signerName="kubernetes.io/legacy-unknown"), 422, "Invalid",
           "spec.signerName"),
    create("csr-signer-bad-domain", CSRS, csr(signerName="Example.com/x"), 422, "Invalid", "spec.signerName"),
    create("csr-signer-one-label", CSRS, csr(signerName="example/x"), 422, "Invalid", "spec.signerName"),
    create("csr-signer-too-long", CSRS, csr(signerName="example.com/" + "a." * 300 + "a"), 422, "Invalid",
           "spec.signerName"),
    create("csr-expiration-599", CSRS, csr(expirationSeconds=599), 422, "Invalid", "spec.expirationSeconds"),
    create("csr-expiration-zero", CSRS, csr(expirationSeconds=0), 422, "Invalid", "spec.expirationSeconds"),
    create("csr-expiration-negative", CSRS, csr(expirationSeconds=-1), 422, "Invalid", "spec.expirationSeconds"),
    create("csr-name-slash", CSRS, {**csr(), "metadata": {"name": "a%b"}}, 422, "Invalid", "metadata.name"),
    create("csr-system-masters", CSRS, csr_body("h", orgs=("system:masters",)), 403, "Forbidden"),
    # CertificateSigningRequest approval and status
    Case("csr-approval-missing-object", "PUT", f"{CSRS}/nope/approval", csr("nope"), 404, "NotFound"),
    Case("csr-approval-post", "POST", f"{CSRS}/h/approval", csr(), 405, "MethodNotAllowed",
         setup=[("POST", CSRS, csr())]),
    Case("csr-approval-both", "PUT", f"{CSRS}/h/approval",
         {**csr(), "status": {"conditions": [{"type": "Approved", "status": "True"},
                                             {"type": "Denied", "status": "True"}]}},
         422, "Invalid", "status.conditions[1].type", setup=[("POST", CSRS, csr())]),
    Case("csr-approval-false", "PUT", f"{CSRS}/h/approval",
         {**csr(), "status": {"conditions": [{"type": "Approved", "status": "False"}]}},
         422, "Invalid", "status.conditions[0].status", setup=[("POST", CSRS, csr())]),
    Case("csr-approval-no-type", "PUT", f"{CSRS}/h/approval",
         {**csr(), "status": {"conditions": [{"status": "True"}]}},
         422, "Invalid", "status.conditions[0].type", setup=[("POST", CSRS, csr())]),
    Case("csr-approval-duplicate", "PUT", f"{CSRS}/h/approval",
         {**csr(), "status": {"conditions": [{"type": "Approved", "status": "True"},
                                             {"type": "Approved", "status": "True"}]}},
         422, "Invalid", "status.conditions[1].type", setup=[("POST", CSRS, csr())]),
    Case("csr-status-approves", "PUT", f"{CSRS}/h/status",
         {**csr(), "status": {"conditions": [{"type": "Approved", "status": "True"}]}},
         422, "Invalid", "status.conditions", setup=[("POST", CSRS, csr())]),
    Case("csr-status-cert-not-base64", "PUT", f"{CSRS}/h/status", {**csr(), "status": {"certificate": "!!"}},
         400, "BadRequest", setup=[("POST", CSRS, csr())]),
    Case("csr-status-cert-garbage", "PUT", f"{CSRS}/h/status", {**csr(), "status": {"certificate": b64(BAD_PEM)}},
         422, "Invalid", "status.certificate", setup=[("POST", CSRS, csr())]),
    Case("csr-status-cert-no-pem", "PUT", f"{CSRS}/h/status", {**csr(), "status": {"certificate": b64(b"x")}},
         422, "Invalid", "status.certificate", setup=[("POST", CSRS, csr())]),
    create("csr-usages-not-known-case", CSRS, csr(usages=["Client Auth"]), 422, "Invalid", "spec.usages[0]"),
    create("csr-request-empty", CSRS, csr(request=""), 422, "Invalid", "spec.request"),
    create("csr-request-two-blocks-of-junk", CSRS,
           csr(request=b64(b"-----BEGIN CERTIFICATE REQUEST-----\nAAAA\n-----END CERTIFICATE REQUEST-----\n")),
           422, "Invalid", "spec.request"),
    create("csr-signer-empty-path", CSRS, csr(signerName="example.com/"), 422, "Invalid", "spec.signerName"),
    Case("csr-name-dot", "POST", CSRS, {**csr(), "metadata": {"name": "."}}, 422, "Invalid", "metadata.name"),
    Case("csr-approval-unknown-status", "PUT", f"{CSRS}/h/approval",
         {**csr(), "status": {"conditions": [{"type": "Custom", "status": "Maybe"}]}},
         422, "Invalid", "status.conditions[0].status", setup=[("POST", CSRS, csr())]),
    Case("csr-approval-wrong-name", "PUT", f"{CSRS}/h/approval", csr("other"), 400, "BadRequest",
         setup=[("POST", CSRS, csr())]),
    # RuntimeClass
    create("rc-name-upper", RCS, rc("Bad"), 422, "Invalid", "metadata.name"),
    # wrong JSON types and bad quantities fail upstream's typed decoding: 400, not 422 (issue 7 schema part)
    create("rc-overhead-not-a-map", RCS, rc(overhead={"podFixed": "1"}), 400, "BadRequest"),
    create("rc-toleration-exists-with-value", RCS,
           rc(scheduling={"tolerations": [{"key": "k", "operator": "Exists", "value": "v"}]}), 422, "Invalid",
           "scheduling.tolerations[0].operator"),
    create("rc-handler-missing", RCS, {**rc(), "handler": None}, 422, "Invalid", "handler"),
    create("rc-handler-empty", RCS, rc(handler=""), 422, "Invalid", "handler"),
    create("rc-handler-upper", RCS, rc(handler="Runc"), 422, "Invalid", "handler"),
    create("rc-handler-underscore", RCS, rc(handler="run_c"), 422, "Invalid", "handler"),
    create("rc-handler-too-long", RCS, rc(handler="a" * 64), 422, "Invalid", "handler"),
    create("rc-overhead-negative", RCS, rc(overhead={"podFixed": {"cpu": "-1"}}), 422, "Invalid",
           "overhead.podFixed[cpu]"),
    create("rc-overhead-not-quantity", RCS, rc(overhead={"podFixed": {"memory": "lots"}}), 400, "BadRequest"),
    create("rc-selector-bad-key", RCS, rc(scheduling={"nodeSelector": {"bad key": "x"}}), 422, "Invalid",
           "scheduling.nodeSelector"),
    create("rc-toleration-operator", RCS, rc(scheduling={"tolerations": [{"key": "k", "operator": "Maybe"}]}),
           422, "Invalid", "scheduling.tolerations[0].operator"),
    create("rc-toleration-effect", RCS, rc(scheduling={"tolerations": [{"key": "k", "effect": "Sometimes"}]}),
           422, "Invalid", "scheduling.tolerations[0].effect"),
    Case("rc-handler-changed", "PUT", f"{RCS}/h", rc(handler="crun"), 422, "Invalid", "handler",
         setup=[("POST", RCS, rc())]),
    create("pod-missing-runtimeclass", "/api/v1/namespaces/default/pods", pod("h", runtimeClassName="nope"),
           403, "Forbidden"),
    create("pod-overhead-without-class", "/api/v1/namespaces/default/pods", pod("h", overhead={"cpu": "1"}),
           403, "Forbidden"),
    # CSIStorageCapacity
    create("cap-name-upper", CAPS, cap("Bad"), 422, "Invalid", "metadata.name"),
    Case("cap-cluster-wide-post", "POST", "/apis/storage.k8s.io/v1/csistoragecapacities", cap(), 405,
         "MethodNotAllowed"),
    Case("cap-topology-changed", "PUT", f"{CAPS}/h", cap(nodeTopology={"matchLabels": {"a": "b"}}), 422,
         "Invalid", "nodeTopology", setup=[("POST", CAPS, cap())]),
    create("cap-class-missing", CAPS, cap(storageClassName=_DROP), 422, "Invalid", "storageClassName"),
    create("cap-class-invalid", CAPS, cap(storageClassName="Bad!"), 422, "Invalid", "storageClassName"),
    create("cap-capacity-negative", CAPS, cap(capacity="-1Gi"), 422, "Invalid", "capacity"),
    create("cap-max-size-garbage", CAPS, cap(maximumVolumeSize="big"), 400, "BadRequest"),
    create("cap-topology-operator", CAPS,
           cap(nodeTopology={"matchExpressions": [{"key": "k", "operator": "Near", "values": ["a"]}]}),
           422, "Invalid", "nodeTopology.matchExpressions[0].operator"),
    Case("cap-class-changed", "PUT", f"{CAPS}/h", cap(storageClassName="fast"), 422, "Invalid", "storageClassName",
         setup=[("POST", CAPS, cap())]),
    # APIService
    create("apisvc-version-priority-high", APISVCS, apisvc(versionPriority=1001), 422, "Invalid",
           "spec.versionPriority"),
    create("apisvc-group-invalid", APISVCS, apisvc("v1.Bad_Group", group="Bad_Group"), 422, "Invalid",
           "spec.group"),
    create("apisvc-name-mismatch", APISVCS, apisvc("v2.h.example.com"), 422, "Invalid", "metadata.name"),
    create("apisvc-name-no-dot", APISVCS, apisvc("v1"), 422, "Invalid", "metadata.name"),
    create("apisvc-group-priority-zero", APISVCS, apisvc(groupPriorityMinimum=0), 422, "Invalid",
           "spec.groupPriorityMinimum"),
    create("apisvc-group-priority-high", APISVCS, apisvc(groupPriorityMinimum=20001), 422, "Invalid",
           "spec.groupPriorityMinimum"),
    create("apisvc-version-priority-zero", APISVCS, apisvc(versionPriority=0), 422, "Invalid",
           "spec.versionPriority"),
    create("apisvc-version-upper", APISVCS, apisvc("V1.h.example.com", version="V1"), 422, "Invalid",
           "metadata.name"),
    create("apisvc-empty-group-v2", APISVCS, apisvc("v2.", group="", version="v2"), 422, "Invalid", "spec.group"),
    create("apisvc-local-cabundle", APISVCS, apisvc(service=None, caBundle=b64(b"x")), 422, "Invalid",
           "spec.caBundle"),
    create("apisvc-local-insecure", APISVCS, apisvc(service=None, insecureSkipTLSVerify=True), 422, "Invalid",
           "spec.insecureSkipTLSVerify"),
    create("apisvc-service-no-name", APISVCS, apisvc(service={"namespace": "default", "port": 443}), 422,
           "Invalid", "spec.service.name"),
    create("apisvc-service-no-namespace", APISVCS, apisvc(service={"name": "x", "port": 443}), 422, "Invalid",
           "spec.service.namespace"),
    create("apisvc-service-port", APISVCS, apisvc(service={"namespace": "d", "name": "x", "port": 70000}), 422,
           "Invalid", "spec.service.port"),
    create("apisvc-insecure-and-ca", APISVCS, apisvc(insecureSkipTLSVerify=True, caBundle=b64(b"x")), 422,
           "Invalid", "spec.insecureSkipTLSVerify"),
    Case("apisvc-unavailable-backend", "GET", "/apis/h.example.com/v1/namespaces/default/things", None, 503,
         "ServiceUnavailable", setup=[("POST", APISVCS, apisvc())]),
    # flowcontrol: served read-only
    Case("flow-create", "POST", f"{FLOW}/flowschemas", {"metadata": {"name": "mine"}, "spec": {}}, 405,
         "MethodNotAllowed", gone=f"{FLOW}/flowschemas/mine"),
    Case("flow-update", "PUT", f"{FLOW}/flowschemas/exempt", {"metadata": {"name": "exempt"}, "spec": {}}, 405,
         "MethodNotAllowed"),
    Case("flow-patch", "PATCH", f"{FLOW}/prioritylevelconfigurations/catch-all", {"spec": {}}, 405,
         "MethodNotAllowed"),
    Case("flow-delete", "DELETE", f"{FLOW}/prioritylevelconfigurations/catch-all", None, 405, "MethodNotAllowed"),
    Case("flow-deletecollection", "DELETE", f"{FLOW}/flowschemas", None, 405, "MethodNotAllowed"),
]


async def _call(client: TestClient[web.Request, web.Application], method: str, path: str,
                body: Any) -> tuple[int, Any]:
    headers = dict(HEADERS)
    if method == "PATCH":
        headers["Content-Type"] = "application/merge-patch+json"
    r = await client.request(method, path, data=orjson.dumps(body) if body is not None else None, headers=headers)
    raw = await r.read()
    return r.status, orjson.loads(raw) if raw else None


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
async def test_hostile(client: TestClient[web.Request, web.Application], case: Case) -> None:
    before: dict[str, Any] = {}
    for method, path, body in case.setup:
        code, out = await _call(client, method, path, body)
        assert code == 201, out
        before = out
    code, out = await _call(client, case.method, case.path, case.body)
    assert code < 500 or code == case.code == 503  # 503 only where upstream's aggregator answers it
    assert (code, out.get("reason")) == (case.code, case.reason), out
    assert out.get("kind") == "Status" and out.get("code") == case.code
    if case.cause:
        assert case.cause in [c.get("field") for c in (out.get("details") or {}).get("causes") or []], out
    if case.gone:
        gone, _ = await _call(client, "GET", case.gone, None)
        assert gone == 404
    if case.setup and case.setup[-1][0] == "POST" and before.get("metadata", {}).get("name"):
        path = case.setup[-1][1] + "/" + before["metadata"]["name"]
        _, now = await _call(client, "GET", path, None)
        assert now == before  # the refused write changed nothing


async def test_create_ignores_status_and_requester_fields(client: TestClient[web.Request, web.Application]) -> None:
    body = csr("s", username="root", groups=["system:masters"])
    body["status"] = {"conditions": [{"type": "Approved", "status": "True"}], "certificate": b64(BAD_PEM)}
    code, out = await _call(client, "POST", CSRS, body)
    assert code == 201 and "status" not in out
    assert out["spec"]["username"] == "admin" and out["spec"]["groups"] == ["system:masters", "system:authenticated"]
    _, got = await _call(client, "GET", f"{CSRS}/s", None)
    assert got == out


async def test_any_csr_name_that_is_a_path_segment(client: TestClient[web.Request, web.Application]) -> None:
    code, out = await _call(client, "POST", CSRS, {**csr(), "metadata": {"name": "Node:Kubelet_1"}})
    assert code == 201, out


async def test_apiservice_create_ignores_status(client: TestClient[web.Request, web.Application]) -> None:
    body = {**apisvc(), "status": {"conditions": [{"type": "Available", "status": "True"}]}}
    code, out = await _call(client, "POST", APISVCS, body)
    assert code == 201 and out["status"] == {}
    assert out["spec"]["service"]["port"] == 443


async def test_unusable_ca_bundle_is_503_not_500(client: TestClient[web.Request, web.Application]) -> None:
    for path, body in (("/api/v1/namespaces/default/services", {"metadata": {"name": "ext"}, "spec": {
            "ports": [{"name": "https", "port": 443}]}}),
            ("/api/v1/namespaces/default/endpoints", {"metadata": {"name": "ext"}, "subsets": [{
                "addresses": [{"ip": "127.0.0.1"}], "ports": [{"name": "https", "port": 9}]}]}),
            (APISVCS, apisvc(caBundle=b64(b"not a certificate")))):
        code, out = await _call(client, "POST", path, body)
        assert code == 201, out
    obj = out
    obj["status"] = {"conditions": [{"type": "Available", "status": "True", "reason": "Forged"}]}
    code, _ = await _call(client, "PUT", f"{APISVCS}/v1.h.example.com/status", obj)
    assert code == 200
    code, out = await _call(client, "GET", "/apis/h.example.com/v1/namespaces/default/things", None)
    assert (code, out["reason"]) == (503, "ServiceUnavailable")
