"""Issue 9's pods as API clients on the three-node netns cluster (root, e2e): the official Python client inside a
pod, and admission webhooks served by a pod.

- A pod on n3 runs `kubernetes.config.load_incluster_config()` (the Python image carries the `kubernetes`
  package from the test venv, `python_image.packages_layer`): it reaches the API server at
  `https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT` (the `kubernetes` ClusterIP, through n3's
  nftables service proxy) with the CA and bound token of its `kube-api-access-*` volume. Listing pods is 403
  (upstream's message) until a RoleBinding grants `view` to its ServiceAccount, then succeeds; the token read
  from inside the pod authenticates until the pod is deleted, and is 401 (and unauthenticated in a
  TokenReview) afterwards, asked from the client netns outside the cluster.
- A Deployment on n2 serves AdmissionReview v1 over HTTPS (stdlib `http.server` + `ssl`, code from a ConfigMap,
  a certificate for `hookd.hooks.svc` from a Secret) behind a Service; a Validating- and a
  MutatingWebhookConfiguration name that Service with the test CA as caBundle. The API server on n1 reaches the
  pod over the pod network: a labelled ConfigMap is refused, an unlabelled one gets `mutated=yes`. Scaled to
  0, `failurePolicy: Ignore` lets writes through unmutated and `Fail` refuses them.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.helpers.netcluster import KUBECTL, PORT, NetCluster, NetNode, net_cluster

pytestmark = [
    pytest.mark.root,
    pytest.mark.e2e,
    pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("nsenter") or not os.access(KUBECTL, os.X_OK),
                       reason="needs root, nsenter and kubectl (network namespaces, real nodes)"),
]
PYTHON_IMAGE = "lite.test/python-kubernetes:inpod"
SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
Obj = dict[str, Any]

# The in-cluster client: what any controller written with the official client does first.
IN_CLUSTER = """
import json, os, time
from kubernetes import client, config
from kubernetes.client.rest import ApiException
config.load_incluster_config()
print("HOST", client.Configuration.get_default_copy().host, flush=True)
api = client.CoreV1Api()
while True:
    try:
        print("LIST OK", len(api.list_namespaced_pod(os.environ["NS"]).items), flush=True)
    except ApiException as e:
        print("LIST", e.status, json.loads(e.body).get("message"), flush=True)
    except Exception as e:
        print("ERROR", type(e).__name__, e, flush=True)
    time.sleep(1)
"""

# An AdmissionReview v1 responder: /validate refuses objects labelled deny=yes, /mutate adds mutated=yes.
WEBHOOK = """
import base64, http.server, json, ssl
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain("/tls/tls.crt", "/tls/tls.key")

class Handler(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        review = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        req = review["request"]
        labels = ((req.get("object") or {}).get("metadata") or {}).get("labels") or {}
        resp = {"uid": req["uid"], "allowed": True}
        path = self.path.split("?")[0]
        if path == "/validate" and labels.get("deny") == "yes":
            resp.update(allowed=False, status={"code": 403, "reason": "Forbidden",
                                               "message": "label deny=yes is not allowed"})
        elif path == "/mutate":
            ops = ([{"op": "add", "path": "/metadata/labels/mutated", "value": "yes"}] if labels
                   else [{"op": "add", "path": "/metadata/labels", "value": {"mutated": "yes"}}])
            resp.update(patchType="JSONPatch", patch=base64.b64encode(json.dumps(ops).encode()).decode())
        body = json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                           "response": resp}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        print("REVIEW", path, req["operation"], req.get("name"), "allowed" if resp["allowed"] else "denied",
              flush=True)

    def log_message(self, *args):
        pass

