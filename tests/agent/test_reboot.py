"""A pod's sandbox lost while no agent ran (a reboot, `lite killall`): the next agent makes a new one as kubelet
does after a node reboot, instead of adopting dead handles. PodRunner with the real shim-based ProcessRuntime
(host processes, hostNetwork, no root); the rule itself is table-tested."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
from pathlib import Path

import pytest

from lite.agent.killall import _kill_shims
from lite.agent.podrunner import restart_after_lost, sandbox_lost
from lite.agent.runtime.state import alive, boot_id, start_time, starting_pid
from lite.agent.status import ContainerRecord, Terminated
from tests.agent.test_podrunner import Harness, _cs, _pod, _running

pytestmark = pytest.mark.timeout(60)


@pytest.mark.parametrize(("boot", "host_network", "netns", "running", "alive", "exited", "lost"), [
    ("b1", False, True, 1, 1, 0, ""),  # an agent restart: everything still there
    ("b1", False, True, 1, 0, 1, ""),  # a container ended meanwhile: restarted in the same sandbox
    ("b1", False, True, 1, 0, 0, ""),  # its shim was killed alone: the same sandbox still holds the others
    ("b1", False, False, 1, 1, 0, "its network namespace is gone"),  # half alive: killed and made anew
    ("b1", False, False, 0, 0, 0, "its network namespace is gone"),
    ("b0", False, True, 1, 1, 0, "the node rebooted"),  # nothing of another boot is alive, whatever pids say
    ("", False, True, 1, 1, 0, ""),  # records of an older agent: no boot to compare
    ("b1", True, False, 2, 0, 0, "its containers are gone"),  # hostNetwork: no netns to tell
    ("b1", True, False, 2, 0, 1, ""),
    ("b1", True, False, 2, 1, 0, ""),
    ("b1", True, False, 0, 0, 0, ""),
])
def test_sandbox_lost(boot: str, host_network: bool, netns: bool, running: int, alive: int, exited: int,
                      lost: str) -> None:
    assert sandbox_lost(recorded_boot=boot, boot="b1", host_network=host_network, netns_mounted=netns,
                        running=running, alive=alive, exited=exited) == lost


def _rec(name: str, code: int | None = None, made: bool = True) -> ContainerRecord:
    r = ContainerRecord(name, "img", container_id="lite://x" if made else "")
    if code is not None:
        r.set_terminated(Terminated(code, "Error"))
    return r


@pytest.mark.parametrize(("policy", "inits", "apps", "restart"), [
    ("Always", [], [_rec("a", 255)], True),
    ("OnFailure", [], [_rec("a", 255)], True),
    ("OnFailure", [], [_rec("a", 0), _rec("b", 255)], True),
    ("OnFailure", [], [_rec("a", 0)], False),  # nothing left to start
    ("Never", [], [_rec("a", 255)], False),  # kubelet makes no new sandbox for a Never pod that ran
    ("Never", [_rec("i", 255)], [_rec("a", None, made=False)], False),
    ("Never", [], [_rec("a", None, made=False)], True),  # nothing was ever made: sandbox creation is retried
])
def test_restart_after_lost(policy: str, inits: list[ContainerRecord], apps: list[ContainerRecord],
                            restart: bool) -> None:
    assert restart_after_lost(policy, inits, apps) is restart


def _pull_the_plug(pod_dir: Path) -> None:
    """What a reboot or `lite killall` does to a pod's containers: shims and inits SIGKILLed, no exit status."""
    for shim in pod_dir.glob("containers/*/state/shim.json"):
        rec = json.loads(shim.read_text())
        for pid in (rec["init_pid"], rec["shim_pid"]):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


async def _gone(pid: int) -> None:
    for _ in range(100):
        if not alive(pid, start_time(pid) or 0):
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"pid {pid} still alive")


async def _plug_pulled(tmp_path: Path, uid: str) -> None:
    pod_dir = tmp_path / "pods" / uid
    pids = [json.loads(f.read_text())["shim_pid"] for f in pod_dir.glob("containers/*/state/shim.json")]
    _pull_the_plug(pod_dir)
    for pid in pids:
        await _gone(pid)


