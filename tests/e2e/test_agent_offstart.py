"""An agent's start never depends on its server, and a node that cannot enforce limits says so (issue 21, 5-6).

One real `lite server` (127.0.0.1, no embedded agent) and real `lite agent`s on node netns this module makes
(`tests.helpers.nodeagent`):
- an agent joins, the server stops, the agent restarts while it is down: it tells systemd READY=1 at once,
  keeps running from what the node holds (the CA it kept, its node certificate) with ONE line saying the server
  is away (however many retries), no traceback; an agent that never joined, started meanwhile, waits (one line)
  instead of exiting; when the server is back both join (one line each saying so).
- an agent whose cgroup root cannot be used (a path through a cgroup file) registers its Node Ready=False with
  reason CgroupsUnavailable and starts no pod (a Warning event on the pod; deleting it does not wait for the
  node); restarted with
  --allow-no-resource-limits the Node is Ready, shows ResourceLimitsUnenforced and the annotation, and the pod
  runs.
Needs root; skips otherwise. Everything listens on 127.0.0.1 or inside the namespaces; `lite killall` cleans.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from liteproc import LiteServer, find_free_port

from tests.helpers import nodeagent
from tests.helpers.nodeagent import NodeAgent, node_condition, wait_for

pytestmark = [pytest.mark.root, pytest.mark.timeout(240)]
PODS = "/api/v1/namespaces/default/pods"
Obj = dict[str, Any]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiteServer]:
    reason = nodeagent.skip_reason()
    if reason is not None:
        pytest.skip(reason)
    srv = LiteServer(tmp_path_factory.mktemp("offstart") / "server", find_free_port())
    try:
        srv.start().wait_ready(60)
        yield srv
    finally:
        with contextlib.suppress(Exception):
            srv.stop()
        srv.kill()


def node(server: LiteServer, name: str) -> Obj:
    status, obj = server.request(f"/api/v1/nodes/{name}")
    assert status == 200, obj
    return dict(obj)


def log_since(agent: NodeAgent, offset: int) -> str:
    with contextlib.suppress(OSError):
        return agent.log.read_bytes()[offset:].decode(errors="replace")
    return ""


def log_size(agent: NodeAgent) -> int:
    return agent.log.stat().st_size if agent.log.exists() else 0


def test_an_agent_starts_and_runs_while_its_server_is_down(server: LiteServer, tmp_path: Path) -> None:
    a = NodeAgent(tmp_path / "a", "offstart-a", node_ip="10.99.8.1")
    b = NodeAgent(tmp_path / "b", "offstart-b", node_ip="10.99.8.2")
    for agent in (a, b):
        agent.tmp.mkdir()
    notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    notify.bind(str(tmp_path / "notify"))
    notify.settimeout(30)

    def tail() -> str:
        return f"--- server ---\n{server.log_tail(15)}\n--- a ---\n{a.log_tail(15)}\n--- b ---\n{b.log_tail(15)}"

    try:
        a.prepare()
        b.prepare()
        token = (server.data_dir / "token").read_text().strip()
        a.start(server.url, token)
        wait_for("node a Ready", lambda: node_condition(server, a.node, "Ready").get("status") == "True", 60, tail)
        assert (a.data_dir / "agent" / "credentials" / "ca.pem").read_bytes() == server.ca()  # kept on the node
        a.stop()

        server.stop()
        # a power cut: the agents come up before the server
        offset_a, offset_b = log_size(a), log_size(b)
        a.start(server.url, token, extra=("--log-level", "debug"), env={"NOTIFY_SOCKET": str(tmp_path / "notify")})
        assert notify.recv(64) == b"READY=1"  # not waiting for the server
        b.start(server.url, token, extra=("--log-level", "debug"))
        # several attempts while away (DEBUG), the agents still running
        wait_for("a retrying", lambda: log_since(a, offset_a).count("still unreachable") >= 3, 60, tail)
        wait_for("b retrying", lambda: log_since(b, offset_b).count("still unreachable") >= 3, 60, tail)
        assert a.proc is not None and a.proc.poll() is None and b.proc is not None and b.proc.poll() is None

        server.start().wait_ready(60)
        joins = len(a.joined())
        wait_for("a to join again", lambda: len(a.joined()) > joins, 60, tail)
        wait_for("b to join", lambda: b.joined(), 60, tail)
        wait_for("node b Ready", lambda: node_condition(server, b.node, "Ready").get("status") == "True", 60, tail)
        wait_for("node a Ready", lambda: node_condition(server, a.node, "Ready").get("status") == "True", 60, tail)
        for agent, offset, waiting in ((a, offset_a, "running from what this node holds"),
                                       (b, offset_b, "this node holds no cluster CA yet")):
            text = log_since(agent, offset)
            away = [line for line in text.splitlines() if " unreachable (" in line and "still" not in line]
            assert len(away) == 1 and waiting in away[0], (agent.node, away)
            assert len([line for line in text.splitlines() if "is back after" in line]) == 1, agent.node
            assert "Traceback" not in text, agent.node
        assert b"Traceback" not in a.log.read_bytes()[:offset_a]
        assert (b.data_dir / "agent" / "credentials" / "ca.pem").read_bytes() == server.ca()
    finally:
        notify.close()
        for agent in (a, b):
            agent.cleanup()


def test_a_node_without_usable_cgroups_is_not_ready_unless_allowed(server: LiteServer, tmp_path: Path) -> None:
    c = NodeAgent(tmp_path, "offstart-c", node_ip="10.99.8.3")
    c.cgroup_root = f"cgroup.procs/{c.cgroup_root}"  # below a file: no cgroup can be made there
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "limits-pod"},
           "spec": {"nodeName": c.node, "terminationGracePeriodSeconds": 0,
                    "containers": [nodeagent.busybox_container()]}}

    def tail() -> str:
        return f"--- server ---\n{server.log_tail(15)}\n--- agent ---\n{c.log_tail(15)}"

    def refusal_events() -> list[Obj]:
        _, events = server.request("/api/v1/namespaces/default/events")
        return [e for e in events["items"] if e["involvedObject"].get("name") == "limits-pod"
                and e["reason"] == "CgroupsUnavailable"]

    try:
        c.prepare()
        token = (server.data_dir / "token").read_text().strip()
        c.start(server.url, token)
        ready = wait_for("node c registered", lambda: node_condition(server, c.node, "Ready"), 60, tail)
        assert ready["status"] == "False" and ready["reason"] == "CgroupsUnavailable", ready
        assert "--allow-no-resource-limits" in ready["message"] and "no pod is started" in ready["message"]
        assert node(server, c.node)["metadata"]["annotations"]["lite.dev/resource-limits"] == "refused"
        status, body = server.request(PODS, "POST", pod)
        assert status == 201, body
        event = wait_for("the pod's refusal event", refusal_events, 60, tail)[0]
        assert event["type"] == "Warning" and "not started" in event["message"]
        assert server.request(f"{PODS}/limits-pod")[1]["status"].get("phase") == "Pending"
        assert c.proc is not None and c.proc.poll() is None  # refusing, not exiting
        # a refused pod deleted gracefully is gone at once: it never ran, nothing waits for the node
        gone = {**pod, "metadata": {"name": "limits-gone"},
                "spec": {**pod["spec"], "terminationGracePeriodSeconds": 30}}
        assert server.request(PODS, "POST", gone)[0] == 201
        wait_for("the second refusal event", lambda: any(
            e["involvedObject"].get("name") == "limits-gone" and e["reason"] == "CgroupsUnavailable"
            for e in server.request("/api/v1/namespaces/default/events")[1]["items"]), 60, tail)
        assert server.request(f"{PODS}/limits-gone", "DELETE")[0] == 200
        wait_for("the refused pod deleted", lambda: server.request(f"{PODS}/limits-gone")[0] == 404, 30, tail)

        c.stop()
        c.start(server.url, token, extra=("--allow-no-resource-limits",))
        wait_for("node c Ready", lambda: node_condition(server, c.node, "Ready").get("status") == "True", 60, tail)
        unenforced = node_condition(server, c.node, "ResourceLimitsUnenforced")
        assert unenforced["status"] == "True" and unenforced["reason"] == "AllowNoResourceLimits", unenforced
        assert node(server, c.node)["metadata"]["annotations"]["lite.dev/resource-limits"] == "unenforced"

        def pod_running() -> bool:
            cs = (server.request(f"{PODS}/limits-pod")[1].get("status") or {}).get("containerStatuses") or []
            return bool(cs) and "running" in (cs[0].get("state") or {})

        wait_for("the pod running without limits", pod_running, 90, tail)
    finally:
        with contextlib.suppress(Exception):
            server.request(f"{PODS}/limits-pod?gracePeriodSeconds=0", "DELETE")
        c.cleanup()
