"""Issue 18: the proxy subresources with a scheme, and the way upstream's DNS expectations read their results
(root, e2e, a one-node netns cluster with the Python test image).

A pod runs what agnhost's `test-webserver` does for the DNS expectations (a plain HTTP file server on its first
declared port, 80, named `http`, serving `/`, with a second container writing `/results/<probe>`), and an
HTTPS server on 8443 with a certificate no client could verify (a throw-away CA). Read with the real kubectl:
- `pods/<name>/proxy/results/<probe>` (no port: the first declared container port), as the DNS tests do;
- `pods/https:<name>:8443/proxy/...` and `services/https:<svc>:<port>/proxy/...`: TLS from the API server to
  the pod, the pod's certificate not verified (as upstream's proxy transport does);
- `pods/http:<name>:80/proxy/...`, and an `https:` request to a plain-HTTP port fails with a Status, not a hang.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from typing import Any

import pytest

from tests.helpers.netcluster import KUBECTL, NetCluster, NetNode, net_cluster

pytestmark = [
    pytest.mark.root,
    pytest.mark.e2e,
    pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("nsenter") or not os.access(KUBECTL, os.X_OK),
                       reason="needs root, nsenter and kubectl (network namespaces, real nodes)"),
]
PYTHON_IMAGE = "lite.test/python:proxy"
Obj = dict[str, Any]

SERVE = """
import http.server, os, ssl, sys, threading
os.makedirs("/results", exist_ok=True)

class Files(http.server.SimpleHTTPRequestHandler):
    def __init__(self, *a, **kw):
        super().__init__(*a, directory="/", **kw)

    def log_message(self, *args):
        pass

class Hello(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = ("tls " + self.path).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass

ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain("/tls/tls.crt", "/tls/tls.key")
tls = http.server.ThreadingHTTPServer(("0.0.0.0", 8443), Hello)
tls.socket = ctx.wrap_socket(tls.socket, server_side=True)
threading.Thread(target=tls.serve_forever, daemon=True).start()
print("SERVING", flush=True)
http.server.ThreadingHTTPServer(("0.0.0.0", 80), Files).serve_forever()
"""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NetCluster]:
    from tests.helpers.images import Image, Layer, busybox_entries, docker_save_tar
    from tests.helpers.python_image import PythonImageUnavailable, python_layer

    base = tmp_path_factory.mktemp("proxy")
    try:
        image = Image([Layer.build(busybox_entries()), python_layer(base / "python-build")])
    except PythonImageUnavailable as e:
        pytest.skip(f"no Python image: {e}")

    def prepare(node: NetNode) -> None:
        docker_save_tar(node.data_dir / "agent" / "images" / "python.tar", image, [PYTHON_IMAGE])

    with net_cluster(base, count=1, prepare=prepare) as c:
        from tests.helpers.tls import make_pki

        pki = make_pki(base)
        c.kubectl("create", "secret", "tls", "web-tls", f"--cert={pki.cert_file}", f"--key={pki.key_file}")
        c.apply([
            {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web", "labels": {"app": "web"}},
             "spec": {"nodeName": c.server.name, "terminationGracePeriodSeconds": 0,
                      "volumes": [{"name": "tls", "secret": {"secretName": "web-tls"}},
                                  {"name": "results", "emptyDir": {}}],
                      "containers": [
                          {"name": "webserver", "image": PYTHON_IMAGE, "imagePullPolicy": "Never",
                           "command": ["python3", "-c", SERVE],
                           "ports": [{"name": "http", "containerPort": 80}, {"name": "https", "containerPort": 8443}],
                           "volumeMounts": [{"name": "tls", "mountPath": "/tls"},
                                            {"name": "results", "mountPath": "/results"}]},
                          {"name": "querier", "image": PYTHON_IMAGE, "imagePullPolicy": "Never",
                           "command": ["sh", "-c", "echo OK > /results/wheezy_udp@kubernetes.default.svc; "
                                       "exec sleep 3600"],
                           "volumeMounts": [{"name": "results", "mountPath": "/results"}]}]}},
            {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"},
             "spec": {"selector": {"app": "web"}, "ports": [{"name": "https", "port": 443, "targetPort": 8443},
                                                            {"name": "http", "port": 8080, "targetPort": 80}]}},
        ])
        c.wait_running("app=web", 1)
        yield c


def raw(cluster: NetCluster, path: str) -> tuple[int, str]:
    r = cluster.kubectl("get", "--raw", path, check=False, timeout=40)
    return r.returncode, r.stdout + r.stderr


def test_dns_results_through_pod_proxy_without_port(cluster: NetCluster) -> None:
    def read() -> str:
        code, out = raw(cluster, "/api/v1/namespaces/default/pods/web/proxy/results/wheezy_udp@kubernetes.default.svc")
        if code != 0:
            raise ValueError(out)
        return out

    assert cluster.wait(read, "the probe result through pods/web/proxy", timeout=60) == "OK\n"


@pytest.mark.parametrize(("path", "want"), [
    ("pods/https:web:8443/proxy/a?b=c", "tls /a?b=c"),
    ("pods/https:web:https/proxy/x", "tls /x"),
    ("services/https:web:443/proxy/y", "tls /y"),
    ("services/https:web:https/proxy/", "tls /"),
])
def test_https_scheme_reaches_a_tls_port(cluster: NetCluster, path: str, want: str) -> None:
    code, out = raw(cluster, f"/api/v1/namespaces/default/{path}")
    assert (code, out) == (0, want)


def test_http_scheme_and_a_tls_mismatch(cluster: NetCluster) -> None:
    code, out = raw(cluster, "/api/v1/namespaces/default/pods/http:web:80/proxy/results/")
    assert code == 0 and "wheezy_udp@kubernetes.default.svc" in out, out
    code, out = raw(cluster, "/api/v1/namespaces/default/pods/https:web:80/proxy/")
    assert code != 0 and "error trying to reach service" in out, out
    code, out = raw(cluster, "/api/v1/namespaces/default/pods/ftp:web:80/proxy/")
    assert code != 0 and '(BadRequest): invalid pod request "ftp:web:80"' in out, out
    code, out = raw(cluster, "/api/v1/namespaces/default/services/ftp:web:80/proxy/")
    assert code != 0 and '(BadRequest): invalid service request "ftp:web:80"' in out, out
    assert json.loads(cluster.kubectl("get", "pod", "web", "-o", "json").stdout)["status"]["phase"] == "Running"


def test_many_probe_reads_each_answered(cluster: NetCluster) -> None:
    """The DNS expectations read every probe file each 5 s for up to 10 minutes, most of them still missing
    (404) at first: every read is answered, none hangs, however many came before."""
    base = "/api/v1/namespaces/default/pods/web/proxy/results"
    script = (f"for i in $(seq 1 40); do {KUBECTL} --kubeconfig {cluster.server.data_dir}/kubeconfig.yaml "
              f"--request-timeout=10s get --raw {base}/missing-$i >/dev/null 2>&1; echo \"miss $?\"; "
              f"{KUBECTL} --kubeconfig {cluster.server.data_dir}/kubeconfig.yaml --request-timeout=10s "
              f"get --raw {base}/wheezy_udp@kubernetes.default.svc; done")
    out = cluster.run_in(cluster.server.netns, "sh", "-c", script, timeout=600).stdout
    assert out.count("miss 1") == 40 and out.count("OK") == 40, out
