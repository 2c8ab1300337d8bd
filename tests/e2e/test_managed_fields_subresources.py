"""managedFields of writes through subresources, as upstream records them: `kubectl scale` (and any write
through `/scale` or `/status`) is an entry `{manager, operation: Update, subresource}` owning what it changed,
so a later server-side apply of those fields conflicts instead of silently setting them back. And of writes
through another served version (issue 18): each entry keeps the apiVersion it was written in, its fields in
that version's shape, and what later writes change is judged in each entry's version."""

from __future__ import annotations

import json
from typing import Any

import yaml
from e2ekit import Cluster
from kubernetes import client


def deployment(ns: str, replicas: int) -> str:
    return yaml.safe_dump({
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "ssa", "namespace": ns},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "ssa"}},
                 "template": {"metadata": {"labels": {"app": "ssa"}},
                              "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}})


def entries(cluster: Cluster, *args: str) -> list[dict[str, Any]]:
    got = json.loads(cluster.kubectl("get", *args, "-o", "json", "--show-managed-fields").stdout)
    out: list[dict[str, Any]] = got["metadata"]["managedFields"]
    return out


def test_apply_after_kubectl_scale_conflicts_on_replicas(cluster: Cluster, ns: str) -> None:
    cluster.kubectl("apply", "--server-side", "-f", "-", input=deployment(ns, 1))
    cluster.kubectl("scale", "deployment", "ssa", "-n", ns, "--replicas=3")
    scale = [e for e in entries(cluster, "deployment", "ssa", "-n", ns) if e.get("subresource") == "scale"]
    assert [(e["manager"], e["operation"], e["apiVersion"], e["fieldsV1"]) for e in scale] == \
        [("kubectl", "Update", "apps/v1", {"f:spec": {"f:replicas": {}}})]

    again = cluster.kubectl("apply", "--server-side", "-f", "-", input=deployment(ns, 1), check=False)
    assert again.returncode != 0
    assert 'Apply failed with 1 conflict: conflict with "kubectl" with subresource "scale" using apps/v1' \
        in again.stderr and ".spec.replicas" in again.stderr
    got = json.loads(cluster.kubectl("get", "deployment", "ssa", "-n", ns, "-o", "json").stdout)
    assert got["spec"]["replicas"] == 3  # not set back

    # the same value is shared, not a conflict; --force-conflicts takes the field back
    cluster.kubectl("apply", "--server-side", "-f", "-", input=deployment(ns, 3))
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", input=deployment(ns, 2))
    after = entries(cluster, "deployment", "ssa", "-n", ns)
    assert not [e for e in after if e.get("subresource") == "scale"]
    assert any(e["operation"] == "Apply" and "f:replicas" in e["fieldsV1"]["f:spec"] for e in after)


def test_status_write_is_its_own_manager_entry(cluster: Cluster, ns: str) -> None:
    cluster.kubectl("apply", "--server-side", "-f", "-", input=deployment(ns, 0))
    apps = client.AppsV1Api(cluster.api)
    apps.patch_namespaced_deployment_status("ssa", ns, {"status": {"observedGeneration": 7}},
                                            field_manager="status-writer")
    status = [e for e in entries(cluster, "deployment", "ssa", "-n", ns) if e["manager"] == "status-writer"]
    assert [(e["operation"], e.get("subresource"), e["fieldsV1"]) for e in status] == \
        [("Update", "status", {"f:status": {"f:observedGeneration": {}}})]
    # the spec's apply entry keeps its fields: a status write takes only what it changed
    mine = [e for e in entries(cluster, "deployment", "ssa", "-n", ns) if e["operation"] == "Apply"]
    assert mine and "f:replicas" in mine[0]["fieldsV1"]["f:spec"]


def test_writes_without_a_field_manager_are_managed_by_their_user_agent(cluster: Cluster, ns: str) -> None:
    cluster.kubectl("create", "configmap", "ua", "-n", ns, "--from-literal=a=b")
    # the Python client names no fieldManager: its User-Agent is OpenAPI-Generator/<version>/python
    client.CoreV1Api(cluster.api).patch_namespaced_config_map("ua", ns, {"metadata": {"labels": {"x": "y"}}})
    managers = {(e["manager"], e["operation"]): e["fieldsV1"] for e in entries(cluster, "configmap", "ua", "-n", ns)}
    assert set(managers) == {("kubectl-create", "Update"), ("OpenAPI-Generator", "Update")}
    assert "f:x" in managers["OpenAPI-Generator", "Update"]["f:metadata"]["f:labels"]


def test_server_side_apply_through_scale_and_status(cluster: Cluster, ns: str) -> None:
    """`kubectl apply --server-side --subresource=scale|status`: the apply is the entry
    `{manager, Apply, subresource}`, conflicting with the other owners of what it names unless forced."""
    cluster.kubectl("apply", "--server-side", "-f", "-", input=deployment(ns, 1))
    scale = yaml.safe_dump({"apiVersion": "apps/v1", "kind": "Deployment",
                            "metadata": {"name": "ssa", "namespace": ns}, "spec": {"replicas": 4}})
    refused = cluster.kubectl("apply", "--server-side", "--subresource=scale", "--field-manager=scaler", "-f", "-",
                              input=scale, check=False)
    assert refused.returncode != 0 and 'conflict with "kubectl": .spec.replicas' in refused.stderr
    cluster.kubectl("apply", "--server-side", "--subresource=scale", "--field-manager=scaler", "--force-conflicts",
                    "-f", "-", input=scale)
    got = [e for e in entries(cluster, "deployment", "ssa", "-n", ns) if e["manager"] == "scaler"]
    assert [(e["operation"], e.get("subresource"), e["fieldsV1"]) for e in got] == \
        [("Apply", "scale", {"f:spec": {"f:replicas": {}}})]

    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump({
        "apiVersion": "networking.k8s.io/v1", "kind": "Ingress", "metadata": {"name": "ing", "namespace": ns},
        "spec": {"defaultBackend": {"service": {"name": "svc", "port": {"number": 80}}}}}))
    cluster.kubectl("patch", "ingress", "ing", "-n", ns, "--subresource=status", "--type=merge", "-p",
                    json.dumps({"status": {"loadBalancer": {"ingress": [{"ip": "192.0.2.1"}]}}}))
    status = yaml.safe_dump({"apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
                             "metadata": {"name": "ing", "namespace": ns},
                             "status": {"loadBalancer": {"ingress": [{"ip": "192.0.2.2"}]}}})
    refused = cluster.kubectl("apply", "--server-side", "--subresource=status", "--field-manager=lb", "-f", "-",
                              input=status, check=False)
    assert refused.returncode != 0
    assert 'conflict with "kubectl-patch" with subresource "status"' in refused.stderr, refused.stderr
    cluster.kubectl("apply", "--server-side", "--subresource=status", "--field-manager=lb", "--force-conflicts",
                    "-f", "-", input=status)
    ing = json.loads(cluster.kubectl("get", "ingress", "ing", "-n", ns, "-o", "json",
                                     "--show-managed-fields").stdout)
    assert ing["status"]["loadBalancer"]["ingress"] == [{"ip": "192.0.2.2"}]
    mine = [e for e in ing["metadata"]["managedFields"] if e["manager"] == "lb"]
    assert [(e["operation"], e.get("subresource")) for e in mine] == [("Apply", "status")]
    assert "f:status" in mine[0]["fieldsV1"]


