"""RBAC decisions over a real `PolicyIndex`: rule matching (verbs, groups, subresources, resourceNames,
nonResourceURLs, `*`), subjects (users, groups, ServiceAccounts), namespaces, missing roles, and the
chain's 403 messages — table-driven."""

from __future__ import annotations

import pytest

from lite.server.authz.attrs import Attributes, RequestInfo, request_info
from lite.server.authz.chain import ANONYMOUS, AuthorizerChain, forbidden
from lite.server.authz.index import PolicyIndex, binding_from
from lite.server.authz.rules import rules_from
from lite.server.requestuser import UserInfo

G = "rbac.authorization.k8s.io"


def crole(name: str, *rules: dict[str, object]) -> tuple[str, dict[str, object]]:
    return name, {"rules": list(rules)}


def rule(verbs: str, groups: str = "", resources: str = "", names: str = "", urls: str = "") -> dict[str, object]:
    out: dict[str, object] = {"verbs": verbs.split(",")}
    if resources:
        out["apiGroups"] = groups.split(",") if groups != "" else [""]
        out["resources"] = resources.split(",")
    if names:
        out["resourceNames"] = names.split(",")
    if urls:
        out["nonResourceURLs"] = urls.split(",")
    return out


def binding(name: str, role: str, *subjects: str, ns: str = "", role_kind: str = "ClusterRole") -> dict[str, object]:
    subs = []
    for s in subjects:
        kind, _, rest = s.partition(":")
        if kind == "ServiceAccount":
            sa_ns, _, sa = rest.rpartition("/")
            subs.append({"kind": kind, "name": sa, **({"namespace": sa_ns} if sa_ns else {})})
        else:
            subs.append({"kind": kind, "name": rest, "apiGroup": G})
    meta = {"name": name, **({"namespace": ns} if ns else {})}
    return {"metadata": meta, "roleRef": {"apiGroup": G, "kind": role_kind, "name": role}, "subjects": subs}


@pytest.fixture
def chain() -> AuthorizerChain:
    index = PolicyIndex()
    for name, body in [
        crole("pod-reader", rule("get,list,watch", "", "pods")),
        crole("log-reader", rule("get", "", "pods/log")),
        crole("any-sub", rule("get", "", "*/status")),
        crole("deploy-all-subs", rule("update", "apps", "deployments/*")),
        crole("one-cm", rule("get,update", "", "configmaps", names="cfg")),
        crole("star", rule("*", "*", "*")),
        crole("urls", rule("get", urls="/healthz,/logs/*")),
        crole("apps-only", rule("create", "apps", "deployments")),
    ]:
        index.put_cluster_role(name, rules_from(body["rules"]))
    index.put_role("team", "secret-reader", rules_from([rule("get", "", "secrets")]))
    for b in [
        binding("u-pods", "pod-reader", "User:alice", ns="team"),
        binding("g-logs", "log-reader", "Group:dev", ns="team"),
        binding("c-sub", "any-sub", "User:carol"),
        binding("c-dep", "deploy-all-subs", "User:carol"),
        binding("c-cm", "one-cm", "User:dan", ns="team"),
        binding("root", "star", "Group:admins"),
        binding("urls", "urls", "User:erin"),
        binding("sa", "apps-only", "ServiceAccount:ci/builder"),
        binding("sa-local", "apps-only", "ServiceAccount:deployer", ns="ci"),  # namespace: the binding's
        binding("sa2", "pod-reader", "ServiceAccount:other/robot"),
        binding("local", "secret-reader", "User:frank", ns="team", role_kind="Role"),
        binding("dangling", "missing-role", "User:gina", ns="team"),
    ]:
        index.put_binding(binding_from(b))
    index.ready.set()
    return AuthorizerChain(index)


def user(spec: str) -> UserInfo:
    name, _, groups = spec.partition("@")
    return UserInfo(name, (*tuple(g for g in groups.split("+") if g), "system:authenticated"))


def req(method: str, path: str, query: str = "") -> RequestInfo:
    q = dict(p.split("=", 1) for p in query.split("&") if p)
    return request_info(method, path, q)


