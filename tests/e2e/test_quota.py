"""ResourceQuota and LimitRange against a real lite server: real kubectl and the official Python client.

The issue's acceptance: quotas on pods, cpu and `count/deployments.apps`; 50 concurrent creates never exceed
them; `kubectl describe quota` shows exact usage; usage goes back down after deletes.
"""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from e2ekit import Cluster

QUOTA = """\
apiVersion: v1
kind: ResourceQuota
metadata: {name: team}
spec:
  hard: {pods: "10", requests.cpu: "5", count/deployments.apps: "1"}
"""

LIMITS = """\
apiVersion: v1
kind: LimitRange
metadata: {name: mem}
spec:
  limits:
  - type: Container
    max: {memory: 512Mi}
    default: {memory: 256Mi}
    defaultRequest: {memory: 128Mi, cpu: 100m}
"""


def used(cluster: Cluster, ns: str, name: str) -> dict[str, str]:
    out = cluster.kubectl("-n", ns, "get", "resourcequota", name, "-o", "json").stdout
    return dict((json.loads(out).get("status") or {}).get("used") or {})


def wait_used(cluster: Cluster, ns: str, name: str, want: dict[str, str], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while (got := used(cluster, ns, name)) != want:
        assert time.monotonic() < deadline, f"quota {name} used {got}, want {want}"
        time.sleep(0.2)


def pod(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"containers": [{"name": "c", "image": "busybox:1", "resources": {"requests": {"cpu": "200m"}}}]}}


def test_quota_under_concurrent_creates_describe_and_deletes(cluster: Cluster, ns: str) -> None:
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    cluster.kubectl("-n", ns, "apply", "-f", "-", input=QUOTA)
    wait_used(cluster, ns, "team", {"pods": "0", "requests.cpu": "0", "count/deployments.apps": "0"})
    core = client.CoreV1Api(cluster.api)

    def create(i: int) -> str:
        try:
            core.create_namespaced_pod(ns, pod(f"p{i}"))
            return "ok"
        except ApiException as e:
            assert e.status == 403, e.body
            return str(json.loads(e.body)["message"])

    with ThreadPoolExecutor(16) as pool:
        results = list(pool.map(create, range(50)))
    assert results.count("ok") == 10
    refusals = [r for r in results if r != "ok"]
    assert all("exceeded quota: team, requested: pods=1, used: pods=10, limited: pods=10" in r for r in refusals), \
        refusals[:3]
    assert len(core.list_namespaced_pod(ns).items) == 10
    assert used(cluster, ns, "team") == {"pods": "10", "requests.cpu": "2", "count/deployments.apps": "0"}

    described = cluster.kubectl("-n", ns, "describe", "quota", "team").stdout
    rows = {line.split()[0]: line.split()[1:] for line in described.splitlines()
            if line.split() and line.split()[0] in ("pods", "requests.cpu", "count/deployments.apps")}
    assert rows == {"pods": ["10", "10"], "requests.cpu": ["2", "5"], "count/deployments.apps": ["0", "1"]}, described

    deploy = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d1"}, "spec": {
        "replicas": 0, "selector": {"matchLabels": {"a": "b"}},
        "template": {"metadata": {"labels": {"a": "b"}}, "spec": {"containers": [{"name": "c", "image": "x"}]}}}}
    apps = client.AppsV1Api(cluster.api)
    apps.create_namespaced_deployment(ns, deploy)
    deploy["metadata"]["name"] = "d2"
    second = cluster.kubectl("-n", ns, "create", "-f", "-", input=json.dumps(deploy), check=False)
    assert second.returncode != 0
    assert ('Error from server (Forbidden): error when creating "STDIN": deployments.apps "d2" is forbidden: '
            'exceeded quota: team, requested: count/deployments.apps=1, used: count/deployments.apps=1, '
            'limited: count/deployments.apps=1') in second.stderr

    for i in range(50):
        if results[i] == "ok" and i % 2 == 0:
            core.delete_namespaced_pod(f"p{i}", ns, grace_period_seconds=0)
    apps.delete_namespaced_deployment("d1", ns)
    left = len(core.list_namespaced_pod(ns).items)
    wait_used(cluster, ns, "team", {"pods": str(left), "requests.cpu": f"{left * 200}m" if left % 5 else str(left // 5),
                                    "count/deployments.apps": "0"})


def test_limitrange_defaults_and_max_with_kubectl(cluster: Cluster, ns: str) -> None:
    cluster.kubectl("-n", ns, "apply", "-f", "-", input=LIMITS)
    cluster.kubectl("-n", ns, "run", "small", "--image=busybox:1", "--restart=Never")
    got = json.loads(cluster.kubectl("-n", ns, "get", "pod", "small", "-o", "json").stdout)
    assert got["spec"]["containers"][0]["resources"] == {"limits": {"memory": "256Mi"},
                                                         "requests": {"cpu": "100m", "memory": "128Mi"}}
    big = pod("big")
    big["spec"]["containers"][0]["resources"] = {"limits": {"memory": "1Gi"}}
    out = cluster.kubectl("-n", ns, "create", "-f", "-", input=json.dumps(big), check=False)
    assert out.returncode != 0
    assert ('pods "big" is forbidden: maximum memory usage per Container is 512Mi, but limit is 1Gi'
            in out.stderr), out.stderr
    described = cluster.kubectl("-n", ns, "describe", "limitrange", "mem").stdout
    assert "Container   memory" in described and "512Mi" in described and "256Mi" in described, described
