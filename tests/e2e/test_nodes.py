"""Node failure and maintenance end to end: hollow nodes that stop heartbeating (with lite's disconnect policy,
`lite.dev/lost-after` and `lite.dev/replace-when-lost`), `kubectl drain` with a PDB.

The module's cluster: a `lite server` with an 8 s node monitor grace period and 3 simulated nodes `n-0..2`
(lease renewal every 2 s). A node "dies" by the simulator's pause annotation `lite.dev/sim-paused=true`:
its Lease, status and pod updates stop, exactly what the node lifecycle controller watches.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from e2ekit import KUBECTL

from tests.helpers.simcluster import SimCluster, running_ready, sim_cluster

Obj = dict[str, Any]
NODES = ["n-0", "n-1", "n-2"]
PAUSED = "lite.dev/sim-paused"


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimCluster]:
    if not os.access(KUBECTL, os.X_OK):
        pytest.skip(f"{KUBECTL} not installed")
    base = tmp_path_factory.mktemp("nodes")
    with sim_cluster(base, 3, ("--simulate", "3", "--node-prefix", "n", "--lease-interval", "2s",
                               "--status-interval", "10s", "--stop-delay", "200ms"),
                     ("--node-monitor-grace-period", "8")) as c:
        yield c


@pytest.fixture
def ns(sim: SimCluster) -> str:
    name = f"nd-{uuid.uuid4().hex[:8]}"
    sim.kubectl("create", "namespace", name)
    return name


def apply(sim: SimCluster, ns: str, manifest: Obj) -> None:
    sim.kubectl("apply", "-n", ns, "-f", "-", input=json.dumps(manifest))


def deployment(name: str, replicas: int, *, toleration_seconds: int | None = None) -> Obj:
    spec: Obj = {"containers": [{"name": "c", "image": "nginx"}]}
    if toleration_seconds is not None:
        spec["tolerations"] = [{"key": key, "operator": "Exists", "effect": "NoExecute",
                                "tolerationSeconds": toleration_seconds}
                               for key in ("node.kubernetes.io/unreachable", "node.kubernetes.io/not-ready")]
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}}, "spec": spec}}}


def taints(sim: SimCluster, node: str) -> set[tuple[str, str]]:
    spec = sim.json("get", "node", node).get("spec", {})
    return {(t["key"], t["effect"]) for t in spec.get("taints") or []}


def ready_condition(sim: SimCluster, node: str) -> str:
    conds = sim.json("get", "node", node)["status"]["conditions"]
    return str(next(c for c in conds if c["type"] == "Ready")["status"])


def _workload(kind: str, name: str, annotations: dict[str, str] | None = None) -> Obj:
    template: Obj = {"metadata": {"labels": {"app": name}, "annotations": annotations or {}},
                     "spec": {"containers": [{"name": "c", "image": "nginx"}]}}
    spec: Obj = {"replicas": 1, "selector": {"matchLabels": {"app": name}}, "template": template}
    if kind == "StatefulSet":
        spec["serviceName"] = name
    return {"apiVersion": "apps/v1", "kind": kind, "metadata": {"name": name}, "spec": spec}


def test_silent_node_is_tainted_and_its_pods_evicted_by_their_policy(sim: SimCluster, ns: str) -> None:
    """Everything starts on one node, which then goes silent. It is marked Unknown and tainted unreachable;
    - `survivor` (4 replicas, tolerationSeconds 2: upstream's way) and `moved` (lite.dev/lost-after 2s over the
      default 300 s toleration) are evicted, stay Terminating, and are replaced on the live nodes;
    - `kept` (lite.dev/replace-when-lost "false") is not evicted and has no second copy;
    - the StatefulSet pod `db-0` (lost-after 2s) is evicted but stays Terminating with no second copy.
    Back, the node finalises the evicted pods, `kept` is Ready there again and `db-0` is made again."""
    victim, others = NODES[0], NODES[1:]
    bad = sim.kubectl("annotate", "node", victim, "lite.dev/lost-after=soon", check=False)
    assert bad.returncode != 0 and "metadata.annotations[lite.dev/lost-after]: Invalid value" in bad.stderr
    quick = {"lite.dev/lost-after": "2s"}
    for node in others:  # everything starts on the victim
        sim.kubectl("cordon", node)
    try:
        apply(sim, ns, deployment("survivor", 4, toleration_seconds=2))
        apply(sim, ns, _workload("Deployment", "moved", quick))
        apply(sim, ns, _workload("Deployment", "kept", {"lite.dev/replace-when-lost": "false"}))
        apply(sim, ns, _workload("StatefulSet", "db", quick))
        first = {app: sim.wait(lambda app=app: (p := [x for x in sim.pods(ns, f"app={app}") if running_ready(x)])
                               and len(p) == (4 if app == "survivor" else 1) and p, f"{app} Running")
                 for app in ("survivor", "moved", "kept", "db")}
        assert {p["spec"]["nodeName"] for pods in first.values() for p in pods} == {victim}
    finally:
        for node in others:
            sim.kubectl("uncordon", node)
    names = {app: {p["metadata"]["name"] for p in pods} for app, pods in first.items()}
    sim.kubectl("annotate", "node", victim, f"{PAUSED}=true")
    try:
        unreachable = {("node.kubernetes.io/unreachable", effect) for effect in ("NoSchedule", "NoExecute")}
        sim.wait(lambda: unreachable <= taints(sim, victim), f"{victim} tainted unreachable", timeout=60)
        assert ready_condition(sim, victim) == "Unknown"

        def replaced() -> bool:
            live = [p for p in sim.pods(ns) if running_ready(p) and p["spec"]["nodeName"] != victim]
            apps = [p["metadata"]["labels"]["app"] for p in live]
            return apps.count("survivor") == 4 and apps.count("moved") == 1

        sim.wait(replaced, "survivor and moved replaced on the live nodes", timeout=60)
        sim.wait(lambda: sim.pods(ns, "app=db")[0]["metadata"].get("deletionTimestamp"), "db-0 evicted")
        by_name = {p["metadata"]["name"]: p for p in sim.pods(ns)}
        for name in names["survivor"] | names["moved"] | names["db"]:  # Terminating: the node is away
            assert by_name[name]["metadata"].get("deletionTimestamp"), name
        assert [p["metadata"]["uid"] for p in sim.pods(ns, "app=db")] == [first["db"][0]["metadata"]["uid"]]
        kept = sim.pods(ns, "app=kept")
        assert [(p["metadata"]["uid"], p["spec"]["nodeName"], p["metadata"].get("deletionTimestamp"))
                for p in kept] == [(first["kept"][0]["metadata"]["uid"], victim, None)]  # not evicted, no copy
        events = sim.json("get", "events", "-n", ns)["items"]
        evicted = {e["involvedObject"]["name"] for e in events if e["reason"] == "TaintManagerEviction"}
        assert evicted == names["survivor"] | names["moved"] | names["db"]
    finally:
        sim.kubectl("annotate", "node", victim, f"{PAUSED}-")
    sim.wait(lambda: ready_condition(sim, victim) == "True" and not any(
        k == "node.kubernetes.io/unreachable" for k, _ in taints(sim, victim)), f"{victim} Ready again")
    gone = names["survivor"] | names["moved"]
    sim.wait(lambda: not gone & {p["metadata"]["name"] for p in sim.pods(ns)},
             "the evicted pods finalised once the node is back")
    sim.wait(lambda: (k := sim.pods(ns, "app=kept")) and len(k) == 1 and running_ready(k[0])
             and k[0]["metadata"]["uid"] == first["kept"][0]["metadata"]["uid"], "the kept pod Ready on its node")
    sim.wait(lambda: (d := sim.pods(ns, "app=db")) and len(d) == 1 and running_ready(d[0])
             and d[0]["metadata"]["uid"] != first["db"][0]["metadata"]["uid"], "db-0 made again")


def test_drain_waits_for_the_disruption_budget(sim: SimCluster, ns: str) -> None:
    apply(sim, ns, deployment("guarded", 2))
    apply(sim, ns, {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "guarded"},
                    "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "guarded"}}}})
    pods = sim.wait(lambda: (p := [x for x in sim.pods(ns, "app=guarded") if running_ready(x)]) and len(p) == 2
                    and p, "2 Running")
    sim.wait(lambda: sim.json("get", "pdb", "guarded", "-n", ns).get("status", {}).get("currentHealthy") == 2,
             "PDB status observed")
    node = pods[0]["spec"]["nodeName"]
    with sim.kubectl_stream("drain", node, "--ignore-daemonsets", "--delete-emptydir-data",
                            "--timeout=120s") as (proc, lines):
        try:
            lines.wait_for(lambda line: "disruption budget" in line, timeout=60)
            assert proc.poll() is None  # still waiting, not failed
            assert sim.json("get", "node", node)["spec"].get("unschedulable") is True
            sim.kubectl("patch", "pdb", "guarded", "-n", ns, "--type=merge", "-p", '{"spec":{"minAvailable":1}}')
            lines.wait_for(lambda line: "drained" in line, timeout=90)
            assert proc.wait(30) == 0, "\n".join(lines.seen)
        finally:
            sim.kubectl("uncordon", node, check=False)
    remaining = [p for p in sim.pods(ns, "app=guarded") if not p["metadata"].get("deletionTimestamp")]
    assert all(p["spec"]["nodeName"] != node for p in remaining)
    sim.wait(lambda: len([p for p in sim.pods(ns, "app=guarded") if running_ready(p)]) == 2,
             "replacement Running elsewhere")
