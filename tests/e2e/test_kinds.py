"""kubectl against the kinds added in issue 7: CSR approve → a certificate the client CA verifies,
read-only flowcontrol objects, local APIServices, RuntimeClass admission."""

from __future__ import annotations

import base64
import json
import time

from cryptography import x509
from cryptography.x509.oid import NameOID
from e2ekit import Cluster, unique

from tests.helpers.csr import csr_body


def _wait_json(cluster: Cluster, *args: str, until: object, timeout: float = 20) -> dict[str, object]:
    deadline = time.monotonic() + timeout
    while True:
        obj = json.loads(cluster.kubectl(*args, "-o", "json").stdout)
        if until(obj) or time.monotonic() > deadline:  # type: ignore[operator]
            return obj  # type: ignore[no-any-return]
        time.sleep(0.2)


def test_csr_approve_issues_a_client_certificate(cluster: Cluster) -> None:
    name = unique("csr")
    body = csr_body(name, cn="bob", orgs=("devs",), usages=["digital signature", "key encipherment", "client auth"],
                    seconds=3600)
    cluster.kubectl("create", "-f", "-", input=json.dumps(body))
    pending = cluster.kubectl("get", "csr", name).stdout
    assert "Pending" in pending and "kubernetes.io/kube-apiserver-client" in pending and "admin" in pending
    assert "approved" in cluster.kubectl("certificate", "approve", name).stdout
    obj = _wait_json(cluster, "get", "csr", name, until=lambda o: (o.get("status") or {}).get("certificate"))
    assert "Approved,Issued" in cluster.kubectl("get", "csr", name).stdout
    cert = x509.load_pem_x509_certificate(base64.b64decode(obj["status"]["certificate"]))  # type: ignore[index]
    ca = x509.load_pem_x509_certificate((cluster.server.data_dir / "server/tls/client-ca.crt").read_bytes())
    cert.verify_directly_issued_by(ca)
    assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "bob"
    assert cert.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)[0].value == "devs"
    assert (cert.not_valid_after_utc - cert.not_valid_before_utc).total_seconds() == 3600 + 300


def test_csr_deny_and_bad_usage(cluster: Cluster) -> None:
    denied, bad = unique("csr"), unique("csr")
    cluster.kubectl("create", "-f", "-", input=json.dumps(csr_body(denied)))
    cluster.kubectl("certificate", "deny", denied)
    assert "Denied" in cluster.kubectl("get", "csr", denied).stdout
    cluster.kubectl("create", "-f", "-", input=json.dumps(csr_body(bad, usages=["server auth", "client auth"])))
    cluster.kubectl("certificate", "approve", bad)
    obj = _wait_json(cluster, "get", "csr", bad, until=lambda o: any(
        c.get("type") == "Failed" for c in (o.get("status") or {}).get("conditions", [])))
    failed = [c for c in obj["status"]["conditions"] if c["type"] == "Failed"]  # type: ignore[index]
    assert failed and failed[0]["reason"] == "SignerValidationFailure"
    assert failed[0]["message"] == "invalid usage for client certificate: server auth"


def test_flowcontrol_objects_are_read_only(cluster: Cluster) -> None:
    out = cluster.kubectl("get", "flowschemas,prioritylevelconfigurations").stdout
    for name in ("flowschema.flowcontrol.apiserver.k8s.io/exempt", "flowschema.flowcontrol.apiserver.k8s.io/catch-all",
                 "prioritylevelconfiguration.flowcontrol.apiserver.k8s.io/exempt",
                 "prioritylevelconfiguration.flowcontrol.apiserver.k8s.io/catch-all"):
        assert name in out
    refused = cluster.kubectl("delete", "flowschema", "exempt", check=False)
    assert refused.returncode != 0 and "does not allow this method" in refused.stderr


def test_local_apiservices_and_api_resources(cluster: Cluster) -> None:
    out = cluster.kubectl("get", "apiservices").stdout
    assert "v1.apps" in out and "Local" in out and "v1.certificates.k8s.io" in out
    resources = cluster.kubectl("api-resources").stdout
    for line in ("certificatesigningrequests", "csistoragecapacities", "runtimeclasses", "apiservices",
                 "flowschemas", "prioritylevelconfigurations"):
        assert line in resources


def test_runtimeclass_admission_with_kubectl_and_python_client(cluster: Cluster, ns: str) -> None:
    from kubernetes import client

    name = unique("rc")
    node = client.NodeV1Api(cluster.api)
    node.create_runtime_class(client.V1RuntimeClass(
        metadata=client.V1ObjectMeta(name=name), handler="runc", overhead=client.V1Overhead(pod_fixed={"cpu": "50m"}),
        scheduling=client.V1Scheduling(node_selector={"lite.test/sandbox": "yes"})))
    assert node.read_runtime_class(name).handler == "runc"
    assert name in cluster.kubectl("get", "runtimeclasses").stdout

    def pod(pod_name: str, rc: str) -> str:
        return json.dumps({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": pod_name, "namespace": ns},
                           "spec": {"runtimeClassName": rc, "containers": [{"name": "c", "image": "busybox"}]}})

    refused = cluster.kubectl("create", "-f", "-", input=pod("p1", "missing-" + name), check=False)
    assert refused.returncode != 0
    assert f'pods "p1" is forbidden: pod rejected: RuntimeClass "missing-{name}" not found' in refused.stderr
    cluster.kubectl("create", "-f", "-", input=pod("p2", name))
    got = client.CoreV1Api(cluster.api).read_namespaced_pod("p2", ns)
    assert got.spec.overhead == {"cpu": "50m"}
    assert got.spec.node_selector == {"lite.test/sandbox": "yes"}
    node.delete_runtime_class(name)


def test_csr_with_the_python_client(cluster: Cluster) -> None:
    from kubernetes import client

    from tests.helpers.csr import make_csr

    api = client.CertificatesV1Api(cluster.api)
    name = unique("csr")
    pem, _ = make_csr("dave")
    api.create_certificate_signing_request(client.V1CertificateSigningRequest(
        metadata=client.V1ObjectMeta(name=name), spec=client.V1CertificateSigningRequestSpec(
            request=base64.b64encode(pem).decode(), signer_name="kubernetes.io/kube-apiserver-client",
            usages=["client auth"], expiration_seconds=600)))
    csr = api.read_certificate_signing_request(name)
    assert csr.spec.username == "system:admin" and "system:masters" in csr.spec.groups
    csr.status = client.V1CertificateSigningRequestStatus(conditions=[client.V1CertificateSigningRequestCondition(
        type="Approved", status="True", reason="PythonClient", message="approved in a test")])
    api.replace_certificate_signing_request_approval(name, csr)
    deadline = time.monotonic() + 20
    while not (csr := api.read_certificate_signing_request(name)).status.certificate:
        assert time.monotonic() < deadline, "no certificate issued"
        time.sleep(0.2)
    cert = x509.load_pem_x509_certificate(base64.b64decode(csr.status.certificate))
    assert (cert.not_valid_after_utc - cert.not_valid_before_utc).total_seconds() == 600 + 300
    assert [c.type for c in csr.status.conditions] == ["Approved"]
