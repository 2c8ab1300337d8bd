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
import os
import re
import subprocess
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from liteproc import LiteServer, find_free_port, lite_command

from lite.agent import servers
from lite.server.services.kubernetes import server_urls
from tests.helpers.images import BUSYBOX, Image, Layer, busybox_entries, docker_save_tar
from tests.helpers.pgserver import PgServer, missing_reason

pytestmark = [pytest.mark.root, pytest.mark.timeout(300)]
TOKEN = "agent-failover-test-token"
IMAGE = "lite.test/busybox:failover"
FLAGS = ("--token", TOKEN, "--leader-elect-lease-duration", "3s", "--leader-elect-renew-deadline", "2s",
         "--leader-elect-retry-period", "500ms", "--identity-lease-duration-seconds", "3",
         "--identity-lease-renew-interval-seconds", "1")
SLICES = ("/apis/discovery.k8s.io/v1/namespaces/default/endpointslices"
          "?labelSelector=kubernetes.io%2Fservice-name%3Dkubernetes")
PODS = "/api/v1/namespaces/default/pods"
Obj = dict[str, Any]


def wait_for(what: str, check: Callable[[], Any], timeout: float = 30.0, tail: Callable[[], str] = str) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        with contextlib.suppress(OSError, KeyError, ValueError):
            got = check()
            if got:
                return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}\n{tail()}")
        time.sleep(0.1)


def busybox_pod(name: str, node: str) -> Obj:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"nodeName": node, "terminationGracePeriodSeconds": 0,
                     "containers": [{"name": "c", "image": IMAGE, "imagePullPolicy": "Never",
                                     "command": ["sleep", "3600"]}]}}


def running(server: LiteServer, name: str) -> Obj | None:
    status, pod = server.request(f"{PODS}/{name}")
    cs = (pod.get("status") or {}).get("containerStatuses") or [] if status == 200 else []
    return pod if cs and "running" in (cs[0].get("state") or {}) else None


def ready_condition(server: LiteServer, name: str) -> Obj | None:
    status, node = server.request(f"/api/v1/nodes/{name}")
    if status != 200:
        return None
    return next((c for c in (node.get("status") or {}).get("conditions") or [] if c["type"] == "Ready"), None)


def pod_processes(cgroup_root: str) -> set[tuple[int, str]]:
    """(pid, start time in ticks) of every process in the agent's cgroup tree (v1 pids or v2), so a restarted
    container (a new process) is told from the one that kept running."""
    out = set()
    for base in (Path("/sys/fs/cgroup/pids") / cgroup_root, Path("/sys/fs/cgroup") / cgroup_root):
        for procs in base.rglob("cgroup.procs") if base.is_dir() else []:
            for pid in procs.read_text().split():
                with contextlib.suppress(OSError):
                    out.add((int(pid), Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]))
    return out


def joined(log: Path) -> list[str]:
    return re.findall(r"joined (https://[^/\s]+)\S* as node", log.read_text(errors="replace"))


