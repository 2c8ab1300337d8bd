"""NetworkPolicy across nodes on issue 8's three-node cluster (root, e2e; VXLAN): every agent enforces for its
own pods, with peers found on any node.

    srv on n3 (app=srv)     friend on n2 (role=friend)     stranger on n1     the client netns outside
- deny-all ingress for app=srv plus "from role=friend": the friend on another node gets in, the stranger on a
  third node does not;
- an egress policy on the friend allowing only app=srv (and DNS): the outside client is refused, srv still
  reached; the refusal is counted on n2's agent and shows as a Warning event on the friend.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator

import pytest

from tests.fabric.fabrickit import fetch, httpd_command, whoami_server
from tests.helpers.netcluster import CLIENT_IP, NetCluster, busybox_pod, net_cluster

pytestmark = [
    pytest.mark.root,
    pytest.mark.e2e,
    pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("nsenter") or not os.access("/usr/bin/kubectl", os.X_OK),
                       reason="needs root, nsenter and kubectl (network namespaces, real nodes)"),
]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NetCluster]:
    with net_cluster(tmp_path_factory.mktemp("np"), backend="vxlan") as c:
        n1, n2, n3 = (n.name for n in c.nodes)
        c.apply([busybox_pod("srv", n3, httpd_command("served-by-srv")),
                 busybox_pod("friend", n2, ["sleep", "3600"], {"app": "friend", "role": "friend"}),
                 busybox_pod("stranger", n1, ["sleep", "3600"])])
        c.wait_running("app in (srv,friend,stranger)", 3)
        yield c


def blocked(cluster: NetCluster, pod: str, url: str) -> bool:
    return cluster.exec(pod, "timeout", "3", "wget", "-qO-", url).returncode != 0


def test_policies_hold_across_nodes(cluster: NetCluster) -> None:
    srv = str(cluster.json("get", "pod", "srv")["status"]["podIP"])
    url = f"http://{srv}:8080/"
    assert cluster.wait(lambda: fetch(cluster, "friend", url), "friend → srv") == "served-by-srv"
    assert fetch(cluster, "stranger", url) == "served-by-srv"

    cluster.apply([
        {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": {"name": "srv-deny"},
         "spec": {"podSelector": {"matchLabels": {"app": "srv"}}}},
        {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": {"name": "srv-friends"},
         "spec": {"podSelector": {"matchLabels": {"app": "srv"}},
                  "ingress": [{"from": [{"podSelector": {"matchLabels": {"role": "friend"}}}],
                               "ports": [{"port": 8080}]}]}}])
    cluster.wait(lambda: blocked(cluster, "stranger", url), "the stranger on n1 is refused by n3's agent")
    assert fetch(cluster, "friend", url) == "served-by-srv"  # the friend on n2 still gets in

    with whoami_server(cluster, CLIENT_IP) as outside:
        assert cluster.wait(lambda: fetch(cluster, "friend", outside), "friend → outside before")
        cluster.apply({"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
                       "metadata": {"name": "friend-out"},
                       "spec": {"podSelector": {"matchLabels": {"role": "friend"}}, "policyTypes": ["Egress"],
                                "egress": [{"to": [{"podSelector": {"matchLabels": {"app": "srv"}}}]}]}})
        cluster.wait(lambda: blocked(cluster, "friend", outside), "friend's egress to outside refused on n2")
        assert fetch(cluster, "friend", url) == "served-by-srv"  # egress to srv (another node) allowed

    def warned() -> bool:
        events = cluster.json("get", "events", "--field-selector", "involvedObject.name=friend")["items"]
        return any(e.get("reason") == "NetworkPolicyDenied" for e in events)

    cluster.wait(warned, "a NetworkPolicyDenied event on the friend", timeout=60)