DECISIONS = [
    # who, method, path, query, allowed
    ("alice", "GET", "/api/v1/namespaces/team/pods", "", True),
    ("alice", "GET", "/api/v1/namespaces/team/pods", "watch=1", True),
    ("alice", "GET", "/api/v1/namespaces/team/pods/p", "", True),
    ("alice", "GET", "/api/v1/namespaces/other/pods", "", False),  # RoleBinding only in team
    ("alice", "GET", "/api/v1/pods", "", False),  # a cluster-wide list needs a cluster binding
    ("alice", "DELETE", "/api/v1/namespaces/team/pods/p", "", False),
    ("alice", "GET", "/api/v1/namespaces/team/pods/p/log", "", False),  # subresource is separate
    ("bob@dev", "GET", "/api/v1/namespaces/team/pods/p/log", "", True),
    ("bob@dev", "GET", "/api/v1/namespaces/team/pods/p", "", False),
    ("bob", "GET", "/api/v1/namespaces/team/pods/p/log", "", False),  # not in the group
    ("carol", "GET", "/api/v1/namespaces/x/pods/p/status", "", True),  # */status
    ("carol", "GET", "/api/v1/namespaces/x/pods/p", "", False),
    ("carol", "PUT", "/apis/apps/v1/namespaces/x/deployments/d/scale", "", True),  # deployments/*
    ("carol", "PUT", "/apis/apps/v1/namespaces/x/deployments/d", "", False),
    ("dan", "GET", "/api/v1/namespaces/team/configmaps/cfg", "", True),
    ("dan", "PUT", "/api/v1/namespaces/team/configmaps/cfg", "", True),
    ("dan", "GET", "/api/v1/namespaces/team/configmaps/other", "", False),
    ("dan", "GET", "/api/v1/namespaces/team/configmaps", "", False),  # list has no name
    ("dan", "GET", "/api/v1/namespaces/team/configmaps", "fieldSelector=metadata.name%3Dcfg", False),
    ("root@admins", "DELETE", "/apis/apps/v1/namespaces/x/deployments", "", True),
    ("root@admins", "GET", "/healthz", "", False),  # resource * does not cover URLs
    ("erin", "GET", "/healthz", "", True),
    ("erin", "GET", "/logs/kube.log", "", True),
    ("erin", "GET", "/logs", "", False),  # "/logs/*" needs the slash
    ("erin", "POST", "/healthz", "", False),
    ("system:serviceaccount:ci:builder", "POST", "/apis/apps/v1/namespaces/x/deployments", "", True),
    ("system:serviceaccount:other:builder", "POST", "/apis/apps/v1/namespaces/x/deployments", "", False),
    ("system:serviceaccount:other:robot", "GET", "/api/v1/pods", "", True),
    ("system:serviceaccount:ci:deployer", "POST", "/apis/apps/v1/namespaces/ci/deployments", "", True),
    ("system:serviceaccount:ci:deployer", "POST", "/apis/apps/v1/namespaces/x/deployments", "", False),
    ("frank", "GET", "/api/v1/namespaces/team/secrets/s", "", True),
    ("frank", "GET", "/api/v1/namespaces/kube-system/secrets/s", "", False),
    ("gina", "GET", "/api/v1/namespaces/team/pods", "", False),
    ("root@system:masters", "DELETE", "/api/v1/nodes/n", "", True),
    ("root@system:masters", "GET", "/metrics", "", True),
]


@pytest.mark.parametrize(("who", "method", "path", "query", "allowed"), DECISIONS,
                         ids=[f"{d[0]} {d[1]} {d[2]}?{d[3]}" for d in DECISIONS])
def test_decision(chain: AuthorizerChain, who: str, method: str, path: str, query: str, allowed: bool) -> None:
    query = query.replace("%3D", "=")
    assert chain.authorize(Attributes(user(who), req(method, path, query))).allowed is allowed


def test_allow_reason_names_the_binding(chain: AuthorizerChain) -> None:
    v = chain.authorize(Attributes(user("bob@dev"), req("GET", "/api/v1/namespaces/team/pods/p/log")))
    assert v.reason == 'RBAC: allowed by RoleBinding "g-logs/team" of ClusterRole "log-reader" to Group "dev"'


def test_missing_role_is_the_denial_reason(chain: AuthorizerChain) -> None:
    v = chain.authorize(Attributes(user("gina"), req("GET", "/api/v1/namespaces/team/pods")))
    assert not v.allowed and v.reason == 'RBAC: clusterrole.rbac.authorization.k8s.io "missing-role" not found'


