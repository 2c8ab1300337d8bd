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
from tests.helpers.images import Image, Layer, docker_save_tar
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


async def test_an_image_archive_dropped_into_agent_images_is_imported_and_runs(
        agent: tuple[Agent, Recorder], busybox_layer: Layer) -> None:
    """The README's air gap: a `docker save` tarball in <data-dir>/agent/images/ becomes a runnable image."""
    a, rec = agent
    image = Image([busybox_layer], cmd=["sh", "-c", "echo from the archive; sleep 1000"])
    drop = a.config.data_dir / "agent" / "images"
    await asyncio.to_thread(docker_save_tar, drop / "airgap.tar", image, ["airgap.local/app:1"])
    p = _pod("airgap", [{"name": "c", "image": "airgap.local/app:1", "imagePullPolicy": "Never"}])
    await a.handle(wire.PodUpsert(p))
    s = await rec.until(p["metadata"]["uid"], lambda s: s["phase"] == "Running", limit=60)
    assert _cs(s)["imageID"]


async def test_a_finished_pod_keeps_its_ip_and_stays_finished_across_an_agent_restart(
        agent: tuple[Agent, Recorder], registry: RegistryServer) -> None:
    a, rec = agent
    p = _pod("done", [_busybox(registry, ["true"])], restartPolicy="Never")
    await a.handle(wire.PodUpsert(p))
    uid = p["metadata"]["uid"]
    first = await rec.until(uid, lambda s: s["phase"] == "Succeeded" and bool(s.get("podIP")))

    # A new agent starts on the same data dir and adopts what it finds there (the old one's runner of this
    # finished pod is idle, and no other pod is on disk for the two agents to contend for).
    again = Agent(a.config)
    rec2 = Recorder()
    await again.open_services()
    serving = asyncio.create_task(again.serve(rec2))
    try:
        await again.handle(wire.Welcome(config={"podCIDR": base.CIDR, "clusterDomain": "cluster.local"}))
        await again.handle(wire.PodUpsert(p))
        s = await rec2.until(uid, lambda s: s["phase"] == "Succeeded")
        assert s.get("podIP") == first["podIP"]
        assert _cs(s)["state"]["terminated"]["reason"] == "Completed" and _cs(s)["restartCount"] == 0
    finally:
        for r in list(again.runners.values()):
            if r.st.uid == uid:
                r.terminate(0)
                await asyncio.wait_for(r.done.wait(), 30)
        serving.cancel()
        await asyncio.gather(serving, return_exceptions=True)


async def test_termination_messages(agent: tuple[Agent, Recorder], registry: RegistryServer) -> None:
    """terminationMessagePath (default and custom, a non-root user, the 4 KiB cap) and FallbackToLogsOnError
    (the log's last 80 lines when the file is empty and the exit is not 0)."""
    a, rec = agent
    lines = "; ".join(f"echo line{i}" for i in range(100))
    cases = {
        "default": (_busybox(registry, ["sh", "-c", "printf bye > /dev/termination-log; exit 1"]), "bye"),
        "custom": ({**_busybox(registry, ["sh", "-c", "printf 'as 1000' > /tmp/msg"]),
                    "terminationMessagePath": "/tmp/msg", "securityContext": {"runAsUser": 1000}}, "as 1000"),
        "capped": (_busybox(registry, ["sh", "-c", "printf '%5000s' | tr ' ' x > /dev/termination-log"]),
                   "x" * 4096),
        "fallback": ({**_busybox(registry, ["sh", "-c", f"{lines}; exit 2"]),
                      "terminationMessagePolicy": "FallbackToLogsOnError"},
                     "".join(f"line{i}\n" for i in range(20, 100))),
        "file-only": (_busybox(registry, ["sh", "-c", "echo in the log; exit 2"]), None),
    }
    pods = {name: _pod(f"msg-{name}", [c], restartPolicy="Never") for name, (c, _) in cases.items()}
    for p in pods.values():
        await a.handle(wire.PodUpsert(p))
    for name, (_c, want) in cases.items():
        s = await rec.until(pods[name]["metadata"]["uid"], lambda s: s["phase"] in ("Succeeded", "Failed"))
        assert _cs(s)["state"]["terminated"].get("message") == want, name