class Server(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def finish_request(self, request, client_address):  # the TLS handshake in the request's own thread
        super().finish_request(ctx.wrap_socket(request, server_side=True), client_address)

    def handle_error(self, request, client_address):  # readiness probes connect without TLS
        pass

print("SERVING", flush=True)
Server(("0.0.0.0", 8443), Handler).serve_forever()
"""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NetCluster]:
    from tests.helpers.images import Image, Layer, busybox_entries, docker_save_tar
    from tests.helpers.python_image import PythonImageUnavailable, packages_layer, python_layer

    base = tmp_path_factory.mktemp("inpod")
    try:
        image = Image([Layer.build(busybox_entries()), python_layer(base / "python-build"),
                       packages_layer(["kubernetes"])])
    except PythonImageUnavailable as e:
        pytest.skip(f"no Python image: {e}")

    def prepare(node: NetNode) -> None:  # n2 serves the webhooks, n3 runs the in-cluster client
        if not node.name.endswith("-n1"):
            docker_save_tar(node.data_dir / "agent" / "images" / "python.tar", image, [PYTHON_IMAGE])

    with net_cluster(base, prepare=prepare) as c:
        yield c


def python_pod(name: str, namespace: str, node: str, code: str, **spec: Any) -> Obj:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace},
            "spec": {"nodeName": node, "terminationGracePeriodSeconds": 0, **spec,
                     "containers": [{"name": "c", "image": PYTHON_IMAGE, "imagePullPolicy": "Never",
                                     "command": ["python3", "-c", code], "env": [{"name": "NS", "value": namespace}]}]}}


def logs(cluster: NetCluster, namespace: str, what: str) -> str:
    return cluster.kubectl("logs", "-n", namespace, what, check=False, timeout=20).stdout


def wait_log(cluster: NetCluster, namespace: str, pod: str, marker: str, timeout: float = 60) -> str:
    """The pod's log once it holds `marker` (the log's tail and the pod's state are in the timeout message)."""
    def probe() -> str:
        text = logs(cluster, namespace, pod)
        if marker in text:
            return text
        state = cluster.kubectl("get", "pod", "-n", namespace, pod, "-o", "jsonpath={.status}", check=False).stdout
        raise ValueError(f"log tail: {text[-1500:]!r}; status: {state[-1500:]}")

    found: str = cluster.wait(probe, f"{marker!r} in the log of {namespace}/{pod}", timeout=timeout)
    return found


def api_from_outside(cluster: NetCluster, token: str, path: str) -> int:
    """The HTTP status of GET `path` with `token`, from the client netns (outside the cluster), CA checked."""
    kubeconfig = yaml.safe_load((cluster.server.data_dir / "kubeconfig.yaml").read_text())
    ca = cluster.base / "cluster-ca.crt"
    ca.write_bytes(base64.b64decode(kubeconfig["clusters"][0]["cluster"]["certificate-authority-data"]))
    code = ("import ssl, sys, urllib.error, urllib.request\n"
            "req = urllib.request.Request(sys.argv[1], headers={'Authorization': 'Bearer ' + sys.stdin.read()})\n"
            "try:\n"
            "    print(urllib.request.urlopen(req, context=ssl.create_default_context(cafile=sys.argv[2]),"
            " timeout=10).status)\n"
            "except urllib.error.HTTPError as e:\n"
            "    print(e.code)\n")
    url = f"https://{cluster.server.ip}:{PORT}{path}"
    r = cluster.run_in(cluster.client, sys.executable, "-c", code, url, str(ca), input=token, timeout=30)
    assert r.returncode == 0, r.stderr
    return int(r.stdout)


def token_review(cluster: NetCluster, token: str) -> Obj:
    review = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token}}
    out: Obj = json.loads(cluster.kubectl("create", "-o", "json", "-f", "-", input=json.dumps(review)).stdout)
    return out["status"]


