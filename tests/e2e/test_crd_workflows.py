"""CustomResourceDefinitions as operators use them, with the real kubectl and the official Python client:
printer columns (cert-manager-like Certificate, JSONPath filters, `-o wide`) and CRD deletion as upstream
(Terminating, instances deleted normally with their finalizers honoured, creates refused, the CRD gone last)."""

from __future__ import annotations

import json
import subprocess
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from e2ekit import KUBECTL, Cluster, unique
from liteproc import LiteServer, find_free_port


def _until(pred: Callable[[], Any], timeout: float = 30, what: str = "") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        got = pred()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what or pred}")
        time.sleep(0.2)


def _certificate_crd(group: str) -> str:
    return f"""apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {{name: certificates.{group}}}
spec:
  group: {group}
  scope: Namespaced
  names: {{plural: certificates, singular: certificate, kind: Certificate, shortNames: [cert]}}
  versions:
  - name: v1
    served: true
    storage: true
    subresources: {{status: {{}}}}
    additionalPrinterColumns:
    - {{jsonPath: '.status.conditions[?(@.type=="Ready")].status', name: Ready, type: string}}
    - {{jsonPath: .spec.secretName, name: Secret, type: string}}
    - {{jsonPath: .spec.issuerRef.name, name: Issuer, priority: 1, type: string}}
    - {{jsonPath: '.status.conditions[?(@.type=="Ready")].message', name: Status, priority: 1, type: string}}
    - {{jsonPath: .spec.replicas, name: Replicas, type: integer}}
    - {{jsonPath: .spec.paused, name: Paused, type: boolean}}
    - {{jsonPath: .metadata.creationTimestamp, name: Age, type: date,
       description: CreationTimestamp is a timestamp}}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              secretName: {{type: string}}
              replicas: {{type: integer}}
              paused: {{type: boolean}}
              issuerRef: {{type: object, properties: {{name: {{type: string}}}}}}
          status:
            type: object
            properties:
              conditions:
                type: array
                items:
                  type: object
                  properties:
                    type: {{type: string}}
                    status: {{type: string}}
                    message: {{type: string}}
"""


def test_printer_columns_in_kubectl_get(cluster: Cluster, ns: str) -> None:
    group = f"{unique('pc')}.example.com"
    cluster.kubectl("apply", "-f", "-", input=_certificate_crd(group))
    _until(lambda: cluster.kubectl("get", f"certificates.{group}", "-n", ns, check=False).returncode == 0,
           what="the Certificate kind to be served")
    cluster.kubectl("apply", "-f", "-", input=f"""apiVersion: {group}/v1
kind: Certificate
metadata: {{name: web, namespace: {ns}}}
spec: {{secretName: web-tls, replicas: 2, paused: false, issuerRef: {{name: letsencrypt}}}}
""")
    from kubernetes import client
    api = client.CustomObjectsApi(cluster.api)
    api.patch_namespaced_custom_object_status(group, "v1", ns, "certificates", "web", {"status": {"conditions": [
        {"type": "Issuing", "status": "False", "message": "not now"},
        {"type": "Ready", "status": "True", "message": "Certificate is up to date and has not expired"}]}})
    lines = cluster.kubectl("get", f"certificates.{group}", "-n", ns).stdout.splitlines()
    assert lines[0].split() == ["NAME", "READY", "SECRET", "REPLICAS", "PAUSED", "AGE"], lines
    assert lines[1].split()[:5] == ["web", "True", "web-tls", "2", "false"], lines
    wide = cluster.kubectl("get", f"certificates.{group}", "-n", ns, "-o", "wide").stdout.splitlines()
    assert wide[0].split() == ["NAME", "READY", "SECRET", "ISSUER", "STATUS", "REPLICAS", "PAUSED", "AGE"], wide
    assert "letsencrypt   Certificate is up to date and has not expired" in wide[1], wide
    # the Table the server sends: types, priorities and descriptions as the CRD says
    server = cluster.server
    req = urllib.request.Request(f"{server.url}/apis/{group}/v1/namespaces/{ns}/certificates", headers={
        "Accept": "application/json;as=Table;v=v1;g=meta.k8s.io", "Authorization": f"Bearer {server.token()}"})
    with urllib.request.urlopen(req, context=server.ssl_context(), timeout=30) as resp:
        cols = {c["name"]: c for c in json.loads(resp.read())["columnDefinitions"]}
    assert (cols["Replicas"]["type"], cols["Paused"]["type"], cols["Issuer"]["priority"]) == ("integer", "boolean", 1)
    assert cols["Age"]["description"] == "CreationTimestamp is a timestamp"
    assert cols["Secret"]["description"] == ("Custom resource definition column (in JSONPath format): "
                                             ".spec.secretName")
    cluster.kubectl("delete", "crd", f"certificates.{group}")


def _widget_crd(group: str) -> str:
    return f"""apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {{name: widgets.{group}}}
spec:
  group: {group}
  scope: Namespaced
  names: {{plural: widgets, singular: widget, kind: Widget}}
  versions:
  - name: v1
    served: true
    storage: true
    schema: {{openAPIV3Schema: {{type: object, x-kubernetes-preserve-unknown-fields: true}}}}
"""


