"""The downward API and subPathExpr through the whole agent as root (real images, namespaces, bind mounts):
a label change delivered by `wire.PodUpsert` reaches the downwardAPI file the container reads, and a
subPathExpr mount resolves to the expanded directory of its volume."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from lite import wire
from lite.agent.agent import Agent
from tests.agent import test_podrunner_root as base
from tests.agent.test_podrunner_root import Recorder, _pod
from tests.helpers.registry import RegistryServer

pytestmark = [pytest.mark.root, pytest.mark.timeout(180)]
agent = base.agent  # the whole-agent fixture of the podrunner tests


async def _until_text(path: Path, want: str, limit: float) -> None:
    end = time.monotonic() + limit
    while True:
        text = await asyncio.to_thread(lambda: path.read_text() if path.exists() else None)
        if text == want:
            return
        if time.monotonic() > end:
            raise AssertionError(f"{path}: {text!r} != {want!r}")
        await asyncio.sleep(0.1)


async def test_downward_file_follows_labels_and_sub_path_expr_resolves(agent: tuple[Agent, Recorder],
                                                                      registry: RegistryServer) -> None:
    a, rec = agent
    # the container copies the downward file into its subPathExpr mount every 0.2 s: what it sees is on the host
    script = "while true; do cat /etc/podinfo/labels > /work/seen.tmp; mv /work/seen.tmp /work/seen; sleep 0.2; done"
    c = {"name": "c", "image": f"{registry.host}/test/busybox:oci", "command": ["sh", "-c", script],
         "env": [{"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
         "volumeMounts": [{"name": "podinfo", "mountPath": "/etc/podinfo"},
                          {"name": "work", "mountPath": "/work", "subPathExpr": "$(POD_NAME)/out"}]}
    p = _pod("downward", [c], volumes=[
        {"name": "podinfo", "downwardAPI": {"items": [{"path": "labels",
                                                       "fieldRef": {"fieldPath": "metadata.labels"}}]}},
        {"name": "work", "emptyDir": {}}])
    p["metadata"]["labels"] = {"app": "one"}
    await a.handle(wire.PodUpsert(p))
    uid = p["metadata"]["uid"]
    await rec.until(uid, lambda s: s["phase"] == "Running")
    seen = a.runners[uid].st.pod_dir / "volumes" / "work" / "downward" / "out" / "seen"
    await _until_text(seen, 'app="one"', 30)

    relabelled = {**p, "metadata": {**p["metadata"], "resourceVersion": "2", "labels": {"app": "two"}}}
    await a.handle(wire.PodUpsert(relabelled))
    await _until_text(seen, 'app="two"', 5)  # kubelet may take a minute; the target is 5 s
