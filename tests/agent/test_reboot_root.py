"""After a reboot (here `lite killall`, which leaves what a reboot leaves: the pod directories and nothing else) a new
agent brings the pod back as kubelet does after a node reboot: a new netns with the same IP, volumes made again
(the disk emptyDir keeps its content, the Memory one starts empty), init container run again, restart count going
on, the readiness probe making it Ready; nothing leaked. Before that, an agent restart without a reboot adopts the
live container as it is. Real images, namespaces, cgroups, in a node netns of the test's own."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from pathlib import Path

import pytest

from lite import wire
from lite.agent.agent import Agent, AgentConfig
from lite.agent.killall import killall
from lite.netns.nsfs import is_netns_mount
from lite.netns.pod import host_ifname
from tests.agent.test_podrunner_root import CIDR, Recorder, _cs, _exec, _pod, _remove_cgroup_root
from tests.helpers.images import PushedImages
from tests.helpers.registry import RegistryServer
from tests.helpers.rootagent import mounts_below, node_config, unmount_node

pytestmark = [pytest.mark.root, pytest.mark.timeout(180)]

SITE = {"metadata": {"name": "site", "namespace": "t"}, "data": {"index.html": "from a configmap\n"}}


async def _start(cfg: AgentConfig) -> tuple[Agent, Recorder, asyncio.Task[None]]:
    a = Agent(cfg)
    rec = Recorder()
    await a.open_services()
    await a.handle(wire.ObjectUpsert("ConfigMap", SITE))  # what the server (or the node's cache) relays
    return a, rec, asyncio.create_task(a.serve(rec))


async def _stop(serving: asyncio.Task[None]) -> None:
    """Agent shutdown: its pods keep running."""
    serving.cancel()
    await asyncio.gather(serving, return_exceptions=True)


async def _get(a: Agent, ip: str) -> str:
    assert a.deps.connect is not None
    reader, writer = await a.deps.connect(ip, 80)
    writer.write(b"GET / HTTP/1.0\r\n\r\n")
    body = await reader.read()
    writer.close()
    return body.decode()


def _ipam(cfg: AgentConfig) -> dict[str, str]:
    return dict(json.loads((cfg.data_dir / "agent" / "ipam.json").read_text())["allocations"])


async def test_reboot_brings_the_pod_back_in_a_new_sandbox(tmp_path: Path, registry: RegistryServer,
                                                           pushed_images: PushedImages) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root")
    cfg = node_config(tmp_path, registry)
    node_ns = cfg.node_netns
    image = f"{registry.host}/test/busybox:oci"
    pod = _pod("web", [{
        "name": "c", "image": image,
        "command": ["sh", "-c", "echo up >> /disk/boots; echo up >> /mem/boots; exec httpd -f -p 80 -h /srv"],
        "volumeMounts": [{"name": "site", "mountPath": "/srv"}, {"name": "disk", "mountPath": "/disk"},
                         {"name": "mem", "mountPath": "/mem"}],
        "readinessProbe": {"httpGet": {"path": "/", "port": 80}, "periodSeconds": 1},
        "resources": {"limits": {"memory": "64Mi"}}}],
        initContainers=[{"name": "init", "image": image, "command": ["sh", "-c", "echo init >> /disk/inits"],
                         "volumeMounts": [{"name": "disk", "mountPath": "/disk"}]}],
        volumes=[{"name": "site", "configMap": {"name": "site"}}, {"name": "disk", "emptyDir": {}},
                 {"name": "mem", "emptyDir": {"medium": "Memory"}}])
    uid = pod["metadata"]["uid"]
    netns = tmp_path / "netns" / f"lite-{uid}"
    agents: list[tuple[Agent, asyncio.Task[None]]] = []
    try:
        a, rec, serving = await _start(cfg)
        agents.append((a, serving))
        await a.handle(wire.Welcome(config={"podCIDR": CIDR, "clusterDomain": "cluster.local"}))
        await a.handle(wire.PodUpsert(pod))
        first = await rec.until(uid, lambda s: _cs(s).get("ready") is True)
        ip, cid = first["podIP"], _cs(first)["containerID"]
        await _stop(serving)

        # an agent restart, no reboot: the live container is adopted as it is (same container, same netns)
        a, rec, serving = await _start(cfg)
        agents.append((a, serving))
        s = await rec.until(uid, lambda s: _cs(s).get("ready") is True)
        assert (_cs(s)["containerID"], _cs(s)["restartCount"], s["podIP"]) == (cid, 0, ip)
        assert "from a configmap" in await _get(a, ip)
        await _stop(serving)

        # its network broken meanwhile (the host veth gone): made again, and the containers with it, never left
        # running in a netns the pod no longer has
        subprocess.run(["nsenter", f"--net={node_ns}", "ip", "link", "del", host_ifname(uid)], check=True)
        a, rec, serving = await _start(cfg)
        agents.append((a, serving))
        s = await rec.until(uid, lambda s: _cs(s).get("ready") is True and _cs(s)["restartCount"] == 1)
        assert s["podIP"] == ip and s["initContainerStatuses"][0]["restartCount"] == 1
        assert "from a configmap" in await _get(a, ip)
        await _stop(serving)

        report = await asyncio.to_thread(killall, cfg.data_dir)  # the reboot
        assert report.processes and report.netns == 1 and not netns.exists() and not mounts_below(cfg.data_dir)

        # an address whose pod is gone from the node (its release lost): freed when the node network comes up
        ipam_file = cfg.data_dir / "agent" / "ipam.json"
        held = json.loads(ipam_file.read_text())
        held["allocations"]["gone-pod"] = "10.251.3.200"
        ipam_file.write_text(json.dumps(held))

        # the node comes back, still cut off: no Welcome, no PodUpsert; the agent starts from what it holds
        a, rec, serving = await _start(cfg)
        agents.append((a, serving))
        s = await rec.until(uid, lambda s: _cs(s).get("ready") is True and _cs(s)["restartCount"] == 2)
        assert s["phase"] == "Running" and s["podIP"] == ip  # same IP: the Ipam keys it by pod uid
        assert _cs(s)["containerID"] != cid
        assert _cs(s)["lastState"]["terminated"]["exitCode"] == 255
        assert _cs(s)["lastState"]["terminated"]["reason"] == "Unknown"
        assert s["initContainerStatuses"][0]["restartCount"] == 2
        assert is_netns_mount(netns)
        assert "from a configmap" in await _get(a, ip)
        assert await _exec(a, pod, ["cat", "/disk/boots", "/mem/boots", "/disk/inits"]) == (
            0, "up\nup\nup\n" + "up\n" + "init\ninit\ninit\n")  # disk emptyDir kept, Memory one new, init again
        mem = cfg.data_dir / "agent" / "pods" / uid / "volumes" / "mem"
        assert mounts_below(cfg.data_dir).count(str(mem)) == 1
        assert _ipam(cfg) == {uid: ip}

        a.runners[uid].terminate(0)
        await asyncio.wait_for(a.runners[uid].done.wait(), 30)
        assert _ipam(cfg) == {} and not netns.exists() and not mounts_below(cfg.data_dir)
        assert a.deps.cgroups is None or not a.deps.cgroups.pods()
    finally:
        for _a, serving in agents:
            await _stop(serving)
        await asyncio.to_thread(killall, cfg.data_dir)
        _remove_cgroup_root(cfg.cgroup_root)
        unmount_node(cfg)
