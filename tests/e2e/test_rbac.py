"""RBAC end to end with the real kubectl and the official Python client against a real `lite server`.

Identities other than the admin are made by impersonation from the admin (`--as dev-user --as-group dev`),
which the admin (system:masters) may do; requests then run as that user through the authorizer chain."""

from __future__ import annotations

import json
import subprocess
import time
import urllib.error
import urllib.request
from typing import Any

import pytest
from e2ekit import Cluster, unique
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from liteproc import lite_command

GUARD = 60.0  # hang guard while waiting for the aggregation controller, never a speed assertion
DEV = ("--as", "dev-user", "--as-group", "dev")


@pytest.fixture
def team(cluster: Cluster, ns: str) -> str:
    """`ns` with group `dev` bound to the `edit` ClusterRole there."""
    cluster.kubectl("create", "rolebinding", "dev-edit", "--clusterrole=edit", "--group=dev", "-n", ns)
    return ns


def test_dev_can_deploy_in_its_namespace_only(cluster: Cluster, team: str) -> None:
    cluster.kubectl("create", "deployment", "web", "--image=registry.invalid/web:1", "-n", team, *DEV)
    cluster.kubectl("get", "deployment", "web", "-n", team, *DEV)
    cluster.kubectl("create", "configmap", "c", "--from-literal=a=b", "-n", team, *DEV)
    other = cluster.kubectl("get", "deployments", "-n", "default", *DEV, check=False)
    assert other.returncode != 0
    assert ('deployments.apps is forbidden: User "dev-user" cannot list resource "deployments" in API group "apps" '
            'in the namespace "default"') in other.stderr


def test_dev_cannot_read_kube_system_secrets(cluster: Cluster, team: str) -> None:
    proc = cluster.kubectl("get", "secrets", "-n", "kube-system", *DEV, check=False)
    assert proc.returncode != 0
    assert ('Error from server (Forbidden): secrets is forbidden: User "dev-user" cannot list resource "secrets" in '
            'API group "" in the namespace "kube-system"') in proc.stderr
    assert cluster.kubectl("auth", "can-i", "get", "secrets", "-n", "kube-system", *DEV, check=False).stdout \
        .strip() == "no"
    assert cluster.kubectl("auth", "can-i", "get", "secrets", "-n", team, *DEV).stdout.strip() == "yes"


def test_dev_cannot_escalate(cluster: Cluster, team: str) -> None:
    crb = unique("esc")
    proc = cluster.kubectl("create", "clusterrolebinding", crb, "--clusterrole=cluster-admin", "--user=dev-user",
                           *DEV, check=False)
    assert proc.returncode != 0
    assert ('clusterrolebindings.rbac.authorization.k8s.io is forbidden: User "dev-user" cannot create resource '
            '"clusterrolebindings" in API group "rbac.authorization.k8s.io" at the cluster scope') in proc.stderr
    # With `admin` in the namespace dev may write RoleBindings, but not bind a role it does not hold ...
    cluster.kubectl("create", "rolebinding", "dev-admin", "--clusterrole=admin", "--group=dev", "-n", team)
    proc = cluster.kubectl("create", "rolebinding", "grab", "--clusterrole=cluster-admin", "--user=dev-user",
                           "-n", team, *DEV, check=False)
    assert proc.returncode != 0
    assert ('rolebindings.rbac.authorization.k8s.io "grab" is forbidden: user "dev-user" (groups=["dev" '
            '"system:authenticated"]) is attempting to grant RBAC permissions not currently held:') in proc.stderr
    # ... nor write a Role with more than it holds; within its permissions both work.
    proc = cluster.kubectl("create", "role", "nodes", "--verb=get", "--resource=nodes", "-n", team, *DEV,
                           check=False)
    assert proc.returncode != 0 and "attempting to grant RBAC permissions not currently held" in proc.stderr
    cluster.kubectl("create", "role", "cm-reader", "--verb=get", "--resource=configmaps", "-n", team, *DEV)
    cluster.kubectl("create", "rolebinding", "cm", "--role=cm-reader", "--user=someone", "-n", team, *DEV)


def test_get_bindings_wide(cluster: Cluster, team: str) -> None:
    out = cluster.kubectl("get", "rolebindings", "-n", team, "-o", "wide").stdout.splitlines()
    assert out[0].split() == ["NAME", "ROLE", "AGE", "USERS", "GROUPS", "SERVICEACCOUNTS"]
    assert out[1].split()[:2] == ["dev-edit", "ClusterRole/edit"] and out[1].split()[-1] == "dev"
    roles = cluster.kubectl("get", "clusterroles").stdout.splitlines()
    assert roles[0].split() == ["NAME", "CREATED", "AT"] and any(r.split()[0] == "view" for r in roles)


