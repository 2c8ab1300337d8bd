"""Downward API and subPathExpr (issue 12 items 8-9): limits of containers without limits read the node's
allocatable (divisor honoured), downwardAPI volume files follow label/annotation updates, and subPathExpr is
expanded from the container's env with kubelet's refusals (absolute path, '..', missing value): the container
waits in CreateContainerConfigError with a Failed event until a fixed expansion lets it start."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from lite.agent.agent import Agent, AgentConfig
from lite.agent.envs import ConfigError, PodContext, container_env, resource_ref
from lite.agent.volumes import payload_of, sub_path
from tests.agent.test_podrunner import Harness, _cs, _pod

Obj = dict[str, Any]
pytestmark = pytest.mark.timeout(60)
NODE = PodContext(node_allocatable={"cpu": "3", "memory": "2Gi", "ephemeral-storage": "1000"})


@pytest.mark.parametrize(("resources", "resource", "divisor", "want"), [
    ({}, "limits.cpu", None, "3"),
    ({}, "limits.cpu", "1m", "3000"),
    ({}, "limits.memory", None, str(2 * 1024 ** 3)),
    ({}, "limits.memory", "1Mi", "2048"),
    ({}, "limits.memory", "1G", "3"),  # 2.147 G rounded up
    ({}, "limits.ephemeral-storage", "1k", "1"),
    ({"limits": {"cpu": "250m"}}, "limits.cpu", "1m", "250"),
    ({"limits": {"cpu": "250m"}}, "limits.memory", "1Mi", "2048"),  # only the missing limit defaults
    ({"limits": {"memory": "64Mi"}}, "limits.memory", "1Mi", "64"),
    ({}, "requests.cpu", "1m", "0"),  # requests never default to the node
])
def test_resource_field_defaults_to_node_allocatable(resources: Obj, resource: str, divisor: str | None,
                                                    want: str) -> None:
    ref: Obj = {"resource": resource, **({"divisor": divisor} if divisor else {})}
    assert resource_ref({"name": "c", "resources": resources}, ref, NODE) == want


def test_agent_passes_the_node_allocatable_to_env_and_volumes(tmp_path: Path) -> None:
    a = Agent(AgentConfig(server_url="https://127.0.0.1:1", token="t", node_name="n1", data_dir=tmp_path / "d",
                          runtime="process", use_cgroups=False, node_ip="127.0.0.1"))
    allocatable = a.node.status()["allocatable"]
    assert a.deps.allocatable == allocatable
    c = {"name": "c", "env": [{"name": "CPU", "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu",
                                                                                 "divisor": "1m"}}}]}
    pod = _pod("alloc", [c])
    from lite.agent.hooks.base import PodState
    ctx = PodState(pod, tmp_path).context(a.deps)
    assert container_env(pod, c, ctx)["CPU"] == str(int(allocatable["cpu"]) * 1000)
    vol = {"downwardAPI": {"items": [{"path": "mem", "resourceFieldRef": {
        "containerName": "c", "resource": "limits.memory", "divisor": "1Ki"}}]}}
    payload = payload_of(vol, pod, ctx)
    assert payload is not None
    assert payload["mem"][0].decode() == allocatable["memory"].removesuffix("Ki")


@pytest.mark.parametrize(("mount", "env", "want"), [
    ({"subPath": "a/b"}, {}, "a/b"),
    ({"subPathExpr": "$(POD)/logs"}, {"POD": "web-1"}, "web-1/logs"),
    ({"subPathExpr": "$(A)-$(B)"}, {"A": "x", "B": "y"}, "x-y"),
    ({"subPathExpr": "$$(A)"}, {"A": "x"}, "$(A)"),
    ({"subPathExpr": "plain"}, {}, "plain"),
    ({}, {}, ""),
])
def test_sub_path_expr_expansion(mount: Obj, env: dict[str, str], want: str) -> None:
    assert sub_path(mount, env) == want


@pytest.mark.parametrize(("mount", "env", "message"), [
    ({"subPathExpr": "$(POD)"}, {"POD": "/tmp"}, "error SubPath `/tmp` must not be an absolute path"),
    ({"subPathExpr": "$(POD)"}, {"POD": ".."}, "unable to provision SubPath `..`: must not contain '..'"),
    ({"subPathExpr": "a/$(POD)/b"}, {"POD": ".."}, "unable to provision SubPath `a/../b`: must not contain '..'"),
    ({"subPathExpr": "$(B)/$(A)"}, {"A": ""}, "missing value for A, B"),
    ({"subPath": "/abs"}, {}, "error SubPath `/abs` must not be an absolute path"),
])
def test_sub_path_expr_refusals(mount: Obj, env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError) as e:
        sub_path(mount, env)
    assert str(e.value) == message


@pytest.fixture
async def h(tmp_path: Path) -> Any:
    harness = Harness(tmp_path)
    yield harness
    await harness.close()


async def _until(cond: Callable[[], bool], limit: float) -> None:
    end = time.monotonic() + limit
    while not cond():
        if time.monotonic() > end:
            raise AssertionError("condition not met")
        await asyncio.sleep(0.05)


async def test_downward_volume_follows_label_and_annotation_updates(h: Harness) -> None:
    pod = _pod("dw", [{"name": "c", "command": ["sleep", "1000"]}],
               volumes=[{"name": "info", "downwardAPI": {"items": [
                   {"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}},
                   {"path": "tier", "fieldRef": {"fieldPath": "metadata.annotations['tier']"}}]}}])
    pod["metadata"]["labels"] = {"app": "a"}
    r = h.runner(pod)
    await h.until(lambda s: "running" in _cs(s).get("state", {}))
    vol = r.st.pod_dir / "volumes" / "info"
    assert (vol / "labels").read_text() == 'app="a"'
    assert (vol / "tier").read_text() == ""
    r.update({**pod, "metadata": {**pod["metadata"], "labels": {"app": "b", "v": "2"},
                                  "annotations": {"tier": "gold"}}})
    await _until(lambda: (vol / "labels").read_text() == 'app="b"\nv="2"', 5)
    assert (vol / "tier").read_text() == "gold"


async def test_bad_sub_path_expr_waits_with_an_event_until_fixed(h: Harness) -> None:
    cms: dict[str, Obj] = {"where": {"data": {"DIR": "/tmp"}}}
    events: list[tuple[str, str, str]] = []
    h.deps.objects = lambda ns: (cms, {})
    h.deps.event = lambda pod, type_, reason, msg: events.append((type_, reason, msg))
    c = {"name": "c", "command": ["sleep", "1000"],
         "env": [{"name": "DIR", "valueFrom": {"configMapKeyRef": {"name": "where", "key": "DIR"}}}],
         "volumeMounts": [{"name": "work", "mountPath": "/work", "subPathExpr": "$(DIR)"}]}
    r = h.runner(_pod("subexpr", [c], volumes=[{"name": "work", "emptyDir": {}}]))
    s = await h.until(lambda s: _cs(s).get("state", {}).get("waiting", {}).get("reason")
                      == "CreateContainerConfigError")
    assert s["phase"] == "Pending"
    assert _cs(s)["state"]["waiting"]["message"] == "error SubPath `/tmp` must not be an absolute path"
    assert ("Warning", "Failed", "Error: error SubPath `/tmp` must not be an absolute path") in events
    cms["where"] = {"data": {"DIR": "logs/web"}}  # the next attempt (10 s backoff) expands it safely
    await h.until(lambda s: "running" in _cs(s).get("state", {}), limit=30)
    assert (r.st.pod_dir / "volumes" / "work" / "logs" / "web").is_dir()


async def test_a_label_update_after_the_pod_finished_writes_no_volume(h: Harness) -> None:
    pod = _pod("dwdone", [{"name": "c", "command": ["true"]}], restartPolicy="Never",
               volumes=[{"name": "info", "downwardAPI": {"items": [
                   {"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}}]}}])
    r = h.runner(pod)
    await h.until(lambda s: s["phase"] == "Succeeded")
    await _until(lambda: not (r.st.pod_dir / "volumes").exists(), 5)  # stop hooks tore the volumes down
    r.update({**pod, "metadata": {**pod["metadata"], "labels": {"late": "yes"}}})
    await asyncio.sleep(0.5)
    assert not (r.st.pod_dir / "volumes").exists()
