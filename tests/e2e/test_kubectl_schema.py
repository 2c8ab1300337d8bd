"""The real kubectl against upstream's schemas: strict field validation, wrong types and `kubectl explain`."""

from __future__ import annotations

import json

from e2ekit import Cluster
from kubernetes import client


def _deployment(name: str, ns: str, extra_spec: str = "", container_extra: str = "") -> str:
    return f"""apiVersion: apps/v1
kind: Deployment
metadata:
  name: {name}
  namespace: {ns}
spec:
  replicas: 1
{extra_spec}  selector:
    matchLabels: {{app: {name}}}
  template:
    metadata:
      labels: {{app: {name}}}
    spec:
      containers:
      - name: c
        image: nginx
{container_extra}"""


def test_apply_with_a_typo_fails_as_upstream(cluster: Cluster, ns: str) -> None:
    manifest = _deployment("typo", ns, "  replica: 3\n", "        imagePullPolcy: Always\n")
    out = cluster.kubectl("apply", "-f", "-", input=manifest, check=False)
    assert out.returncode != 0
    assert ('Deployment in version "v1" cannot be handled as a Deployment: strict decoding error: '
            'unknown field "spec.replica", unknown field "spec.template.spec.containers[0].imagePullPolcy"'
            in out.stderr), out.stderr
    assert cluster.kubectl("get", "deploy", "typo", "-n", ns, check=False).returncode != 0
    # --validate=false sends fieldValidation=Ignore: the object is created and the unknown fields dropped
    cluster.kubectl("apply", "--validate=false", "-f", "-", input=manifest)
    got = json.loads(cluster.kubectl("get", "deploy", "typo", "-n", ns, "-o", "json").stdout)
    assert "replica" not in got["spec"]
    assert "imagePullPolcy" not in got["spec"]["template"]["spec"]["containers"][0]


def test_apply_update_with_a_typo_fails(cluster: Cluster, ns: str) -> None:
    cluster.kubectl("apply", "-f", "-", input=_deployment("upd", ns))
    out = cluster.kubectl("apply", "-f", "-", input=_deployment("upd", ns, "  replica: 3\n"), check=False)
    assert out.returncode != 0 and 'strict decoding error: unknown field "spec.replica"' in out.stderr, out.stderr


def test_wrong_type_is_refused(cluster: Cluster, ns: str) -> None:
    manifest = _deployment("wt", ns).replace("replicas: 1", 'replicas: "two"')
    out = cluster.kubectl("create", "-f", "-", input=manifest, check=False)
    assert out.returncode != 0
    assert ("json: cannot unmarshal string into Go struct field DeploymentSpec.spec.replicas of type int32"
            in out.stderr), out.stderr


def test_explain_prints_upstream_descriptions(cluster: Cluster) -> None:
    out = cluster.kubectl("explain", "deploy.spec").stdout
    assert "Specification of the desired behavior of the Deployment." in out, out
    assert "Number of desired pods. This is a pointer to distinguish between explicit" in out, out
    assert "revisionHistoryLimit" in out and "progressDeadlineSeconds" in out
    out = cluster.kubectl("explain", "pods.spec.containers", "--recursive").stdout
    assert "imagePullPolicy" in out and "livenessProbe" in out and "successThreshold" in out, out
    out = cluster.kubectl("explain", "configmap.data").stdout
    assert "Data contains the configuration data." in out, out


def test_server_side_apply_names_the_undeclared_field(cluster: Cluster, ns: str) -> None:
    manifest = _deployment("ssa", ns, "", "        imagePullPolcy: Always\n")
    out = cluster.kubectl("apply", "--server-side", "-f", "-", input=manifest, check=False)
    assert out.returncode != 0
    assert ('.spec.template.spec.containers[name="c"].imagePullPolcy: field not declared in schema'
            in out.stderr), out.stderr


def test_number_annotation_is_refused_and_the_python_client_lists_fine(cluster: Cluster, ns: str) -> None:
    """A number as an annotation value used to be stored and then broke the typed Python client's list of the
    whole namespace; now the write is refused, and `--validate=warn` (fieldValidation=Warn) prints one
    warning per unknown field and drops it."""
    pod = f"""apiVersion: v1
kind: Pod
metadata:
  name: ann
  namespace: {ns}
  annotations:
    a: {{value}}
spec:
  containers:
  - name: c
    image: busybox
    imagePullPolcy: Always
"""
    # kubectl refuses it itself, with the very message the server gives; a raw client gets it from the server
    out = cluster.kubectl("create", "-f", "-", input=pod.replace("{value}", "1"), check=False)
    detail = "json: cannot unmarshal number into Go struct field ObjectMeta.metadata.annotations of type string"
    assert out.returncode != 0 and detail in out.stderr, out.stderr
    body = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "ann", "annotations": {"a": 1}},
            "spec": {"containers": [{"name": "c", "image": "busybox"}]}}
    status, err = cluster.server.request(f"/api/v1/namespaces/{ns}/pods", "POST", body)
    assert (status, err["reason"], err["message"]) == (
        400, "BadRequest", f'Pod in version "v1" cannot be handled as a Pod: {detail}')
    out = cluster.kubectl("create", "--validate=warn", "-f", "-", input=pod.replace("{value}", '"1"'))
    assert 'Warning: unknown field "spec.containers[0].imagePullPolcy"' in out.stderr, out.stderr
    pods = client.CoreV1Api(cluster.api).list_namespaced_pod(ns).items
    assert [p.metadata.name for p in pods] == ["ann"] and pods[0].metadata.annotations == {"a": "1"}


METADATA_CASES = [
    ("finalizers", "x"), ("labels", ["a"]), ("labels", {"a": 1.5}), ("annotations", {"a": True}),
    ("ownerReferences", {"a": "b"}), ("uid", 7), ("creationTimestamp", 5), ("generation", "x"),
    ("managedFields", "x"), ("deletionGracePeriodSeconds", "x"), ("resourceVersion", 5),
    ("ownerReferences", [{"apiVersion": "v1", "kind": "X", "name": "n", "uid": "u", "controller": "yes"}]),
]


def test_metadata_type_errors_match_kubectls_own_decoder(cluster: Cluster) -> None:
    """kubectl decodes `metadata` with upstream's Go types before sending anything: its message is the
    oracle for the server's (which must say the same after `<Kind> ... cannot be handled as a <Kind>: `)."""
    for field, value in METADATA_CASES:
        obj = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "meta", field: value}}
        out = cluster.kubectl("create", "-f", "-", input=json.dumps(obj), check=False)
        assert out.returncode != 0
        expected = out.stderr.strip().removeprefix('error: unable to decode "STDIN": ')
        assert expected.startswith("json: cannot unmarshal"), out.stderr
        status, err = cluster.server.request("/api/v1/namespaces/default/configmaps", "POST", obj)
        assert (status, err["message"]) == (
            400, f'ConfigMap in version "v1" cannot be handled as a ConfigMap: {expected}'), (field, value)
