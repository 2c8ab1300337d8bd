"""NetworkPolicy for real, end to end: a `lite server`, a node agent with its service proxy and policy
enforcement in a node netns of its own, real pods (busybox from the test registry), the real kubectl.

`lite.dev/depends-on: "db"` on a Deployment's template: its pods reach `db` (by name: DNS is allowed too) but
not `cache`, and the refusal is counted and reported as a Warning event on the pod. Reuses the node fixture of
`test_pods` (same safety: every netns, pod and cgroup is this module's own).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from test_pods import IMAGE, Node, _apply, _pods, node, ns  # noqa: F401 - fixtures used by name

pytestmark = [pytest.mark.root, pytest.mark.e2e, pytest.mark.timeout(600)]


def server_deployment(name: str) -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}}, "spec": {
                         "terminationGracePeriodSeconds": 1,
                         "containers": [{"name": "web", "image": IMAGE,
                                         "command": ["httpd", "-f", "-p", "80", "-h", "/www"],
                                         "ports": [{"name": "http", "containerPort": 80}]}]}}}}


def service(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name},
            "spec": {"selector": {"app": name}, "ports": [{"port": 8080, "targetPort": "http"}]}}


def client(depends_on: str) -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "app"},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "app"}},
                     "template": {"metadata": {"labels": {"app": "app"},
                                               "annotations": {"lite.dev/depends-on": depends_on}},
                                  "spec": {"terminationGracePeriodSeconds": 1, "containers": [
                                      {"name": "c", "image": IMAGE, "command": ["sleep", "3600"]}]}}}}


def test_depends_on_reaches_db_not_cache_and_reports_the_refusal(node: Node, ns: str) -> None:  # noqa: F811
    for name in ("db", "cache"):
        _apply(node, ns, server_deployment(name))
        _apply(node, ns, service(name))
    _apply(node, ns, client("db"))
    node.wait(lambda: len(_pods(node, ns, "app in (db,cache,app)")) == 3, 120, "3 pods")
    for pod in _pods(node, ns, "app in (db,cache,app)"):
        node.wait_ready(ns, pod["metadata"]["name"])
    app = _pods(node, ns, "app=app")[0]["metadata"]["name"]
    cache_ip = node.kubectl("get", "service", "-n", ns, "cache", "-o", "jsonpath={.spec.clusterIP}").stdout.strip()

    table = node.kubectl("get", "networkpolicy", "-n", ns).stdout
    assert "app-depends-on" in table and "app=app" in table, table  # NAME, POD-SELECTOR columns

    def fetch(url: str) -> bool:
        out = node.kubectl("exec", "-n", ns, app, "--", "timeout", "3", "wget", "-qO-", url, check=False)
        return "hello from lite" in out.stdout

    # busybox wget -T crashes here; `timeout 3` bounds a dropped connection instead.
    node.wait(lambda: not fetch(f"http://{cache_ip}:8080/"), 60, "cache refused once the policy is enforced")
    node.wait(lambda: fetch("http://db:8080/"), 60, "db reachable by name (DNS and db allowed)")
    assert not fetch(f"http://cache.{ns}.svc.cluster.local:8080/")

    def denied_event() -> bool:
        events = json.loads(node.kubectl("get", "events", "-n", ns, "-o", "json").stdout)["items"]
        return any(e.get("reason") == "NetworkPolicyDenied" and e["involvedObject"].get("name") == app
                   and e.get("type") == "Warning" for e in events)

    node.wait(denied_event, 60, "a NetworkPolicyDenied Warning event on the pod")

    def counted() -> bool:  # the agent's metrics, as the node's kubelet-like summary shows them
        raw = node.kubectl("get", "--raw", "/api/v1/nodes/e2e-node/proxy/stats/summary", check=False).stdout
        pods = json.loads(raw or "{}").get("pods") or []
        return any(p["podRef"]["name"] == app and p.get("networkPolicyRefused", 0) > 0 for p in pods)

    node.wait(counted, 60, "the refusals counted in the node's stats summary")

    # Dropping the annotation removes the policy, and with it the isolation.
    node.kubectl("patch", "deployment", "-n", ns, "app", "--type=json", "-p",
                 '[{"op": "remove", "path": "/spec/template/metadata/annotations"}]')
    node.wait(lambda: "app-depends-on" not in node.kubectl("get", "networkpolicy", "-n", ns).stdout, 60,
              "the generated policy removed")


def sleeper(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"app": name}},
            "spec": {"terminationGracePeriodSeconds": 1,
                     "containers": [{"name": "c", "image": IMAGE, "command": ["sleep", "3600"]}]}}


def test_default_deny_then_allow_from_a_labelled_namespace(node: Node, ns: str) -> None:  # noqa: F811
    _apply(node, ns, server_deployment("web"))
    friends, strangers = f"{ns}-x", f"{ns}-y"
    node.kubectl("create", "namespace", friends)
    node.kubectl("create", "namespace", strangers)
    try:
        node.kubectl("label", "namespace", friends, "team=x")
        _apply(node, friends, sleeper("client"))
        _apply(node, strangers, sleeper("client"))
        node.wait(lambda: len(_pods(node, ns, "app=web")) == 1, 60, "web pod")
        web = node.wait_ready(ns, _pods(node, ns, "app=web")[0]["metadata"]["name"])
        for space in (friends, strangers):
            node.wait_ready(space, "client")
        url = f"http://{web['status']['podIP']}/"

        def fetch(space: str) -> bool:
            out = node.kubectl("exec", "-n", space, "client", "--", "timeout", "3", "wget", "-qO-", url,
                               check=False)
            return "hello from lite" in out.stdout

        assert fetch(friends) and fetch(strangers)
        deny = {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": {"name": "deny"},
                "spec": {"podSelector": {}}}
        _apply(node, ns, deny)
        node.wait(lambda: not fetch(friends), 60, "default deny blocks")
        assert not fetch(strangers)
        allow = {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": {"name": "team-x"},
                 "spec": {"podSelector": {"matchLabels": {"app": "web"}},
                          "ingress": [{"from": [{"namespaceSelector": {"matchLabels": {"team": "x"}}}]}]}}
        _apply(node, ns, allow)
        node.wait(lambda: fetch(friends), 60, "the labelled namespace is let in")
        assert not fetch(strangers)
    finally:
        node.kubectl("delete", "namespace", friends, strangers, "--wait=false", check=False)
