"""Nodes relayed to every agent for the pod network (real API stack, real JoinSession): the whole set before
Synced, the agent's published annotations on its Node, slim updates only when the data path's view changes."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from joinstack import NODE, Stack, TestAgent, joined, serve_join

from lite import wire
from lite.server.join.noderelay import slim_node

ANN = "flannel.alpha.coreos.com/public-ip"


@dataclass
class FabricAgent(TestAgent):
    __test__ = False
    ip: str = "10.99.0.2"

    def hello_info(self) -> dict[str, Any]:
        return {**super().hello_info(), "annotations": {ANN: self.ip}, "podNetwork": True}


@pytest.fixture
async def stack(tmp_path: Path, free_port: int) -> AsyncIterator[Stack]:
    async with serve_join(tmp_path, free_port) as s:
        yield s


def node_upserts(agent: TestAgent, until: int | None = None) -> list[dict[str, Any]]:
    return [m.obj for m in agent.messages[:until] if isinstance(m, wire.ObjectUpsert) and m.kind == "Node"]


async def test_every_node_arrives_before_synced_with_its_published_address(stack: Stack) -> None:
    a, b = FabricAgent(ip="10.99.0.2"), FabricAgent(ip="10.99.0.3")
    async with joined(stack, "na", a):
        await a.wait_for(lambda: any(isinstance(m, wire.Synced) for m in a.messages))
        assert (await stack.resources.get(NODE, "", "na"))["metadata"]["annotations"][ANN] == "10.99.0.2"
        async with joined(stack, "nb", b):
            await b.wait_for(lambda: any(isinstance(m, wire.Synced) for m in b.messages))
            synced_at = next(i for i, m in enumerate(b.messages) if isinstance(m, wire.Synced))
            before = {n["metadata"]["name"]: n for n in node_upserts(b, synced_at)}
            assert set(before) == {"na", "nb"}
            assert before["na"]["metadata"]["annotations"] == {ANN: "10.99.0.2"}
            assert "managedFields" not in before["na"]["metadata"] and "conditions" not in before["na"]["status"]
            # the first agent hears about the second node as it registers
            await a.wait_for(lambda: ("Node", "", "nb") in a.objects
                             and a.objects[("Node", "", "nb")]["metadata"]["annotations"].get(ANN) == "10.99.0.3")
            await stack.resources.patch(NODE, "", "nb", {"spec": {"podCIDR": "10.42.7.0/24",
                                                                  "podCIDRs": ["10.42.7.0/24"]}})
            await a.wait_for(lambda: a.objects[("Node", "", "nb")]["spec"]["podCIDR"] == "10.42.7.0/24")
        await stack.resources.delete(NODE, "", "nb")
        await a.wait_for(lambda: ("Node", "", "nb") not in a.objects)


async def test_a_changed_annotation_is_written_back_on_rejoin(stack: Stack) -> None:
    async with joined(stack, "na", FabricAgent(ip="10.99.0.2")) as _:
        pass
    agent = FabricAgent(ip="10.99.0.9")
    async with joined(stack, "na", agent):
        await agent.wait_for(lambda: any(isinstance(m, wire.Synced) for m in agent.messages))
        assert (await stack.resources.get(NODE, "", "na"))["metadata"]["annotations"][ANN] == "10.99.0.9"


@pytest.mark.parametrize(("change", "relayed"), [
    ({"metadata": {"labels": {"x": "y"}}}, False),
    ({"status": {"conditions": [{"type": "Ready", "status": "False"}]}}, False),
    ({"metadata": {"annotations": {ANN: "10.0.0.1", "other.io/x": "1"}}}, False),
    ({"metadata": {"annotations": {ANN: "10.0.0.5"}}}, True),
    ({"spec": {"podCIDR": "10.42.3.0/24"}}, True),
    ({"status": {"addresses": [{"type": "InternalIP", "address": "10.0.0.6"}]}}, True),
])  # fmt: skip
def test_only_changes_the_data_path_reads_are_relayed(change: dict[str, Any], relayed: bool) -> None:
    base = {"metadata": {"name": "n", "labels": {}, "annotations": {ANN: "10.0.0.1"}, "managedFields": [{}]},
            "spec": {"podCIDR": "10.42.1.0/24"},
            "status": {"addresses": [{"type": "InternalIP", "address": "10.0.0.1"}], "conditions": []}}
    new = {k: {**v, **change.get(k, {})} for k, v in base.items()}
    assert (slim_node(base) != slim_node(new)) is relayed


async def test_agents_without_a_pod_network_get_no_nodes(stack: Stack) -> None:
    plain, fabric = TestAgent(), FabricAgent()
    async with joined(stack, "n1", plain), joined(stack, "n2", fabric):
        await fabric.wait_for(lambda: ("Node", "", "n1") in fabric.objects and ("Node", "", "n2") in fabric.objects)
        await plain.wait_for(lambda: any(isinstance(m, wire.Synced) for m in plain.messages))
    assert node_upserts(plain) == []
