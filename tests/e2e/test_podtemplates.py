"""core/v1 PodTemplate through the real kubectl and the Python client: discovery, create, get (table), a
strategic merge patch, a bad template refused with 422, and deletecollection."""

from __future__ import annotations

import json

from e2ekit import Cluster


def _pt(name: str, image: str = "busybox", **labels: str) -> dict[str, object]:
    return {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": name, "labels": labels},
            "template": {"metadata": {"labels": {"app": name}},
                         "spec": {"containers": [{"name": "main", "image": image}]}}}


def test_podtemplates_with_kubectl(cluster: Cluster, ns: str) -> None:
    resources = cluster.kubectl("api-resources", "--api-group=", "-o", "wide").stdout
    row = next(line for line in resources.splitlines() if line.startswith("podtemplates "))
    assert "PodTemplate" in row and "true" in row.split() and "deletecollection" in row
    for name in ("web", "db"):
        cluster.kubectl("-n", ns, "create", "-f", "-", input=json.dumps(_pt(name, set="one")))
    cluster.kubectl("-n", ns, "create", "-f", "-", input=json.dumps(_pt("keep", image="nginx:1")))
    out = cluster.kubectl("-n", ns, "get", "podtemplates").stdout.splitlines()
    assert out[0].split() == ["NAME", "CONTAINERS", "IMAGES", "POD", "LABELS"]
    assert [line.split() for line in out[1:]] == [["db", "main", "busybox", "app=db"],
                                                  ["keep", "main", "nginx:1", "app=keep"],
                                                  ["web", "main", "busybox", "app=web"]]
    got = json.loads(cluster.kubectl("-n", ns, "get", "podtemplate", "web", "-o", "json").stdout)
    assert got["template"]["spec"]["restartPolicy"] == "Always"
    side = {"template": {"spec": {"containers": [{"name": "side", "image": "nginx:2"}]}}}
    cluster.kubectl("-n", ns, "patch", "podtemplate", "web", "-p", json.dumps(side))  # strategic: merged by name
    # upstream's mergeSortedSlice puts a patch item absent from the live list before the server-only ones
    assert cluster.kubectl("-n", ns, "get", "podtemplate", "web", "--no-headers").stdout.split() == \
        ["web", "side,main", "nginx:2,busybox", "app=web"]

    bad = _pt("bad")
    bad["template"]["spec"]["containers"] = []  # type: ignore[index]
    proc = cluster.kubectl("-n", ns, "create", "-f", "-", input=json.dumps(bad), check=False)
    assert proc.returncode != 0
    assert 'PodTemplate "bad" is invalid' in proc.stderr and "template.spec.containers: Required value" in proc.stderr

    from kubernetes import client

    core = client.CoreV1Api(cluster.api)
    core.delete_collection_namespaced_pod_template(ns, label_selector="set=one")
    left = core.list_namespaced_pod_template(ns)
    assert [p.metadata.name for p in left.items] == ["keep"]
    assert left.items[0].template.spec.containers[0].image == "nginx:1"
