"""PodRunner with the real shim-based ProcessRuntime (host processes, host network, no cgroups or images):
lifecycle, init containers, restarts with backoff, probes, preStop and grace, adoption after an agent restart."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from lite.agent.hooks.base import Deps
from lite.agent.podrunner import PodRunner
from lite.agent.runtime.container import ProcessRuntime

Obj = dict[str, Any]
pytestmark = pytest.mark.timeout(60)


def _pod(uid: str, containers: list[Obj], **spec: Any) -> Obj:
    return {"metadata": {"name": f"p-{uid}", "namespace": "default", "uid": uid},
            "spec": {"hostNetwork": True, "containers": containers, **spec}}


class Harness:
    def __init__(self, tmp: Path) -> None:
        self.deps = Deps(runtime=ProcessRuntime(), images=None, cgroups=None, ipam=None, data_dir=tmp,
                         node_name="n1", node_ip="127.0.0.1")
        self.statuses: list[Obj] = []
        self.finals: list[Obj] = []
        self.tasks: list[asyncio.Task[None]] = []
        self.runners: list[PodRunner] = []

    def runner(self, pod: Obj) -> PodRunner:
        r = PodRunner(self.deps, pod, report=lambda p, s: self.statuses.append(s), on_final=self.finals.append)
        self.tasks.append(asyncio.create_task(r.run()))
        self.runners.append(r)
        return r

    async def until(self, cond: Callable[[Obj], bool], limit: float = 20) -> Obj:
        end = time.monotonic() + limit
        while time.monotonic() < end:
            if self.statuses and cond(self.statuses[-1]):
                return self.statuses[-1]
            await asyncio.sleep(0.05)
        raise AssertionError(f"condition not met; last status: {self.statuses[-1] if self.statuses else None}")

    async def close(self) -> None:
        """Kill every pod (leaves no process behind)."""
        for r in self.runners:
            r.terminate(0)
        await asyncio.wait_for(asyncio.gather(*(r.done.wait() for r in self.runners)), 20)
        await self.shutdown()

    async def shutdown(self) -> None:
        """Agent shutdown: cancel the runners, containers keep running."""
        for t in self.tasks:
            t.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)


def _cs(status: Obj, i: int = 0) -> Obj:
    return dict(status.get("containerStatuses", [])[i])


def _running(s: Obj) -> bool:
    return "running" in _cs(s).get("state", {})


@pytest.fixture
async def h(tmp_path: Path) -> Any:
    harness = Harness(tmp_path)
    yield harness
    await harness.close()


async def test_run_ready_then_terminate_with_grace(h: Harness, tmp_path: Path) -> None:
    marker = tmp_path / "prestop"
    c = {"name": "main", "command": ["sh", "-c", "trap 'exit 7' TERM; echo hello; while :; do sleep 0.1; done"],
         "lifecycle": {"preStop": {"exec": {"command": ["sh", "-c", f"echo bye > {marker}"]}}}}
    r = h.runner(_pod("u1", [c], terminationGracePeriodSeconds=5))
    s = await h.until(lambda s: s["phase"] == "Running" and _cs(s).get("ready"))
    assert {c["type"]: c["status"] for c in s["conditions"]}["Ready"] == "True"
    assert _cs(s)["containerID"].startswith("lite://") and _cs(s)["started"] is True
    log = r.log_path("main")
    assert log is not None
    for _ in range(50):
        if log.exists() and "hello" in log.read_text():
            break
        await asyncio.sleep(0.05)
    assert " stdout F hello" in log.read_text()
    r.terminate()
    await asyncio.wait_for(r.done.wait(), 15)
    assert marker.read_text() == "bye\n"
    term = _cs(h.statuses[-1])["state"]["terminated"]
    assert term["exitCode"] == 7 and term["reason"] == "Error"
    assert h.finals and h.finals[0]["metadata"]["uid"] == "u1"


async def test_sigkill_after_grace(h: Harness) -> None:
    c = {"name": "stubborn", "command": ["sh", "-c", "trap '' TERM; while :; do sleep 0.1; done"]}
    r = h.runner(_pod("u2", [c], terminationGracePeriodSeconds=30))
    await h.until(_running)
    t0 = time.monotonic()
    r.terminate(grace=2)
    await asyncio.wait_for(r.done.wait(), 15)
    assert time.monotonic() - t0 >= 1.9
    assert _cs(h.statuses[-1])["state"]["terminated"]["exitCode"] == 137


async def test_init_then_app_and_succeeded(h: Harness, tmp_path: Path) -> None:
    f = tmp_path / "order"
    pod = _pod("u3", [{"name": "app", "command": ["sh", "-c", f"echo app >> {f}"]}], restartPolicy="Never",
               initContainers=[{"name": "i1", "command": ["sh", "-c", f"echo i1 >> {f}"]},
                               {"name": "i2", "command": ["sh", "-c", f"echo i2 >> {f}"]}])
    h.runner(pod)
    pending = await h.until(lambda s: s["phase"] == "Pending")
    assert "initContainerStatuses" in pending
    s = await h.until(lambda s: s["phase"] == "Succeeded")
    assert f.read_text() == "i1\ni2\napp\n"
    assert _cs(s)["state"]["terminated"]["reason"] == "Completed"
    assert all(i["state"]["terminated"]["exitCode"] == 0 for i in s["initContainerStatuses"])
    assert {c["type"]: c["status"] for c in s["conditions"]}["Initialized"] == "True"


async def test_failed_init_with_never_fails_pod(h: Harness) -> None:
    pod = _pod("u4", [{"name": "app", "command": ["true"]}], restartPolicy="Never",
               initContainers=[{"name": "bad", "command": ["sh", "-c", "exit 3"]}])
    h.runner(pod)
    s = await h.until(lambda s: s["phase"] == "Failed")
    assert s["initContainerStatuses"][0]["state"]["terminated"]["exitCode"] == 3
    assert _cs(s)["state"]["waiting"]["reason"] == "PodInitializing"


async def test_crash_loop_backoff(h: Harness) -> None:
    h.runner(_pod("u5", [{"name": "crash", "command": ["sh", "-c", "exit 2"]}]))
    s = await h.until(lambda s: _cs(s).get("state", {}).get("waiting", {}).get("reason") == "CrashLoopBackOff")
    cs = _cs(s)
    assert cs["restartCount"] >= 1 and cs["lastState"]["terminated"]["exitCode"] == 2
    assert "back-off 10s restarting failed container=crash" in cs["state"]["waiting"]["message"]
    assert s["phase"] == "Running"


async def test_liveness_failure_restarts_and_readiness(h: Harness, tmp_path: Path) -> None:
    ready = tmp_path / "ready"
    c = {"name": "web", "command": ["sh", "-c", "while :; do sleep 0.1; done"],
         "readinessProbe": {"exec": {"command": ["test", "-f", str(ready)]}, "periodSeconds": 1, "timeoutSeconds": 10},
         "livenessProbe": {"exec": {"command": ["sh", "-c", f"test ! -f {tmp_path}/die"]}, "periodSeconds": 1,
                           "timeoutSeconds": 10,
                           "failureThreshold": 1},
         }
    h.runner(_pod("u6", [c], terminationGracePeriodSeconds=1))
    s = await h.until(_running)
    assert _cs(s)["ready"] is False
    ready.touch()
    await h.until(lambda s: _cs(s)["ready"] is True)
    (tmp_path / "die").touch()
    s = await h.until(lambda s: _cs(s)["restartCount"] >= 1)
    assert _cs(s)["lastState"]["terminated"]["exitCode"] in (137, 143)


async def test_agent_restart_adopts_without_restarting(tmp_path: Path) -> None:
    h1 = Harness(tmp_path)
    c = {"name": "long", "command": ["sh", "-c", "while :; do sleep 0.1; done"]}
    pod = _pod("u7", [c], terminationGracePeriodSeconds=1)
    h1.runner(pod)
    s = await h1.until(_running)
    cid = _cs(s)["containerID"]
    await h1.shutdown()  # agent shutdown: cancel, never stop
    state = tmp_path / "pods" / "u7" / "containers" / "long" / "state"
    import json
    pid = json.loads((state / "shim.json").read_text())["init_pid"]
    os.kill(pid, 0)  # still running
    h2 = Harness(tmp_path)
    r2 = h2.runner(pod)
    s2 = await h2.until(_running)
    assert _cs(s2)["containerID"] == cid and _cs(s2)["restartCount"] == 0
    await asyncio.sleep(0.5)
    assert _cs(h2.statuses[-1])["restartCount"] == 0
    r2.terminate()
    await asyncio.wait_for(r2.done.wait(), 15)
    with pytest.raises(ProcessLookupError):
        for _ in range(50):
            os.kill(pid, 0)
            await asyncio.sleep(0.05)
    await h2.close()


async def test_startup_probe_gates_started_and_previous_log(h: Harness, tmp_path: Path) -> None:
    up = tmp_path / "up"
    c = {"name": "slow", "command": ["sh", "-c", "echo attempt; while :; do sleep 0.1; done"],
         "startupProbe": {"exec": {"command": ["test", "-f", str(up)]}, "periodSeconds": 1, "failureThreshold": 30,
                          "timeoutSeconds": 10}}
    r = h.runner(_pod("u8", [c], terminationGracePeriodSeconds=1))
    s = await h.until(_running)
    await asyncio.sleep(1.5)
    s = h.statuses[-1]
    assert _cs(s)["started"] is False and _cs(s)["ready"] is False
    up.touch()
    s = await h.until(lambda s: _cs(s)["started"] is True)
    assert _cs(s)["ready"] is True  # no readiness probe: ready once started
    assert r.log_path("slow", previous=True) is None


def _init_invariants(s: Obj) -> None:
    """upstream e2e's initContainersInvariants: after a failed or running init container every later one is
    waiting, and while initialization is incomplete every app container waits with PodInitializing, never
    restarted; every waiting init container that has not run says PodInitializing."""
    all_init, failed = True, False
    for st in s.get("initContainerStatuses") or []:
        state = st["state"]
        assert not ((failed or not all_init) and "waiting" not in state), s
        if "waiting" in state and not st.get("lastState"):
            assert state["waiting"]["reason"] == "PodInitializing", s
        if "terminated" not in state:
            all_init = False
        elif state["terminated"]["exitCode"] != 0:
            all_init, failed = False, True
    if not all_init or failed:
        for st in s.get("containerStatuses") or []:
            assert st["state"].get("waiting", {}).get("reason") == "PodInitializing", s
            assert st["restartCount"] == 0, s


async def test_failed_init_never_later_containers_wait_pod_initializing(h: Harness) -> None:
    pod = _pod("u4b", [{"name": "app", "command": ["true"]}], restartPolicy="Never",
               initContainers=[{"name": "i1", "command": ["true"]}, {"name": "i2", "command": ["false"]},
                               {"name": "i3", "command": ["true"]}])
    h.runner(pod)
    s = await h.until(lambda s: s["phase"] == "Failed")
    for each in h.statuses:
        _init_invariants(each)
    i1, i2, i3 = s["initContainerStatuses"]
    assert i1["state"]["terminated"]["exitCode"] == 0 and i2["state"]["terminated"]["exitCode"] == 1
    assert i3["state"] == {"waiting": {"reason": "PodInitializing"}}, s
    assert _cs(s)["state"] == {"waiting": {"reason": "PodInitializing"}}, s
    init = {c["type"]: c for c in s["conditions"]}["Initialized"]
    assert (init["status"], init["reason"], init["message"]) == (
        "False", "ContainersNotInitialized", "containers with incomplete status: [i2 i3]")


async def test_failed_init_retried_restart_count_rises_at_each_exit(h: Harness) -> None:
    pod = _pod("u4c", [{"name": "app", "command": ["true"]}],
               initContainers=[{"name": "i1", "command": ["false"]}, {"name": "i2", "command": ["true"]}])
    h.runner(pod)
    s = await h.until(lambda s: s["initContainerStatuses"][0]["restartCount"] >= 2, limit=40)
    exits: set[str] = set()
    for each in h.statuses:
        _init_invariants(each)
        i1 = each["initContainerStatuses"][0]
        for term in (i1["state"].get("terminated"), (i1.get("lastState") or {}).get("terminated")):
            if term:
                exits.add(term["finishedAt"])
        # kubelet counts an exit it has seen, before the next start: never fewer restarts than exits seen
        assert i1["restartCount"] >= len(exits), each
        assert each["initContainerStatuses"][1]["state"] == {"waiting": {"reason": "PodInitializing"}}, each
    assert s["phase"] == "Pending"
    init = {c["type"]: c for c in s["conditions"]}["Initialized"]
    assert init["message"] == "containers with incomplete status: [i1 i2]"


async def test_host_port_conflict_rejects_the_later_pod(h: Harness) -> None:
    """kubelet's NodePorts admission: the later of two pods wanting one hostPort fails at once (reason
    NodePorts, nothing started); once the first is gone the port is free again."""
    h.deps.admitted_specs = lambda: [r.st.spec for r in h.runners if r.active]
    port = {"containerPort": 80, "hostPort": 21017}
    first = h.runner(_pod("hp1", [{"name": "c", "command": ["sleep", "60"], "ports": [port]}]))
    await h.until(_running)
    h.runner(_pod("hp2", [{"name": "c", "command": ["sleep", "60"], "ports": [port]}]))
    s = await h.until(lambda s: s["phase"] == "Failed")
    assert (s["reason"], s["message"]) == ("NodePorts", "Pod was rejected: Predicate NodePorts failed: node(s) "
                                           "didn't have free ports for the requested pod ports")
    assert all("waiting" in c["state"] for c in s["containerStatuses"]), s
    first.terminate(0)
    await asyncio.wait_for(first.done.wait(), 20)
    h.runner(_pod("hp3", [{"name": "c", "command": ["sleep", "60"], "ports": [port]}]))
    await h.until(_running)
