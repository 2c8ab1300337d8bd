"""`authz.attrs.request_info`: upstream RequestInfoFactory cases, table-driven."""

from __future__ import annotations

import pytest

from lite.server.authz.attrs import RequestInfo, RequestInfos, request_info

R = True
N = False
CASES = [
    # method, path, query, expected
    ("GET", "/api/v1/namespaces/ns/pods", {}, RequestInfo(R, "", "list", "", "v1", "pods", "", "ns", "")),
    ("GET", "/api/v1/namespaces/ns/pods", {"watch": "1"}, RequestInfo(R, "", "watch", "", "v1", "pods", "", "ns")),
    ("GET", "/api/v1/namespaces/ns/pods", {"watch": "true"}, RequestInfo(R, "", "watch", "", "v1", "pods", "", "ns")),
    ("GET", "/api/v1/namespaces/ns/pods", {"watch": "false"}, RequestInfo(R, "", "list", "", "v1", "pods", "", "ns")),
    ("GET", "/api/v1/namespaces/ns/pods", {"watch": "0"}, RequestInfo(R, "", "list", "", "v1", "pods", "", "ns")),
    ("GET", "/api/v1/namespaces/ns/pods/p", {}, RequestInfo(R, "", "get", "", "v1", "pods", "", "ns", "p")),
    # a GET with a name stays "get", even with ?watch
    ("GET", "/api/v1/namespaces/ns/pods/p", {"watch": "1"}, RequestInfo(R, "", "get", "", "v1", "pods", "", "ns", "p")),
    ("GET", "/api/v1/namespaces/ns/pods", {"watch": "1", "fieldSelector": "metadata.name=p"},
     RequestInfo(R, "", "watch", "", "v1", "pods", "", "ns", "p")),
    ("GET", "/api/v1/namespaces/ns/pods", {"fieldSelector": "metadata.name==p,spec.nodeName=n"},
     RequestInfo(R, "", "list", "", "v1", "pods", "", "ns", "p")),
    ("GET", "/api/v1/namespaces/ns/pods", {"fieldSelector": "metadata.name!=p"},
     RequestInfo(R, "", "list", "", "v1", "pods", "", "ns", "")),
    ("GET", "/api/v1/pods", {}, RequestInfo(R, "", "list", "", "v1", "pods")),
    ("HEAD", "/api/v1/pods", {}, RequestInfo(R, "", "list", "", "v1", "pods")),
    ("POST", "/api/v1/namespaces/ns/pods", {}, RequestInfo(R, "", "create", "", "v1", "pods", "", "ns")),
    ("PUT", "/api/v1/namespaces/ns/pods/p", {}, RequestInfo(R, "", "update", "", "v1", "pods", "", "ns", "p")),
    ("PATCH", "/api/v1/namespaces/ns/pods/p", {}, RequestInfo(R, "", "patch", "", "v1", "pods", "", "ns", "p")),
    ("DELETE", "/api/v1/namespaces/ns/pods/p", {}, RequestInfo(R, "", "delete", "", "v1", "pods", "", "ns", "p")),
    ("DELETE", "/api/v1/namespaces/ns/pods", {}, RequestInfo(R, "", "deletecollection", "", "v1", "pods", "", "ns")),
    ("GET", "/api/v1/namespaces/ns/pods/p/log", {}, RequestInfo(R, "", "get", "", "v1", "pods", "log", "ns", "p")),
    ("POST", "/api/v1/namespaces/ns/pods/p/eviction", {},
     RequestInfo(R, "", "create", "", "v1", "pods", "eviction", "ns", "p")),
    ("PUT", "/apis/apps/v1/namespaces/ns/deployments/d/scale", {},
     RequestInfo(R, "", "update", "apps", "v1", "deployments", "scale", "ns", "d")),
    ("GET", "/apis/apps/v1/watch/namespaces/ns/deployments", {},
     RequestInfo(R, "", "watch", "apps", "v1", "deployments", "", "ns")),
    ("GET", "/apis/apps/v1/watch/namespaces/ns/deployments/d", {},
     RequestInfo(R, "", "watch", "apps", "v1", "deployments", "", "ns", "d")),
    ("GET", "/api/v1/proxy/namespaces/ns/services/s/a/b", {},
     RequestInfo(R, "", "proxy", "", "v1", "services", "", "ns", "s")),
    # the namespace object itself and its status/finalize subresources
    ("GET", "/api/v1/namespaces/ns", {}, RequestInfo(R, "", "get", "", "v1", "namespaces", "", "ns", "ns")),
    ("PUT", "/api/v1/namespaces/ns/status", {},
     RequestInfo(R, "", "update", "", "v1", "namespaces", "status", "ns", "ns")),
    ("PUT", "/api/v1/namespaces/ns/finalize", {},
     RequestInfo(R, "", "update", "", "v1", "namespaces", "finalize", "ns", "ns")),
    ("GET", "/api/v1/namespaces", {}, RequestInfo(R, "", "list", "", "v1", "namespaces")),
    ("GET", "/api/v1/nodes/n1", {}, RequestInfo(R, "", "get", "", "v1", "nodes", "", "", "n1")),
    ("POST", "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", {},
     RequestInfo(R, "", "create", "rbac.authorization.k8s.io", "v1", "clusterrolebindings")),
    # non-resource requests: the verb is the lower-cased method
    ("GET", "/api", {}, RequestInfo(N, "/api", "get")),
    ("GET", "/api/v1", {}, RequestInfo(N, "/api/v1", "get")),
    ("GET", "/apis/apps", {}, RequestInfo(N, "/apis/apps", "get")),
    ("GET", "/apis/apps/v1", {}, RequestInfo(N, "/apis/apps/v1", "get")),
    ("GET", "/healthz", {}, RequestInfo(N, "/healthz", "get")),
    ("POST", "/healthz", {}, RequestInfo(N, "/healthz", "post")),
    ("GET", "/version", {}, RequestInfo(N, "/version", "get")),
    ("GET", "/openapi/v3/apis/apps/v1", {}, RequestInfo(N, "/openapi/v3/apis/apps/v1", "get")),
    ("GET", "/metrics", {}, RequestInfo(N, "/metrics", "get")),
    ("GET", "/", {}, RequestInfo(N, "/", "get")),
    ("GET", "/api/v1/watch", {}, RequestInfo(N, "/api/v1/watch", "get")),
]


@pytest.mark.parametrize(("method", "path", "query", "want"), CASES, ids=[f"{c[0]} {c[1]} {c[2]}" for c in CASES])
def test_request_info(method: str, path: str, query: dict[str, str], want: RequestInfo) -> None:
    got = request_info(method, path, query)
    if want.resource_request:
        want = RequestInfo(True, path, *[getattr(want, f) for f in
                                         ("verb", "api_group", "api_version", "resource", "subresource", "namespace",
                                          "name")])
    assert got == want


def test_request_infos_remember_only_what_the_query_cannot_change() -> None:
    infos = RequestInfos(size=8)
    for _ in range(2):  # the second round is answered from memory where that is allowed
        for method, path, query, _want in CASES:
            assert infos.get(method, path, query) == request_info(method, path, query)
    assert len(infos) == 8  # bounded: the oldest went
    # GET and HEAD are never remembered: the same path lists, then watches
    assert infos.get("GET", "/api/v1/namespaces/ns/pods", {}).verb == "list"
    assert infos.get("GET", "/api/v1/namespaces/ns/pods", {"watch": "1"}).verb == "watch"
    post = infos.get("POST", "/api/v1/namespaces/ns/pods", {})
    assert infos.get("POST", "/api/v1/namespaces/ns/pods", {"watch": "1"}) is post
