"""Pure parts of the aggregation layer: resolving an APIService to an endpoint (upstream's availability
reasons), the Available condition's transition time, remote APIs merged into discovery with claimed local
group-versions hidden, and the headers the proxy forwards."""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any

import pytest
from multidict import CIMultiDict

from lite.kinds import KindRegistry
from lite.server.aggregator.aggregator import available_condition
from lite.server.aggregator.proxy import forward_headers
from lite.server.aggregator.resolve import Backend, Unavailable, backend
from lite.server.api.discovery import Discovery
from lite.server.requestuser import CURRENT_USER, user_info

Obj = dict[str, Any]
APISVC = {"metadata": {"name": "v1.x.io"}, "spec": {"group": "x.io", "version": "v1", "caBundle": base64.b64encode(
    b"PEM").decode(), "service": {"namespace": "ns", "name": "ext", "port": 443}}}
SVC = {"spec": {"ports": [{"name": "https", "port": 443, "targetPort": 8443}]}}


def eps(*subsets: Obj) -> Obj:
    return {"subsets": list(subsets)}


RESOLVE: list[tuple[str, Obj | None, Obj | None, Backend | Unavailable]] = [
    ("resolved", SVC, eps({"addresses": [{"ip": "127.0.0.1"}], "ports": [{"name": "https", "port": 9443}]}),
     Backend("127.0.0.1", 9443, "ext.ns.svc", b"PEM", False)),
    ("no service", None, None, Unavailable("ServiceNotFound", 'service/ext in "ns" is not present')),
    ("wrong port", {"spec": {"ports": [{"port": 80}]}}, None,
     Unavailable("ServicePortError", 'service/ext in "ns" is not listening on port 443')),
    ("no endpoints", SVC, None, Unavailable("EndpointsNotFound", 'cannot find endpoints for service/ext in "ns"')),
    ("no addresses", SVC, eps({"notReadyAddresses": [{"ip": "1.2.3.4"}], "ports": [{"name": "https", "port": 1}]}),
     Unavailable("MissingEndpoints", 'endpoints for service/ext in "ns" have no addresses with port name "https"')),
    ("other port name", SVC, eps({"addresses": [{"ip": "1.2.3.4"}], "ports": [{"name": "http", "port": 1}]}),
     Unavailable("MissingEndpoints", 'endpoints for service/ext in "ns" have no addresses with port name "https"')),
]


@pytest.mark.parametrize(("case", "svc", "endpoints", "want"), RESOLVE, ids=[c[0] for c in RESOLVE])
def test_resolve(case: str, svc: Obj | None, endpoints: Obj | None, want: Backend | Unavailable) -> None:
    assert backend(APISVC, svc, endpoints) == want


def test_available_condition_keeps_transition_time_while_status_holds() -> None:
    old = {"status": {"conditions": [{"type": "Available", "status": "True", "lastTransitionTime": "T0"}]}}
    assert available_condition(old, True, "Passed", "all checks passed")["lastTransitionTime"] == "T0"
    assert available_condition(old, False, "MissingEndpoints", "m")["lastTransitionTime"] != "T0"


@dataclass(frozen=True)
class Remote:
    group: str
    version: str
    resources: Obj


WIDGETS = {"resources": [{"name": "widgets", "singularName": "widget", "namespaced": True, "kind": "Widget",
                          "verbs": ["get", "list"]},
                         {"name": "widgets/status", "singularName": "", "namespaced": True, "kind": "Widget",
                          "verbs": ["get"]}]}


def test_discovery_merges_remote_and_hides_claimed_local() -> None:
    state: list[tuple[int, tuple[Remote, ...], frozenset[tuple[str, str]]]] = [(0, (), frozenset())]
    d = Discovery(KindRegistry(), lambda: state[0])
    assert d.resource_list("metrics.k8s.io/v1beta1") is not None
    assert d.group("x.io") is None
    state[0] = (1, (Remote("x.io", "v1", WIDGETS), Remote("metrics.k8s.io", "v1beta1", WIDGETS)),
                frozenset({("x.io", "v1"), ("metrics.k8s.io", "v1beta1")}))
    assert d.group("x.io") == {"kind": "APIGroup", "apiVersion": "v1", "name": "x.io",
                               "versions": [{"groupVersion": "x.io/v1", "version": "v1"}],
                               "preferredVersion": {"groupVersion": "x.io/v1", "version": "v1"}}
    listed = d.resource_list("metrics.k8s.io/v1beta1")
    assert listed is not None and [r["name"] for r in listed["resources"]] == ["widgets", "widgets/status"]
    v2 = next(g for g in d.apis_v2()["items"] if g["metadata"]["name"] == "x.io")
    res = v2["versions"][0]["resources"][0]
    assert res["resource"] == "widgets" and res["scope"] == "Namespaced"
    assert res["subresources"][0]["subresource"] == "status"
    # claimed but unavailable: neither the remote nor the local kinds are listed
    state[0] = (2, (), frozenset({("metrics.k8s.io", "v1beta1")}))
    assert d.resource_list("metrics.k8s.io/v1beta1") is None and d.group("x.io") is None


def test_forwarded_headers_carry_the_user_not_the_credentials() -> None:
    headers = CIMultiDict([("Authorization", "Bearer secret"), ("Accept", "application/json"),
                           ("Impersonate-User", "root"), ("X-Remote-User", "forged"), ("Connection", "close")])
    token = CURRENT_USER.set(user_info("admin"))
    try:
        out = forward_headers(headers)
    finally:
        CURRENT_USER.reset(token)
    assert out == [("Accept", "application/json"), ("X-Remote-User", "admin"),
                   ("X-Remote-Group", "system:masters"), ("X-Remote-Group", "system:authenticated")]


def test_openapi_index_lists_remote_and_drops_claimed_local() -> None:
    import orjson

    from lite.server.aggregator import RemoteGroupVersion
    from lite.server.aggregator.aggregator import openapi_root_with

    root = orjson.dumps({"paths": {"api/v1": {"serverRelativeURL": "/openapi/v3/api/v1?hash=A"},
                                   "apis/metrics.k8s.io/v1beta1": {"serverRelativeURL": "/x"}}})
    assert openapi_root_with(root, (), frozenset()) == root
    remote = (RemoteGroupVersion("x.io", "v1", 1000, 15, {}),)
    out = orjson.loads(openapi_root_with(root, remote, frozenset({("x.io", "v1"), ("metrics.k8s.io", "v1beta1")})))
    assert out["paths"] == {"api/v1": {"serverRelativeURL": "/openapi/v3/api/v1?hash=A"},
                            "apis/x.io/v1": {"serverRelativeURL": "/openapi/v3/apis/x.io/v1"}}
