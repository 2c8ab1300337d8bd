"""Issue 18 item 13: in-cluster API clients on a ONE-node cluster (root, e2e).

The `lite server` (embedded agent) runs in its own network namespace, bound to 0.0.0.0, on 6443 and on a
non-default port. A Python pod on that very node talks HTTPS to the API server (the CA and token of its
`kube-api-access-*` volume, as every in-cluster client does) through the `kubernetes` Service's DNS name, its
ClusterIP, and straight to the node IP and port the `default/kubernetes` EndpointSlice names: each request
gets its HTTP answer (200 for `/version` with the token, 401 for `/api` with a wrong one). The TLS hello of a
current busybox wget (the client of the report: TLS 1.2, P-256 and x25519, its cipher and signature lists) gets
a ServerHello on each path, not a close; and the pod's own busybox wget (no `openssl` in the image, so busybox's
own TLS code: no signature_algorithms extension in busybox 1.35) gets `/version` on each path.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator

import pytest

from tests.helpers.netcluster import KUBECTL, NetCluster, NetNode, net_cluster

pytestmark = [
    pytest.mark.root,
    pytest.mark.e2e,
    pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("nsenter") or not os.access(KUBECTL, os.X_OK),
                       reason="needs root, nsenter and kubectl (network namespaces, real nodes)"),
]
PYTHON_IMAGE = "lite.test/python:onenode"
SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"

# GET argv[1] with the token in the file argv[2] (or argv[2] itself when no such file), the server checked
# against the ServiceAccount volume's CA: prints the HTTP status, or the error the TLS/TCP layer raised.
GET = f"""
import ssl, sys, urllib.error, urllib.request
ctx = ssl.create_default_context(cafile="{SA_DIR}/ca.crt")
ctx.check_hostname = False  # the node IP form is not among the certificate's names in every setup
try:
    token = open(sys.argv[2]).read()
except OSError:
    token = sys.argv[2]
req = urllib.request.Request(sys.argv[1], headers={{"Authorization": "Bearer " + token}})
try:
    with urllib.request.urlopen(req, context=ctx, timeout=10) as r:
        print("STATUS", r.status, r.read().decode())
except urllib.error.HTTPError as e:
    print("STATUS", e.code, e.read().decode())
except Exception as e:
    print("ERROR", type(e).__name__, e)
"""

# A ClientHello as busybox wget (networking/tls.c, current releases) sends it; prints the first 6 bytes back.
BUSYBOX_HELLO = """
import os, socket, struct, sys
host, port = sys.argv[1], int(sys.argv[2])
suites = (0x00FF, 0xC009, 0xC00A, 0xC013, 0xC014, 0xC023, 0xC027, 0xC02B, 0xC02F, 0x002F, 0x0035, 0x003C, 0x003D,
          0x009C)
ciphers = b"".join(struct.pack(">H", c) for c in suites)
body = b"\\x03\\x03" + os.urandom(32) + b"\\x00" + struct.pack(">H", len(ciphers)) + ciphers + b"\\x01\\x00"
sni = host.encode()
name = b"\\x00" + struct.pack(">H", len(sni)) + sni
ext = b"\\x00\\x00" + struct.pack(">HH", len(name) + 2, len(name)) + name
ext += b"\\x00\\x0a\\x00\\x06\\x00\\x04\\x00\\x17\\x00\\x1d"
sigalgs = b"\\x02\\x01\\x02\\x02\\x02\\x03\\x04\\x01\\x04\\x02\\x04\\x03"
ext += b"\\x00\\x0d" + struct.pack(">HH", len(sigalgs) + 2, len(sigalgs)) + sigalgs
body += struct.pack(">H", len(ext)) + ext
hello = b"\\x01" + struct.pack(">I", len(body))[1:] + body
s = socket.create_connection((host, port), timeout=10)
s.sendall(b"\\x16\\x03\\x01" + struct.pack(">H", len(hello)) + hello)
got = b""
try:
    while len(got) < 6:
        chunk = s.recv(6 - len(got))
        if not chunk:
            break
        got += chunk
except OSError as e:
    print("ERROR", e)
