"""As root, with real containers: an agent whose server never answers starts the cached pod from nothing (no pod
left on the node: as after a reboot) on the pod network of the cached Welcome's podCIDR, with its cached
ConfigMap and Secret mounted and the Secret in its env. Everything lives in a node netns, netns directory and
cgroup root of this test; the image comes from an air-gap archive; the session dials a closed port on
127.0.0.1; `lite killall` removes what the pod left."""

from __future__ import annotations

import asyncio
import base64
import os
import socket
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from liteproc import lite_command

from lite import wire
from lite.agent.agent import Agent, AgentConfig
from lite.agent.backend import AgentStreams
from lite.agent.cache import DesiredCache
from lite.agent.session import JoinSession
from lite.agent.streams.backend import PodRef
from tests.helpers.images import BUSYBOX, Image, Layer, busybox_entries, docker_save_tar

Obj = dict[str, Any]
IMAGE = "lite.test/busybox:cache"
pytestmark = [pytest.mark.root, pytest.mark.timeout(120),
              pytest.mark.skipif(os.geteuid() != 0 or not BUSYBOX.exists(), reason="needs root and busybox-static")]


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def _exec(a: Agent, uid: str, argv: list[str]) -> str:
    proc = await AgentStreams(lambda: a.runners).exec(PodRef("t", "web", uid), "c", argv, stdin=False, tty=False)
    assert proc.stdout is not None
    out = await proc.stdout.read()
    assert await proc.wait() == 0, out
    return out.decode()


async def test_a_rebooted_node_without_server_starts_the_cached_pod(tmp_path: Path) -> None:
    data, node_ns, netns_dir = tmp_path / "data", tmp_path / "node-netns", tmp_path / "netns"
    node_ns.touch()
    subprocess.run(["unshare", f"--net={node_ns}", "ip", "link", "set", "lo", "up"], check=True)
    (data / "agent" / "images").mkdir(parents=True)
    docker_save_tar(data / "agent" / "images" / "busybox.tar", Image([Layer.build(busybox_entries())]), [IMAGE])
    uid = str(uuid.uuid4())
    pod = {"metadata": {"name": "web", "namespace": "t", "uid": uid},
           "spec": {"nodeName": "n1", "terminationGracePeriodSeconds": 1, "containers": [{
               "name": "c", "image": IMAGE, "imagePullPolicy": "Never", "command": ["sleep", "3600"],
               "env": [{"name": "PW", "valueFrom": {"secretKeyRef": {"name": "db", "key": "pw"}}}],
               "volumeMounts": [{"name": "site", "mountPath": "/srv"}, {"name": "pw", "mountPath": "/pw"}]}],
               "volumes": [{"name": "site", "configMap": {"name": "site"}},
                           {"name": "pw", "secret": {"secretName": "db"}}]}}
    cache = DesiredCache(data / "agent" / "cache", data / "agent" / "credentials" / "cache.key")
    cache.record(wire.Welcome(config={"podCIDR": "10.251.9.0/24", "clusterDomain": "cluster.local"}))
    cache.record(wire.ObjectUpsert("ConfigMap", {"metadata": {"name": "site", "namespace": "t"},
                                                 "data": {"index.html": "the last relayed page\n"}}))
    cache.record(wire.ObjectUpsert("Secret", {"metadata": {"name": "db", "namespace": "t"},
                                              "data": {"pw": base64.b64encode(b"last-relayed-pw").decode()}}))
    cache.record(wire.PodUpsert(pod))
    await cache.flush()

    a = Agent(AgentConfig(server_url=f"https://127.0.0.1:{_closed_port()}", token="t", node_name="n1",
                          data_dir=data, node_netns=str(node_ns), netns_dir=netns_dir, node_ip="10.9.9.9",
                          cgroup_root=f"lite-cache-{uuid.uuid4().hex[:8]}"))
    a.replay_after = 1.0
    task: asyncio.Task[None] | None = None
    try:
        await a.open_services()
        session = JoinSession(a.config.server_url, "t", node_name="n1", agent=a,
                              credentials_dir=a.root / "credentials", backoff=(0.2, 1.0))
        task = asyncio.create_task(a.serve(session))
        end = time.monotonic() + 90  # hang guard
        while True:
            r = a.runners.get(uid)
            cs = (r.status().get("containerStatuses") or [{}])[0] if r is not None else {}
            if "running" in (cs.get("state") or {}):
                break
            assert time.monotonic() < end, f"the cached pod never ran: {r.status() if r else None}"
            await asyncio.sleep(0.1)
        assert a.replayed and a.runners[uid].status()["podIP"].startswith("10.251.9.")
        assert await _exec(a, uid, ["cat", "/srv/index.html"]) == "the last relayed page\n"
        assert await _exec(a, uid, ["cat", "/pw/pw"]) == "last-relayed-pw"
        assert await _exec(a, uid, ["sh", "-c", "echo $PW"]) == "last-relayed-pw\n"
    finally:
        for r in list(a.runners.values()):
            r.terminate(0)
        await asyncio.gather(*(asyncio.wait_for(r.done.wait(), 30) for r in list(a.runners.values())),
                             return_exceptions=True)
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        subprocess.run([*lite_command(), "killall", "--data-dir", str(data)], check=False, timeout=120,
                       capture_output=True)
        subprocess.run(["umount", "-R", "-l", str(netns_dir)], check=False, capture_output=True)
        subprocess.run(["umount", "-l", str(node_ns)], check=False, capture_output=True)
