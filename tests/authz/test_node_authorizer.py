"""The Node authorizer and NodeRestriction decisions as tables (pure functions, no server)."""

from __future__ import annotations

from typing import Any

import pytest

from lite.server.admission.noderestriction import refusal
from lite.server.authz.attrs import RequestInfo
from lite.server.authz.node import NodePods, decide, node_name
from lite.server.join.nodecreds import hash_password, password_matches
from lite.server.requestuser import UserInfo


def _pod(ns: str, name: str, **spec: Any) -> dict[str, Any]:
    return {"metadata": {"namespace": ns, "name": name}, "spec": {"nodeName": "n1", **spec}}


PODS = [
    _pod("default", "web", serviceAccountName="websa",
         volumes=[{"name": "s", "secret": {"secretName": "websecret"}},
                  {"name": "d", "persistentVolumeClaim": {"claimName": "data"}}],
         containers=[{"name": "c", "envFrom": [{"configMapRef": {"name": "webcfg"}}]}]),
]
PVCS = {("default", "data"): {"spec": {"volumeName": "pv-data"}},
        ("default", "other"): {"spec": {"volumeName": "pv-o"}}}


def lookup(_res: str, ns: str, name: str) -> dict[str, Any] | None:
    return PVCS.get((ns, name))


def req(verb: str, resource: str, name: str = "", ns: str = "", sub: str = "", group: str = "") -> RequestInfo:
    return RequestInfo(True, "/x", verb, group, "v1", resource, sub, ns, name)


CASES = [
    # (request, allowed: True / False (refused) / None (no opinion))
    (req("get", "secrets", "websecret", "default"), True),
    (req("get", "secrets", "othersecret", "default"), False),
    (req("get", "secrets", "websecret", "kube-system"), False),
    (req("list", "secrets", ns="default"), False),
    (req("update", "secrets", "websecret", "default"), False),
    (req("get", "configmaps", "webcfg", "default"), True),
    (req("get", "configmaps", "cfg2", "default"), False),
    (req("get", "persistentvolumeclaims", "data", "default"), True),
    (req("get", "persistentvolumeclaims", "other", "default"), False),
    (req("get", "persistentvolumes", "pv-data"), True),
    (req("get", "persistentvolumes", "pv-o"), False),
    (req("create", "serviceaccounts", "websa", "default", "token"), True),
    (req("create", "serviceaccounts", "default", "default", "token"), False),
    (req("get", "serviceaccounts", "websa", "default"), False),
    (req("get", "nodes", "n2"), True),
    (req("list", "nodes"), True),
    (req("patch", "nodes", "n1"), True),
    (req("patch", "nodes", "n1", sub="status"), True),
    (req("patch", "nodes", "n2"), None),
    (req("update", "nodes", "n2", sub="status"), None),
    (req("delete", "nodes", "n2"), None),
    (req("create", "nodes"), True),
    (req("update", "leases", "n1", "kube-node-lease", group="coordination.k8s.io"), True),
    (req("update", "leases", "n2", "kube-node-lease", group="coordination.k8s.io"), None),
    (req("update", "leases", "n1", "default", group="coordination.k8s.io"), None),
    (req("get", "pods", "anything", "default"), True),
    (req("patch", "pods", "web", "default", "status"), True),
    (req("patch", "pods", "elsewhere", "default", "status"), False),
    (req("delete", "pods", "web", "default"), True),
    (req("delete", "pods", "elsewhere", "default"), False),
    (req("update", "pods", "web", "default"), None),
    (req("create", "events", ns="default"), True),
    (req("create", "deployments", ns="default", group="apps"), None),
    (RequestInfo(False, "/healthz", "get"), None),
]


@pytest.mark.parametrize(("info", "want"), CASES, ids=[f"{i.verb}-{i.resource}/{i.subresource}-{i.namespace}/{i.name}"
                                                      for i, _ in CASES])
def test_node_authorizer(info: RequestInfo, want: bool | None) -> None:
    got = decide("n1", info, PODS, lookup)
    assert (None if got is None else got.allowed) == want
    if got is not None and not got.allowed and info.resource in ("secrets", "configmaps"):
        assert got.reason == "no relationship found between node 'n1' and this object"


