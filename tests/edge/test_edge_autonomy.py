"""Issue 21's "Done when", end to end on the netns test cluster (root, e2e): a node cut off from its server keeps
serving through a reboot, and the server's view wins once the link is back.

One cluster, one cut of node n2, three phases in file order (each a test, so a report names the phase that
failed; the story fixture does the cut, the server-side changes and the reboot once):

    t=0      cut n2 (its switch port down); on the server: delete one `web` pod, change `edit` (replicas 1 → 2,
             another image), change the ConfigMap `web` mounts (never relayed)
             reboot n2: SIGKILL its agent, `lite killall` its data dir, start the agent (still cut off)
    phase 1  within 30 s of the agent's start every pod of n2 runs again; `web` answers from n2's own netns
             through its ClusterIP and through the name the node-local cluster DNS gives, serving the ConfigMap
             and Secret last relayed before the cut; `kubectl` on the node (the agent's `--local-api`) lists
             the node's pods and execs into one
    ~t=40    the server marks n2 unreachable (40 s grace period) and taints it; ~t=60 `lite.dev/lost-after: 20s`
             has run out:
    phase 2  `move` is replaced on another node, `keep` (`replace-when-lost: "false"`) is not; the default
             policy (300 s) evicts nothing of `web` and `edit`
    t=90     restore the link
    phase 3  within 30 s the server shows `web`'s and `keep`'s surviving pods Running (same uids, no duplicate,
             none evicted), `edit` rolled out with the change, and on n2 the deleted `web` pod and `move`'s old
             copy have no process left

Budget: ~40 s cluster start, ~20 s workloads, 90 s cut, ≤30 s after the restore, teardown.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from tests.helpers import edgekit as kit
from tests.helpers.netcluster import (
    NetCluster,
    NetNode,
    cut,
    net_cluster,
    pods_running_on,
    reboot,
    restore,
    running_ready,
)

pytestmark = [
    pytest.mark.root,
    pytest.mark.e2e,
    pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("nsenter") or not os.access("/usr/bin/kubectl", os.X_OK),
                       reason="needs root, nsenter and kubectl (network namespaces, real nodes)"),
]
CUT_FOR = 90.0  # the cut: longer than lost-after (20 s) after the 40 s grace, shorter than 300 s
WITHIN = 30.0  # the bound after the agent's start (phase 1) and after the restore (phase 3)
Obj = dict[str, Any]


@dataclass
class Story:
    cluster: NetCluster
    edge: NetNode
    others: list[NetNode]
    web_ip: str
    dns_ip: str
    before: dict[str, list[Obj]] = field(default_factory=dict)  # app → its pods just before the cut
    deleted: str = ""  # uid of the `web` pod deleted on the server while cut off
    cut_at: float = 0.0
    agent_started: float = 0.0

    def uids(self, app: str) -> set[str]:
        return {p["metadata"]["uid"] for p in self.before[app]}


def _relayed(s: Story, greeting: str, password: str) -> bool:
    got = (kit.node_get(s.cluster, s.edge, f"http://{s.web_ip}/cm/greeting"),
           kit.node_get(s.cluster, s.edge, f"http://{s.web_ip}/sec/password"))
    return got == (greeting, password)


@pytest.fixture(scope="module")
def story(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Story]:
    with net_cluster(tmp_path_factory.mktemp("edge"), prepare=kit.second_image) as c:
        edge, others = c.nodes[1], [c.nodes[0], c.nodes[2]]
        kit.cordon(c, others, True)  # keep and move land on the edge node; a replacement may go anywhere later
        c.apply([*kit.config("v1", "s1"), *kit.web(edge.name), kit.edit(edge.name), kit.keep(), kit.move()])
        c.wait_running("app in (web,edit,keep,move)", 5)
        kit.cordon(c, others, False)
        s = Story(c, edge, others, c.json("get", "svc", "web")["spec"]["clusterIP"],
                  c.json("get", "svc", "-n", "kube-system", "kube-dns")["spec"]["clusterIP"])
        # the second version is the last one relayed before the cut: the node must serve exactly it
        c.apply(kit.config("v2", "s2"))
        c.wait(lambda: _relayed(s, "v2", "s2"), "the ConfigMap and Secret v2 to reach the web pods", timeout=60)
        for app in ("web", "edit", "keep", "move"):
            s.before[app] = c.pods(f"app={app}")
        everything = [p for ps in s.before.values() for p in ps]
        assert all(p["spec"]["nodeName"] == edge.name for p in everything), kit.summary(everything)
        # the node-side probe sees them all (so it can see them missing later)
        assert {p["metadata"]["uid"] for p in everything} <= pods_running_on(edge)

        cut(c, edge)
        s.cut_at = time.monotonic()
        s.deleted = s.before["web"][0]["metadata"]["uid"]
        c.kubectl("delete", "pod", s.before["web"][0]["metadata"]["name"], "--wait=false")
        c.kubectl("patch", "deployment", "edit", "-p", json.dumps(
            {"spec": {"replicas": 2, "template": {"spec": {"containers": [{"name": "c", "image": kit.NEW_IMAGE}]}}}}))
        c.apply(kit.config("v3", "s3"))  # never relayed: the node keeps serving v2
        s.agent_started = reboot(c, edge, "--local-api")
        try:
            yield s
        finally:
            restore(c, edge)


def _wait_until(t: float) -> None:
    time.sleep(max(0.0, t - time.monotonic()))


def test_rebooted_cut_off_the_node_runs_its_pods_and_serves_them_itself(story: Story) -> None:
    s, c = story, story.cluster
    all_uids = set().union(*(s.uids(app) for app in s.before))
    deadline = s.agent_started + WITHIN

    def all_back() -> bool:
        missing = all_uids - pods_running_on(s.edge)
        if missing:
            raise AssertionError(f"no process on the node for pods {sorted(missing)}")
        return True

    c.wait(all_back, "every pod of the edge node to run again after the reboot, cut off",
           timeout=max(1.0, deadline - time.monotonic()), interval=0.5)
    pod_names = {p["metadata"]["name"] for p in s.before["web"]}

    def answers() -> bool:
        body = kit.node_get(c, s.edge, f"http://{s.web_ip}/")
        return body in pod_names

    c.wait(answers, "web to answer through its ClusterIP from the node", timeout=max(1.0, deadline - time.monotonic()))
    addresses = c.wait(lambda: kit.node_resolve(c, s.edge, f"web.{kit.ZONE}", s.dns_ip),
                       "the node's cluster DNS to resolve web", timeout=max(1.0, deadline - time.monotonic()))
    assert addresses == [s.web_ip]
    assert kit.node_get(c, s.edge, f"http://{addresses[0]}/") in pod_names
    # the mounted ConfigMap and Secret are the last ones relayed (v2), not the first nor the server's newer v3
    assert _relayed(s, "v2", "s2"), (kit.node_get(c, s.edge, f"http://{s.web_ip}/cm/greeting"),
                                     kit.node_get(c, s.edge, f"http://{s.web_ip}/sec/password"))


def test_cut_off_kubectl_on_the_node_lists_and_execs_through_the_local_api(story: Story) -> None:
    s, c = story, story.cluster
    all_uids = set().union(*(s.uids(app) for app in s.before))
    listed = c.wait(lambda: c.json("get", "pods", "-n", "default", node=s.edge)["items"],
                    "the node-local API to list pods", timeout=20)
    assert {p["metadata"]["uid"] for p in listed} == all_uids, kit.summary(listed)
    web_pod = next(p["metadata"]["name"] for p in s.before["web"] if p["metadata"]["uid"] != s.deleted)
    r = c.kubectl("exec", web_pod, "--", "sh", "-c", "echo $(cat /www/cm/greeting) $(cat /www/sec/password)",
                  node=s.edge, check=False)
    assert (r.returncode, r.stdout.split()) == (0, ["v2", "s2"]), r.stderr
    # read-only: a write is refused
    r = c.kubectl("delete", "pod", web_pod, "--wait=false", node=s.edge, check=False)
    assert r.returncode != 0 and s.deleted not in r.stdout, r.stdout


def test_while_cut_off_only_what_may_be_replaced_is_replaced(story: Story) -> None:
    s, c = story, story.cluster
    others = {n.name for n in s.others}

    def replaced() -> list[Obj]:
        return [p for p in c.pods("app=move") if p["spec"].get("nodeName") in others and running_ready(p)]

    # grace (40 s) + lost-after (20 s) + a replacement's start; well before the restore at 90 s
    c.wait(replaced, "move to be replaced on another node", timeout=max(1.0, s.cut_at + CUT_FOR - 5 - time.monotonic()),
           interval=1.0)
    keep = c.pods("app=keep")
    assert [p["metadata"]["uid"] for p in keep] == list(s.uids("keep")), kit.summary(keep)
    assert not keep[0]["metadata"].get("deletionTimestamp"), kit.summary(keep)
    # and the node keeps running it (and everything else) meanwhile
    assert s.uids("keep") | s.uids("web") <= pods_running_on(s.edge)
    # the default policy tolerates an unreachable node for 300 s: nothing of web/edit is evicted at ~90 s
    _wait_until(s.cut_at + CUT_FOR - 2)
    for app in ("web", "edit", "keep"):
        now = kit.by_uid(c.pods(f"app={app}"))
        kept = s.uids(app) - {s.deleted}
        assert kept <= now.keys() and not any(now[u]["metadata"].get("deletionTimestamp") for u in kept), \
            kit.summary(list(now.values()))


def test_after_restore_the_servers_view_wins(story: Story) -> None:
    s, c = story, story.cluster
    _wait_until(s.cut_at + CUT_FOR)
    restore(c, s.edge)
    deadline = time.monotonic() + WITHIN
    left = lambda: max(1.0, deadline - time.monotonic())  # noqa: E731

    def same_running(app: str, count: int) -> list[Obj] | None:
        pods = c.pods(f"app={app}")
        ok = (len(pods) == count and all(running_ready(p) and p["spec"]["nodeName"] == s.edge.name for p in pods)
              and s.uids(app) - {s.deleted} <= {p["metadata"]["uid"] for p in pods})
        if not ok:
            raise AssertionError(f"{app}: {kit.summary(pods)}")
        return pods

    # web: the surviving pod is the same one, plus one replacement for the deleted pod; keep: the same pod
    c.wait(lambda: same_running("web", 2) and same_running("keep", 1), "web and keep Running on the node again",
           timeout=left())
    # edit: the change made on the server is applied (2 replicas of the new image), the old pod gone
    def edited() -> bool:
        pods = c.pods("app=edit")
        if not (len(pods) == 2 and all(running_ready(p) and p["spec"]["nodeName"] == s.edge.name
                                       and p["spec"]["containers"][0]["image"] == kit.NEW_IMAGE
                                       for p in pods)):
            raise AssertionError(f"edit: {kit.summary(pods)}")
        return True

    c.wait(edited, "edit's change to be applied", timeout=left())
    # on the node: the pod deleted meanwhile, edit's old pod and move's old copy have no process left
    gone = {s.deleted} | s.uids("edit") | s.uids("move")
    def stopped() -> bool:
        still = gone & pods_running_on(s.edge)
        if still:
            raise AssertionError(f"still running on the node: {sorted(still)}")
        return True

    c.wait(stopped, "the deleted and replaced pods to stop on the node", timeout=left())
    # no pod runs twice: move has exactly one pod, elsewhere; nothing of web/keep runs anywhere but the node
    moved = c.pods("app=move")
    assert len(moved) == 1 and moved[0]["spec"]["nodeName"] != s.edge.name and running_ready(moved[0]), \
        kit.summary(moved)
    everywhere = c.pods()
    assert not {p["metadata"]["uid"] for p in everywhere} & ({s.deleted} | s.uids("move")), kit.summary(everywhere)
