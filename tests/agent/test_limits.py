"""Whether a node enforces resource limits (`lite.agent.limits`): the decision table and the Node it makes."""

from __future__ import annotations

from pathlib import Path

import pytest

from lite import wire
from lite.agent.agent import Agent, AgentConfig
from lite.agent.limits import ANNOTATION, CONDITION, ENFORCED, REFUSED_REASON, conditions, decide, pod_refusal
from lite.agent.node import NodeReporter

NO_CGROUPS = "no usable cgroup hierarchy (need cgroup2 with cpu/memory/pids, or v1 cpu/memory/pids)"


@pytest.mark.parametrize(("runtime", "problem", "allow", "want"), [
    # cgroups usable: enforced, whatever the runtime and the flag
    ("namespaces", None, False, ("enforced", "")),
    ("namespaces", None, True, ("enforced", "")),
    ("process", None, False, ("enforced", "")),
    # none: refused, unless the operator opted out (the flag) or the runtime is itself the opt-out
    ("namespaces", NO_CGROUPS, False, ("refused", REFUSED_REASON)),
    ("namespaces", NO_CGROUPS, True, ("unenforced", "AllowNoResourceLimits")),
    ("process", NO_CGROUPS, False, ("unenforced", "ProcessRuntime")),
    ("process", NO_CGROUPS, True, ("unenforced", "ProcessRuntime")),
])
def test_decide(runtime: str, problem: str | None, allow: bool, want: tuple[str, str]) -> None:
    got = decide(runtime, problem, allow)
    assert (got.annotation, got.reason) == want
    assert got.enforced == (want[0] == "enforced") and got.refused == (want[0] == "refused")
    if problem is not None:
        assert problem in got.message
    if want[0] == "refused":
        assert "--allow-no-resource-limits" in got.message and "no pod is started" in got.message


def _kubelet() -> list[dict[str, str]]:
    return [{"type": "MemoryPressure", "status": "False"}, {"type": "Ready", "status": "True",
                                                            "reason": "KubeletReady", "message": "ready"}]


def test_conditions() -> None:
    assert conditions(ENFORCED, _kubelet()) == _kubelet()
    refused = decide("namespaces", NO_CGROUPS, False)
    got = {c["type"]: c for c in conditions(refused, _kubelet())}
    assert set(got) == {"MemoryPressure", "Ready"}
    assert got["Ready"]["status"] == "False" and got["Ready"]["reason"] == REFUSED_REASON
    assert got["Ready"]["message"] == refused.message
    allowed = decide("namespaces", NO_CGROUPS, True)
    got = {c["type"]: c for c in conditions(allowed, _kubelet())}
    assert got["Ready"]["status"] == "True"
    assert got[CONDITION] == {"type": CONDITION, "status": "True", "reason": "AllowNoResourceLimits",
                              "message": allowed.message}
    assert pod_refusal(allowed, "n1") == "" and pod_refusal(ENFORCED, "n1") == ""
    assert pod_refusal(refused, "n1").startswith("node n1 cannot enforce resource limits")
    assert ANNOTATION == "lite.dev/resource-limits"


def test_node_status_follows_the_decision(tmp_path: Path) -> None:
    r = NodeReporter("n1", tmp_path)
    ready = {c["type"]: c for c in r.status()["conditions"]}["Ready"]
    assert ready["status"] == "True"
    r.limits = decide("namespaces", NO_CGROUPS, False)
    conds = {c["type"]: c for c in r.status()["conditions"]}
    assert conds["Ready"]["status"] == "False" and conds["Ready"]["reason"] == REFUSED_REASON
    assert CONDITION not in conds
    r.limits = decide("namespaces", NO_CGROUPS, True)
    conds = {c["type"]: c for c in r.status()["conditions"]}
    assert conds["Ready"]["status"] == "True" and conds[CONDITION]["status"] == "True"
    assert conds["Ready"]["lastTransitionTime"] >= ready["lastTransitionTime"]


class _Posts:
    """Stands in for the join session: what the agent posts."""

    def __init__(self) -> None:
        self.msgs: list[wire.Message] = []

    def post(self, msg: wire.Message) -> None:
        self.msgs.append(msg)


@pytest.mark.parametrize(("runtime", "allow", "want"), [
    ("namespaces", False, "refused"), ("namespaces", True, "unenforced"), ("process", False, "unenforced")])
async def test_an_agent_whose_cgroup_root_is_unusable(tmp_path: Path, runtime: str, allow: bool, want: str) -> None:
    """A cgroup root below a cgroup file cannot be made (root or not): the agent decides from that, its Node
    says so, and a refusing agent starts no pod (one Warning event; a deleted one is final at once)."""
    agent = Agent(AgentConfig(server_url="https://127.0.0.1:1", token="t", node_name="n1", data_dir=tmp_path,
                              runtime=runtime, cgroup_root="cgroup.procs/lite-bogus", allow_no_limits=allow,
                              node_ip="127.0.0.1"))
    await agent.open_services()
    try:
        assert agent.deps.cgroups is None and agent.limits.annotation == want
        assert agent.hello_info()["annotations"][ANNOTATION] == want
        conds = {c["type"]: c for c in agent.hello_info()["status"]["conditions"]}
        assert conds["Ready"]["status"] == ("False" if want == "refused" else "True")
        assert (CONDITION in conds) == (want == "unenforced")
        if want != "refused":
            return
        posts = _Posts()
        agent.session = posts
        pod = {"metadata": {"name": "p", "namespace": "default", "uid": "u1"},
               "spec": {"containers": [{"name": "c", "image": "busybox"}]}}
        await agent.handle(wire.PodUpsert(pod))
        await agent.handle(wire.PodUpsert({**pod, "spec": {**pod["spec"], "activeDeadlineSeconds": 5}}))
        assert agent.runners == {}
        assert len(posts.msgs) == 1  # one event per pod, however often it is relayed
        event = posts.msgs[0]
        assert isinstance(event, wire.Event) and event.event["reason"] == REFUSED_REASON
        assert event.event["type"] == "Warning" and "not started" in event.event["message"]
        deleted = {**pod, "metadata": {**pod["metadata"], "deletionTimestamp": "2026-01-01T00:00:00Z"}}
        await agent.handle(wire.PodUpsert(deleted))
        assert posts.msgs[1:] == [wire.PodFinal("u1", "default", "p")] and agent.runners == {}
    finally:
        assert agent.deps.images is not None
        await agent.deps.images.close()