def hpa(ns: str, version: str, cpu: int) -> str:
    spec: dict[str, Any] = {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                            "minReplicas": 1, "maxReplicas": 5}
    if version == "v1":
        spec["targetCPUUtilizationPercentage"] = cpu
    else:
        spec["metrics"] = [{"type": "Resource", "resource": {"name": "cpu", "target": {
            "type": "Utilization", "averageUtilization": cpu}}}]
    return yaml.safe_dump({"apiVersion": f"autoscaling/{version}", "kind": "HorizontalPodAutoscaler",
                           "metadata": {"name": "web", "namespace": ns}, "spec": spec})


def test_server_side_apply_through_autoscaling_v1_then_v2(cluster: Cluster, ns: str) -> None:
    cluster.kubectl("apply", "--server-side", "-f", "-", input=hpa(ns, "v1", 50))
    (entry,) = entries(cluster, "horizontalpodautoscalers.v2.autoscaling", "web", "-n", ns)
    assert (entry["manager"], entry["operation"], entry["apiVersion"]) == ("kubectl", "Apply", "autoscaling/v1")
    assert "f:targetCPUUtilizationPercentage" in entry["fieldsV1"]["f:spec"]

    other = cluster.kubectl("apply", "--server-side", "--field-manager", "other", "-f", "-",
                            input=hpa(ns, "v2", 70), check=False)
    assert other.returncode != 0
    assert 'Apply failed with 1 conflict: conflict with "kubectl": .spec.targetCPUUtilizationPercentage' \
        in other.stderr, other.stderr

    cluster.kubectl("apply", "--server-side", "-f", "-", input=hpa(ns, "v2", 70))  # its own field: no conflict
    (entry,) = entries(cluster, "horizontalpodautoscalers.v2.autoscaling", "web", "-n", ns)
    assert (entry["manager"], entry["apiVersion"]) == ("kubectl", "autoscaling/v2")
    assert "f:metrics" in entry["fieldsV1"]["f:spec"]
    got = json.loads(cluster.kubectl("get", "horizontalpodautoscalers.v1.autoscaling", "web", "-n", ns,
                                     "-o", "json").stdout)
    assert got["spec"]["targetCPUUtilizationPercentage"] == 70