def test_crd_deletion_waits_for_instances_and_their_finalizers(cluster: Cluster, ns: str) -> None:
    from kubernetes import client
    from kubernetes.client.rest import ApiException
    group = f"{unique('del')}.example.com"
    name = f"widgets.{group}"
    ext = client.ApiextensionsV1Api(cluster.api)
    api = client.CustomObjectsApi(cluster.api)
    cluster.kubectl("apply", "-f", "-", input=_widget_crd(group))
    _until(lambda: cluster.kubectl("get", name, "-n", ns, check=False).returncode == 0, what="widgets served")
    for wname, fin in (("plain", None), ("held", "example.com/cleanup")):
        meta: dict[str, Any] = {"name": wname}
        if fin:
            meta["finalizers"] = [fin]
        api.create_namespaced_custom_object(group, "v1", ns, "widgets", {
            "apiVersion": f"{group}/v1", "kind": "Widget", "metadata": meta, "spec": {"x": 1}})
    cluster.kubectl("delete", "crd", name, "--wait=false")

    def terminating() -> dict[str, Any] | None:
        crd = ext.read_custom_resource_definition(name).to_dict()
        conds = {c["type"]: c for c in crd["status"]["conditions"]}
        held = api.get_namespaced_custom_object(group, "v1", ns, "widgets", "held")
        if conds["Terminating"]["reason"] == "InstanceDeletionInProgress" and held["metadata"].get(
                "deletionTimestamp"):
            return crd
        return None
    crd = _until(terminating, what="the CRD to be Terminating with its held object being deleted")
    assert crd["metadata"]["finalizers"] == ["customresourcecleanup.apiextensions.k8s.io"]
    assert crd["metadata"]["deletion_timestamp"] is not None
    conds = {c["type"]: c for c in crd["status"]["conditions"]}
    assert conds["Terminating"]["status"] == "True" and conds["Established"]["status"] == "True"
    assert conds["Terminating"]["message"] == "CustomResource deletion is in progress"
    left = api.list_namespaced_custom_object(group, "v1", ns, "widgets")["items"]
    assert [w["metadata"]["name"] for w in left] == ["held"]
    with pytest.raises(ApiException) as e:
        api.create_namespaced_custom_object(group, "v1", ns, "widgets", {
            "apiVersion": f"{group}/v1", "kind": "Widget", "metadata": {"name": "late"}})
    assert e.value.status == 405
    body = json.loads(e.value.body)
    assert body["reason"] == "MethodNotAllowed"
    assert body["message"] == "create not allowed while custom resource definition is terminating"
    refused = cluster.kubectl("create", "-f", "-", check=False, input=f"""apiVersion: {group}/v1
kind: Widget
metadata: {{name: late, namespace: {ns}}}
""")
    assert refused.returncode != 0 and "create not allowed while custom resource definition is terminating" in \
        refused.stderr, refused.stderr
    assert cluster.kubectl("get", "crd", name, "-o", "jsonpath={.metadata.deletionTimestamp}").stdout
    # the owner of the finalizer finishes: the object goes, then the CRD
    cluster.kubectl("patch", name, "held", "-n", ns, "--type=merge", "-p", '{"metadata":{"finalizers":null}}')
    cluster.kubectl("wait", "--for=delete", f"crd/{name}", "--timeout=30s")
    gone = cluster.kubectl("get", "crd", name, check=False)
    assert gone.returncode != 0 and "NotFound" in gone.stderr
    # a new CRD of the same name starts empty
    cluster.kubectl("apply", "-f", "-", input=_widget_crd(group))
    _until(lambda: cluster.kubectl("get", name, "-n", ns, check=False).returncode == 0, what="widgets served")
    assert api.list_namespaced_custom_object(group, "v1", ns, "widgets")["items"] == []
    cluster.kubectl("delete", "crd", name)  # kubectl waits until it is gone
    assert cluster.kubectl("get", "crd", name, check=False).returncode != 0


def test_crd_deletion_without_the_controller_manager(tmp_path: Path) -> None:
    """Upstream's CRD finalizer is part of the API server: a server without the controller manager still
    deletes a CRD with its objects."""
    server = LiteServer(tmp_path / "data", find_free_port(), extra=("--disable-controller-manager",)).start()
    try:
        server.wait_ready(60)
        kubectl = [KUBECTL, "--kubeconfig", str(server.kubeconfig)]

        def run(*args: str, input: str | None = None) -> subprocess.CompletedProcess[str]:
            return subprocess.run([*kubectl, *args], input=input, capture_output=True, text=True, timeout=120)
        group = f"{unique('nocm')}.example.com"
        assert run("apply", "-f", "-", input=_widget_crd(group)).returncode == 0
        _until(lambda: run("get", f"widgets.{group}", "-n", "default").returncode == 0, what="widgets served")
        made = run("create", "-f", "-", input=f"apiVersion: {group}/v1\nkind: Widget\n"
                                               "metadata: {name: w, namespace: default}\n")
        assert made.returncode == 0, made.stderr
        gone = run("delete", "crd", f"widgets.{group}", "--timeout=60s")
        assert gone.returncode == 0, gone.stderr
        assert run("get", "crd", f"widgets.{group}").returncode != 0
    finally:
        code = server.stop(timeout=15)
        assert code == 0, server.log_tail()
