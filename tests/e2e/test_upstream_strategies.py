"""Per-kind write rules as upstream's strategies have them, through real kubectl and the official Python
client: what a write through `/status` keeps, what a Service changed to ExternalName drops."""

from __future__ import annotations

import json
from typing import Any

import yaml
from e2ekit import Cluster, unique
from kubernetes import client

from tests.helpers.csr import csr_body


def get(cluster: Cluster, *args: str) -> dict[str, Any]:
    out: dict[str, Any] = json.loads(cluster.kubectl("get", *args, "-o", "json").stdout)
    return out


def test_status_writes_keep_metadata_changes(cluster: Cluster, ns: str) -> None:
    """Upstream's status strategies reset only the spec: labels and annotations sent with a status write stay
    (Ingress and CertificateSigningRequest, as the conformance tests write them)."""
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump({
        "apiVersion": "networking.k8s.io/v1", "kind": "Ingress", "metadata": {"name": "ing", "namespace": ns},
        "spec": {"defaultBackend": {"service": {"name": "svc", "port": {"number": 80}}}}}))
    cluster.kubectl("patch", "ingress", "ing", "-n", ns, "--subresource=status", "--type=merge", "-p", json.dumps({
        "metadata": {"labels": {"patched": "yes"}, "annotations": {"note": "kept"}},
        "spec": {"defaultBackend": {"service": {"name": "other", "port": {"number": 81}}}},
        "status": {"loadBalancer": {"ingress": [{"ip": "192.0.2.7"}]}}}))
    got = get(cluster, "ingress", "ing", "-n", ns)
    assert got["metadata"]["labels"] == {"patched": "yes"} and got["metadata"]["annotations"]["note"] == "kept"
    assert got["spec"]["defaultBackend"]["service"]["name"] == "svc"  # the spec is still not a status write's
    assert got["status"]["loadBalancer"]["ingress"] == [{"ip": "192.0.2.7"}]

    certs = client.CertificatesV1Api(cluster.api)
    name = unique("csr")
    made = certs.create_certificate_signing_request(csr_body(name))
    made.metadata.annotations = {"updated": "status"}
    made.status = client.V1CertificateSigningRequestStatus(conditions=[client.V1CertificateSigningRequestCondition(
        type="Failed", status="True", reason="E2E", message="set by the test")])
    out = certs.replace_certificate_signing_request_status(name, made)
    assert out.metadata.annotations == {"updated": "status"}
    assert [c.reason for c in out.status.conditions] == ["E2E"]
    certs.delete_certificate_signing_request(name)

    # a Deployment's status strategy keeps its labels (upstream), takes annotations
    cluster.kubectl("create", "deployment", "d", "-n", ns, "--image=nginx", "--replicas=0")
    cluster.kubectl("patch", "deployment", "d", "-n", ns, "--subresource=status", "--type=merge", "-p",
                    json.dumps({"metadata": {"labels": {"x": "y"}, "annotations": {"a": "b"}}}))
    dep = get(cluster, "deployment", "d", "-n", ns)
    assert "x" not in dep["metadata"]["labels"] and dep["metadata"]["annotations"]["a"] == "b"
