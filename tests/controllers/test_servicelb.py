"""The built-in service load balancer against the real in-process API."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import Kit

from lite.server.controllers.runtime import builtin
from lite.server.controllers.servicelb import ServiceLBController, desired_ingress, node_address

NODE = builtin("", "Node")
SERVICE = builtin("", "Service")
Obj = dict[str, Any]


def node(name: str, ready: bool = True, **addresses: str) -> Obj:
    status = {
        "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        "addresses": [{"type": t, "address": a} for t, a in addresses.items()],
    }
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}, "status": status}


def service(name: str, type_: str = "LoadBalancer", **spec: Any) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name},
        "spec": {"type": type_, "ports": [{"port": 80, "targetPort": 8080}], **spec},
    }


ADDRESS_CASES = [
    ("internal", node("a", InternalIP="10.0.0.1"), "10.0.0.1"),
    ("external preferred", node("a", InternalIP="10.0.0.1", ExternalIP="203.0.113.1"), "203.0.113.1"),
    ("not ready", node("a", ready=False, InternalIP="10.0.0.1"), ""),
    ("no address", node("a"), ""),
]


@pytest.mark.parametrize(("n", "want"), [c[1:] for c in ADDRESS_CASES], ids=[c[0] for c in ADDRESS_CASES])
def test_node_address(n: Obj, want: str) -> None:
    assert node_address(n) == want


def test_desired_ingress() -> None:
    nodes = [
        node("b", InternalIP="10.0.0.2"),
        node("a", InternalIP="10.0.0.1"),
        node("c", ready=False, InternalIP="10.0.0.3"),
    ]
    assert desired_ingress(service("s"), nodes) == [{"ip": "10.0.0.1"}, {"ip": "10.0.0.2"}]
    assert desired_ingress(service("s", loadBalancerClass="example.com/lb"), nodes) is None
    assert desired_ingress(service("s", "ClusterIP"), nodes) == []
    assert desired_ingress(service("s"), []) == []



POOL = "lite.dev/lb-pool"
A, B, C = node("a", InternalIP="10.0.0.1"), node("b", InternalIP="10.0.0.2"), node("c", InternalIP="10.0.0.3")

def pooled(obj: Obj, pool: str) -> Obj:
    return {**obj, "metadata": {**obj["metadata"], "labels": {POOL: pool}}}


POOL_CASES = [
    ("no node labelled: every node", service("s"), [A, B, C], ["10.0.0.1", "10.0.0.2", "10.0.0.3"]),
    ("labelled nodes only", service("s"), [pooled(A, "x"), B, pooled(C, "y")], ["10.0.0.1", "10.0.0.3"]),
    ("the service's pool", pooled(service("s"), "y"), [pooled(A, "x"), B, pooled(C, "y")], ["10.0.0.3"]),
    ("a pool no node is in", pooled(service("s"), "z"), [A, B], []),
    ("empty pool name is a pool", pooled(service("s"), ""), [pooled(A, ""), B], ["10.0.0.1"]),
]


@pytest.mark.parametrize(("svc", "nodes", "want"), [c[1:] for c in POOL_CASES], ids=[c[0] for c in POOL_CASES])
def test_lb_pool_labels_limit_the_nodes(svc: Obj, nodes: list[Obj], want: list[str]) -> None:
    assert desired_ingress(svc, nodes) == [{"ip": ip} for ip in want]


async def ingress(kit: Kit, name: str) -> Any:
    return ((await kit.api.get(SERVICE, "default", name)).get("status") or {}).get("loadBalancer", {}).get("ingress")


async def write_node(kit: Kit, n: Obj) -> None:
    created = await kit.api.create(NODE, "", {**n, "status": {}})
    await kit.api.update(NODE, "", n["metadata"]["name"], {**created, "status": n["status"]}, subresource="status")


async def test_ingress_follows_ready_nodes(kit: Kit) -> None:
    await write_node(kit, node("n1", InternalIP="10.0.0.1"))
    await write_node(kit, node("n2", InternalIP="10.0.0.2"))
    await kit.api.create(SERVICE, "default", service("lb"))
    await kit.api.create(SERVICE, "default", service("owned", loadBalancerClass="example.com/lb"))
    await kit.api.create(SERVICE, "default", service("plain", "ClusterIP"))
    c = ServiceLBController(kit.api, kit.informers)
    await kit.settle(c)
    for key in ("default/lb", "default/owned", "default/plain"):
        await c.reconcile(key)
    assert await ingress(kit, "lb") == [{"ip": "10.0.0.1"}, {"ip": "10.0.0.2"}]
    assert await ingress(kit, "owned") is None and await ingress(kit, "plain") is None
    rv = (await kit.api.get(SERVICE, "default", "lb"))["metadata"]["resourceVersion"]
    await kit.settle(c)
    await c.reconcile("default/lb")  # unchanged: no write
    assert (await kit.api.get(SERVICE, "default", "lb"))["metadata"]["resourceVersion"] == rv

    n2 = await kit.api.get(NODE, "", "n2")
    n2["status"]["conditions"] = [{"type": "Ready", "status": "False"}]
    await kit.api.update(NODE, "", "n2", n2, subresource="status")
    await kit.settle(c)
    await c.reconcile("default/lb")
    assert await ingress(kit, "lb") == [{"ip": "10.0.0.1"}]

    lb = await kit.api.get(SERVICE, "default", "lb")
    lb["spec"]["type"] = "ClusterIP"
    lb["spec"].pop("externalTrafficPolicy", None)
    for port in lb["spec"]["ports"]:
        port.pop("nodePort", None)
    await kit.api.update(SERVICE, "default", "lb", lb)
    await kit.settle(c)
    await c.reconcile("default/lb")
    assert not await ingress(kit, "lb")
