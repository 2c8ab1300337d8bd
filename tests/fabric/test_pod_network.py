"""Issue 8's three-node cluster (root, e2e), VXLAN backend: pods on different nodes reach each other by pod IP
and through Services and cluster DNS, pods leave the cluster masqueraded to their node's IP, NodePorts answer on
every node from outside, and a deleted Node leaves no routes, neighbours or FDB entries on the others."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator

import pytest

from tests.fabric.fabrickit import fetch, httpd_command, web_deployment, whoami_server
from tests.helpers.netcluster import CLIENT_IP, EXTERNAL_NET, NetCluster, busybox_pod, net_cluster

pytestmark = [
    pytest.mark.root,
    pytest.mark.e2e,
    pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("nsenter") or not os.access("/usr/bin/kubectl", os.X_OK),
                       reason="needs root, nsenter and kubectl (network namespaces, real nodes)"),
]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NetCluster]:
    with net_cluster(tmp_path_factory.mktemp("vx"), backend="vxlan") as c:
        n1, n2, n3 = (n.name for n in c.nodes)
        c.apply([busybox_pod("srv-c", n3, httpd_command("served-by-c")),
                 busybox_pod("cli-b", n2, ["sleep", "3600"]), busybox_pod("cli-a", n1, ["sleep", "3600"])])
        c.wait_running("app in (srv-c,cli-b,cli-a)", 3)
        yield c


def pod_ip(cluster: NetCluster, name: str) -> str:
    return str(cluster.json("get", "pod", name)["status"]["podIP"])


def test_a_pod_on_b_fetches_a_page_from_a_pod_on_c_by_pod_ip(cluster: NetCluster) -> None:
    url = f"http://{pod_ip(cluster, 'srv-c')}:8080/"
    assert cluster.wait(lambda: fetch(cluster, "cli-b", url), "B → C by pod IP") == "served-by-c"
    assert fetch(cluster, "cli-a", url) == "served-by-c"
    # the node publishes its VTEP for the others, and the pods' MTU leaves room for VXLAN
    node = cluster.json("get", "node", cluster.nodes[2].name)
    assert node["metadata"]["annotations"]["flannel.alpha.coreos.com/public-ip"] == cluster.nodes[2].ip
    # node 3 found its address through --flannel-iface and reports --node-external-ip
    addresses = {a["type"]: a["address"] for a in node["status"]["addresses"]}
    assert (addresses["InternalIP"], addresses["ExternalIP"]) == (cluster.nodes[2].ip, f"{EXTERNAL_NET}.13")
    assert "dev eth0" in cluster.run_in(cluster.nodes[2].netns, "ip", "-d", "link", "show", "lite.1").stdout
    assert "mtu 1450" in cluster.exec("cli-b", "ip", "link", "show", "eth0").stdout


def test_a_pod_reaches_outside_the_cluster_with_its_nodes_ip_as_source(cluster: NetCluster) -> None:
    with whoami_server(cluster, CLIENT_IP) as url:
        seen = cluster.wait(lambda: fetch(cluster, "cli-b", url), "pod → client netns")
    assert seen == cluster.nodes[1].ip


def test_pod_to_pod_across_nodes_keeps_the_pod_source_ip(cluster: NetCluster) -> None:
    url = f"http://{pod_ip(cluster, 'srv-c')}:8080/cgi-bin/ip"
    seen = cluster.wait(lambda: fetch(cluster, "cli-b", url), "B → C CGI")
    assert seen.removeprefix("[::ffff:").removesuffix("]") == pod_ip(cluster, "cli-b")  # httpd listens on [::]


def test_a_service_name_reaches_replicas_on_all_three_nodes(cluster: NetCluster) -> None:
    cluster.apply(web_deployment("web", 3))
    pods = cluster.wait_running("app=web", 3)
    assert len({p["spec"]["nodeName"] for p in pods}) == 3
    names = {p["metadata"]["name"] for p in pods}
    for url in ("http://web", "http://web.default.svc.cluster.local"):
        assert cluster.wait(lambda u=url: fetch(cluster, "cli-b", u) in names, f"{url} from a pod")  # type: ignore[misc]
    # the pods' nameserver is the kube-dns Service (node-local behind it), which resolves the ClusterIP
    dns_ip = cluster.json("get", "svc", "-n", "kube-system", "kube-dns")["spec"]["clusterIP"]
    assert f"nameserver {dns_ip}" in cluster.exec("cli-b", "cat", "/etc/resolv.conf").stdout
    svc_ip = cluster.json("get", "svc", "web")["spec"]["clusterIP"]
    assert svc_ip in cluster.exec("cli-b", "nslookup", "web.default.svc.cluster.local", dns_ip).stdout
    seen: set[str] = set()
    cluster.wait(lambda: seen.add(fetch(cluster, "cli-b", "http://web")) or names <= seen,
                 "requests to reach all three replicas", timeout=60, interval=0)
    assert names <= seen


def test_nodeport_answers_on_every_node_ip_from_outside(cluster: NetCluster) -> None:
    cluster.apply(web_deployment("web", 3))
    cluster.wait_running("app=web", 3)
    port = cluster.json("get", "svc", "web")["spec"]["ports"][0]["nodePort"]
    names = {p["metadata"]["name"] for p in cluster.pods("app=web")}
    for node in cluster.nodes:
        def got(ip: str = node.ip) -> str:
            r = cluster.run_in(cluster.client, "wget", "-qO-", "-T", "3", f"http://{ip}:{port}/", timeout=10)
            return r.stdout.strip() if r.stdout.strip() in names else ""

        assert cluster.wait(got, f"NodePort {port} on {node.ip} from the client netns", timeout=30)


def test_pods_on_every_node_reach_the_api_server_through_kubernetes_default(cluster: NetCluster) -> None:
    for pod in ("cli-a", "cli-b"):  # the server's node and another one (masqueraded to its node IP there)
        def connects(p: str = pod) -> bool:
            r = cluster.exec(p, "sh", "-c", "echo | nc -w 2 kubernetes.default.svc.cluster.local 443")
            return r.returncode == 0

        assert cluster.wait(connects, f"{pod} → kubernetes.default:443", timeout=30)


def test_a_deleted_node_leaves_no_routes_neighbours_or_fdb_entries(cluster: NetCluster) -> None:
    from tests.helpers.netcluster import stop_process

    gone = cluster.nodes[2]
    cidr = cluster.json("get", "node", gone.name)["spec"]["podCIDR"]
    vtep = cidr.split("/")[0]
    for node in cluster.nodes[:2]:
        assert "lite.1" in cluster.run_in(node.netns, "ip", "route", "show", cidr).stdout
    stop_process(gone)
    cluster.kubectl("delete", "node", gone.name, "--wait=false")

    def clean(netns: str) -> bool:
        routes = cluster.run_in(netns, "ip", "route", "show", cidr).stdout.strip()
        neigh = cluster.run_in(netns, "ip", "neigh", "show", vtep, "dev", "lite.1").stdout.strip()
        fdb = cluster.run_in(netns, "bridge", "fdb", "show", "dev", "lite.1").stdout
        return not routes and not neigh and gone.ip not in fdb

    for node in cluster.nodes[:2]:
        cluster.wait(lambda ns=node.netns: clean(ns), f"{gone.name}'s entries to leave {node.name}")  # type: ignore[misc]
    # the survivors still reach each other
    other = cluster.nodes[1]
    fdb = cluster.run_in(cluster.nodes[0].netns, "bridge", "fdb", "show", "dev", "lite.1").stdout
    assert other.ip in fdb

