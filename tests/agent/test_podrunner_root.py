"""The whole node agent as root: real images from the test registry, namespaced containers, cgroups, and pod
networks on a bridge inside a node netns this test creates (the host's network is never touched).

The server end is a stand-in that records what the agent posts and feeds it desired state through
`Agent.handle`, the same calls the join session makes.
"""

from __future__ import annotations

import asyncio
import base64
import ipaddress
import os
import subprocess
import time
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from lite import wire
from lite.agent.agent import Agent, AgentConfig
from lite.agent.backend import AgentStreams
from lite.agent.killall import kill_cgroup_tree, remove_cgroup_tree
from lite.agent.streams.backend import PodRef
from tests.helpers.images import PushedImages
from tests.helpers.registry import RegistryServer
from tests.helpers.rootagent import node_config, unmount_node

Obj = dict[str, Any]
CIDR = "10.251.3.0/24"
pytestmark = [pytest.mark.root, pytest.mark.timeout(180)]


class Recorder:
    """Stands in for the join session: keeps every message the agent posts."""

    def __init__(self) -> None:
        self.posted: list[wire.Message] = []

    def post(self, msg: wire.Message) -> None:
        self.posted.append(msg)

    async def run(self) -> None:
        await asyncio.Event().wait()

    def status(self, uid: str) -> Obj | None:
        for m in reversed(self.posted):
            if isinstance(m, wire.PodStatus) and m.uid == uid:
                return m.status
        return None

    async def until(self, uid: str, cond: Callable[[Obj], bool], limit: float = 60) -> Obj:
        end = time.monotonic() + limit
        while time.monotonic() < end:
            s = self.status(uid)
            if s is not None and cond(s):
                return s
            await asyncio.sleep(0.1)
        raise AssertionError(f"pod {uid}: condition not met; last status {self.status(uid)}")


def _cs(s: Obj, i: int = 0) -> Obj:
    return dict((s.get("containerStatuses") or [{}])[i])


def _pod(name: str, containers: list[Obj], **spec: Any) -> Obj:
    return {"metadata": {"name": name, "namespace": "t", "uid": str(uuid.uuid4()), "resourceVersion": "1"},
            "spec": {"nodeName": "n1", "terminationGracePeriodSeconds": 2, "containers": containers, **spec}}


@pytest.fixture
async def agent(tmp_path: Path, registry: RegistryServer, pushed_images: PushedImages) -> AsyncIterator[
        tuple[Agent, Recorder]]:
    if os.geteuid() != 0:
        pytest.skip("needs root (namespaces, cgroups, netns)")
    # the node netns and the pods' netns files live under tmp_path: nothing in /run/netns, nothing on the host
    cfg = node_config(tmp_path, registry, also=("docker.io",))
    a = Agent(cfg)
    rec = Recorder()
    await a.open_services()
    task = asyncio.create_task(a.serve(rec))
    await a.handle(wire.Welcome(config={"podCIDR": CIDR, "clusterDomain": "cluster.local"}))
    try:
        yield a, rec
    finally:
        for r in list(a.runners.values()):
            r.terminate(0)
        for r in list(a.runners.values()):
            await asyncio.wait_for(r.done.wait(), 30)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        unmount_node(cfg)
        if a.deps.cgroups is not None:
            for qos, uid in a.deps.cgroups.pods():
                a.deps.cgroups.pod(uid, qos).remove()
        _remove_cgroup_root(cfg.cgroup_root)


def _remove_cgroup_root(root: str) -> None:
    """Whatever is left in the test's cgroup root (shims live in <root>/shims and may still be exiting) is
    killed, then the tree is removed; the session's closing check reports anything that stays."""
    kill_cgroup_tree(root)
    remove_cgroup_tree(root)


async def _exec(a: Agent, pod: Obj, argv: list[str], container: str = "c") -> tuple[int, str]:
    streams = AgentStreams(lambda: a.runners)
    ref = PodRef("t", pod["metadata"]["name"], pod["metadata"]["uid"])
    proc = await streams.exec(ref, container, argv, stdin=False, tty=False)
    assert proc.stdout is not None
    out = await proc.stdout.read()
    return await proc.wait(), out.decode()


