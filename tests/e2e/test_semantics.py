"""Exact semantics against a real `lite server`: the official Python client deserialises create responses of
every kind with required status integers, `kubectl apply` of a Deployment leaves generation 1 after the
controller recorded its revision, `/version/` is served, and impersonation is honoured, not ignored."""

from __future__ import annotations

import json
import time

import pytest
from e2ekit import Cluster
from kubernetes import client
from kubernetes.client.exceptions import ApiException

GUARD = 60.0  # hang guard while waiting for the controller, never a speed assertion


def _template(app: str) -> client.V1PodTemplateSpec:
    return client.V1PodTemplateSpec(metadata=client.V1ObjectMeta(labels={"app": app}),
                                    spec=client.V1PodSpec(containers=[client.V1Container(name="c", image="busybox")]))


def _selector(app: str) -> client.V1LabelSelector:
    return client.V1LabelSelector(match_labels={"app": app})


def test_python_client_reads_created_status_integers(cluster: Cluster, ns: str) -> None:
    apps, core = client.AppsV1Api(cluster.api), client.CoreV1Api(cluster.api)
    meta = client.V1ObjectMeta
    ds = apps.create_namespaced_daemon_set(ns, client.V1DaemonSet(
        metadata=meta(name="ds"), spec=client.V1DaemonSetSpec(selector=_selector("ds"), template=_template("ds"))))
    assert (ds.status.current_number_scheduled, ds.status.number_misscheduled, ds.status.desired_number_scheduled,
            ds.status.number_ready) == (0, 0, 0, 0)
    rs = apps.create_namespaced_replica_set(ns, client.V1ReplicaSet(
        metadata=meta(name="rs"), spec=client.V1ReplicaSetSpec(replicas=0, selector=_selector("rs"),
                                                               template=_template("rs"))))
    assert rs.status.replicas == 0
    sts = apps.create_namespaced_stateful_set(ns, client.V1StatefulSet(
        metadata=meta(name="sts"), spec=client.V1StatefulSetSpec(replicas=0, service_name="sts",
                                                                 selector=_selector("sts"), template=_template("sts"))))
    assert sts.status.replicas == 0 and sts.status.available_replicas == 0
    rc = core.create_namespaced_replication_controller(ns, client.V1ReplicationController(
        metadata=meta(name="rc"), spec=client.V1ReplicationControllerSpec(replicas=0, selector={"app": "rc"},
                                                                          template=_template("rc"))))
    assert rc.status.replicas == 0
    hpa = client.AutoscalingV2Api(cluster.api).create_namespaced_horizontal_pod_autoscaler(
        ns, client.V2HorizontalPodAutoscaler(metadata=meta(name="hpa"), spec=client.V2HorizontalPodAutoscalerSpec(
            max_replicas=3, scale_target_ref=client.V2CrossVersionObjectReference(
                api_version="apps/v1", kind="Deployment", name="none"))))
    assert hpa.status.desired_replicas == 0
    pdb = client.PolicyV1Api(cluster.api).create_namespaced_pod_disruption_budget(ns, client.V1PodDisruptionBudget(
        metadata=meta(name="pdb"), spec=client.V1PodDisruptionBudgetSpec(min_available=1, selector=_selector("x"))))
    assert (pdb.status.disruptions_allowed, pdb.status.current_healthy, pdb.status.desired_healthy,
            pdb.status.expected_pods) == (0, 0, 0, 0)
    # reads deserialise too, whether or not the controllers have written a status since
    assert isinstance(apps.read_namespaced_daemon_set("ds", ns).status.number_ready, int)


DEPLOYMENT = """
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
spec:
  replicas: 1
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers: [{name: c, image: busybox}]
"""


def test_apply_leaves_deployment_generation_1(cluster: Cluster, ns: str) -> None:
    cluster.kubectl("apply", "-n", ns, "-f", "-", input=DEPLOYMENT)
    deadline = time.monotonic() + GUARD
    while True:
        got = json.loads(cluster.kubectl("get", "deployment", "web", "-n", ns, "-o", "json").stdout)
        revision = (got["metadata"].get("annotations") or {}).get("deployment.kubernetes.io/revision")
        if revision == "1" and (got.get("status") or {}).get("observedGeneration"):
            break
        assert time.monotonic() < deadline, f"the deployment controller never ran: {got}"
        time.sleep(0.2)
    out = cluster.kubectl("get", "deployment", "web", "-n", ns, "-o",
                          "jsonpath={.metadata.generation} {.status.observedGeneration}").stdout
    assert out == "1 1"


def test_version_with_trailing_slash(cluster: Cluster) -> None:
    plain = json.loads(cluster.kubectl("get", "--raw", "/version").stdout)
    assert json.loads(cluster.kubectl("get", "--raw", "/version/").stdout) == plain


def test_impersonation_is_not_ignored(cluster: Cluster, ns: str) -> None:
    """The admin may impersonate; the request is then served as alice (who may do nothing), not as the admin."""
    proc = cluster.kubectl("get", "configmaps", "-n", ns, "--as", "alice", check=False)
    assert proc.returncode != 0 and f'User "alice" cannot list resource "configmaps" in API group "" in the ' \
                                    f'namespace "{ns}"' in proc.stderr
    with pytest.raises(ApiException) as e:
        client.CoreV1Api(cluster.api).list_namespaced_config_map(ns, _headers={"Impersonate-User": "alice"})
    assert e.value.status == 403


def test_kubectl_server_dry_runs_and_cascades(cluster: Cluster, ns: str) -> None:
    """kubectl's DeleteOptions and write options pass upstream's validation and mean what they say."""
    cluster.kubectl("create", "configmap", "dry", "-n", ns, "--from-literal=a=b", "--dry-run=server")
    assert cluster.kubectl("get", "configmap", "dry", "-n", ns, check=False).returncode != 0
    cluster.kubectl("create", "configmap", "keep", "-n", ns, "--from-literal=a=b")
    cluster.kubectl("delete", "configmap", "keep", "-n", ns, "--dry-run=server")
    cluster.kubectl("get", "configmap", "keep", "-n", ns)
    cluster.kubectl("delete", "configmap", "keep", "-n", ns, "--cascade=orphan", "--grace-period=0")
    assert cluster.kubectl("get", "configmap", "keep", "-n", ns, check=False).returncode != 0