def test_can_i_list(cluster: Cluster, team: str) -> None:
    out = cluster.kubectl("auth", "can-i", "--list", "-n", team, *DEV).stdout
    rows = {line.split()[0]: line for line in out.splitlines() if line and not line.startswith(" ")}
    assert "deployments.apps" in rows and "create" in rows["deployments.apps"]
    assert "selfsubjectaccessreviews.authorization.k8s.io" in rows
    assert "/healthz" in out and "/version" in out
    admin = cluster.kubectl("auth", "can-i", "--list", "-n", team).stdout
    assert any(line.split()[:1] == ["*.*"] for line in admin.splitlines())
    assert cluster.kubectl("auth", "can-i", "get", "/metrics", *DEV, check=False).stdout.strip() == "no"


def test_whoami(cluster: Cluster) -> None:
    out = cluster.kubectl("auth", "whoami", *DEV).stdout
    assert "dev-user" in out and "[dev system:authenticated]" in out
    assert "system:masters" in cluster.kubectl("auth", "whoami").stdout


def test_access_reviews_from_the_python_client(cluster: Cluster, team: str) -> None:
    authz = client.AuthorizationV1Api(cluster.api)
    sar = authz.create_subject_access_review(client.V1SubjectAccessReview(spec=client.V1SubjectAccessReviewSpec(
        user="dev-user", groups=["dev"], resource_attributes=client.V1ResourceAttributes(
            namespace=team, verb="create", group="apps", resource="deployments"))))
    assert sar.status.allowed is True and 'RoleBinding "dev-edit/' in sar.status.reason
    local = authz.create_namespaced_local_subject_access_review(team, client.V1LocalSubjectAccessReview(
        metadata=client.V1ObjectMeta(namespace=team), spec=client.V1SubjectAccessReviewSpec(
            user="dev-user", groups=["dev"], resource_attributes=client.V1ResourceAttributes(
                verb="delete", resource="nodes"))))
    assert local.status.allowed is False
    with pytest.raises(ApiException) as e:
        authz.create_subject_access_review(client.V1SubjectAccessReview(spec=client.V1SubjectAccessReviewSpec(
            user="x", resource_attributes=client.V1ResourceAttributes(verb="get", resource="pods"),
            non_resource_attributes=client.V1NonResourceAttributes(path="/x", verb="get"))))
    assert e.value.status == 422
    mine = authz.create_self_subject_access_review(client.V1SelfSubjectAccessReview(
        spec=client.V1SelfSubjectAccessReviewSpec(non_resource_attributes=client.V1NonResourceAttributes(
            path="/metrics", verb="get"))))
    assert mine.status.allowed is True  # the admin


def _anonymous(cluster: Cluster, path: str, headers: dict[str, str] | None = None) -> tuple[int, Any]:
    req = urllib.request.Request(cluster.server.url + path, headers=headers or {})
    try:
        with urllib.request.urlopen(req, context=cluster.server.ssl_context(), timeout=10) as resp:
            status, raw = resp.status, resp.read()
    except urllib.error.HTTPError as e:
        status, raw = e.code, e.read()
    try:
        return status, json.loads(raw)
    except ValueError:
        return status, raw.decode()


def test_anonymous_sees_only_public_info(cluster: Cluster) -> None:
    assert _anonymous(cluster, "/version")[0] == 200
    assert _anonymous(cluster, "/healthz") == (200, "ok")
    status, body = _anonymous(cluster, "/api/v1/pods")
    assert status == 403 and body["reason"] == "Forbidden"
    assert body["message"] == ('pods is forbidden: User "system:anonymous" cannot list resource "pods" in API group '
                               '"" at the cluster scope')
    assert body["details"] == {"kind": "pods"}
    status, body = _anonymous(cluster, "/api")
    assert status == 403 and body["message"] == 'forbidden: User "system:anonymous" cannot get path "/api"'
    # a credential that does not authenticate is 401, even where anonymous would be allowed
    assert _anonymous(cluster, "/healthz", {"Authorization": "Bearer not-a-token"})[0] == 401
    assert _anonymous(cluster, "/api/v1/pods", {"Authorization": "Bearer not-a-token"})[0] == 401


def _node_token(cluster: Cluster) -> str:
    """The join token: it authenticates as user "node", whom no binding grants anything."""
    proc = subprocess.run([*lite_command(), "token", "--data-dir", str(cluster.server.data_dir)],
                          capture_output=True, text=True, check=True, timeout=60)
    return proc.stdout.strip()