def test_official_client_in_a_pod_rbac_and_bound_token(cluster: NetCluster) -> None:
    ns, node = "apps", cluster.nodes[2].name
    cluster.kubectl("create", "namespace", ns)
    cluster.kubectl("create", "serviceaccount", "-n", ns, "lister")
    cluster.apply(python_pod("incluster", ns, node, IN_CLUSTER, serviceAccountName="lister"))
    denied = f'pods is forbidden: User "system:serviceaccount:{ns}:lister" cannot list resource "pods" ' \
             f'in API group "" in the namespace "{ns}"'
    out = wait_log(cluster, ns, "incluster", f"LIST 403 {denied}", timeout=120)
    api_ip = cluster.json("get", "service", "kubernetes")["spec"]["clusterIP"]
    assert out.splitlines()[0] == f"HOST https://{api_ip}:443", out
    assert "LIST OK" not in out and "ERROR" not in out, out

    cluster.kubectl("create", "rolebinding", "-n", ns, "lister-view", "--clusterrole=view",
                    f"--serviceaccount={ns}:lister")
    out = wait_log(cluster, ns, "incluster", "LIST OK 1")
    assert "ERROR" not in out, out

    token = cluster.exec("incluster", "cat", f"{SA_DIR}/token", namespace=ns).stdout.strip()
    assert token.count(".") == 2, token
    status = token_review(cluster, token)
    assert status["authenticated"] is True, status
    assert status["user"]["username"] == f"system:serviceaccount:{ns}:lister"
    assert status["user"]["extra"]["authentication.kubernetes.io/pod-name"] == ["incluster"]
    assert status["user"]["extra"]["authentication.kubernetes.io/node-name"] == [node]
    assert api_from_outside(cluster, token, f"/api/v1/namespaces/{ns}/pods") == 200

    cluster.kubectl("delete", "pod", "-n", ns, "incluster", "--wait=true", "--timeout=60s")
    assert api_from_outside(cluster, token, f"/api/v1/namespaces/{ns}/pods") == 401
    assert api_from_outside(cluster, token, "/api") == 401
    assert token_review(cluster, token).get("authenticated") is not True


def webhook_server(cluster: NetCluster, tls_dir: Path) -> list[Obj]:
    from tests.helpers.tls import make_pki

    tls_dir.mkdir()
    pki = make_pki(tls_dir, ("hookd.hooks.svc",))
    labels = {"app": "hookd"}
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "hookd-tls", "namespace": "hooks"},
              "type": "kubernetes.io/tls",
              "data": {"tls.crt": base64.b64encode(pki.cert_file.read_bytes()).decode(),
                       "tls.key": base64.b64encode(pki.key_file.read_bytes()).decode()}}
    code = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "hookd-code", "namespace": "hooks"},
            "data": {"server.py": WEBHOOK}}
    pod_spec = {"nodeSelector": {"kubernetes.io/hostname": cluster.nodes[1].name},
                "terminationGracePeriodSeconds": 0,
                "volumes": [{"name": "tls", "secret": {"secretName": "hookd-tls"}},
                            {"name": "code", "configMap": {"name": "hookd-code"}}],
                "containers": [{"name": "hookd", "image": PYTHON_IMAGE, "imagePullPolicy": "Never",
                                "command": ["python3", "/code/server.py"],
                                "ports": [{"name": "https", "containerPort": 8443}],
                                "readinessProbe": {"tcpSocket": {"port": 8443}, "periodSeconds": 1},
                                "volumeMounts": [{"name": "tls", "mountPath": "/tls", "readOnly": True},
                                                 {"name": "code", "mountPath": "/code"}]}]}
    deploy = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "hookd", "namespace": "hooks"},
              "spec": {"replicas": 1, "selector": {"matchLabels": labels},
                       "template": {"metadata": {"labels": labels}, "spec": pod_spec}}}
    service = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "hookd", "namespace": "hooks"},
               "spec": {"selector": labels, "ports": [{"name": "https", "port": 443, "targetPort": "https"}]}}
    ca_bundle = base64.b64encode(pki.ca_file.read_bytes()).decode()
    return [secret, code, deploy, service, *webhook_configurations(ca_bundle, "Fail")]


def webhook_configurations(ca_bundle: str, policy: str) -> list[Obj]:
    def hook(name: str, path: str) -> Obj:
        return {"name": name, "admissionReviewVersions": ["v1"], "sideEffects": "None",
                "failurePolicy": policy, "timeoutSeconds": 5,
                "namespaceSelector": {"matchLabels": {"webhooks": "on"}},
                "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"],
                           "resources": ["configmaps"]}],
                "clientConfig": {"caBundle": ca_bundle,
                                 "service": {"namespace": "hooks", "name": "hookd", "path": path, "port": 443}}}

    group = "admissionregistration.k8s.io/v1"
    return [{"apiVersion": group, "kind": "ValidatingWebhookConfiguration", "metadata": {"name": "deny-labelled"},
             "webhooks": [hook("deny.hooks.lite.test", "/validate")]},
            {"apiVersion": group, "kind": "MutatingWebhookConfiguration", "metadata": {"name": "add-label"},
             "webhooks": [hook("label.hooks.lite.test", "/mutate")]}]


