"""Node IPAM controller against the real in-process API."""

from __future__ import annotations

from typing import Any

from conftest import Kit

from lite.server.controllers.nodeipam import CIDRSet, NodeIpamController
from lite.server.controllers.runtime import builtin

NODE = builtin("", "Node")


def node(name: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}, "spec": spec}


def test_cidr_set() -> None:
    s = CIDRSet("10.42.0.0/16", 24)
    assert s.count == 256
    assert s.allocate_next() == "10.42.0.0/24"
    assert s.occupy("10.42.1.0/24")
    assert s.allocate_next() == "10.42.2.0/24"
    assert not s.occupy("10.99.0.0/24") and not s.occupy("10.42.3.0/25")
    s.release("10.42.0.0/24")
    assert s.allocate_next() == "10.42.0.0/24"
    tiny = CIDRSet("10.0.0.0/23", 24)
    assert [tiny.allocate_next(), tiny.allocate_next(), tiny.allocate_next()] == ["10.0.0.0/24", "10.0.1.0/24", None]


async def test_nodes_get_distinct_cidrs_kept_and_released(kit: Kit) -> None:
    await kit.api.create(NODE, "", node("n1"))
    await kit.api.create(NODE, "", node("n2", podCIDR="10.42.0.0/24", podCIDRs=["10.42.0.0/24"]))
    c = NodeIpamController(kit.api, kit.informers)
    await kit.settle(c)
    c.on_start()  # what every leadership term does: rebuild from stored nodes
    await c.reconcile("n1")
    n1 = await kit.api.get(NODE, "", "n1")
    assert n1["spec"]["podCIDR"] == "10.42.1.0/24" and n1["spec"]["podCIDRs"] == ["10.42.1.0/24"]
    await c.reconcile("n1")  # idempotent
    assert (await kit.api.get(NODE, "", "n1"))["spec"]["podCIDR"] == "10.42.1.0/24"
    await kit.api.delete(NODE, "", "n2")
    await kit.settle(c)
    await c.reconcile("n2")
    await kit.api.create(NODE, "", node("n3"))
    await kit.settle(c)
    await c.reconcile("n3")
    assert (await kit.api.get(NODE, "", "n3"))["spec"]["podCIDRs"] == ["10.42.0.0/24"]
