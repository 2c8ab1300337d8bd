"""Per-kind strategy functions: defaulting, QoS, validation and update rules (pure, no store)."""

from __future__ import annotations

from typing import Any

import pytest

from lite.server.api.deletion import gc_finalizers
from lite.server.api.strategies import batch, core, crd, pods, workloads
from lite.server.api.strategies.base import Strategy


@pytest.mark.parametrize(("image", "policy"), [
    ("nginx", "Always"), ("nginx:latest", "Always"), ("nginx:1.25", "IfNotPresent"),
    ("localhost:5000/nginx", "Always"), ("localhost:5000/nginx:2", "IfNotPresent"),
    ("nginx@sha256:abcd", "IfNotPresent"),
])
def test_image_pull_policy(image: str, policy: str) -> None:
    c: dict[str, Any] = {"name": "c", "image": image}
    pods.default_container(c)
    assert c["imagePullPolicy"] == policy


def _spec(*containers: dict[str, Any]) -> dict[str, Any]:
    return {"containers": [{"name": f"c{i}", "image": "i", **c} for i, c in enumerate(containers)]}


def test_qos_classes_and_requests_from_limits() -> None:
    assert pods.qos_class(_spec({})) == "BestEffort"
    assert pods.qos_class(_spec({"resources": {"requests": {"cpu": "100m"}}})) == "Burstable"
    guaranteed = _spec({"resources": {"limits": {"cpu": "1", "memory": "1Gi"}}})
    pods.default_pod({"spec": guaranteed})
    assert guaranteed["containers"][0]["resources"]["requests"] == {"cpu": "1", "memory": "1Gi"}
    assert pods.qos_class(guaranteed) == "Guaranteed"
    mixed = _spec({"resources": {"limits": {"cpu": "1", "memory": "1Gi"}, "requests": {"cpu": "500m"}}})
    pods.default_pod({"spec": mixed})
    assert pods.qos_class(mixed) == "Burstable"


def test_pod_defaults_are_not_overwritten() -> None:
    ports = [{"containerPort": 53, "protocol": "UDP"}, {"containerPort": 80}]
    pod: dict[str, Any] = {"spec": {**_spec({"ports": ports}), "restartPolicy": "Never",
                                    "tolerations": [{"operator": "Exists"}]}}
    pods.default_pod(pod)
    pods.prepare_create_pod(pod)
    spec = pod["spec"]
    assert spec["restartPolicy"] == "Never"
    assert [p["protocol"] for p in spec["containers"][0]["ports"]] == ["UDP", "TCP"]
    assert spec["tolerations"] == [{"operator": "Exists"}]  # tolerates everything already
    assert pod["status"]["phase"] == "Pending"


def test_pod_update_rules() -> None:
    old: dict[str, Any] = {"spec": {**_spec({}), "tolerations": [{"key": "a", "operator": "Exists"}]}}
    new: dict[str, Any] = {"spec": {**_spec({}), "tolerations": [{"key": "a", "operator": "Exists"},
                                                                    {"key": "b", "operator": "Exists"}]}}
    new["spec"]["containers"][0]["image"] = "other"
    new["spec"]["activeDeadlineSeconds"] = 30
    assert pods.validate_pod_update(new, old) == []
    removed = {"spec": {**_spec({}), "tolerations": []}}
    assert [c.field for c in pods.validate_pod_update(removed, old)] == ["spec.tolerations"]
    node = {"spec": {**old["spec"], "nodeName": "n1"}}
    assert [c.field for c in pods.validate_pod_update(node, old)] == ["spec"]


def test_pod_grace() -> None:
    bound = {"spec": {"nodeName": "n", "terminationGracePeriodSeconds": 10}, "status": {"phase": "Running"}}
    assert pods.pod_grace(bound, None) == 10
    assert pods.pod_grace(bound, 3) == 3
    assert pods.pod_grace(bound, -5) == 1
    assert pods.pod_grace({"spec": {}}, 30) == 0
    assert pods.pod_grace({**bound, "status": {"phase": "Failed"}}, None) == 0


def test_workload_defaults() -> None:
    sts: dict[str, Any] = {"spec": {"template": {"spec": _spec({})}}}
    workloads.default_statefulset(sts)
    assert sts["spec"]["podManagementPolicy"] == "OrderedReady" and sts["spec"]["replicas"] == 1
    assert sts["spec"]["updateStrategy"] == {"type": "RollingUpdate", "rollingUpdate": {"partition": 0}}
    ds: dict[str, Any] = {"spec": {"template": {"spec": _spec({})}}}
    workloads.default_daemonset(ds)
    assert ds["spec"]["updateStrategy"]["rollingUpdate"] == {"maxUnavailable": 1, "maxSurge": 0}
    rs: dict[str, Any] = {"metadata": {}, "spec": {"template": {"metadata": {"labels": {"a": "b"}}, "spec": _spec({})}}}
    workloads.default_replicaset(rs)
    assert rs["metadata"]["labels"] == {"a": "b"} and rs["spec"]["template"]["spec"]["dnsPolicy"] == "ClusterFirst"
    cj: dict[str, Any] = {"spec": {"schedule": "* * * * *", "jobTemplate": {"spec": {"template": {"spec": _spec({})}}}}}
    batch.default_cronjob(cj)
    assert (cj["spec"]["concurrencyPolicy"], cj["spec"]["successfulJobsHistoryLimit"],
            cj["spec"]["failedJobsHistoryLimit"]) == ("Allow", 3, 1)


