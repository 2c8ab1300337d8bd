"""An agent fails over between two real `lite server`s on one PostgreSQL without restarting its pod (issue 20).

Two servers (127.0.0.1, own ports, short identity and controller Leases) share a PostgreSQL; the
`default/kubernetes` EndpointSlices list both. A real `lite agent` joins through the first (its node name is
picked so that it also ranks the first server first), learns both, runs a busybox pod (air-gap image archive,
bridge in a node netns this test makes, pod netns files and cgroups under unique names). `kill -9` of that
server: the agent joins the other within a second or two, its Node stays Ready (no transition), the pod keeps
its container (same id, start time, no restart), a new pod runs (desired state and status reports flow through
the survivor), and the EndpointSlices drop the dead server. Then the agent restarts while its `--server` is
still down: it takes the CA and the session from the server it remembered, and still restarts nothing.
Needs root and PostgreSQL; skips otherwise. Everything listens on 127.0.0.1; `lite killall` cleans the node.
"""

from __future__ import annotations

import contextlib
import json
import time
from pathlib import Path
from typing import Any

import pytest
from liteproc import LiteServer, find_free_port

from lite.agent import servers
from lite.server.services.kubernetes import server_urls
from tests.helpers import nodeagent
from tests.helpers.nodeagent import NodeAgent, node_condition, pod_processes, wait_for
from tests.helpers.pgserver import PgServer, missing_reason

pytestmark = [pytest.mark.root, pytest.mark.timeout(300)]
TOKEN = "agent-failover-test-token"
FLAGS = ("--token", TOKEN, "--leader-elect-lease-duration", "3s", "--leader-elect-renew-deadline", "2s",
         "--leader-elect-retry-period", "500ms", "--identity-lease-duration-seconds", "3",
         "--identity-lease-renew-interval-seconds", "1")
SLICES = ("/apis/discovery.k8s.io/v1/namespaces/default/endpointslices"
          "?labelSelector=kubernetes.io%2Fservice-name%3Dkubernetes")
PODS = "/api/v1/namespaces/default/pods"
Obj = dict[str, Any]


def busybox_pod(name: str, node: str) -> Obj:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"nodeName": node, "terminationGracePeriodSeconds": 0,
                     "containers": [nodeagent.busybox_container()]}}


def running(server: LiteServer, name: str) -> Obj | None:
    status, pod = server.request(f"{PODS}/{name}")
    cs = (pod.get("status") or {}).get("containerStatuses") or [] if status == 200 else []
    return pod if cs and "running" in (cs[0].get("state") or {}) else None


