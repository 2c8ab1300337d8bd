"""Pod fidelity as root, through the whole agent (real images, namespaces, cgroups): container shims leave
the agent's cgroup, completed init containers are ready and hold the app containers at PodInitializing, and
activeDeadlineSeconds fails a pod with DeadlineExceeded, also when set on a running pod."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from lite import wire
from lite.agent.agent import Agent
from tests.agent import test_podrunner_root as base
from tests.agent.test_podrunner_root import Recorder, _cs, _pod
from tests.helpers.registry import RegistryServer

pytestmark = [pytest.mark.root, pytest.mark.timeout(180)]
agent = base.agent  # the whole-agent fixture of the podrunner tests


def _busybox(registry: RegistryServer, command: list[str], name: str = "c") -> dict[str, object]:
    return {"name": name, "image": f"{registry.host}/test/busybox:oci", "command": command}


async def test_container_shims_live_in_the_shims_cgroup(agent: tuple[Agent, Recorder],
                                                       registry: RegistryServer) -> None:
    """A service manager restarting the agent kills its cgroup: the shims must have left it."""
    a, rec = agent
    if a.deps.cgroups is None:
        pytest.skip("no usable cgroups")
    p = _pod("shimmed", [_busybox(registry, ["sleep", "1000"])])
    await a.handle(wire.PodUpsert(p))
    uid = p["metadata"]["uid"]
    await rec.until(uid, lambda s: s["phase"] == "Running")
    shim = a.runners[uid].st.pod_dir / "containers" / "c" / "state" / "shim.json"
    shim_pid = json.loads(await asyncio.to_thread(shim.read_text))["shim_pid"]
    lines = (await asyncio.to_thread(Path(f"/proc/{shim_pid}/cgroup").read_text)).splitlines()
    root = a.config.cgroup_root
    by_controller = {ln.split(":")[1]: ln.split(":", 2)[2] for ln in lines}
    # cgroup v1: the memory hierarchy (the one a service manager's kill follows); v2: the unified one
    assert by_controller.get("memory", by_controller.get("")) == f"/{root}/shims", lines


async def test_init_containers_are_reported_as_the_kubelet_does(agent: tuple[Agent, Recorder],
                                                                registry: RegistryServer) -> None:
    a, rec = agent
    p = _pod("inits", [_busybox(registry, ["sleep", "1000"])],
             initContainers=[_busybox(registry, ["true"], "first"), _busybox(registry, ["sleep", "3"], "second")])
    await a.handle(wire.PodUpsert(p))
    uid = p["metadata"]["uid"]
    s = await rec.until(uid, lambda s: (s["initContainerStatuses"][1]["state"].get("running") is not None))
    assert s["phase"] == "Pending"
    assert s["initContainerStatuses"][0]["ready"] is True  # completed
    assert s["initContainerStatuses"][1]["ready"] is False
    assert _cs(s)["state"] == {"waiting": {"reason": "PodInitializing"}}
    assert {c["type"]: c["status"] for c in s["conditions"]}["Initialized"] == "False"
    s = await rec.until(uid, lambda s: s["phase"] == "Running")
    assert [c["ready"] for c in s["initContainerStatuses"]] == [True, True]
    assert {c["type"]: c["status"] for c in s["conditions"]}["Initialized"] == "True"


async def test_active_deadline_fails_the_pod_and_can_be_set_on_a_running_pod(agent: tuple[Agent, Recorder],
                                                                             registry: RegistryServer) -> None:
    a, rec = agent
    p = _pod("deadline", [_busybox(registry, ["sleep", "1000"])], activeDeadlineSeconds=2)
    later = _pod("later", [_busybox(registry, ["sleep", "1000"])])
    for pod in (p, later):
        await a.handle(wire.PodUpsert(pod))
    s = await rec.until(p["metadata"]["uid"], lambda s: s["phase"] == "Failed", limit=30)
    assert s["reason"] == "DeadlineExceeded"
    assert s["message"] == "Pod was active on the node longer than the specified deadline"
    assert "terminated" in _cs(s)["state"]

    s = await rec.until(later["metadata"]["uid"], lambda s: s["phase"] == "Running")
    # the pod is running without a deadline; now the user sets one (kubectl patch)
    updated = {**later, "metadata": {**later["metadata"], "resourceVersion": "2"},
               "spec": {**later["spec"], "activeDeadlineSeconds": 1}}
    await a.handle(wire.PodUpsert(updated))
    s = await rec.until(later["metadata"]["uid"], lambda s: s["phase"] == "Failed", limit=30)
    assert s["reason"] == "DeadlineExceeded"
