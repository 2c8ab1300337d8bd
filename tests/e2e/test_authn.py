"""Authentication against a real server with the real kubectl: client certificates (the admin's, one issued by
`lite certificate issue-user`, one issued through a CSR), ServiceAccount tokens from `kubectl create token`
(bound to a pod: refused once it is deleted), TokenReview, OIDC discovery."""

from __future__ import annotations

import base64
import json
import subprocess
import time
from pathlib import Path
from typing import Any

import jwt
import yaml
from e2ekit import Cluster, unique
from helpers.csr import make_csr
from kubernetes import client
from liteproc import lite_command

from lite.server.certs import kubeconfig_text


def whoami(cluster: Cluster, kubeconfig: Path) -> dict[str, Any]:
    out = cluster.kubectl("--kubeconfig", str(kubeconfig), "auth", "whoami", "-o", "json").stdout
    info: dict[str, Any] = json.loads(out)["status"]["userInfo"]
    return info


def token_kubeconfig(cluster: Cluster, path: Path, token: str) -> Path:
    ca = base64.b64decode(cluster.server.config()["clusters"][0]["cluster"]["certificate-authority-data"])
    path.write_text(kubeconfig_text(cluster.server.url, ca, token, user="sa"))
    return path


def cert_kubeconfig(cluster: Cluster, path: Path, cert_pem: bytes, key_pem: bytes) -> Path:
    ca = base64.b64decode(cluster.server.config()["clusters"][0]["cluster"]["certificate-authority-data"])
    path.write_text(kubeconfig_text(cluster.server.url, ca, "", (cert_pem, key_pem), user="csr"))
    return path


def test_admin_kubeconfig_is_a_system_masters_certificate(cluster: Cluster) -> None:
    user = cluster.server.config()["users"][0]["user"]
    assert user["client-certificate-data"] and user["client-key-data"]
    info = whoami(cluster, cluster.kubeconfig)
    assert info["username"] == "system:admin"
    assert info["groups"] == ["system:masters", "system:authenticated"]


def test_issued_user_certificate(cluster: Cluster, tmp_path: Path) -> None:
    out = subprocess.run([*lite_command(), "certificate", "issue-user", "alice", "--group", "dev", "--data-dir",
                          str(cluster.server.data_dir)], capture_output=True, text=True, check=True, timeout=60)
    assert "token:" not in out.stdout
    path = tmp_path / "alice.yaml"
    path.write_text(out.stdout)
    info = whoami(cluster, path)
    assert (info["username"], info["groups"]) == ("alice", ["dev", "system:authenticated"])


def test_a_csr_issued_certificate_authenticates(cluster: Cluster, tmp_path: Path) -> None:
    name = unique("csr")
    csr_pem, key_pem = make_csr("carol", ("qa",))
    body = {"apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest",
            "metadata": {"name": name},
            "spec": {"request": base64.b64encode(csr_pem).decode(), "usages": ["client auth"],
                     "signerName": "kubernetes.io/kube-apiserver-client"}}
    cluster.kubectl("create", "-f", "-", input=json.dumps(body))
    cluster.kubectl("certificate", "approve", name)
    cert = ""
    deadline = time.monotonic() + 30
    while not cert and time.monotonic() < deadline:
        cert = cluster.kubectl("get", "csr", name, "-o", "jsonpath={.status.certificate}").stdout
        time.sleep(0.2)
    assert cert, "the CSR was not signed"
    info = whoami(cluster, cert_kubeconfig(cluster, tmp_path / "carol.yaml", base64.b64decode(cert), key_pem))
    assert (info["username"], info["groups"]) == ("carol", ["qa", "system:authenticated"])


