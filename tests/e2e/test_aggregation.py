"""The aggregation layer end to end: an extension API server the test starts on 127.0.0.1 (TLS with its own CA
in caBundle), reached through a selector-less Service whose Endpoints point at it; kubectl sees its API
through lite (raw requests, watch streaming, api-resources), and loses it when it goes unavailable."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from e2ekit import Cluster

from tests.helpers.extapi import ExtensionServer

SVC = "ext-api"


def _manifests(ns: str, port: int, ca: bytes, group: str, version: str) -> str:
    items = [
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": SVC, "namespace": ns},
         "spec": {"ports": [{"name": "https", "port": 443, "targetPort": port}]}},
        {"apiVersion": "v1", "kind": "Endpoints", "metadata": {"name": SVC, "namespace": ns},
         "subsets": [{"addresses": [{"ip": "127.0.0.1"}], "ports": [{"name": "https", "port": port}]}]},
        apiservice(ns, ca, group, version),
    ]
    return yaml.safe_dump_all(items)  # (a v1 List would make kubectl's validation want OpenAPI v2)


def apiservice(ns: str, ca: bytes, group: str, version: str) -> dict[str, object]:
    return {"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService", "metadata": {"name": f"{version}.{group}"},
            "spec": {"group": group, "version": version, "groupPriorityMinimum": 1000, "versionPriority": 15,
                     "service": {"namespace": ns, "name": SVC, "port": 443},
                     "caBundle": base64.b64encode(ca).decode()}}


def wait_available(cluster: Cluster, name: str, want: str, timeout: float = 30) -> str:
    deadline = time.monotonic() + timeout
    while True:
        out = cluster.kubectl("get", "apiservice", name, "--no-headers", check=False).stdout
        if (out and out.split()[2].startswith(want)) or time.monotonic() > deadline:
            return out
        time.sleep(0.3)


def extension_auth(cluster: Cluster) -> dict[str, str]:
    cm = json.loads(cluster.kubectl("get", "configmap", "-n", "kube-system", "extension-apiserver-authentication",
                                    "-o", "json").stdout)
    return cm["data"]  # type: ignore[no-any-return]


@pytest.fixture
def ext(tmp_path: Path, ns: str, cluster: Cluster) -> Iterator[ExtensionServer]:
    """An extension server that, like one built on k8s.io/apiserver, trusts only the front-proxy CA that
    lite publishes in kube-system/extension-apiserver-authentication."""
    server = ExtensionServer(tmp_path, f"{SVC}.{ns}.svc",
                             client_ca=extension_auth(cluster)["requestheader-client-ca-file"]).start()
    yield server
    server.stop()


def test_extension_api_is_served_through_lite(cluster: Cluster, ns: str, ext: ExtensionServer) -> None:
    group = "widgets.lite.test"
    name = f"v1.{group}"
    cluster.kubectl("apply", "-f", "-", input=_manifests(ns, ext.port, ext.ca_pem, group, "v1"))
    try:
        assert "True" in wait_available(cluster, name, "True")
        listed = json.loads(cluster.kubectl("get", "--raw", f"/apis/{group}/v1/namespaces/{ns}/widgets").stdout)
        annotations = listed["items"][0]["metadata"]["annotations"]
        assert annotations == {"remote-user": "system:admin", "remote-groups": "system:masters,system:authenticated"}
        assert all("Authorization" not in h and "authorization" not in h for h in ext.seen)
        allowed = json.loads(extension_auth(cluster)["requestheader-allowed-names"])
        assert ext.peers and set(ext.peers) <= set(allowed)
        watched = cluster.kubectl("get", "--raw", f"/apis/{group}/v1/namespaces/{ns}/widgets?watch=1").stdout
        assert [json.loads(line)["object"]["metadata"]["name"] for line in watched.splitlines()] == ["w1", "w2"]
        resources = cluster.kubectl("api-resources", "--api-group", group).stdout
        assert "widgets" in resources and "wdg" in resources and f"{group}/v1" in resources
        assert "w1" in cluster.kubectl("get", "widgets", "-n", ns).stdout
        posted = {"apiVersion": f"{group}/v1", "kind": "Widget", "metadata": {"name": "big"}, "data": "x" * 100000}
        out = cluster.kubectl("create", "--raw", f"/apis/{group}/v1/namespaces/{ns}/widgets", "-f", "-",
                              input=json.dumps(posted))
        assert json.loads(out.stdout) == posted  # the body went through whole
        index = json.loads(cluster.kubectl("get", "--raw", "/openapi/v3").stdout)["paths"]
        assert f"apis/{group}/v1" in index
        widget = {"apiVersion": f"{group}/v1", "kind": "Widget", "metadata": {"name": "w9", "namespace": ns}}
        created = cluster.kubectl("create", "-f", "-", input=json.dumps(widget))  # kubectl reads the remote doc
        assert "widget.widgets.lite.test/w9 created" in created.stdout
        groups = json.loads(cluster.kubectl("get", "--raw", "/apis").stdout)
        assert group in [g["name"] for g in groups["groups"]]

        cluster.kubectl("delete", "endpoints", SVC, "-n", ns)
        gone = cluster.kubectl("get", "--raw", f"/apis/{group}/v1/namespaces/{ns}/widgets", check=False)
        assert gone.returncode != 0 and "unable to handle the request" in gone.stderr
        out = wait_available(cluster, name, "False")
        assert "False (EndpointsNotFound)" in out
        assert group not in cluster.kubectl("api-resources").stdout
    finally:
        cluster.kubectl("delete", "apiservice", name, "--ignore-not-found")


def test_installed_metrics_server_replaces_builtin_metrics(cluster: Cluster, ns: str, tmp_path: Path) -> None:
    server = ExtensionServer(tmp_path, f"{SVC}.{ns}.svc", group="metrics.k8s.io", version="v1beta1").start()
    local = json.loads(cluster.kubectl("get", "apiservice", "v1beta1.metrics.k8s.io", "-o", "json").stdout)
    try:
        cluster.kubectl("apply", "-f", "-", input=_manifests(ns, server.port, server.ca_pem, "metrics.k8s.io",
                                                              "v1beta1"))
        assert "True" in wait_available(cluster, "v1beta1.metrics.k8s.io", "True")
        doc = json.loads(cluster.kubectl("get", "--raw", "/apis/metrics.k8s.io/v1beta1").stdout)
        assert [r["name"] for r in doc["resources"]] == ["widgets"]  # the remote list, not lite's pods/nodes
    finally:
        restore = {"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
                   "metadata": {"name": "v1beta1.metrics.k8s.io"}, "spec": local["spec"]}
        cluster.kubectl("replace", "-f", "-", input=json.dumps(restore))
        server.stop()
    doc = json.loads(cluster.kubectl("get", "--raw", "/apis/metrics.k8s.io/v1beta1").stdout)
    assert sorted(r["name"] for r in doc["resources"]) == ["nodes", "pods"]


def test_crd_groups_get_a_local_apiservice(cluster: Cluster) -> None:
    group = "gadgets.lite.test"
    crd = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
           "metadata": {"name": f"gadgets.{group}"},
           "spec": {"group": group, "scope": "Namespaced",
                    "names": {"plural": "gadgets", "singular": "gadget", "kind": "Gadget"},
                    "versions": [{"name": "v1", "served": True, "storage": True,
                                  "schema": {"openAPIV3Schema": {"type": "object",
                                                                 "x-kubernetes-preserve-unknown-fields": True}}}]}}
    cluster.kubectl("apply", "-f", "-", input=json.dumps(crd))
    try:
        assert "True" in wait_available(cluster, f"v1.{group}", "True")
        got = json.loads(cluster.kubectl("get", "apiservice", f"v1.{group}", "-o", "json").stdout)
        assert got["spec"]["service"] is None
        assert got["metadata"]["labels"]["kube-aggregator.kubernetes.io/automanaged"] == "true"
    finally:
        cluster.kubectl("delete", "crd", f"gadgets.{group}")
    deadline = time.monotonic() + 30
    while f"v1.{group}" in cluster.kubectl("get", "apiservices").stdout:
        assert time.monotonic() < deadline, "the CRD's APIService was not removed"
        time.sleep(0.3)