def test_job_restart_policy_and_selector_rules() -> None:
    job: dict[str, Any] = {"metadata": {"name": "j", "uid": "u1"}, "spec": {"template": {"spec": _spec({})}}}
    batch.default_job(job)
    batch.prepare_create_job(job)
    causes = batch.validate_job(job)  # pod default restartPolicy Always is not allowed for Jobs
    assert [c.field for c in causes] == ["spec.template.spec.restartPolicy"]
    changed = {"metadata": job["metadata"], "spec": {**job["spec"], "template": {"spec": _spec({"image": "x"})}}}
    assert "spec.template" in [c.field for c in batch.validate_job_update(changed, job)]


def test_go_selector_format() -> None:
    assert workloads.go_selector({"matchLabels": {"b": "2", "a": "1"}}) == (
        'v1.LabelSelector{MatchLabels:map[string]string{"a":"1", "b":"2"}, '
        "MatchExpressions:[]v1.LabelSelectorRequirement(nil)}")


def test_secret_rules() -> None:
    tls = {"type": "kubernetes.io/tls", "data": {"tls.crt": "YQ=="}}
    assert [c.field for c in core.validate_secret(tls)] == ["data[tls.key]"]
    assert [c.field for c in core.validate_secret({"data": {"bad key": "YQ=="}})] == ["data[bad key]"]
    assert [c.field for c in core.validate_secret({"data": {"k": "not base64!"}})] == ["data[k]"]
    old = {"type": "Opaque", "immutable": True, "data": {"a": "YQ=="}}
    new = {"type": "Opaque", "immutable": False, "data": {"a": "Yg=="}}
    assert [c.field for c in core.validate_secret_update(new, old)] == ["immutable", "data"]


def test_service_multi_port_names() -> None:
    svc = {"spec": {"ports": [{"port": 80}, {"port": 443}]}}
    core.default_service(svc)
    assert [c.field for c in core.validate_service(svc)] == ["spec.ports[0].name", "spec.ports[1].name"]
    svc = {"spec": {"type": "ClusterIP", "ports": [{"port": 80, "nodePort": 30000}]}}
    assert [c.field for c in core.validate_service(svc)] == ["spec.ports[0].nodePort"]


def test_crd_kinds_storage_first() -> None:
    obj = {"spec": {"group": "a.io", "scope": "Cluster", "names": {"plural": "things", "kind": "Thing"},
                    "versions": [{"name": "v1beta1", "served": True, "storage": False},
                                 {"name": "v1", "served": True, "storage": True},
                                 {"name": "v0", "served": False, "storage": False}]}}
    kinds = crd.kinds_of(obj)
    assert [k.version for k in kinds] == ["v1", "v1beta1"]
    assert all(k.crd and not k.namespaced and k.generation for k in kinds)


def test_gc_finalizers() -> None:
    bg = Strategy(gc_policy="background")
    orphan_default = Strategy(gc_policy="orphan")
    assert gc_finalizers(bg, ["x"], None) == ["x"]
    assert gc_finalizers(bg, ["x"], "Orphan") == ["x", "orphan"]
    assert gc_finalizers(bg, ["orphan"], "Foreground") == ["foregroundDeletion"]
    assert gc_finalizers(orphan_default, [], None) == ["orphan"]
    assert gc_finalizers(orphan_default, [], "Background") == []
    assert gc_finalizers(Strategy(), [], "Orphan") == []


def test_python_client_required_fields_are_filled() -> None:
    pod: dict[str, Any] = {"spec": _spec({}), "status": {"containerStatuses": [{"name": "c0", "state": {}}]}}
    pods.default_pod(pod)
    cs = pod["status"]["containerStatuses"][0]
    assert (cs["image"], cs["imageID"], cs["ready"], cs["restartCount"]) == ("", "", False, 0)
    node: dict[str, Any] = {"status": {"nodeInfo": {"kubeletVersion": "v1.32.0-lite"}}}
    core.default_node(node)
    assert node["status"]["nodeInfo"]["kubeletVersion"] == "v1.32.0-lite" and node["status"]["nodeInfo"]["bootID"] == ""
    bad = {"spec": {"taints": [{"key": "k", "effect": "Sometimes"}, {"effect": "NoSchedule"}]}}
    assert [c.field for c in core.validate_node(bad)] == ["spec.taints[0].effect", "spec.taints[1].key"]


def test_cr_schema_lists_and_special_types() -> None:
    from lite.server.api.strategies import crschema

    schema = {"type": "object", "properties": {"spec": {"type": "object", "properties": {
        "ports": {"type": "array", "maxItems": 2, "items": {"type": "object", "properties": {
            "name": {"type": "string", "maxLength": 3}, "port": {"x-kubernetes-int-or-string": True}}}},
        "note": {"type": "string", "nullable": True},
        "labels": {"type": "object", "additionalProperties": {"type": "string"}}}}}}
    obj = {"spec": {"ports": [{"name": "web", "port": 80, "junk": 1}, {"name": "http", "port": "x"}],
                    "note": None, "labels": {"a": "b"}}}
    crschema.prune_and_default(obj, schema)
    assert obj["spec"]["ports"][0] == {"name": "web", "port": 80}
    causes = crschema.validate(obj, schema)
    assert [c.field for c in causes] == ["spec.ports[1].name"]
    obj["spec"]["ports"].append({"port": True})
    obj["spec"]["labels"] = {"a": 1}
    fields = [c.field for c in crschema.validate(obj, schema)]
    assert fields == ["spec.ports", "spec.ports[1].name", "spec.ports[2].port", "spec.labels.a"]