def configmap(name: str, labels: dict[str, str] | None = None) -> str:
    meta: Obj = {"name": name, "namespace": "guarded", **({"labels": labels} if labels else {})}
    return json.dumps({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {"k": "v"}})


def stored_labels(cluster: NetCluster, name: str) -> dict[str, str]:
    labels: dict[str, str] = cluster.json("get", "configmap", "-n", "guarded", name)["metadata"].get("labels") or {}
    return labels


def test_webhooks_served_by_a_pod(cluster: NetCluster) -> None:
    cluster.kubectl("create", "namespace", "hooks")
    cluster.apply({"apiVersion": "v1", "kind": "Namespace",
                   "metadata": {"name": "guarded", "labels": {"webhooks": "on"}}})
    objects = webhook_server(cluster, cluster.base / "hook-tls")
    cluster.apply(objects[:4])
    pod = cluster.wait_running("app=hookd", 1, namespace="hooks")[0]
    assert pod["spec"]["nodeName"] == cluster.nodes[1].name
    cluster.wait(lambda: any(ep.get("conditions", {}).get("ready") for s in cluster.json(
        "get", "endpointslices", "-n", "hooks", "-l", "kubernetes.io/service-name=hookd")["items"]
        for ep in s.get("endpoints") or []), "a ready endpoint of the hookd Service")
    cluster.apply(objects[4:])
    # as upstream's e2e does: a dry-run marker until the configurations are in effect (the API server's
    # webhook informers see them a moment after the write)
    cluster.wait(lambda: cluster.kubectl("create", "--dry-run=server", "-f", "-", check=False,
                                         input=configmap("marker", {"deny": "yes"})).returncode != 0,
                 "the webhook configurations to be in effect", timeout=30)

    refused = cluster.kubectl("create", "-f", "-", input=configmap("labelled", {"deny": "yes"}), check=False)
    assert refused.returncode != 0
    assert 'admission webhook "deny.hooks.lite.test" denied the request: label deny=yes is not allowed' \
        in refused.stderr, refused.stderr
    assert cluster.kubectl("get", "configmap", "-n", "guarded", "labelled", check=False).returncode != 0
    cluster.kubectl("create", "-f", "-", input=configmap("plain"))
    assert stored_labels(cluster, "plain") == {"mutated": "yes"}
    hook_log = logs(cluster, "hooks", "deploy/hookd")
    assert "REVIEW /validate CREATE labelled denied" in hook_log, hook_log
    assert "REVIEW /mutate CREATE plain allowed" in hook_log and "REVIEW /validate CREATE plain allowed" in hook_log

    cluster.kubectl("scale", "-n", "hooks", "deployment/hookd", "--replicas=0")
    cluster.wait(lambda: not cluster.pods("app=hookd", "hooks"), "the webhook pod to be gone")
    # the configurations still say Fail (as since they were made): nothing gets through
    blocked = cluster.kubectl("create", "-f", "-", input=configmap("blocked"), check=False)
    assert blocked.returncode != 0
    assert 'Internal error occurred: failed calling webhook "label.hooks.lite.test"' in blocked.stderr, \
        blocked.stderr
    assert cluster.kubectl("get", "configmap", "-n", "guarded", "blocked", check=False).returncode != 0

    ca_bundle = objects[4]["webhooks"][0]["clientConfig"]["caBundle"]
    cluster.apply(webhook_configurations(ca_bundle, "Ignore"))
    # the API server's webhook informers see the change a moment later: retry until the write goes through
    cluster.wait(lambda: cluster.kubectl("create", "-f", "-", input=configmap("while-down", {"deny": "yes"}),
                                         check=False).returncode == 0, "a write with failurePolicy Ignore",
                 timeout=30)
    assert stored_labels(cluster, "while-down") == {"deny": "yes"}  # neither refused nor mutated