def test_impersonation_needs_the_verb_and_acts_as_the_user(cluster: Cluster, team: str) -> None:
    nobody = cluster.kubectl("auth", "can-i", "--list", "-n", team, "--as", "nobody").stdout
    assert "deployments.apps" not in nobody and "selfsubjectaccessreviews.authorization.k8s.io" in nobody
    token = _node_token(cluster)
    status, body = cluster.server.request("/api/v1/nodes", token=token)
    assert status == 403  # the join token's user may do nothing ...
    req = urllib.request.Request(cluster.server.url + f"/api/v1/namespaces/{team}/configmaps", headers={
        "Authorization": f"Bearer {token}", "Impersonate-User": "dev-user", "Impersonate-Group": "dev"})
    try:
        urllib.request.urlopen(req, context=cluster.server.ssl_context(), timeout=10)
        raise AssertionError("impersonation without the impersonate verb was served")
    except urllib.error.HTTPError as e:  # ... impersonation included
        assert e.code == 403
        body = json.loads(e.read())
    assert body["message"] == ('users "dev-user" is forbidden: User "node" cannot impersonate resource "users" in '
                               'API group "" at the cluster scope')
    assert body["details"] == {"name": "dev-user", "kind": "users"}
    # granted the verb on that one user, it acts as exactly that user (and only with groups it may use)
    cluster.kubectl("create", "clusterrole", f"imp-{team}", "--verb=impersonate", "--resource=users",
                    "--resource-name=dev-user")
    cluster.kubectl("create", "clusterrolebinding", f"imp-{team}", f"--clusterrole=imp-{team}", "--user=node")
    deadline = time.monotonic() + GUARD
    while True:
        req = urllib.request.Request(cluster.server.url + "/apis/authorization.k8s.io/v1/selfsubjectrulesreviews",
                                     method="POST", data=json.dumps({"spec": {"namespace": team}}).encode(),
                                     headers={"Authorization": f"Bearer {token}", "Impersonate-User": "dev-user",
                                              "Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, context=cluster.server.ssl_context(), timeout=10) as resp:
                review = json.loads(resp.read())
                break
        except urllib.error.HTTPError as e:
            assert e.code == 403 and time.monotonic() < deadline
            time.sleep(0.2)
    # dev-user without the dev group: nothing from the team binding
    assert not any("deployments" in r.get("resources", []) for r in review["status"]["resourceRules"])


def test_impersonated_extras_are_carried(cluster: Cluster) -> None:
    """`Impersonate-Extra-<key>` values reach the user the request acts as (here seen by SelfSubjectReview)."""
    req = urllib.request.Request(
        cluster.server.url + "/apis/authentication.k8s.io/v1/selfsubjectreviews", method="POST",
        data=json.dumps({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}).encode(),
        headers={"Authorization": f"Bearer {cluster.server.token()}", "Content-Type": "application/json",
                 "Impersonate-User": "dev-user", "Impersonate-Group": "dev", "Impersonate-Extra-Scopes": "s1",
                 "Impersonate-Extra-Acme.example%2Fproject": "p1"})
    with urllib.request.urlopen(req, context=cluster.server.ssl_context(), timeout=10) as resp:
        info = json.loads(resp.read())["status"]["userInfo"]
    assert info["username"] == "dev-user" and info["groups"] == ["dev", "system:authenticated"]
    assert info["extra"] == {"scopes": ["s1"], "acme.example/project": ["p1"]}


def test_aggregation_adds_labelled_rules_to_view(cluster: Cluster, ns: str) -> None:
    name = unique("agg-view")
    cluster.kubectl("create", "rolebinding", "viewers", "--clusterrole=view", "--group=viewers", "-n", ns)
    cluster.kubectl("create", "rolebinding", "admins", "--clusterrole=admin", "--group=admins", "-n", ns)
    asker = ("--as", "v", "--as-group", "viewers")
    assert cluster.kubectl("auth", "can-i", "list", "podtemplates", "-n", ns, *asker,
                           check=False).stdout.strip() == "no"
    cluster.kubectl("apply", "-f", "-", input=json.dumps({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": name, "labels": {"rbac.authorization.k8s.io/aggregate-to-view": "true"}},
        "rules": [{"apiGroups": [""], "resources": ["podtemplates"], "verbs": ["list"]}]}))
    deadline = time.monotonic() + GUARD
    while cluster.kubectl("auth", "can-i", "list", "podtemplates", "-n", ns, *asker,
                          check=False).stdout.strip() != "yes":
        assert time.monotonic() < deadline, cluster.kubectl("get", "clusterrole", "view", "-o", "yaml").stdout
        time.sleep(0.2)
    # admin aggregates edit, which aggregates view: it follows too
    while cluster.kubectl("auth", "can-i", "list", "podtemplates", "-n", ns, "--as", "a", "--as-group", "admins",
                          check=False).stdout.strip() != "yes":
        assert time.monotonic() < deadline
        time.sleep(0.2)
    cluster.kubectl("delete", "clusterrole", name)
    while cluster.kubectl("auth", "can-i", "list", "podtemplates", "-n", ns, *asker,
                          check=False).stdout.strip() != "no":
        assert time.monotonic() < deadline
        time.sleep(0.2)
