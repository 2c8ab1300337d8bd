"""Issue 8's three-node cluster (root, e2e): cluster DNS as pods see it, and the API server from a pod.

From a busybox pod: a headless Service gives every ready pod IP, a StatefulSet's pods resolve as
`web-0.nginx.default.svc.cluster.local`, SRV answers for a named port, a name outside the cluster is forwarded
to the upstream resolver the test runs in the client netns (dnsmasq, named by every node's `--resolv-conf`),
and an ExternalName Service answers a CNAME. Exact answer codes (NXDOMAIN versus NODATA, SOA in the
authority section, TTL 5) are checked with dnspython from a node's netns through the kube-dns ClusterIP.
A Python pod reaches `https://kubernetes.default.svc`, verifying the cluster CA, with a bearer token, both
from a Secret the test mounts.
"""

from __future__ import annotations

import base64
import os
import shutil
from collections.abc import Iterator

import pytest
import yaml

from tests.fabric.dnskit import EXTERNAL_ADDRESS, EXTERNAL_NAME, query, upstream_resolver
from tests.fabric.fabrickit import web_deployment
from tests.helpers.netcluster import IMAGE, NetCluster, NetNode, busybox_pod, net_cluster

pytestmark = [
    pytest.mark.root,
    pytest.mark.e2e,
    pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("nsenter") or not os.access("/usr/bin/kubectl", os.X_OK)
                       or not shutil.which("dnsmasq"),
                       reason="needs root, nsenter, kubectl and dnsmasq (network namespaces, real nodes)"),
]
PYTHON_IMAGE = "lite.test/python:netdone"
ZONE = "default.svc.cluster.local"


def _python_image(node: NetNode) -> None:
    """The Python image goes to the last node only (the API client pod runs there)."""
    if not node.name.endswith("-n3"):
        return
    from tests.helpers.images import Image, Layer, busybox_entries, docker_save_tar
    from tests.helpers.python_image import PythonImageUnavailable, python_layer

    try:
        layer = python_layer(node.data_dir.parent / "python-build")
    except PythonImageUnavailable as e:
        pytest.skip(f"no Python image: {e}")
    image = Image([Layer.build(busybox_entries()), layer])
    docker_save_tar(node.data_dir / "agent" / "images" / "python.tar", image, [PYTHON_IMAGE])


def statefulset() -> list[dict[str, object]]:
    labels = {"app": "nginx"}
    headless = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "nginx"},
                "spec": {"clusterIP": "None", "selector": labels, "ports": [{"name": "web", "port": 8080}]}}
    sts = {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "web"},
           "spec": {"serviceName": "nginx", "replicas": 2, "selector": {"matchLabels": labels},
                    "template": {"metadata": {"labels": labels},
                                 "spec": {"terminationGracePeriodSeconds": 0,
                                          "containers": [{"name": "c", "image": IMAGE, "imagePullPolicy": "Never",
                                                          "command": ["httpd", "-f", "-p", "8080", "-h", "/www"]}]}}}}
    return [headless, sts]


API_CLIENT = """
import json, ssl, sys, urllib.request
ctx = ssl.create_default_context(cafile="/var/run/api/ca.crt")
token = open("/var/run/api/token").read().strip()
req = urllib.request.Request("https://kubernetes.default.svc/api/v1/namespaces/default/pods",
                             headers={"Authorization": "Bearer " + token})
body = json.load(urllib.request.urlopen(req, context=ctx, timeout=10))
print(" ".join(sorted(p["metadata"]["name"] for p in body["items"])))
"""


def api_client_pod(node: str) -> list[dict[str, object]]:
    return [{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "api-cli", "labels": {"app": "api-cli"}},
             "spec": {"nodeName": node, "terminationGracePeriodSeconds": 0,
                      "volumes": [{"name": "api", "secret": {"secretName": "api-access"}}],
                      "containers": [{"name": "c", "image": PYTHON_IMAGE, "imagePullPolicy": "Never",
                                      "command": ["sleep", "3600"],
                                      "volumeMounts": [{"name": "api", "mountPath": "/var/run/api"}]}]}}]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NetCluster]:
    base = tmp_path_factory.mktemp("dns")
    with net_cluster(base, prepare=_python_image) as c, upstream_resolver(c, base / "dnsmasq.log"):
        n2, n3 = (n.name for n in c.nodes[1:])
        kubeconfig = yaml.safe_load((c.server.data_dir / "kubeconfig.yaml").read_text())
        ca = kubeconfig["clusters"][0]["cluster"]["certificate-authority-data"]
        token = kubeconfig["users"][0]["user"]["token"]
        secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "api-access"},
                  "data": {"ca.crt": ca, "token": base64.b64encode(token.encode()).decode()}}
        headless = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web-hl"},
                    "spec": {"clusterIP": "None", "selector": {"app": "web"}, "ports": [{"port": 8080}]}}
        external = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "outside"},
                    "spec": {"type": "ExternalName", "externalName": EXTERNAL_NAME}}
        c.apply([*web_deployment("web", 3), headless, external, *statefulset(), secret,
                 busybox_pod("dns-cli", n2, ["sleep", "3600"]), *api_client_pod(n3)])
        c.wait_running("app in (dns-cli,api-cli)", 2)
        c.wait_running("app=web", 3)
        c.wait_running("app=nginx", 2)
        yield c


