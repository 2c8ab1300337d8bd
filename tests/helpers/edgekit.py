"""Shared bits of issue 21's edge-autonomy test and bench (not a test module): the workloads pinned to one node
and the checks made from inside that node's netns (no server needed).

Workloads (namespace default, every pod on the edge node):
- `web`: a Deployment (2 replicas, nodeSelector on the node's hostname) whose busybox httpd serves its pod name at
  `/`, the ConfigMap `web-config` mounted at `/cm` and the Secret `web-secret` at `/sec`; a ClusterIP Service
  `web` (port 80 → 8080) in front.
- `edit`: a Deployment pinned the same way, changed on the server while the node is cut off.
- `keep`: 1 replica, pod annotations `lite.dev/lost-after: 20s` and `lite.dev/replace-when-lost: "false"`.
- `move`: 1 replica, `lite.dev/lost-after: 20s` only.
`keep` and `move` carry no node selector (a replacement may go anywhere); they land on the edge node because
the test cordons the other nodes while creating them.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from tests.helpers.netcluster import IMAGE, NetCluster, NetNode

NEW_IMAGE = "lite.test/busybox:edge"  # the image `edit` is changed to while its node is cut off

Obj = dict[str, Any]
ZONE = "default.svc.cluster.local"
LOST_AFTER = "lite.dev/lost-after"
REPLACE = "lite.dev/replace-when-lost"
SERVE = "mkdir -p /www; hostname > /www/index.html; exec httpd -f -p 8080 -h /www"


def _deployment(name: str, replicas: int, *, node: str | None = None, annotations: dict[str, str] | None = None,
                volumes: list[Obj] | None = None, mounts: list[Obj] | None = None) -> Obj:
    labels = {"app": name}
    container: Obj = {"name": "c", "image": IMAGE, "imagePullPolicy": "Never", "command": ["sh", "-c", SERVE],
                      "readinessProbe": {"tcpSocket": {"port": 8080}, "periodSeconds": 1}}
    if mounts:
        container["volumeMounts"] = mounts
    spec: Obj = {"terminationGracePeriodSeconds": 0, "containers": [container]}
    if node is not None:
        spec["nodeSelector"] = {"kubernetes.io/hostname": node}
    if volumes:
        spec["volumes"] = volumes
    meta: Obj = {"labels": labels}
    if annotations:
        meta["annotations"] = annotations
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
            "spec": {"replicas": replicas, "selector": {"matchLabels": labels},
                     "strategy": {"type": "RollingUpdate",
                                  "rollingUpdate": {"maxSurge": "100%", "maxUnavailable": 0}},
                     "template": {"metadata": meta, "spec": spec}}}


def config(greeting: str, password: str) -> list[Obj]:
    """The ConfigMap and Secret `web` mounts, with the given contents."""
    return [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "web-config"},
             "data": {"greeting": greeting}},
            {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "web-secret"},
             "stringData": {"password": password}}]


def web(node: str, replicas: int = 2) -> list[Obj]:
    volumes = [{"name": "cm", "configMap": {"name": "web-config"}},
               {"name": "sec", "secret": {"secretName": "web-secret"}}]
    mounts = [{"name": "cm", "mountPath": "/www/cm"}, {"name": "sec", "mountPath": "/www/sec"}]
    service = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"},
               "spec": {"selector": {"app": "web"},
                        "ports": [{"name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP"}]}}
    return [_deployment("web", replicas, node=node, volumes=volumes, mounts=mounts), service]


def edit(node: str) -> Obj:
    return _deployment("edit", 1, node=node)


def keep() -> Obj:
    return _deployment("keep", 1, annotations={LOST_AFTER: "20s", REPLACE: "false"})


def move() -> Obj:
    return _deployment("move", 1, annotations={LOST_AFTER: "20s"})


def second_image(node: NetNode) -> None:
    """`net_cluster(prepare=...)`: NEW_IMAGE in the node's air-gap drop too (busybox under another name)."""
    from tests.helpers.images import Image, Layer, busybox_entries, docker_save_tar

    docker_save_tar(node.data_dir / "agent" / "images" / "edge.tar", Image([Layer.build(busybox_entries())]),
                    [NEW_IMAGE])


def cordon(cluster: NetCluster, nodes: list[NetNode], on: bool) -> None:
    cluster.kubectl("cordon" if on else "uncordon", *(n.name for n in nodes))


def node_get(cluster: NetCluster, node: NetNode, url: str, timeout: int = 2) -> str | None:
    """`wget -qO- url` from the node's own netns (its service proxy, no pod involved): the body, None on error."""
    r = cluster.run_in(node.netns, "wget", "-qO-", "-T", str(timeout), url, timeout=timeout + 10)
    return r.stdout.strip() if r.returncode == 0 else None


# One A query to the node-local cluster DNS (through the kube-dns ClusterIP); prints the addresses or the rcode.
_RESOLVE = """
import sys
import dns.message, dns.query, dns.rcode, dns.rdatatype
r = dns.query.udp(dns.message.make_query(sys.argv[1], "A"), sys.argv[2], timeout=2)
print(" ".join(rd.to_text() for rr in r.answer if rr.rdtype == dns.rdatatype.A for rd in rr)
      or dns.rcode.to_text(r.rcode()))
"""


def node_resolve(cluster: NetCluster, node: NetNode, name: str, dns_ip: str) -> list[str]:
    """The A records the cluster DNS gives `name`, asked from the node's own netns ([] on any failure)."""
    r = cluster.run_in(node.netns, sys.executable, "-c", _RESOLVE, name, dns_ip, timeout=15)
    out = r.stdout.split() if r.returncode == 0 else []
    return [a for a in out if a.count(".") == 3]


def by_uid(pods: list[Obj]) -> dict[str, Obj]:
    return {p["metadata"]["uid"]: p for p in pods}


def summary(pods: list[Obj]) -> str:
    """One line per pod (name, node, phase, terminating) for assertion messages."""
    return json.dumps([[p["metadata"]["name"], p["spec"].get("nodeName"), (p.get("status") or {}).get("phase"),
                        bool(p["metadata"].get("deletionTimestamp"))] for p in pods])