def test_agent_fails_over_without_restarting_its_pod(tmp_path: Path) -> None:
    reason = nodeagent.skip_reason() or missing_reason()
    if reason is not None:
        pytest.skip(reason)
    pg = PgServer.start()
    flags = ("--datastore-endpoint", pg.dsn("postgres"), *FLAGS)
    a = LiteServer(tmp_path / "a", find_free_port(), extra=flags)
    b = LiteServer(tmp_path / "b", find_free_port(), extra=flags)
    agent: NodeAgent | None = None

    def tail() -> str:
        out = []
        for what, path in (("a", a.log_path), ("b", b.log_path)):
            with contextlib.suppress(OSError):
                out.append(f"--- {what} ---\n" + "\n".join(path.read_text(errors="replace").splitlines()[-25:]))
        return "\n".join(out) + ("" if agent is None else f"\n--- agent ---\n{agent.log_tail()}")

    try:
        a.start()
        b.start()
        a.wait_ready(60)
        b.wait_ready(60)
        both = sorted([a.url, b.url])
        wait_for("both servers listed", lambda: server_urls(a.request(SLICES)[1]["items"]) == both, 20, tail)
        assert server_urls(b.request(SLICES)[1]["items"]) == both

        # a real agent joins through a, which its node name ranks first
        node = next(f"lb-node-{i}" for i in range(100) if servers.preference(both, f"lb-node-{i}")[0] == a.url)
        agent = NodeAgent(tmp_path, node)
        agent.prepare()
        token = (a.data_dir / "token").read_text().strip()
        agent.start(a.url, token)
        wait_for("the node Ready", lambda: node_condition(a, node).get("status") == "True", 60, tail)
        remembered = json.loads((agent.data_dir / "agent" / "servers.json").read_text())
        assert remembered == {"server": a.url, "servers": both}
        status, body = a.request(PODS, "POST", busybox_pod("keep", node))
        assert status == 201, body
        before = wait_for("the pod running", lambda: running(a, "keep"), 60, tail)
        ready_before = node_condition(a, node)
        assert ready_before
        processes = pod_processes(agent.cgroup_root)
        assert processes, "no pod process found in the agent's cgroups"

        # kill -9 the server the agent is on
        assert agent.joined()[-1] == a.url, f"the agent is not on the server it ranks first\n{tail()}"
        victim, survivor = a, b
        sessions = len(agent.joined())
        victim.kill()
        killed = time.monotonic()
        wait_for("the agent to join the survivor", lambda: len(agent.joined()) > sessions, 15, tail)
        moved = time.monotonic() - killed
        assert agent.joined()[-1] == survivor.url
        wait_for("the dead server dropped from the slices",
                 lambda: server_urls(survivor.request(SLICES)[1]["items"]) == [survivor.url], 15, tail)
        dropped = time.monotonic() - killed
        status, eps = survivor.request("/api/v1/namespaces/default/endpoints/kubernetes")
        assert [s["ports"][0]["port"] for s in eps["subsets"]] == [survivor.port]

        # pod status reporting resumes through the survivor: a new pod runs
        status, body = survivor.request(PODS, "POST", busybox_pod("after", node))
        assert status == 201, body
        wait_for("a new pod running after the failover", lambda: running(survivor, "after"), 60, tail)
        # nothing restarted: same pod, same container, same start; the node never left Ready
        after = running(survivor, "keep")
        assert after is not None
        assert after["metadata"]["uid"] == before["metadata"]["uid"]
        cs_before, cs_after = before["status"]["containerStatuses"][0], after["status"]["containerStatuses"][0]
        assert cs_after["restartCount"] == 0
        assert cs_after["containerID"] == cs_before["containerID"]
        assert cs_after["state"]["running"]["startedAt"] == cs_before["state"]["running"]["startedAt"]
        ready_after = node_condition(survivor, node)
        assert ready_after.get("status") == "True"
        assert ready_after["lastTransitionTime"] == ready_before["lastTransitionTime"]
        print(f"agent rejoined {moved:.1f}s after kill -9; slices dropped the dead server after {dropped:.1f}s")

        # the agent restarts while its --server is still down: the CA and the session come from b
        agent.stop(30)
        sessions = len(agent.joined())
        agent.start(a.url, token)
        wait_for("the restarted agent to join b", lambda: len(agent.joined()) > sessions, 30, tail)
        assert agent.joined()[-1] == survivor.url
        again = running(survivor, "keep")
        assert again is not None and again["metadata"]["uid"] == before["metadata"]["uid"]
        cs_again = again["status"]["containerStatuses"][0]
        assert (cs_again["containerID"], cs_again["restartCount"], cs_again["state"]["running"]["startedAt"]) == (
            cs_before["containerID"], 0, cs_before["state"]["running"]["startedAt"])
        # the processes themselves: the pod's processes from before the failover all still run
        assert processes <= pod_processes(agent.cgroup_root), "a process of the pod was replaced"
    finally:
        if agent is not None:
            agent.stop()
        for s in (a, b):
            if s.proc is not None:
                with contextlib.suppress(Exception):
                    s.stop()
                s.kill()
        if agent is not None:
            agent.cleanup()
        pg.stop()