def test_create_token_authenticates_until_its_pod_is_deleted(cluster: Cluster, ns: str, tmp_path: Path) -> None:
    cluster.kubectl("-n", ns, "create", "serviceaccount", "robot")
    token = cluster.kubectl("-n", ns, "create", "token", "robot", "--duration", "15m").stdout.strip()
    info = whoami(cluster, token_kubeconfig(cluster, tmp_path / "sa.yaml", token))
    assert info["username"] == f"system:serviceaccount:{ns}:robot"
    assert info["groups"] == ["system:serviceaccounts", f"system:serviceaccounts:{ns}", "system:authenticated"]

    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "holder"},
           "spec": {"serviceAccountName": "robot", "automountServiceAccountToken": False,
                    "containers": [{"name": "c", "image": "busybox"}]}}
    cluster.kubectl("-n", ns, "create", "-f", "-", input=json.dumps(pod))
    bound = cluster.kubectl("-n", ns, "create", "token", "robot", "--bound-object-kind", "Pod",
                            "--bound-object-name", "holder").stdout.strip()
    claims = jwt.decode(bound, options={"verify_signature": False})
    pod_uid = cluster.kubectl("-n", ns, "get", "pod", "holder", "-o", "jsonpath={.metadata.uid}").stdout
    assert claims["kubernetes.io"]["pod"] == {"name": "holder", "uid": pod_uid}
    status, _ = cluster.server.request(f"/api/v1/namespaces/{ns}/pods", token=bound)
    assert status != 401
    cluster.kubectl("-n", ns, "delete", "pod", "holder", "--grace-period=0", "--force")
    status, body = cluster.server.request(f"/api/v1/namespaces/{ns}/pods", token=bound)
    assert (status, body["reason"]) == (401, "Unauthorized")
    # The unbound token lives on, until its service account goes.
    assert cluster.server.request(f"/api/v1/namespaces/{ns}/pods", token=token)[0] != 401
    cluster.kubectl("-n", ns, "delete", "serviceaccount", "robot")
    assert cluster.server.request(f"/api/v1/namespaces/{ns}/pods", token=token)[0] == 401


def test_token_review_and_oidc_discovery(cluster: Cluster, ns: str) -> None:
    cluster.kubectl("-n", ns, "create", "serviceaccount", "checker")
    token = cluster.kubectl("-n", ns, "create", "token", "checker", "--audience", "vault").stdout.strip()
    authn = client.AuthenticationV1Api(cluster.api)
    review = authn.create_token_review(client.V1TokenReview(spec=client.V1TokenReviewSpec(
        token=token, audiences=["vault"])))
    assert review.status.authenticated and review.status.audiences == ["vault"]
    assert review.status.user.username == f"system:serviceaccount:{ns}:checker"
    wrong = authn.create_token_review(client.V1TokenReview(spec=client.V1TokenReviewSpec(token=token)))
    assert not wrong.status.authenticated  # the API's own audience is not in the token
    garbage = authn.create_token_review(client.V1TokenReview(spec=client.V1TokenReviewSpec(token="x.y.z")))
    assert not garbage.status.authenticated and garbage.status.error

    config = json.loads(cluster.kubectl("get", "--raw", "/.well-known/openid-configuration").stdout)
    assert config["issuer"] == "https://kubernetes.default.svc.cluster.local"
    assert config["jwks_uri"].endswith("/openid/v1/jwks")
    assert config["id_token_signing_alg_values_supported"] == ["RS256"]
    jwks = yaml.safe_load(cluster.kubectl("get", "--raw", "/openid/v1/jwks").stdout)
    key = jwt.PyJWK(jwks["keys"][0])
    assert jwt.get_unverified_header(token)["kid"] == jwks["keys"][0]["kid"]
    claims = jwt.decode(token, key.key, algorithms=["RS256"], audience="vault", issuer=config["issuer"])
    assert claims["sub"] == f"system:serviceaccount:{ns}:checker"
    status, _ = cluster.server.request("/openid/v1/jwks", token="nobody")
    assert status == 401