def test_index_updates_and_deletes_bindings(chain: AuthorizerChain) -> None:
    a = Attributes(user("alice"), req("GET", "/api/v1/namespaces/team/pods"))
    chain.index.delete_binding("team", "u-pods")
    assert not chain.authorize(a).allowed
    chain.index.put_binding(binding_from(binding("u-pods", "pod-reader", "User:zed", ns="team")))
    assert not chain.authorize(a).allowed
    chain.index.put_binding(binding_from(binding("u-pods", "pod-reader", "User:alice", ns="team")))
    assert chain.authorize(a).allowed
    chain.index.delete_cluster_role("pod-reader")
    assert not chain.authorize(a).allowed


FORBIDDEN = [
    ("GET", "/api/v1/namespaces/y/pods", "", 'pods is forbidden: User "x" cannot list resource "pods" in API group '
                                             '"" in the namespace "y"', "pods", ""),
    ("GET", "/api/v1/namespaces/y/pods/p/log", "", 'pods "p" is forbidden: User "x" cannot get resource "pods/log" '
                                                   'in API group "" in the namespace "y"', "pods", "p"),
    ("POST", "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", "",
     'clusterrolebindings.rbac.authorization.k8s.io is forbidden: User "x" cannot create resource '
     '"clusterrolebindings" in API group "rbac.authorization.k8s.io" at the cluster scope', "clusterrolebindings", ""),
    ("GET", "/metrics", "", 'forbidden: User "x" cannot get path "/metrics"', "", ""),
]


@pytest.mark.parametrize(("method", "path", "query", "message", "kind", "name"), FORBIDDEN)
def test_forbidden_messages(method: str, path: str, query: str, message: str, kind: str, name: str) -> None:
    err = forbidden(Attributes(UserInfo("x"), req(method, path, query)))
    status = err.status()
    assert (status["code"], status["reason"], status["message"]) == (403, "Forbidden", message)
    assert status.get("details", {}).get("kind", "") == kind and status.get("details", {}).get("name", "") == name


def test_anonymous_gets_only_what_is_bound(chain: AuthorizerChain) -> None:
    health = Attributes(ANONYMOUS, req("GET", "/healthz"))
    assert not chain.authorize(health).allowed
    chain.index.put_binding(binding_from(binding("pub", "urls", "Group:system:unauthenticated")))
    assert chain.authorize(health).allowed
    assert not chain.authorize(Attributes(ANONYMOUS, req("GET", "/api/v1/pods"))).allowed


def test_rules_for_lists_cluster_and_namespace_rules(chain: AuthorizerChain) -> None:
    rules, errors = chain.rules_for(user("carol"), "team")
    assert {r.resources for r in rules} == {("*/status",), ("deployments/*",)} and errors == []
    rules, errors = chain.rules_for(user("gina"), "team")
    assert rules == [] and errors == ['clusterrole.rbac.authorization.k8s.io "missing-role" not found']


def test_cached_verdicts_of_per_object_requests_are_small(chain: AuthorizerChain) -> None:
    """A kubelet patching every pod's status is thousands of distinct requests: when none of the user's rules
    names objects, they are one cached verdict (one object, one entry); each RequestInfo has no per-instance
    dict."""
    carol = user("carol")
    verdicts = [chain.authorize(Attributes(carol, req("GET", f"/api/v1/namespaces/team/pods/p{i}/status")))
                for i in range(50)]
    assert all(v.allowed for v in verdicts) and len({id(v) for v in verdicts}) == 1
    assert len(chain._cache) == 1
    info = req("PATCH", "/api/v1/namespaces/team/pods/p1/status")
    assert not hasattr(info, "__dict__") and info.resource == "pods" and info.subresource == "status"


def test_a_user_whose_rules_name_objects_is_decided_per_object_from_the_cache_too(chain: AuthorizerChain) -> None:
    """Only the verdicts of users none of whose rules name objects are cached without the object's name."""
    dan = user("dan")
    asks = ["cfg", "other", "cfg", "other"]
    got = [chain.authorize(Attributes(dan, req("GET", f"/api/v1/namespaces/team/configmaps/{n}"))).allowed
           for n in asks]
    assert got == [True, False, True, False] and len(chain._cache) == 2