async def test_pods_serve_talk_and_stay_isolated(agent: tuple[Agent, Recorder], registry: RegistryServer) -> None:
    a, rec = agent
    await a.handle(wire.ObjectUpsert("ConfigMap", {"metadata": {"name": "site", "namespace": "t"},
                                                   "data": {"index.html": "from a configmap\n"}}))
    await a.handle(wire.ObjectUpsert("Secret", {"metadata": {"name": "s", "namespace": "t"},
                                                "data": {"pw": base64.b64encode(b"hunter2").decode()}}))
    web = _pod("web", [{
        "name": "c", "image": f"{registry.host}/test/busybox:oci",
        "command": ["httpd", "-f", "-p", "80", "-h", "/srv"],
        "env": [{"name": "PW", "valueFrom": {"secretKeyRef": {"name": "s", "key": "pw"}}}],
        "volumeMounts": [{"name": "site", "mountPath": "/srv"}],
        "readinessProbe": {"httpGet": {"path": "/", "port": 80}, "periodSeconds": 1},
        "resources": {"limits": {"memory": "64Mi", "cpu": "500m"}}}],
        initContainers=[{"name": "init", "image": f"{registry.host}/test/busybox:oci",
                         "command": ["sh", "-c", "echo init ran"]}],
        volumes=[{"name": "site", "configMap": {"name": "site"}}])
    await a.handle(wire.PodUpsert(web))
    uid = web["metadata"]["uid"]
    s = await rec.until(uid, lambda s: s["phase"] == "Running" and _cs(s).get("ready") is True)
    assert ipaddress.ip_address(s["podIP"]) in ipaddress.ip_network(CIDR)
    assert s["initContainerStatuses"][0]["state"]["terminated"]["reason"] == "Completed"
    assert s["qosClass"] == "Burstable" and _cs(s)["imageID"]  # the init container has no limits
    assert await _exec(a, web, ["sh", "-c", "echo $PW"]) == (0, "hunter2\n")
    assert (await _exec(a, web, ["sh", "-c", "exit 3"]))[0] == 3
    code, ps = await _exec(a, web, ["ps", "-o", "pid,comm"])
    pids = [ln.split()[0] for ln in ps.splitlines()[1:]]
    assert code == 0 and "1" in pids and len(pids) <= 3, ps  # httpd as PID 1, ps itself; no host processes

    client = _pod("client", [{"name": "c", "image": f"{registry.host}/test/busybox:oci",
                              "command": ["wget", "-qO-", f"http://{s['podIP']}/"]}], restartPolicy="Never")
    await a.handle(wire.PodUpsert(client))
    cs = await rec.until(client["metadata"]["uid"], lambda s: s["phase"] in ("Succeeded", "Failed"))
    log0 = a.runners[client["metadata"]["uid"]].log_path("c")
    assert cs["phase"] == "Succeeded", (cs, log0.read_text() if log0 and log0.exists() else "")
    log = a.runners[client["metadata"]["uid"]].log_path("c")
    assert log is not None and "from a configmap" in log.read_text()
    code, out = await _exec(a, web, ["sh", "-c", "ls /srv; cat /proc/1/cmdline | tr '\\0' ' '"])
    assert "index.html" in out and "httpd" in out

    a.runners[uid].terminate(1)
    await asyncio.wait_for(a.runners[uid].done.wait(), 30) if uid in a.runners else None
    assert any(isinstance(m, wire.PodFinal) and m.uid == uid for m in rec.posted)
    assert not (a.config.netns_dir / f"lite-{uid}").exists()  # type: ignore[operator]


async def test_oom_killed_and_restarted(agent: tuple[Agent, Recorder], registry: RegistryServer) -> None:
    a, rec = agent
    if a.deps.cgroups is None:
        pytest.skip("no usable cgroups")
    hog = _pod("hog", [{"name": "c", "image": f"{registry.host}/test/busybox:oci",
                        "command": ["sh", "-c", "head -c 200m /dev/zero | tail"],
                        "resources": {"limits": {"memory": "32Mi"}}}])
    await a.handle(wire.PodUpsert(hog))
    s = await rec.until(hog["metadata"]["uid"], lambda s: _cs(s).get("restartCount", 0) >= 1
                        and (_cs(s).get("lastState") or {}).get("terminated", {}).get("reason") == "OOMKilled")
    assert _cs(s)["lastState"]["terminated"]["exitCode"] == 137


