"""The agent runs only runtime handlers it has: a pod whose RuntimeClass names another handler (or that the
agent was not given) stays waiting with a FailedCreatePodSandBox event, as kubelet does; one naming `runc`
runs. The relay sends a pod's RuntimeClass along with it."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from lite.agent.hooks.base import Deps
from lite.agent.hooks.runtimeclass import handler_problem
from lite.agent.podrunner import PodRunner
from lite.agent.runtime.container import ProcessRuntime
from lite.server.join.relay import pod_refs

Obj = dict[str, Any]
pytestmark = pytest.mark.timeout(60)


@pytest.mark.parametrize(("rc", "problem"), [
    ({"handler": "runc"}, None),
    ({"handler": "lite"}, None),
    ({"handler": "runsc"}, 'no runtime for "runsc" is configured'),
    (None, 'RuntimeClass "x" not found'),
])
def test_handler_problem(rc: Obj | None, problem: str | None) -> None:
    got = handler_problem("x", rc)
    assert (got is None) if problem is None else (got is not None and problem in got)


def test_relay_sends_the_runtime_class() -> None:
    pod = {"metadata": {"namespace": "ns", "name": "p"}, "spec": {"runtimeClassName": "gvisor", "containers": []}}
    assert ("RuntimeClass", "", "gvisor") in pod_refs(pod)


async def _run(tmp_path: Path, classes: dict[str, Obj], rc_name: str) -> tuple[list[Obj], list[tuple[str, str]],
                                                                                 PodRunner, asyncio.Task[None]]:
    events: list[tuple[str, str]] = []
    statuses: list[Obj] = []
    deps = Deps(runtime=ProcessRuntime(), images=None, cgroups=None, ipam=None, data_dir=tmp_path, node_name="n1",
                node_ip="127.0.0.1", event=lambda pod, t, reason, msg: events.append((reason, msg)),
                runtime_class=classes.get)
    pod = {"metadata": {"name": "p", "namespace": "default", "uid": f"u-{rc_name}"},
           "spec": {"hostNetwork": True, "runtimeClassName": rc_name,
                    "containers": [{"name": "c", "command": ["sleep", "30"]}]}}
    runner = PodRunner(deps, pod, report=lambda p, s: statuses.append(s), on_final=lambda p: None)
    return statuses, events, runner, asyncio.create_task(runner.run())


async def _until(pred: Any, limit: float = 20) -> None:
    end = time.monotonic() + limit
    while not pred():
        assert time.monotonic() < end, "condition not met"
        await asyncio.sleep(0.05)


async def test_unknown_handler_keeps_pod_waiting(tmp_path: Path) -> None:
    statuses, events, runner, task = await _run(tmp_path, {"gvisor": {"handler": "runsc"}}, "gvisor")
    try:
        await _until(lambda: events)
        assert events[0][0] == "FailedCreatePodSandBox" and 'no runtime for "runsc"' in events[0][1]
        await _until(lambda: statuses)
        state = statuses[-1]["containerStatuses"][0]["state"]
        assert "waiting" in state and statuses[-1].get("phase", "Pending") == "Pending"
    finally:
        runner.terminate(0)
        await asyncio.wait_for(runner.done.wait(), 20)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_runc_handler_runs(tmp_path: Path) -> None:
    statuses, events, runner, task = await _run(tmp_path, {"default": {"handler": "runc"}}, "default")
    try:
        await _until(lambda: statuses and "running" in statuses[-1]["containerStatuses"][0]["state"])
        assert not [e for e in events if e[0] == "FailedCreatePodSandBox"]
    finally:
        runner.terminate(0)
        await asyncio.wait_for(runner.done.wait(), 20)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
