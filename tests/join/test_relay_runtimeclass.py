"""A pod's RuntimeClass travels to its node's agent before the pod (the agent checks the handler), and is
withdrawn when no pod of the node uses it any more."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from joinstack import POD, Stack, TestAgent, joined, pod, serve_join

from lite import wire


@pytest.fixture
async def stack(tmp_path: Path, free_port: int) -> AsyncIterator[Stack]:
    async with serve_join(tmp_path, free_port) as s:
        yield s


async def test_runtime_class_relayed_before_the_pod(stack: Stack) -> None:
    r = stack.resources
    rc_kind = r.kinds.by_resource("node.k8s.io", "v1", "runtimeclasses")
    assert rc_kind is not None
    await r.create(rc_kind, "", {"metadata": {"name": "gvisor"}, "handler": "runsc"})
    agent = TestAgent()
    async with joined(stack, "n1", agent):
        spec_pod = pod("sandboxed")
        spec_pod["spec"]["runtimeClassName"] = "gvisor"
        spec_pod["spec"]["nodeName"] = "n1"
        uid = (await r.create(POD, "default", spec_pod))["metadata"]["uid"]
        await agent.wait_for(lambda: agent.starts[uid] == 1)
        assert agent.objects[("RuntimeClass", "", "gvisor")]["handler"] == "runsc"
        order = [m.T for m in agent.messages if isinstance(m, (wire.ObjectUpsert, wire.PodUpsert))]
        assert order.index("object_upsert") < order.index("pod_upsert")
        await r.delete(POD, "default", "sandboxed", grace_period_seconds=0)
        await agent.wait_for(lambda: not agent.objects)
