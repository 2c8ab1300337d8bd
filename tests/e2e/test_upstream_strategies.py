"""Per-kind write rules as upstream's strategies have them, through real kubectl and the official Python
client: what a write through `/status` keeps, what a Service changed to ExternalName drops."""

from __future__ import annotations

import json
import time
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


def _until_created(cluster: Cluster, doc: str) -> None:
    """Create `doc`, retrying while the allocators have not yet seen the release (their informer lags)."""
    deadline = time.monotonic() + 20
    while True:
        out = cluster.kubectl("create", "-f", "-", input=doc, check=False)
        if out.returncode == 0:
            return
        assert time.monotonic() < deadline and "already allocated" in out.stderr, out.stderr
        time.sleep(0.2)


def test_service_changed_to_external_name_drops_what_it_no_longer_needs(cluster: Cluster, ns: str) -> None:
    """As upstream's dropTypeDependentFields: clusterIPs, nodePorts, the health-check port and the defaults of
    the old type are cleared (and released), not refused; a value the update also changed is still judged."""
    cluster.kubectl("create", "service", "loadbalancer", "lb", "-n", ns, "--tcp=80:8080")
    cluster.kubectl("patch", "service", "lb", "-n", ns, "--type=merge", "-p",
                    json.dumps({"spec": {"externalTrafficPolicy": "Local"}}))
    before = get(cluster, "service", "lb", "-n", ns)["spec"]
    assert before["clusterIP"] and before["ports"][0]["nodePort"] and before["healthCheckNodePort"]

    changed = cluster.kubectl("patch", "service", "lb", "-n", ns, "--type=merge", "-p",
                              json.dumps({"spec": {"type": "ExternalName", "externalName": "example.com"}}))
    assert "patched" in changed.stdout
    spec = get(cluster, "service", "lb", "-n", ns)["spec"]
    for gone in ("clusterIP", "clusterIPs", "ipFamilies", "ipFamilyPolicy", "healthCheckNodePort",
                 "externalTrafficPolicy", "internalTrafficPolicy", "allocateLoadBalancerNodePorts"):
        assert gone not in spec, (gone, spec)
    assert "nodePort" not in spec["ports"][0] and spec["externalName"] == "example.com"

    # what it held is free again: another Service can take the same clusterIP and nodePort
    _until_created(cluster, yaml.safe_dump({
        "apiVersion": "v1", "kind": "Service", "metadata": {"name": "reuse", "namespace": ns},
        "spec": {"type": "NodePort", "clusterIP": before["clusterIP"],
                 "ports": [{"port": 80, "nodePort": before["ports"][0]["nodePort"]}]}}))

    # a net-new nodePort sent with the change is the user's and refused, as upstream
    cluster.kubectl("create", "service", "nodeport", "np", "-n", ns, "--tcp=80:8080")
    refused = cluster.kubectl("patch", "service", "np", "-n", ns, "--type=json", "-p", json.dumps([
        {"op": "replace", "path": "/spec/type", "value": "ExternalName"},
        {"op": "add", "path": "/spec/externalName", "value": "example.com"},
        {"op": "replace", "path": "/spec/ports/0/nodePort", "value": 31999}]), check=False)
    assert refused.returncode != 0 and "spec.ports[0].nodePort: Forbidden" in refused.stderr
