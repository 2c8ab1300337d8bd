"""The scheduler against the real API: binding, spreading, taints, FailedScheduling text, preemption."""

from __future__ import annotations

import asyncio
from pathlib import Path

from conftest import NODE, PC, PDB, POD, Kit, node, open_kit, pod


async def test_pod_lands_on_the_only_fitting_node(kit: Kit) -> None:
    await kit.api.create(NODE, "", node("small", cpu="1"))
    await kit.api.create(NODE, "", node("big", cpu="8"))
    await kit.api.create(POD, "default", pod("p", cpu="2"))
    assert await kit.bound("p") == "big"
    got = await kit.get_pod("p")
    cond = next(c for c in got["status"]["conditions"] if c["type"] == "PodScheduled")
    assert cond["status"] == "True"
    ev = await kit.until(lambda: kit.events("p", "Scheduled"))
    assert ev[0]["message"] == "Successfully assigned default/p to big"
    assert ev[0]["source"]["component"] == "default-scheduler"
