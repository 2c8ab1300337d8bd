"""The scheduler end to end on hollow nodes: FailedScheduling for a pod that fits nowhere, and preemption.

The module's cluster: 2 simulated nodes `s-0`, `s-1` with 1 cpu each, so a 600m pod fills a node.
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


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimCluster]:
    if not os.access(KUBECTL, os.X_OK):
        pytest.skip(f"{KUBECTL} not installed")
    base = tmp_path_factory.mktemp("sched")
    with sim_cluster(base, 2, ("--simulate", "2", "--node-prefix", "s", "--cpu", "1", "--memory", "2Gi",
                               "--stop-delay", "200ms")) as c:
        yield c


@pytest.fixture
def ns(sim: SimCluster) -> str:
    name = f"sc-{uuid.uuid4().hex[:8]}"
    sim.kubectl("create", "namespace", name)
    return name


def apply(sim: SimCluster, ns: str, manifest: Obj) -> None:
    sim.kubectl("apply", "-n", ns, "-f", "-", input=json.dumps(manifest))


def pod_spec(cpu: str, priority_class: str = "") -> Obj:
    spec: Obj = {"containers": [{"name": "c", "image": "nginx", "resources": {"requests": {"cpu": cpu}}}]}
    if priority_class:
        spec["priorityClassName"] = priority_class
    return spec


def events(sim: SimCluster, ns: str, name: str, reason: str) -> list[Obj]:
    items: list[Obj] = sim.json("get", "events", "-n", ns,
                                f"--field-selector=involvedObject.name={name},reason={reason}")["items"]
    return items


def test_unschedulable_pod_gets_failed_scheduling_event(sim: SimCluster, ns: str) -> None:
    apply(sim, ns, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "huge"}, "spec": pod_spec("8")})
    found = sim.wait(lambda: events(sim, ns, "huge", "FailedScheduling"), "FailedScheduling event")
    assert found[0]["type"] == "Warning"
    assert "0/2 nodes are available" in found[0]["message"] and "Insufficient cpu" in found[0]["message"]
    pod = sim.json("get", "pod", "huge", "-n", ns)
    assert pod["status"]["phase"] == "Pending" and not pod["spec"].get("nodeName")
    cond = next(c for c in pod["status"]["conditions"] if c["type"] == "PodScheduled")
    assert cond["status"] == "False" and cond["reason"] == "Unschedulable"
    described = sim.kubectl("describe", "pod", "huge", "-n", ns).stdout
    assert "FailedScheduling" in described


def test_high_priority_pod_preempts_on_a_full_cluster(sim: SimCluster, ns: str) -> None:
    pc = f"vip-{uuid.uuid4().hex[:6]}"
    apply(sim, ns, {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": pc},
                    "value": 100000, "description": "e2e preemptor"})
    apply(sim, ns, {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "filler"},
                    "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "filler"}},
                             "template": {"metadata": {"labels": {"app": "filler"}}, "spec": pod_spec("600m")}}})
    fillers = sim.wait(lambda: (p := [x for x in sim.pods(ns, "app=filler") if running_ready(x)]) and len(p) == 2
                       and p, "2 fillers Running")
    assert {p["spec"]["nodeName"] for p in fillers} == {"s-0", "s-1"}  # the cluster is full
    apply(sim, ns, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "vip", "labels": {"app": "vip"}},
                    "spec": pod_spec("600m", pc)})
    vip = sim.wait(lambda: [p for p in sim.pods(ns, "app=vip") if running_ready(p)], "vip Running")[0]
    assert vip["spec"]["priority"] == 100000
    victims = [p for p in fillers if p["spec"]["nodeName"] == vip["spec"]["nodeName"]]
    assert len(victims) == 1
    assert sim.wait(lambda: events(sim, ns, victims[0]["metadata"]["name"], "Preempted"), "Preempted event")
    # The filler's replacement finds no room: Pending, with a FailedScheduling event; the other filler stays.
    pending = sim.wait(lambda: [p for p in sim.pods(ns, "app=filler") if p["status"].get("phase") == "Pending"
                                and not p["metadata"].get("deletionTimestamp")], "the replacement Pending")
    assert sim.wait(lambda: events(sim, ns, pending[0]["metadata"]["name"], "FailedScheduling"),
                    "FailedScheduling for the replacement")
    running = [p for p in sim.pods(ns, "app=filler") if running_ready(p)]
    assert [p["metadata"]["name"] for p in running] == [p["metadata"]["name"] for p in fillers if p not in victims]
