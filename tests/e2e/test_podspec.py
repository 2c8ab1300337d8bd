"""The issue's pod-spec attacks through the real clients: kubectl prints upstream's Invalid message and the
official Python client gets a 422 with the field's cause; nothing is stored."""

from __future__ import annotations

import json

import pytest
from e2ekit import Cluster

TRAVERSAL = {
    "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "escape"},
    "spec": {"containers": [{"name": "c", "image": "busybox", "volumeMounts": [
        {"name": "../../../../tmp/x", "mountPath": "/x"}]}],
        "volumes": [{"name": "../../../../tmp/x", "emptyDir": {"medium": "Memory"}}]},
}


def test_kubectl_volume_name_traversal_is_invalid(cluster: Cluster, ns: str) -> None:
    out = cluster.kubectl("apply", "-n", ns, "-f", "-", input=json.dumps(TRAVERSAL), check=False)
    assert out.returncode != 0
    assert 'The Pod "escape" is invalid: ' in out.stderr
    assert 'spec.volumes[0].name: Invalid value: "../../../../tmp/x": a lowercase RFC 1123 label must consist ' \
           "of lower case alphanumeric characters or '-'" in out.stderr
    missing = cluster.kubectl("get", "pod", "escape", "-n", ns, check=False)
    assert "NotFound" in missing.stderr


def test_python_client_setuid_mode_and_bad_quantity(cluster: Cluster, ns: str) -> None:
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    core = client.CoreV1Api(cluster.api)
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "setuid"},
           "spec": {"containers": [{"name": "c", "image": "busybox"}],
                    "volumes": [{"name": "cfg", "configMap": {"name": "cm", "defaultMode": 0o4755}}]}}
    with pytest.raises(ApiException) as e:
        core.create_namespaced_pod(ns, pod)
    assert e.value.status == 422
    status = json.loads(e.value.body)
    assert status["reason"] == "Invalid"
    assert {"reason": "FieldValueInvalid", "field": "spec.volumes[0].configMap.defaultMode",
            "message": "Invalid value: 2541: must be a number between 0 and 0777 (octal), both inclusive"} \
        in status["details"]["causes"]
    pod["spec"] = {"containers": [{"name": "c", "image": "busybox", "resources": {"limits": {"memory": "lots"}}}]}
    with pytest.raises(ApiException) as e:
        core.create_namespaced_pod(ns, pod)
    assert e.value.status == 400 and "quantities must match the regular expression" in e.value.body
    assert core.list_namespaced_pod(ns).items == []
