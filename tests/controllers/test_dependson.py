"""lite.dev/depends-on: the generated egress NetworkPolicy against the real in-process API, and what it lets the
workload's pods reach (checked with the agent's own policy decisions)."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import DEPLOY, EVENT, Kit

from lite.agent.netpol import compile as comp
from lite.errors import ApiError
from lite.server.controllers.dependson import DependsOnController, dependencies
from lite.server.controllers.runtime import builtin

SERVICE = builtin("", "Service")
SLICE = builtin("discovery.k8s.io", "EndpointSlice")
NETPOL = builtin("networking.k8s.io", "NetworkPolicy")
NS = builtin("", "Namespace")
Obj = dict[str, Any]


@pytest.mark.parametrize(("text", "want"), [
    ("db", [("prod", "db")]),
    (" db , cache.other-ns,, db", [("prod", "db"), ("other-ns", "cache")]),
    ("kubernetes", [("default", "kubernetes")]),
    ("", []),
])
def test_dependencies(text: str, want: list[tuple[str, str]]) -> None:
    assert dependencies(text, "prod") == want


def deployment(name: str, annotation: str | None) -> Obj:
    annotations = {"lite.dev/depends-on": annotation} if annotation is not None else {}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}, "annotations": annotations},
                                  "spec": {"containers": [{"name": "c", "image": "busybox"}]}}}}


def service(name: str, selector: dict[str, str] | None, port: int, target: Any) -> Obj:
    spec: Obj = {"ports": [{"port": port, "targetPort": target, "protocol": "TCP"}]}
    if selector:
        spec["selector"] = selector
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name}, "spec": spec}


async def setup(kit: Kit) -> None:
    await kit.api.create(NS, "", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "other-ns"}})
    await kit.api.create(SERVICE, "default", service("db", {"app": "db"}, 5432, "pg"))
    await kit.api.create(SERVICE, "other-ns", service("cache", {"app": "cache"}, 6379, 6379))
    await kit.api.create(SERVICE, "default", service("api", None, 443, 6443))
    await kit.api.create(SLICE, "default", {
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice", "addressType": "IPv4",
        "metadata": {"name": "api-1", "labels": {"kubernetes.io/service-name": "api"}},
        "ports": [{"name": "https", "port": 6443, "protocol": "TCP"}],
        "endpoints": [{"addresses": ["192.0.2.10"]}]})


async def run(kit: Kit, c: DependsOnController) -> None:
    await kit.settle(c)
    await c.reconcile("Deployment|default/web")


async def test_policy_follows_the_annotation(kit: Kit) -> None:
    await setup(kit)
    web = await kit.api.create(DEPLOY, "default", deployment("web", "db, api, missing"))
    c = DependsOnController(kit.api, kit.informers, cluster_dns="10.43.0.10")
    await run(kit, c)
    policy = await kit.api.get(NETPOL, "default", "web-depends-on")
    assert policy["metadata"]["ownerReferences"][0]["uid"] == web["metadata"]["uid"]
    assert policy["spec"]["podSelector"] == {"matchLabels": {"app": "web"}}
    assert policy["spec"]["policyTypes"] == ["Egress"]
    egress = policy["spec"]["egress"]
    assert egress[0] == {"to": [{"ipBlock": {"cidr": "10.43.0.10/32"}}],
                         "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]}
    assert egress[1]["to"][0]["podSelector"] == {"matchLabels": {"app": "db"}}
    assert egress[1]["ports"] == [{"protocol": "TCP", "port": "pg"}]  # the targetPort's name
    assert egress[2] == {"to": [{"ipBlock": {"cidr": "192.0.2.10/32"}}], "ports": [{"protocol": "TCP", "port": 6443}]}
    events = (await kit.api.list(EVENT, "default"))["items"]
    assert any(e["reason"] == "DependencyNotFound" and "missing.default" in e["message"] for e in events)

    rv = policy["metadata"]["resourceVersion"]
    await run(kit, c)  # nothing changed: no write
    assert (await kit.api.get(NETPOL, "default", "web-depends-on"))["metadata"]["resourceVersion"] == rv

    current = await kit.api.get(DEPLOY, "default", "web")
    current["spec"]["template"]["metadata"]["annotations"]["lite.dev/depends-on"] = "cache.other-ns"
    await kit.api.update(DEPLOY, "default", "web", current)
    await run(kit, c)
    egress = (await kit.api.get(NETPOL, "default", "web-depends-on"))["spec"]["egress"]
    assert egress[1]["to"][0]["namespaceSelector"] == {"matchLabels": {"kubernetes.io/metadata.name": "other-ns"}}
    assert len(egress) == 2

    current = await kit.api.get(DEPLOY, "default", "web")
    del current["spec"]["template"]["metadata"]["annotations"]["lite.dev/depends-on"]
    await kit.api.update(DEPLOY, "default", "web", current)
    await run(kit, c)
    with pytest.raises(ApiError) as e:
        await kit.api.get(NETPOL, "default", "web-depends-on")
    assert e.value.code == 404


async def test_a_policy_of_the_same_name_not_ours_is_left_alone(kit: Kit) -> None:
    mine = {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": {"name": "web-depends-on"}, "spec": {"podSelector": {}}}
    await kit.api.create(NETPOL, "default", mine)
    await kit.api.create(DEPLOY, "default", deployment("web", "db"))
    c = DependsOnController(kit.api, kit.informers)
    await run(kit, c)
    assert (await kit.api.get(NETPOL, "default", "web-depends-on"))["spec"] == {"podSelector": {},
                                                                               "policyTypes": ["Ingress"]}


async def test_the_generated_policy_lets_pods_reach_db_but_not_cache(kit: Kit) -> None:
    await setup(kit)
    await kit.api.create(DEPLOY, "default", deployment("web", "db"))
    c = DependsOnController(kit.api, kit.informers, cluster_dns="10.43.0.10")
    await run(kit, c)
    policy = await kit.api.get(NETPOL, "default", "web-depends-on")
    web = comp.PodView("default", "web-1", "10.42.0.2", {"app": "web"}, "n1")
    db = comp.PodView("default", "db-1", "10.42.0.3", {"app": "db"}, "n1", (("pg", "TCP", 5432),))
    cache = comp.PodView("other-ns", "cache-1", "10.42.0.4", {"app": "cache"}, "n1")
    namespaces = {"default": {"kubernetes.io/metadata.name": "default"},
                  "other-ns": {"kubernetes.io/metadata.name": "other-ns"}}
    (pp,) = comp.compile_policies([policy], [web, db, cache], namespaces, [web])
    assert comp.admits(pp.egress, db.ip, "TCP", 5432)
    assert not comp.admits(pp.egress, db.ip, "TCP", 22)
    assert not comp.admits(pp.egress, cache.ip, "TCP", 6379)
    assert comp.admits(pp.egress, "10.43.0.10", "UDP", 53)
    assert pp.ingress is None  # only egress is isolated
