"""Pod status computation: container states, kubelet phase rules, conditions, QoS class."""

from __future__ import annotations

import pytest

from lite.agent.status import (
    ContainerRecord,
    PodView,
    Terminated,
    pod_conditions,
    pod_phase,
    pod_status,
    qos_class,
    terminated_reason,
    without_times,
)


def _rec(name: str, state: str, code: int = 0, last: bool = False) -> ContainerRecord:
    r = ContainerRecord(name, "busybox")
    if state == "running":
        r.set_running("2026-01-01T00:00:00Z")
    elif state == "terminated":
        r.set_terminated(Terminated(code, terminated_reason(code, False)))
    if last:
        r.last = Terminated(1, "Error")
    return r


@pytest.mark.parametrize(("policy", "inits", "apps", "want"), [
    ("Always", [], [("waiting", 0, False)], "Pending"),
    ("Always", [("running", 0, False)], [("waiting", 0, False)], "Pending"),
    ("Never", [("terminated", 1, False)], [("waiting", 0, False)], "Failed"),
    ("Always", [("terminated", 1, False)], [("waiting", 0, False)], "Pending"),
    ("Always", [("terminated", 0, False)], [("running", 0, False)], "Running"),
    ("Always", [], [("waiting", 0, True)], "Running"),  # CrashLoopBackOff counts as stopped
    ("Always", [], [("terminated", 0, False)], "Running"),
    ("Never", [], [("terminated", 0, False), ("terminated", 0, False)], "Succeeded"),
    ("Never", [], [("terminated", 0, False), ("terminated", 2, False)], "Failed"),
    ("OnFailure", [], [("terminated", 2, False)], "Running"),
    ("OnFailure", [], [("terminated", 0, False)], "Succeeded"),
])
def test_phase(policy: str, inits: list[tuple[str, int, bool]], apps: list[tuple[str, int, bool]],
               want: str) -> None:
    ii = [_rec(f"i{n}", *t) for n, t in enumerate(inits)]
    aa = [_rec(f"a{n}", *t) for n, t in enumerate(apps)]
    assert pod_phase(policy, ii, aa) == want


def test_conditions_keep_transition_times() -> None:
    app = _rec("web", "running")
    first = pod_conditions("Running", [], [app], [], now="T1")
    ready = {c["type"]: c for c in first}
    assert ready["Ready"]["status"] == "False" and ready["Ready"]["reason"] == "ContainersNotReady"
    assert ready["Ready"]["message"] == "containers with unready status: [web]"
    app.ready = True
    second = {c["type"]: c for c in pod_conditions("Running", [], [app], first, now="T2")}
    assert second["Ready"]["status"] == "True" and second["Ready"]["lastTransitionTime"] == "T2"
    assert second["PodScheduled"]["lastTransitionTime"] == "T1"
    init = _rec("setup", "running")
    third = {c["type"]: c for c in pod_conditions("Pending", [init], [app], [], now="T3")}
    assert third["Initialized"]["message"] == "containers with incomplete status: [setup]"
    done = {c["type"]: c for c in pod_conditions("Succeeded", [], [_rec("a", "terminated")], [], now="T")}
    assert done["Ready"]["reason"] == "PodCompleted"


def test_container_status_render_and_restart() -> None:
    r = ContainerRecord("c", "busybox", image_id="sha256:abc", container_id="lite://x")
    r.set_running("S")
    r.started = r.ready = True
    r.set_terminated(Terminated(137, terminated_reason(137, True), "S", "F", container_id="lite://x"))
    r.restart("CrashLoopBackOff")
    st = pod_status(PodView(pod_ip="10.42.0.2", host_ip="10.0.0.1", restart_policy="Always"), [], [r])
    cs = st["containerStatuses"][0]
    assert cs["state"] == {"waiting": {"reason": "CrashLoopBackOff"}}
    assert cs["lastState"]["terminated"]["reason"] == "OOMKilled"
    assert cs["lastState"]["terminated"]["exitCode"] == 137
    assert cs["restartCount"] == 1 and cs["ready"] is False and cs["containerID"] == "lite://x"
    assert st["phase"] == "Running" and st["podIPs"] == [{"ip": "10.42.0.2"}]
    assert without_times(st) == without_times(pod_status(PodView(pod_ip="10.42.0.2", host_ip="10.0.0.1"), [], [r]))


@pytest.mark.parametrize(("resources", "want"), [
    ([{}], "BestEffort"),
    ([{"limits": {"cpu": "1", "memory": "1Gi"}}], "Guaranteed"),
    ([{"limits": {"cpu": "1", "memory": "1Gi"}, "requests": {"cpu": "1", "memory": "1Gi"}}], "Guaranteed"),
    ([{"limits": {"cpu": "1", "memory": "1Gi"}}, {}], "Burstable"),
    ([{"requests": {"cpu": "100m"}}], "Burstable"),
    ([{"limits": {"cpu": "1"}}], "Burstable"),
])
def test_qos(resources: list[dict[str, object]], want: str) -> None:
    pod = {"spec": {"containers": [{"name": f"c{i}", "resources": r} for i, r in enumerate(resources)]}}
    assert qos_class(pod) == want