async def test_lost_sandbox_is_made_anew_init_again_restart_counts_go_on(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    ready = tmp_path / "ready"
    pod = _pod("r1", [{"name": "app", "command": ["sh", "-c", "while :; do sleep 0.1; done"],
                       "readinessProbe": {"exec": {"command": ["test", "-f", str(ready)]}, "periodSeconds": 1}}],
               terminationGracePeriodSeconds=1,
               initContainers=[{"name": "init", "command": ["sh", "-c", f"echo init >> {runs}"]}])
    ready.touch()
    h1 = Harness(tmp_path)
    h1.runner(pod)
    s = await h1.until(lambda s: _running(s) and _cs(s)["ready"])
    first_id = _cs(s)["containerID"]
    await h1.shutdown()
    await _plug_pulled(tmp_path, "r1")

    h2 = Harness(tmp_path)
    try:
        h2.runner(pod)
        s = await h2.until(lambda s: _running(s) and _cs(s)["ready"] and _cs(s)["restartCount"] == 1)
        app = _cs(s)
        assert app["lastState"]["terminated"]["exitCode"] == 255
        assert app["lastState"]["terminated"]["reason"] == "Unknown"
        assert app["containerID"] != first_id
        init = s["initContainerStatuses"][0]
        assert init["restartCount"] == 1 and init["state"]["terminated"]["exitCode"] == 0
        assert runs.read_text() == "init\ninit\n"  # the init container ran again in the new sandbox
        records = json.loads((tmp_path / "pods" / "r1" / "records.json").read_text())
        assert records["..start"]["boot"] == h2.deps.boot
    finally:
        await h2.close()


async def test_never_pod_that_lost_its_sandbox_fails_and_is_not_restarted(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    pod = _pod("r2", [{"name": "app", "command": ["sh", "-c", f"echo run >> {runs}; while :; do sleep 0.1; done"]}],
               restartPolicy="Never", terminationGracePeriodSeconds=1)
    h1 = Harness(tmp_path)
    h1.runner(pod)
    await h1.until(_running)
    await h1.shutdown()
    await _plug_pulled(tmp_path, "r2")

    h2 = Harness(tmp_path)
    try:
        h2.runner(pod)
        s = await h2.until(lambda s: s["phase"] == "Failed")
        term = _cs(s)["state"]["terminated"]
        assert (term["exitCode"], term["reason"], _cs(s)["restartCount"]) == (255, "Unknown", 0)
        assert runs.read_text() == "run\n"
    finally:
        await h2.close()


async def test_another_boot_is_never_adopted(tmp_path: Path) -> None:
    """Records from another boot: nothing is adopted (a recorded pid may now be any process), all starts anew."""
    pod = _pod("r3", [{"name": "app", "command": ["sh", "-c", "while :; do sleep 0.1; done"]}],
               terminationGracePeriodSeconds=1)
    h1 = Harness(tmp_path)
    h1.deps.boot = "an-earlier-boot"
    h1.runner(pod)
    s = await h1.until(_running)
    first_id = _cs(s)["containerID"]
    await h1.shutdown()
    await _plug_pulled(tmp_path, "r3")  # (this machine did not reboot: the old processes must go by hand)

    h2 = Harness(tmp_path)
    try:
        h2.runner(pod)
        s = await h2.until(lambda s: _running(s) and _cs(s)["restartCount"] == 1)
        assert _cs(s)["containerID"] != first_id and _cs(s)["lastState"]["terminated"]["reason"] == "Unknown"
    finally:
        await h2.close()


async def test_adopted_container_that_ended_for_good_is_not_started_again(tmp_path: Path) -> None:
    """An agent restart (no reboot) with restartPolicy OnFailure: the container that completed stays completed,
    the running one is adopted as it is."""
    runs = tmp_path / "runs"
    pod = _pod("r4", [{"name": "once", "command": ["sh", "-c", f"echo once >> {runs}"]},
                      {"name": "long", "command": ["sh", "-c", "while :; do sleep 0.1; done"]}],
               restartPolicy="OnFailure", terminationGracePeriodSeconds=1)
    h1 = Harness(tmp_path)
    h1.runner(pod)
    s = await h1.until(lambda s: "terminated" in _cs(s, 0)["state"] and "running" in _cs(s, 1)["state"])
    long_id = _cs(s, 1)["containerID"]
    await h1.shutdown()

    h2 = Harness(tmp_path)
    try:
        h2.runner(pod)
        await h2.until(lambda s: "running" in _cs(s, 1)["state"])
        await asyncio.sleep(0.5)
        s = h2.statuses[-1]
        assert _cs(s, 0)["state"]["terminated"]["reason"] == "Completed" and _cs(s, 0)["restartCount"] == 0
        assert _cs(s, 1)["containerID"] == long_id and _cs(s, 1)["restartCount"] == 0
        assert runs.read_text() == "once\n"
    finally:
        await h2.close()


@pytest.mark.parametrize("same_boot", [True, False])
def test_killall_kills_a_recorded_shim_only_in_its_boot(tmp_path: Path, same_boot: bool) -> None:
    """A pid and start time recorded in another boot may now be any process's: `lite killall` leaves it alone."""
    proc = subprocess.Popen(["sleep", "60"])
    try:
        state = tmp_path / "pod" / "containers" / "c" / "state"
        state.mkdir(parents=True)
        started = start_time(proc.pid)
        (state / "shim.json").write_text(json.dumps({
            "shim_pid": proc.pid, "init_pid": proc.pid, "shim_start": started, "init_start": started,
            "boot": boot_id() if same_boot else "an-earlier-boot"}))
        assert bool(_kill_shims([tmp_path / "pod"])) is same_boot
        assert (proc.wait(5) == -signal.SIGKILL) if same_boot else proc.poll() is None
    finally:
        proc.kill()
        proc.wait()


def test_a_starting_shim_is_waited_for_only_in_its_boot(tmp_path: Path) -> None:
    proc = subprocess.Popen(["sleep", "60"])
    try:
        record = {"shim_pid": proc.pid, "shim_start": start_time(proc.pid), "boot": boot_id()}
        (tmp_path / "starting.json").write_text(json.dumps(record))
        assert starting_pid(tmp_path) == proc.pid
        (tmp_path / "starting.json").write_text(json.dumps({**record, "boot": "an-earlier-boot"}))
        assert starting_pid(tmp_path) is None
    finally:
        proc.kill()
        proc.wait()