@pytest.mark.parametrize(("user", "want"), [
    (UserInfo("system:node:n1", ("system:nodes",)), "n1"),
    (UserInfo("system:node:n1", ()), None),  # not in the group
    (UserInfo("node", ("system:nodes",)), None),  # the join token's user is not a node
    (UserInfo("system:node:", ("system:nodes",)), None),
    (UserInfo("alice", ("system:nodes",)), None),
])
def test_node_identity(user: UserInfo, want: str | None) -> None:
    assert node_name(user) == want


def _node(name: str, **labels: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": labels}}


@pytest.mark.parametrize(("op", "kind", "name", "obj", "old", "refused"), [
    ("UPDATE", "Node", "n1", _node("n1", a="1"), _node("n1"), None),
    ("UPDATE", "Node", "n2", _node("n2"), _node("n2"), "cannot modify node 'n2'"),
    ("CREATE", "Node", "n2", _node("n2"), None, "cannot modify node 'n2'"),
    ("UPDATE", "Node", "n1", _node("n1", **{"node-role.kubernetes.io/master": ""}), _node("n1"),
     "not allowed to modify labels: node-role.kubernetes.io/master"),
    ("UPDATE", "Node", "n1", _node("n1"), _node("n1", **{"node-restriction.kubernetes.io/x": "y"}),
     "not allowed to modify labels: node-restriction.kubernetes.io/x"),
    ("UPDATE", "Node", "n1", _node("n1", **{"node-role.kubernetes.io/w": ""}),
     _node("n1", **{"node-role.kubernetes.io/w": ""}), None),  # unchanged protected labels are fine
    ("CREATE", "Node", "n1", _node("n1", **{"node-restriction.kubernetes.io/x": "y"}), None, "cannot set labels"),
    ("CREATE", "Pod", "p", {"metadata": {"name": "p"}, "spec": {"nodeName": "n1"}}, None, "can only create mirror"),
    ("CREATE", "Pod", "p", {"metadata": {"name": "p", "annotations": {"kubernetes.io/config.mirror": "x"}},
                            "spec": {"nodeName": "n2"}}, None, "spec.nodeName set to itself"),
    ("CREATE", "Pod", "p", {"metadata": {"name": "p", "annotations": {"kubernetes.io/config.mirror": "x"}},
                            "spec": {"nodeName": "n1"}}, None, None),
    ("UPDATE", "Pod", "p", {"metadata": {"name": "p"}}, {"metadata": {"name": "p"}}, None),
])
def test_node_restriction(op: str, kind: str, name: str, obj: Any, old: Any, refused: str | None) -> None:
    got = refusal("n1", op, kind, name, obj, old)
    assert (got is None) if refused is None else (got is not None and refused in got), got


def test_node_password_hash() -> None:
    stored = hash_password("secret-password-123")
    assert "secret-password-123" not in stored and stored.startswith("scrypt$")
    assert password_matches("secret-password-123", stored)
    assert not password_matches("secret-password-124", stored)
    assert hash_password("secret-password-123") != stored  # salted
    assert not password_matches("x", "garbage") and not password_matches("x", "md5$a$b")


@pytest.mark.parametrize(("info", "want"), CASES, ids=[f"{i.verb}-{i.resource}/{i.subresource}-{i.namespace}/{i.name}"
                                                      for i, _ in CASES])
def test_node_pods_read_lazily_give_the_same_verdicts(info: RequestInfo, want: bool | None) -> None:
    """NodeAuthorizer hands `decide` the node's pods as NodePods: read only by the requests that need them (its
    lease, its Node and its pods' status need no pod: the pod cache decodes what it hands out), same verdicts."""
    fetched: list[bool] = []

    def fetch() -> list[dict[str, Any]]:
        fetched.append(True)
        return PODS

    keys = {f"{p['metadata']['namespace']}/{p['metadata']['name']}" for p in PODS}
    got = decide("n1", info, NodePods(fetch, lambda: keys), lookup)
    assert (None if got is None else got.allowed) == want
    graph = info.resource in ("secrets", "configmaps", "persistentvolumeclaims", "persistentvolumes",
                              "serviceaccounts")
    assert bool(fetched) <= graph  # only the object graph reads the pods themselves
