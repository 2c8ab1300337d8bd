"""The scheduler end to end on hollow nodes: FailedScheduling for a pod that fits nowhere, and preemption.

The module's cluster: 2 simulated nodes `s-0`, `s-1` with 1 cpu each, so a 600m pod fills a node.
"""

from __future__ import annotations

import json
import os
import re
import uuid
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest
from e2ekit import KUBECTL
from kubernetes import client

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


def test_scheduler_events_read_through_events_k8s_io(sim: SimCluster, ns: str) -> None:
    """The scheduler records as kube-scheduler does (events.k8s.io: eventTime, reportingController, action,
    series for repeats), so the official client's EventsV1Api reads them; the controllers record as
    kube-controller-manager does (core/v1, eventTime null), which that model refuses, upstream too."""
    apply(sim, ns, {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "fits"},
                    "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "fits"}},
                             "template": {"metadata": {"labels": {"app": "fits"}}, "spec": pod_spec("50m")}}})
    apply(sim, ns, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "huge"}, "spec": pod_spec("8")})
    ev = client.EventsV1Api(sim.api)

    def scheduler_events() -> list[Any]:
        items: list[Any] = ev.list_namespaced_event(ns, field_selector="reportingController=default-scheduler").items
        return items

    def by_reason(reason: str, name: str = "") -> list[Any]:
        return [e for e in scheduler_events() if e.reason == reason and e.regarding.name.startswith(name)]

    [scheduled] = sim.wait(lambda: by_reason("Scheduled", "fits-"), "a Scheduled event through events.k8s.io")
    assert isinstance(scheduled.event_time, datetime) and scheduled.action == "Binding"
    assert scheduled.reporting_instance.startswith("default-scheduler-") and scheduled.type == "Normal"
    assert scheduled.note == f"Successfully assigned {ns}/{scheduled.regarding.name} to " \
        f"{sim.pods(ns, 'app=fits')[0]['spec']['nodeName']}"
    assert scheduled.series is None and scheduled.deprecated_source is None and scheduled.deprecated_count is None
    failed = sim.wait(lambda: by_reason("FailedScheduling", "huge"), "a FailedScheduling event")
    assert failed[0].action == "Scheduling" and failed[0].type == "Warning"
    assert "0/2 nodes are available" in failed[0].note and isinstance(failed[0].event_time, datetime)

    # Repeats: each node change sends `huge` back to the queue, and the same failure makes a series.
    labels = iter(range(1000))

    def a_series() -> list[Any]:
        sim.kubectl("label", "node", "s-0", f"poke={next(labels)}", "--overwrite")
        return [e for e in by_reason("FailedScheduling", "huge") if e.series is not None]

    [series] = sim.wait(a_series, "a FailedScheduling series", timeout=90, interval=1.0)
    assert series.series.count >= 2 and series.series.last_observed_time >= series.event_time
    sim.kubectl("label", "node", "s-0", "poke-")
    # kubectl events (core/v1) shows the series as upstream's kubectl does: "<last> (xN over <first>)"
    out = sim.kubectl("events", "-n", ns, "--for", "pod/huge").stdout
    assert re.search(r"\(x\d+ over [0-9hms]+\)\s+Warning\s+FailedScheduling\s+Pod/huge", out), out
    described = sim.kubectl("describe", "pod", "huge", "-n", ns).stdout
    assert re.search(r"Warning\s+FailedScheduling\s+.*default-scheduler", described), described

    # The controllers' events (as upstream's, written by the core/v1 recorder) have `eventTime: null` through
    # events.k8s.io; the official client's model requires one and refuses the whole list, as it does on an
    # upstream cluster (kubernetes-client/python#1616).
    raw = json.loads(ev.list_namespaced_event(ns, _preload_content=False).data)["items"]
    controller_events = [e for e in raw if e.get("reportingController") != "default-scheduler"]
    assert {e["deprecatedSource"]["component"] for e in controller_events} >= {"deployment-controller",
                                                                               "replicaset-controller"}
    assert all(e["eventTime"] is None and e["deprecatedCount"] >= 1 for e in controller_events)
    assert all(e["eventTime"] and "deprecatedSource" not in e for e in raw if e not in controller_events)
    with pytest.raises(ValueError, match=r"event_?[tT]ime"):  # the model (pydantic in 37.x) refuses null
        ev.list_namespaced_event(ns)