async def test_attach_streams_live_output(agent: tuple[Agent, Recorder], registry: RegistryServer) -> None:
    a, rec = agent
    pod = _pod("talker", [{"name": "c", "image": f"{registry.host}/test/busybox:oci", "stdin": True,
                           "command": ["sh", "-c", "while read line; do echo got $line; done"]}], hostNetwork=True)
    await a.handle(wire.PodUpsert(pod))
    await rec.until(pod["metadata"]["uid"], lambda s: "running" in _cs(s).get("state", {}))
    streams = AgentStreams(lambda: a.runners)
    proc = await streams.attach(PodRef("t", "talker", pod["metadata"]["uid"]), "c", stdin=True, tty=False)
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(b"hello\n")
    await proc.stdin.drain()
    line = await asyncio.wait_for(proc.stdout.readline(), 20)
    assert line == b"got hello\n", rec.status(pod["metadata"]["uid"])
    proc.stdin.close()
    assert await asyncio.wait_for(proc.wait(), 20) == 0  # stdin closed: the loop ends, the container exits 0


async def test_image_pull_backoff_and_undesired_pods_stop(agent: tuple[Agent, Recorder],
                                                          registry: RegistryServer) -> None:
    a, rec = agent
    bad = _pod("bad", [{"name": "c", "image": f"{registry.host}/test/nope:1", "command": ["true"]}],
               hostNetwork=True)
    await a.handle(wire.PodUpsert(bad))
    uid = bad["metadata"]["uid"]
    s = await rec.until(uid, lambda s: _cs(s).get("state", {}).get("waiting", {}).get("reason") == "ErrImagePull")
    assert s["phase"] == "Pending"
    s = await rec.until(uid, lambda s: _cs(s)["state"]["waiting"]["reason"] == "ImagePullBackOff", 30)
    assert "Back-off pulling image" in _cs(s)["state"]["waiting"]["message"]
    await a.handle(wire.Synced([]))  # the server's full desired set no longer has it: killed, reported final
    for _ in range(100):
        if any(isinstance(m, wire.PodFinal) and m.uid == uid for m in rec.posted):
            break
        await asyncio.sleep(0.1)
    assert any(isinstance(m, wire.PodFinal) and m.uid == uid for m in rec.posted)
    assert uid not in a.runners


async def test_security_context_reaches_the_process(agent: tuple[Agent, Recorder], registry: RegistryServer) -> None:
    a, rec = agent
    pod = _pod("sec", [{"name": "c", "image": f"{registry.host}/test/busybox:oci", "command": ["sh", "-c", (
        "id -u; id -g; touch /rootfs-write 2>/dev/null && echo writable || echo read-only; "
        "grep CapEff /proc/self/status; echo $GREETING")],
        "env": [{"name": "NAME", "value": "lite"}, {"name": "GREETING", "value": "hi $(NAME)"}],
        "securityContext": {"runAsUser": 65534, "runAsGroup": 65534, "readOnlyRootFilesystem": True,
                            "capabilities": {"drop": ["ALL"]}}}], restartPolicy="Never", hostNetwork=True)
    await a.handle(wire.PodUpsert(pod))
    s = await rec.until(pod["metadata"]["uid"], lambda s: s["phase"] in ("Succeeded", "Failed"))
    assert s["phase"] == "Succeeded", s
    log = a.runners[pod["metadata"]["uid"]].log_path("c")
    assert log is not None
    out = [ln.split(" ", 3)[3] for ln in log.read_text().splitlines()]
    assert out[:3] == ["65534", "65534", "read-only"], out
    assert out[3].split()[1] == "0000000000000000" and out[4] == "hi lite"


async def test_pod_deleted_before_the_node_has_a_pod_cidr(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root (netns)")
    node_ns = tmp_path / "node-netns"
    node_ns.touch()
    subprocess.run(["unshare", f"--net={node_ns}", "true"], check=True)
    try:
        a = Agent(AgentConfig(server_url="https://127.0.0.1:1", token="t", node_name="n1", data_dir=tmp_path / "d",
                              runtime="process", use_cgroups=False, node_netns=str(node_ns),
                              netns_dir=tmp_path / "netns", node_ip="10.9.9.9"))
        rec = Recorder()
        task = asyncio.create_task(a.serve(rec))
        pod = _pod("early", [{"name": "c", "image": "busybox", "command": ["true"]}])
        await a.handle(wire.PodUpsert(pod))  # no Welcome with a podCIDR yet: the pod waits for the network
        await asyncio.sleep(0.2)
        await a.handle(wire.PodDelete(pod["metadata"]["uid"], "t", "early"))
        for _ in range(100):
            if any(isinstance(m, wire.PodFinal) for m in rec.posted):
                break
            await asyncio.sleep(0.1)
        assert any(isinstance(m, wire.PodFinal) and m.uid == pod["metadata"]["uid"] for m in rec.posted)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    finally:
        subprocess.run(["umount", "-l", str(node_ns)], check=False)
