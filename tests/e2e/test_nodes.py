"""Node failure and maintenance end to end: hollow nodes that stop heartbeating, `kubectl drain` with a PDB.

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


def test_silent_node_is_tainted_and_its_pods_replaced(sim: SimCluster, ns: str) -> None:
    apply(sim, ns, deployment("survivor", 4, toleration_seconds=2))
    pods = sim.wait(lambda: (p := [x for x in sim.pods(ns, "app=survivor") if running_ready(x)]) and len(p) == 4
                    and p, "4 Running")
    victim = pods[0]["spec"]["nodeName"]
    on_victim = {p["metadata"]["name"] for p in pods if p["spec"]["nodeName"] == victim}
    sim.kubectl("annotate", "node", victim, f"{PAUSED}=true")
    try:
        unreachable = {("node.kubernetes.io/unreachable", effect) for effect in ("NoSchedule", "NoExecute")}
        sim.wait(lambda: unreachable <= taints(sim, victim), f"{victim} tainted unreachable", timeout=60)
        assert ready_condition(sim, victim) == "Unknown"

        def replaced() -> bool:
            pods = sim.pods(ns, "app=survivor")
            healthy = [p for p in pods if running_ready(p) and p["spec"]["nodeName"] != victim]
            return len(healthy) == 4

        sim.wait(replaced, "4 Running pods on the live nodes", timeout=60)
        evicted = [p for p in sim.pods(ns, "app=survivor") if p["metadata"]["name"] in on_victim]
        assert all(p["metadata"].get("deletionTimestamp") for p in evicted)  # Terminating: the node is away
        events = sim.json("get", "events", "-n", ns)["items"]
        assert any(e["reason"] == "TaintManagerEviction" for e in events), [e["reason"] for e in events]
    finally:
        sim.kubectl("annotate", "node", victim, f"{PAUSED}-")
    sim.wait(lambda: ready_condition(sim, victim) == "True" and not any(
        k == "node.kubernetes.io/unreachable" for k, _ in taints(sim, victim)), f"{victim} Ready again")
    sim.wait(lambda: not on_victim & {p["metadata"]["name"] for p in sim.pods(ns, "app=survivor")},
             "the evicted pods finalised once the node is back")


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


def _workload(kind: str, name: str, annotations: dict[str, str] | None = None) -> Obj:
    template: Obj = {"metadata": {"labels": {"app": name}, "annotations": annotations or {}},
                     "spec": {"containers": [{"name": "c", "image": "nginx"}]}}
    spec: Obj = {"replicas": 1, "selector": {"matchLabels": {"app": name}}, "template": template}
    if kind == "StatefulSet":
        spec["serviceName"] = name
    return {"apiVersion": "apps/v1", "kind": kind, "metadata": {"name": name}, "spec": spec}


def test_lost_after_and_replace_when_lost(sim: SimCluster, ns: str) -> None:
    """A node annotated lost-after 2s goes silent: its plain Deployment pod is evicted after 2 s (not the 300 s
    of the default toleration) and replaced on a live node; the pod marked replace-when-lost "false" is not
    evicted; the StatefulSet pod is evicted but stays Terminating with no second copy. Back, the node finalises
    the evicted pods and the kept one is Running and Ready there again."""
    victim, others = NODES[0], NODES[1:]
    bad = sim.kubectl("annotate", "node", victim, "lite.dev/lost-after=soon", check=False)
    assert bad.returncode != 0 and "metadata.annotations[lite.dev/lost-after]: Invalid value" in bad.stderr
    sim.kubectl("annotate", "node", victim, "lite.dev/lost-after=2s")
    for node in others:  # everything starts on the victim
        sim.kubectl("cordon", node)
    try:
        apply(sim, ns, _workload("Deployment", "moved"))
        apply(sim, ns, _workload("Deployment", "kept", {"lite.dev/replace-when-lost": "false"}))
        apply(sim, ns, _workload("StatefulSet", "db"))
        first = {app: sim.wait(lambda app=app: next((p for p in sim.pods(ns, f"app={app}") if running_ready(p)),
                                                    None), f"{app} Running")
                 for app in ("moved", "kept", "db")}
        assert {p["spec"]["nodeName"] for p in first.values()} == {victim}
    finally:
        for node in others:
            sim.kubectl("uncordon", node)
    sim.kubectl("annotate", "node", victim, f"{PAUSED}=true")
    try:
        def replaced() -> Obj | None:
            return next((p for p in sim.pods(ns, "app=moved") if running_ready(p)
                         and p["spec"]["nodeName"] != victim), None)

        sim.wait(replaced, "the moved pod replaced on a live node", timeout=60)
        by_name = {p["metadata"]["name"]: p for p in sim.pods(ns)}
        assert by_name[first["moved"]["metadata"]["name"]]["metadata"].get("deletionTimestamp")  # evicted
        kept = by_name[first["kept"]["metadata"]["name"]]
        assert not kept["metadata"].get("deletionTimestamp") and kept["spec"]["nodeName"] == victim
        assert len(sim.pods(ns, "app=kept")) == 1
        sim.wait(lambda: sim.pods(ns, "app=db")[0]["metadata"].get("deletionTimestamp"), "db-0 evicted")
        db = sim.pods(ns, "app=db")
        assert [(p["metadata"]["name"], p["metadata"]["uid"]) for p in db] == [
            ("db-0", first["db"]["metadata"]["uid"])]  # Terminating, and no second copy
        assert ready_condition(sim, victim) == "Unknown"
        kept = next(p for p in sim.pods(ns, "app=kept"))
        assert not kept["metadata"].get("deletionTimestamp")  # still, after the others were evicted
        events = sim.json("get", "events", "-n", ns)["items"]
        evicted = {e["involvedObject"]["name"] for e in events if e["reason"] == "TaintManagerEviction"}
        assert evicted == {first["moved"]["metadata"]["name"], "db-0"}
    finally:
        sim.kubectl("annotate", "node", victim, f"{PAUSED}-")
        sim.kubectl("annotate", "node", victim, "lite.dev/lost-after-")
    sim.wait(lambda: ready_condition(sim, victim) == "True", f"{victim} Ready again")
    moved = first["moved"]["metadata"]["name"]
    sim.wait(lambda: moved not in {p["metadata"]["name"] for p in sim.pods(ns, "app=moved")},
             "the node's copy of the moved pod stopped")
    sim.wait(lambda: (k := sim.pods(ns, "app=kept")) and len(k) == 1 and running_ready(k[0])
             and k[0]["metadata"]["uid"] == first["kept"]["metadata"]["uid"], "the kept pod Ready on its node")
    sim.wait(lambda: (d := sim.pods(ns, "app=db")) and len(d) == 1 and running_ready(d[0])
             and d[0]["metadata"]["uid"] != first["db"]["metadata"]["uid"], "db-0 made again")
