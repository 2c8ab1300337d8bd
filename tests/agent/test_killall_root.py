"""`lite killall` as root: an agent runs pods (in a node netns and cgroup root of the test's own), goes away
leaving them running as designed, and `lite killall --data-dir` removes every process, mount, pod netns,
link and cgroup they held; a second run finds nothing."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest

from lite import wire
from lite.agent.agent import Agent
from tests.agent.test_podrunner_root import CIDR, Recorder, _pod
from tests.helpers.images import PushedImages
from tests.helpers.registry import RegistryServer
from tests.helpers.rootagent import mounts_below, node_config, unmount_node

pytestmark = [pytest.mark.root, pytest.mark.timeout(180)]


def _lite(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "lite.cli.main", *args], capture_output=True, text=True,
                          timeout=120)


def _cgroup_procs(root: str) -> tuple[list[Path], set[int]]:
    cgroups = [*Path("/sys/fs/cgroup").glob(f"*/{root}"), Path("/sys/fs/cgroup") / root]
    return cgroups, {int(x) for top in cgroups if top.is_dir() for f in top.rglob("cgroup.procs")
                     for x in f.read_text().split()}


def _still_running(pids: set[int]) -> list[int]:
    out = []
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            continue
        if state != "Z":
            out.append(pid)
    return out


async def test_killall_leaves_nothing_behind(tmp_path: Path, registry: RegistryServer,
                                            pushed_images: PushedImages) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root")
    cfg = node_config(tmp_path, registry)
    node_ns, root, data = cfg.node_netns, cfg.cgroup_root, cfg.data_dir
    a = Agent(cfg)
    rec = Recorder()
    await a.open_services()
    serving = asyncio.create_task(a.serve(rec))
    try:
        await a.handle(wire.Welcome(config={"podCIDR": CIDR, "clusterDomain": "cluster.local"}))
        pods = [_pod(f"p{i}", [{"name": "c", "image": f"{registry.host}/test/busybox:oci",
                                "command": ["sleep", "1000"], "resources": {"limits": {"memory": "32Mi"}}}],
                     volumes=[{"name": "scratch", "emptyDir": {"medium": "Memory"}}]) for i in range(2)]
        for p in pods:
            p["spec"]["containers"][0]["volumeMounts"] = [{"name": "scratch", "mountPath": "/scratch"}]
            await a.handle(wire.PodUpsert(p))
        for p in pods:
            await rec.until(p["metadata"]["uid"], lambda s: s["phase"] == "Running")
    finally:
        serving.cancel()  # the agent goes away; its pods keep running (by design)
        await asyncio.gather(serving, return_exceptions=True)
    try:
        cgroups, procs = await asyncio.to_thread(_cgroup_procs, root)
        assert procs and mounts_below(data)  # something to clean up
        assert sorted(os.listdir(tmp_path / "netns")) == sorted(f"lite-{p['metadata']['uid']}" for p in pods)

        done = _lite("killall", "--data-dir", str(data))
        assert done.returncode == 0, done.stderr
        assert "2 pod networks removed" in done.stdout and "1 links removed" in done.stdout, done.stdout
        assert not await asyncio.to_thread(_still_running, procs)
        assert not mounts_below(data)
        assert not os.listdir(tmp_path / "netns")
        assert not mounts_below(tmp_path / "netns"), "the emptied netns dir is still a mount point"
        assert not any(top.exists() for top in cgroups)
        links = subprocess.run(["ip", "-n", str(node_ns), "-o", "link"], capture_output=True, text=True)
        assert "lite0" not in links.stdout and "lv" not in links.stdout, links.stdout

        again = _lite("killall", "--data-dir", str(data))
        assert again.returncode == 0 and again.stdout.startswith("0 processes killed, 0 mounts removed, "
                                                                 "0 pod networks removed, 0 links removed"), again
    finally:
        _lite("killall", "--data-dir", str(data))
        unmount_node(cfg)