def test_review_requests_as_upstream_answers_them(cluster: Cluster) -> None:
    base = "/apis/authentication.k8s.io/v1"
    srv = cluster.server
    status, body = srv.request(f"{base}/tokenreviews")
    assert (status, body["reason"]) == (405, "MethodNotAllowed")
    assert srv.request(f"{base}/tokenreviews/x", method="POST", body={})[0] == 404
    status, body = srv.request(f"{base}/tokenreviews", method="POST", body={"spec": {"token": 5}})
    assert (status, body["reason"]) == (400, "BadRequest") and "spec.token of type string" in body["message"]
    status, body = srv.request(f"{base}/tokenreviews", method="POST", body={"spec": {}})
    assert (status, body["message"]) == (400, "token is required for TokenReview in authentication")
    status, body = srv.request(f"{base}/tokenreviews", method="POST", body={"spec": {"token": srv.token()}})
    assert status == 201 and body["status"]["authenticated"] and body["status"]["user"]["username"] == "admin"
    status, body = srv.request(f"{base}/selfsubjectreviews", method="POST",
                               body={"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"})
    assert status == 201 and body["status"]["userInfo"] == {
        "username": "admin", "groups": ["system:masters", "system:authenticated"]}
    assert srv.request(f"{base}/selfsubjectreviews", method="POST", body={}, token="wrong")[0] == 401


def test_pods_get_api_credentials_and_need_their_service_account(cluster: Cluster, ns: str, tmp_path: Path) -> None:
    cm = json.loads(cluster.kubectl("-n", ns, "get", "configmap", "kube-root-ca.crt", "-o", "json").stdout)
    ca = base64.b64decode(cluster.server.config()["clusters"][0]["cluster"]["certificate-authority-data"])
    assert cm["data"]["ca.crt"] == ca.decode()
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
           "spec": {"containers": [{"name": "c", "image": "busybox"}]}}
    cluster.kubectl("-n", ns, "create", "-f", "-", input=json.dumps(pod))
    got = json.loads(cluster.kubectl("-n", ns, "get", "pod", "p", "-o", "json").stdout)["spec"]
    [volume] = got["volumes"]
    assert volume["name"].startswith("kube-api-access-") and len(volume["name"]) == len("kube-api-access-") + 5
    assert got["containers"][0]["volumeMounts"] == [
        {"name": volume["name"], "readOnly": True, "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}]
    pod["metadata"]["name"], pod["spec"]["serviceAccountName"] = "q", "missing"
    out = cluster.kubectl("-n", ns, "create", "-f", "-", input=json.dumps(pod), check=False)
    assert out.returncode != 0 and (f'pods "q" is forbidden: error looking up service account {ns}/missing: '
                                    'serviceaccount "missing" not found') in out.stderr
    cluster.kubectl("-n", ns, "create", "serviceaccount", "quiet")
    cluster.kubectl("-n", ns, "patch", "serviceaccount", "quiet", "-p", '{"automountServiceAccountToken":false}')
    pod["metadata"]["name"], pod["spec"]["serviceAccountName"] = "r", "quiet"
    cluster.kubectl("-n", ns, "create", "-f", "-", input=json.dumps(pod))
    assert "volumes" not in json.loads(cluster.kubectl("-n", ns, "get", "pod", "r", "-o", "json").stdout)["spec"]


def test_legacy_token_secret(cluster: Cluster, ns: str) -> None:
    secret = {"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/service-account-token",
              "metadata": {"name": "legacy", "annotations": {"kubernetes.io/service-account.name": "default"}}}
    cluster.kubectl("-n", ns, "create", "-f", "-", input=json.dumps(secret))
    data: dict[str, str] = {}
    deadline = time.monotonic() + 30
    while "token" not in data and time.monotonic() < deadline:
        data = json.loads(cluster.kubectl("-n", ns, "get", "secret", "legacy", "-o", "json").stdout).get("data") or {}
        time.sleep(0.2)
    assert base64.b64decode(data["namespace"]).decode() == ns and base64.b64decode(data["ca.crt"])
    token = base64.b64decode(data["token"]).decode()
    assert jwt.decode(token, options={"verify_signature": False})["iss"] == "kubernetes/serviceaccount"
    status, body = cluster.server.request("/apis/authentication.k8s.io/v1/selfsubjectreviews", method="POST",
                                          body={}, token=token)
    assert status == 201 and body["status"]["userInfo"]["username"] == f"system:serviceaccount:{ns}:default"
    cluster.kubectl("-n", ns, "delete", "secret", "legacy")
    assert cluster.server.request("/api", token=token)[0] == 401