print("GOT", got.hex())
"""


@pytest.fixture(scope="module")
def python_image(tmp_path_factory: pytest.TempPathFactory) -> object:
    from tests.helpers.images import Image, Layer, busybox_entries
    from tests.helpers.python_image import PythonImageUnavailable, python_layer

    try:
        return Image([Layer.build(busybox_entries()), python_layer(tmp_path_factory.mktemp("python-build"))])
    except PythonImageUnavailable as e:
        pytest.skip(f"no Python image: {e}")


@pytest.fixture(scope="module", params=[6443, 16443], ids=["port-6443", "port-16443"])
def cluster(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
            python_image: object) -> Iterator[NetCluster]:
    from tests.helpers.images import docker_save_tar

    def prepare(node: NetNode) -> None:
        docker_save_tar(node.data_dir / "agent" / "images" / "python.tar", python_image, [PYTHON_IMAGE])

    with net_cluster(tmp_path_factory.mktemp("onenode"), count=1, port=request.param, prepare=prepare) as c:
        yield c


def client_pod(cluster: NetCluster) -> str:
    """A running busybox pod on the one node, with the default ServiceAccount's token mounted."""
    name = "client"
    if not cluster.extra.get(name):
        cluster.apply({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
                       "spec": {"nodeName": cluster.server.name, "terminationGracePeriodSeconds": 0,
                                "containers": [{"name": "c", "image": PYTHON_IMAGE, "imagePullPolicy": "Never",
                                                "command": ["sleep", "3600"]}]}})
        cluster.wait_running("app!=none", 1)
        cluster.extra[name] = True
    return name


def get(cluster: NetCluster, url: str, token: bool = True) -> str:
    """The outcome of GET `url` from inside the pod (`GET` above), with the pod's token or a wrong one."""
    r = cluster.exec(client_pod(cluster), "python3", "-c", GET, url, f"{SA_DIR}/token" if token else "wrong",
                     timeout=40)
    return r.stdout + r.stderr


def endpoint(cluster: NetCluster) -> tuple[str, int]:
    (sl,) = cluster.json("get", "endpointslices", "-l", "kubernetes.io/service-name=kubernetes")["items"]
    return sl["endpoints"][0]["addresses"][0], sl["ports"][0]["port"]


def test_endpoint_slice_names_the_node_and_the_port(cluster: NetCluster) -> None:
    assert endpoint(cluster) == (cluster.server.ip, cluster.port)


@pytest.mark.parametrize("target", ["dns", "clusterip", "endpoint"])
def test_pod_reaches_the_api_server_on_its_own_node(cluster: NetCluster, target: str) -> None:
    ip, port = endpoint(cluster)
    host = {"dns": "kubernetes.default.svc",
            "clusterip": cluster.json("get", "service", "kubernetes")["spec"]["clusterIP"],
            "endpoint": f"{ip}:{port}"}[target]
    out = get(cluster, f"https://{host}/version")
    assert out.startswith("STATUS 200 ") and '"gitVersion"' in out, out
    out = get(cluster, f"https://{host}/api", token=False)
    assert out.startswith("STATUS 401 ") and "Unauthorized" in out, out


@pytest.mark.parametrize("target", ["dns", "clusterip", "endpoint"])
def test_busybox_tls_hello_gets_a_server_hello(cluster: NetCluster, target: str) -> None:
    ip, port = endpoint(cluster)
    host, to = {"dns": ("kubernetes.default.svc", 443),
                "clusterip": (cluster.json("get", "service", "kubernetes")["spec"]["clusterIP"], 443),
                "endpoint": (ip, port)}[target]
    r = cluster.exec(client_pod(cluster), "python3", "-c", BUSYBOX_HELLO, host, str(to), timeout=40)
    # a handshake record (0x16) of TLS 1.2 (0x0303) carrying a ServerHello (type 2)
    assert r.stdout.startswith("GOT 160303") and r.stdout.strip()[-2:] == "02", r.stdout + r.stderr


@pytest.mark.parametrize("target", ["dns", "endpoint"])
def test_busybox_wget_in_the_pod_gets_the_version(cluster: NetCluster, target: str) -> None:
    ip, port = endpoint(cluster)
    host = {"dns": "kubernetes.default.svc", "endpoint": f"{ip}:{port}"}[target]
    r = cluster.exec(client_pod(cluster), "wget", "-q", "-O", "-", "--no-check-certificate",
                     f"https://{host}/version", timeout=40)
    assert '"gitVersion"' in r.stdout, r.stdout + r.stderr


def test_the_embedded_agent_joins_in_process(cluster: NetCluster) -> None:
    """The agent `lite server` embeds joins through `join.routes.local_join`: its node password is registered
    as any node's, and it holds no node certificate (nor a TLS session to its own server)."""
    from lite.agent.nodecreds import NodeCredentials

    creds = NodeCredentials(cluster.server.data_dir / "agent" / "credentials", cluster.server.name)
    assert (creds.dir / "node-password").exists()
    assert not creds.cert_path.exists() and not creds.key_path.exists()
    assert f"joined in process as node {cluster.server.name}" in cluster.server.log.read_text(errors="replace")
    secret = cluster.json("get", "secret", "-n", "kube-system", f"{cluster.server.name}.node-password.lite")
    assert secret["type"] == "lite.io/node-password"