def test_agent_fails_over_without_restarting_its_pod(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root (namespaces, cgroups, netns)")
    if not BUSYBOX.exists():
        pytest.skip("needs busybox-static")
    reason = missing_reason()
    if reason is not None:
        pytest.skip(reason)
    pg = PgServer.start()
    flags = ("--datastore-endpoint", pg.dsn("postgres"), *FLAGS)
    a = LiteServer(tmp_path / "a", find_free_port(), extra=flags)
    b = LiteServer(tmp_path / "b", find_free_port(), extra=flags)
    agent_dir, node_ns, netns_dir = tmp_path / "agent", tmp_path / "node-netns", tmp_path / "netns"
    agent_log = tmp_path / "agent.log"
    agent: subprocess.Popen[bytes] | None = None

    def tail() -> str:
        out = []
        for what, path in (("a", a.log_path), ("b", b.log_path), ("agent", agent_log)):
            with contextlib.suppress(OSError):
                out.append(f"--- {what} ---\n" + "\n".join(path.read_text(errors="replace").splitlines()[-25:]))
        return "\n".join(out)

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
        node_ns.touch()
        subprocess.run(["unshare", f"--net={node_ns}", "ip", "link", "set", "lo", "up"], check=True)
        drop = agent_dir / "agent" / "images"
        drop.mkdir(parents=True)
        docker_save_tar(drop / "busybox.tar", Image([Layer.build(busybox_entries())]), [IMAGE])
        (tmp_path / "resolv.conf").write_text("nameserver 127.0.53.53\n")
        token = (a.data_dir / "token").read_text().strip()
        cgroup_root = f"lite-lb-{uuid.uuid4().hex[:8]}"
        command = [*lite_command(), "agent", "--server", a.url, "--token", token, "--data-dir", str(agent_dir),
                   "--node-name", node, "--node-ip", "10.99.7.1", "--node-netns", str(node_ns),
                   "--netns-dir", str(netns_dir), "--cgroup-root", cgroup_root,
                   "--disable-service-proxy", "--resolv-conf", str(tmp_path / "resolv.conf")]
        with open(agent_log, "ab") as log:
            agent = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        wait_for("the node Ready", lambda: (ready_condition(a, node) or {}).get("status") == "True", 60, tail)
        remembered = json.loads((agent_dir / "agent" / "servers.json").read_text())
        assert remembered == {"server": a.url, "servers": both}
        status, body = a.request(PODS, "POST", busybox_pod("keep", node))
        assert status == 201, body
        before = wait_for("the pod running", lambda: running(a, "keep"), 60, tail)
        ready_before = ready_condition(a, node)
        assert ready_before is not None
        processes = pod_processes(cgroup_root)
        assert processes, "no pod process found in the agent's cgroups"

        # kill -9 the server the agent is on
        assert joined(agent_log)[-1] == a.url, f"the agent is not on the server it ranks first\n{tail()}"
        victim, survivor = a, b
        sessions = len(joined(agent_log))
        victim.kill()
        killed = time.monotonic()
        wait_for("the agent to join the survivor", lambda: len(joined(agent_log)) > sessions, 15, tail)
        moved = time.monotonic() - killed
        assert joined(agent_log)[-1] == survivor.url
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
        ready_after = ready_condition(survivor, node)
        assert ready_after is not None and ready_after["status"] == "True"
        assert ready_after["lastTransitionTime"] == ready_before["lastTransitionTime"]
        print(f"agent rejoined {moved:.1f}s after kill -9; slices dropped the dead server after {dropped:.1f}s")

        # the agent restarts while its --server is still down: the CA and the session come from b
        agent.terminate()
        agent.wait(30)
        sessions = len(joined(agent_log))
        with open(agent_log, "ab") as log:
            agent = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        wait_for("the restarted agent to join b", lambda: len(joined(agent_log)) > sessions, 30, tail)
        assert joined(agent_log)[-1] == survivor.url
        again = running(survivor, "keep")
        assert again is not None and again["metadata"]["uid"] == before["metadata"]["uid"]
        cs_again = again["status"]["containerStatuses"][0]
        assert (cs_again["containerID"], cs_again["restartCount"], cs_again["state"]["running"]["startedAt"]) == (
            cs_before["containerID"], 0, cs_before["state"]["running"]["startedAt"])
        # the processes themselves: the pod's processes from before the failover all still run
        assert processes <= pod_processes(cgroup_root), "a process of the pod was replaced"
    finally:
        if agent is not None and agent.poll() is None:
            agent.terminate()
            try:
                agent.wait(20)
            except subprocess.TimeoutExpired:
                agent.kill()
                agent.wait()
        for s in (a, b):
            if s.proc is not None:
                with contextlib.suppress(Exception):
                    s.stop()
                s.kill()
        subprocess.run([*lite_command(), "killall", "--data-dir", str(agent_dir)], check=False, timeout=120,
                       capture_output=True)
        subprocess.run(["umount", "-R", "-l", str(netns_dir)], check=False, capture_output=True)
        subprocess.run(["umount", "-l", str(node_ns)], check=False, capture_output=True)
        pg.stop()
