"""Issue 18: upstream's "Should recreate evicted statefulset" against a `lite server` plus a real node agent (the
node fixture of `test_pods`, one cluster for this module), driven by the real kubectl.

A plain pod holds hostPort 21017 on the node; a StatefulSet pinned to that node wants the same hostPort. The
agent's admission (kubelet's NodePorts predicate) rejects `ss-0` (phase Failed, reason NodePorts, upstream's
message); the StatefulSet controller deletes it and makes it again, over and over, while the port is taken.
Once the conflicting pod is deleted, `ss-0` comes back Running under a uid never seen before.
Needs root, kubectl, docker-registry, busybox-static.
"""

from __future__ import annotations

import json

import pytest
from e2ekit import unique
from test_pods import IMAGE, Node, node  # noqa: F401 - the module's cluster fixture

pytestmark = [pytest.mark.root, pytest.mark.timeout(600)]
PORT = 21017


def test_statefulset_pod_rejected_by_the_node_is_recreated(node: Node) -> None:  # noqa: F811
    ns = unique("ssev")
    node.kubectl("create", "namespace", ns)
    port = {"containerPort": PORT, "hostPort": PORT}
    holder = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "test-pod"},
              "spec": {"nodeName": "e2e-node", "terminationGracePeriodSeconds": 0,
                       "containers": [{"name": "c", "image": IMAGE, "command": ["sleep", "3600"], "ports": [port]}]}}
    node.kubectl("apply", "-n", ns, "-f", "-", input=json.dumps(holder))
    node.wait_ready(ns, "test-pod")
    sts = {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "ss"},
           "spec": {"replicas": 1, "serviceName": "ss", "selector": {"matchLabels": {"app": "ss"}},
                    "template": {"metadata": {"labels": {"app": "ss"}},
                                 "spec": {"nodeName": "e2e-node", "terminationGracePeriodSeconds": 0,
                                          "containers": [{"name": "c", "image": IMAGE, "command": ["sleep", "3600"],
                                                          "ports": [port]}]}}}}
    fmt = 'jsonpath={.metadata.uid} {.status.phase} {.status.reason} {.status.message}{"\\n"}'
    with node.cluster.kubectl_stream("get", "pods", "-n", ns, "--field-selector", "metadata.name=ss-0",
                                     "-w", "-o", fmt) as (_, lines):
        node.kubectl("apply", "-n", ns, "-f", "-", input=json.dumps(sts))
        failed = lines.wait_for(lambda line: " Failed " in line, timeout=90)
        first_uid = failed.split()[0]
        assert failed.split(" ", 3)[2:] == ["NodePorts", "Pod was rejected: Predicate NodePorts failed: node(s) "
                                            "didn't have free ports for the requested pod ports"], failed
        lines.wait_for(lambda line: bool(line) and line.split()[0] != first_uid, timeout=90)  # re-created
    events = node.kubectl("get", "events", "-n", ns, "--field-selector", "involvedObject.name=ss",
                          "-o", "jsonpath={.items[*].message}").stdout
    assert "delete Pod ss-0 in StatefulSet ss successful" in events, events
    seen = {line.split()[0] for line in lines.seen if line}
    node.kubectl("delete", "pod", "-n", ns, "test-pod", "--grace-period=0", "--force")
    node.wait(lambda: (node.pod(ns, "ss-0").get("status") or {}).get("phase") == "Running", 120, "ss-0 Running")
    assert node.pod(ns, "ss-0")["metadata"]["uid"] not in seen