def nslookup(cluster: NetCluster, name: str, qtype: str = "") -> str:
    args = [f"-type={qtype}"] if qtype else []
    r = cluster.exec("dns-cli", "nslookup", *args, name)
    return r.stdout + r.stderr


def pod_ips(cluster: NetCluster, selector: str) -> dict[str, str]:
    return {p["metadata"]["name"]: p["status"]["podIP"] for p in cluster.pods(selector)}


def test_a_headless_service_gives_every_ready_pod_ip(cluster: NetCluster) -> None:
    ips = set(pod_ips(cluster, "app=web").values())
    assert len(ips) == 3

    def all_ips() -> bool:
        return ips <= set(nslookup(cluster, f"web-hl.{ZONE}").split())

    assert cluster.wait(all_ips, "the headless service to list every web pod", timeout=30)
    # the short name resolves through the pod's search path too
    assert ips <= set(nslookup(cluster, "web-hl").split())


def test_statefulset_pods_resolve_by_hostname_under_their_service(cluster: NetCluster) -> None:
    ips = pod_ips(cluster, "app=nginx")
    for name in ("web-0", "web-1"):
        out = cluster.wait(lambda n=name: nslookup(cluster, f"{n}.nginx.{ZONE}"),  # type: ignore[misc]
                           f"{name}.nginx to resolve", timeout=30)
        assert ips[name] in out.split(), out


def test_srv_for_a_named_port(cluster: NetCluster) -> None:
    out = nslookup(cluster, f"_http._tcp.web.{ZONE}", "srv")
    assert f"web.{ZONE}" in out and " 80 " in f" {out} ", out
    # through the headless StatefulSet service: one SRV per pod, target its hostname, port the pod's
    out = nslookup(cluster, f"_web._tcp.nginx.{ZONE}", "srv")
    assert f"web-0.nginx.{ZONE}" in out and f"web-1.nginx.{ZONE}" in out and "8080" in out, out


def test_names_outside_the_cluster_are_forwarded_to_the_nodes_upstream(cluster: NetCluster) -> None:
    log = cluster.base / "dnsmasq.log"
    out = nslookup(cluster, EXTERNAL_NAME)
    assert EXTERNAL_ADDRESS in out.split(), out
    # dnsmasq saw the query, from the pod's node (the node-local DNS forwards, masqueraded to the node IP)
    assert f"query[A] {EXTERNAL_NAME} from {cluster.nodes[1].ip}" in log.read_text()


def test_an_externalname_service_answers_a_cname(cluster: NetCluster) -> None:
    dns_ip = cluster.json("get", "svc", "-n", "kube-system", "kube-dns")["spec"]["clusterIP"]
    r = query(cluster, cluster.nodes[1].netns, f"outside.{ZONE}", "CNAME", dns_ip)
    assert r["rcode"] == "NOERROR"
    assert [a[1:3] for a in r["answer"]] == [["CNAME", f"{EXTERNAL_NAME}."]]
    out = nslookup(cluster, f"outside.{ZONE}")
    assert EXTERNAL_NAME in out and EXTERNAL_ADDRESS in out.split(), out


def test_nxdomain_versus_nodata(cluster: NetCluster) -> None:
    dns_ip = cluster.json("get", "svc", "-n", "kube-system", "kube-dns")["spec"]["clusterIP"]
    svc_ip = cluster.json("get", "svc", "web")["spec"]["clusterIP"]
    ns = cluster.nodes[2].netns
    found = query(cluster, ns, f"web.{ZONE}", "A", dns_ip)
    assert found["rcode"] == "NOERROR" and [a[1:] for a in found["answer"]] == [["A", svc_ip, 5]]
    nodata = query(cluster, ns, f"web.{ZONE}", "AAAA", dns_ip)  # the name exists, not with this type
    assert (nodata["rcode"], nodata["answer"], nodata["authority"]) == ("NOERROR", [], ["SOA"])
    missing = query(cluster, ns, f"nosuch.{ZONE}", "A", dns_ip)
    assert (missing["rcode"], missing["answer"], missing["authority"]) == ("NXDOMAIN", [], ["SOA"])
    ancestor = query(cluster, ns, ZONE, "A", dns_ip)  # an empty non-terminal exists: NODATA
    assert (ancestor["rcode"], ancestor["answer"]) == ("NOERROR", [])
    # and as a pod sees them
    assert "NXDOMAIN" in nslookup(cluster, f"nosuch.{ZONE}")
    assert "NXDOMAIN" not in nslookup(cluster, f"web.{ZONE}", "aaaa")


def test_a_pod_reaches_the_api_server_with_a_mounted_ca_and_token(cluster: NetCluster) -> None:
    def listed() -> str:
        r = cluster.exec("api-cli", "python3", "-c", API_CLIENT, timeout=40)
        return r.stdout.strip() if r.returncode == 0 else ""

    names = cluster.wait(listed, "the API through https://kubernetes.default.svc", timeout=60).split()
    assert "api-cli" in names and "dns-cli" in names
    # the CA really is checked: without it (the image has no CA store) verification fails
    unverified = API_CLIENT.replace('cafile="/var/run/api/ca.crt"', "")
    r = cluster.exec("api-cli", "python3", "-c", unverified, timeout=40)
    assert r.returncode != 0 and "CERTIFICATE_VERIFY_FAILED" in r.stderr, r.stderr[-500:]
