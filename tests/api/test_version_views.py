"""Conversions between served versions of one stored object (lite/server/api/versions), the version-dependent
event rules, and the move of events an older lite kept apart into the one Event store."""

from __future__ import annotations

import asyncio
import datetime
import json
from pathlib import Path
from typing import Any

import orjson
import pytest

from lite import errors
from lite.kinds import KindRegistry
from lite.server.api import componentstatus, versions
from lite.server.api.resources import Resources
from lite.server.api.strategies import default_strategies
from lite.server.api.versions import events, hpa
from lite.server.store import Store

KINDS = KindRegistry()
HPA_V1 = KINDS.by_gvk("autoscaling", "v1", "HorizontalPodAutoscaler")
EVENTS_V1 = KINDS.by_gvk("events.k8s.io", "v1", "Event")
CPU = {"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 55}}}
REF = {"kind": "Deployment", "name": "web", "apiVersion": "apps/v1"}


def v2(spec: dict[str, Any], status: dict[str, Any] | None = None, ann: dict[str, str] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "h", "namespace": "ns"}
    if ann:
        meta["annotations"] = ann
    return {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler", "metadata": meta,
            "spec": {"scaleTargetRef": REF, "minReplicas": 1, "maxReplicas": 5, **spec},
            "status": {"currentReplicas": 0, "desiredReplicas": 0, **(status or {})}}


# ---- HPA ------------------------------------------------------------------------------------------------------

def test_a_cpu_utilization_target_is_the_v1_percentage() -> None:
    out = hpa.to_v1(v2({"metrics": [CPU]}))
    assert out["apiVersion"] == "autoscaling/v1"
    assert out["spec"] == {"scaleTargetRef": REF, "minReplicas": 1, "maxReplicas": 5,
                           "targetCPUUtilizationPercentage": 55}
    assert "annotations" not in out["metadata"]
    assert hpa.to_v2(out)["spec"]["metrics"] == [CPU]


def test_other_metrics_travel_in_upstreams_annotation_format() -> None:
    mem = {"type": "Resource", "resource": {"name": "memory", "target": {"type": "AverageValue",
                                                                         "averageValue": "100Mi"}}}
    pods = {"type": "Pods", "pods": {"metric": {"name": "qps"}, "target": {"type": "AverageValue",
                                                                          "averageValue": "10"}}}
    ext = {"type": "External", "external": {"metric": {"name": "queue", "selector": {"matchLabels": {"q": "a"}}},
                                            "target": {"type": "Value", "value": "30"}}}
    obj = {"type": "Object", "object": {"describedObject": {"kind": "Service", "name": "s", "apiVersion": "v1"},
                                        "metric": {"name": "rps"},
                                        "target": {"type": "AverageValue", "averageValue": "5"}}}
    out = hpa.to_v1(v2({"metrics": [mem, pods, CPU, ext, obj]}))
    assert out["spec"]["targetCPUUtilizationPercentage"] == 55
    # byte for byte what upstream's apiserver writes (Go field order, compact)
    assert out["metadata"]["annotations"][hpa.METRICS] == (
        '[{"type":"Resource","resource":{"name":"memory","targetAverageValue":"100Mi"}},'
        '{"type":"Pods","pods":{"metricName":"qps","targetAverageValue":"10"}},'
        '{"type":"External","external":{"metricName":"queue","metricSelector":{"matchLabels":{"q":"a"}},'
        '"targetValue":"30"}},'
        '{"type":"Object","object":{"target":{"kind":"Service","name":"s","apiVersion":"v1"},"metricName":"rps",'
        '"targetValue":"0","averageValue":"5"}}]')
    back = hpa.to_v2(out)
    # the CPU target comes last (upstream appends the converted v1 field after the annotation's metrics)
    assert back["spec"]["metrics"][:3] == [mem, pods, ext]
    assert back["spec"]["metrics"][3]["object"]["target"] == {"type": "AverageValue", "value": "0",
                                                               "averageValue": "5"}
    assert back["spec"]["metrics"][4] == CPU
    assert "annotations" not in back["metadata"]


def test_status_metrics_conditions_and_behavior_round_trip() -> None:
    current = [{"type": "Resource", "resource": {"name": "cpu", "current": {"averageUtilization": 40,
                                                                              "averageValue": "120m"}}}]
    conditions = [{"type": "AbleToScale", "status": "True", "lastTransitionTime": "2024-01-01T00:00:00Z",
                   "reason": "ReadyForNewScale", "message": "ok"}]
    behavior = {"scaleDown": {"stabilizationWindowSeconds": 60, "selectPolicy": "Max",
                              "policies": [{"type": "Percent", "value": 100, "periodSeconds": 15}]}}
    stored = v2({"metrics": [CPU], "behavior": behavior},
                {"currentMetrics": current, "conditions": conditions, "currentReplicas": 2, "desiredReplicas": 3,
                 "observedGeneration": 4})
    out = hpa.to_v1(stored)
    assert out["status"] == {"observedGeneration": 4, "currentReplicas": 2, "desiredReplicas": 3,
                             "currentCPUUtilizationPercentage": 40}
    ann = out["metadata"]["annotations"]
    assert json.loads(ann[hpa.CURRENT_METRICS]) == [
        {"type": "Resource", "resource": {"name": "cpu", "currentAverageUtilization": 40,
                                          "currentAverageValue": "120m"}}]
    # Go marshals the internal behavior type, which has no json tags
    assert ann[hpa.BEHAVIOR] == ('{"ScaleUp":null,"ScaleDown":{"StabilizationWindowSeconds":60,"SelectPolicy":'
                                 '"Max","Policies":[{"Type":"Percent","Value":100,"PeriodSeconds":15}]}}')
    back = hpa.to_v2(out)
    assert back["spec"]["behavior"] == behavior
    assert back["status"]["currentMetrics"] == current and back["status"]["conditions"] == conditions
    assert back["status"]["observedGeneration"] == 4


def test_v1_without_a_target_gets_upstreams_default_and_annotations_read_case_insensitively() -> None:
    v1 = {"apiVersion": "autoscaling/v1", "kind": "HorizontalPodAutoscaler",
          "metadata": {"name": "h", "annotations": {hpa.BEHAVIOR: '{"scaleup":{"selectpolicy":"Disabled"}}',
                                                    "keep": "me"}},
          "spec": {"scaleTargetRef": REF, "maxReplicas": 3}, "status": {"currentCPUUtilizationPercentage": 12}}
    out = hpa.to_v2(v1)
    assert out["spec"]["metrics"] == [{"type": "Resource", "resource": {"name": "cpu", "target": {
        "type": "Utilization", "averageUtilization": 80}}}]
    assert out["spec"]["behavior"] == {"scaleUp": {"selectPolicy": "Disabled"}}
    assert out["metadata"]["annotations"] == {"keep": "me"}
    assert out["status"]["currentMetrics"] == [{"type": "Resource", "resource": {"name": "cpu", "current": {
        "averageUtilization": 12}}}]
    assert v1["metadata"]["annotations"][hpa.BEHAVIOR]  # the input is not changed


def test_a_v2_object_never_shows_round_trip_annotations() -> None:
    v1 = hpa.to_v1(v2({"metrics": [CPU]}, {"conditions": [{"type": "ScalingActive", "status": "False"}]}))
    assert hpa.CONDITIONS in v1["metadata"]["annotations"]
    assert "annotations" not in hpa.to_v2(v1)["metadata"]


# ---- Events ---------------------------------------------------------------------------------------------------

CORE_EVENT = {"apiVersion": "v1", "kind": "Event", "metadata": {"name": "e", "namespace": "ns"},
              "involvedObject": {"kind": "Pod", "name": "p", "namespace": "ns"}, "reason": "Pulled",
              "message": "pulled it", "type": "Normal", "source": {"component": "kubelet", "host": "n1"},
              "firstTimestamp": "2024-01-01T00:00:00Z", "lastTimestamp": "2024-01-01T00:00:05Z", "count": 2,
              "reportingComponent": "kubelet", "reportingInstance": "n1", "action": "Pull",
              "related": {"kind": "Node", "name": "n1"}, "series": {"count": 2,
                                                                   "lastObservedTime": "2024-01-01T00:00:05.000000Z"}}


def test_event_field_names_convert_both_ways() -> None:
    v1 = events.to_v1(CORE_EVENT)
    assert v1 == {"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": CORE_EVENT["metadata"],
                  "regarding": CORE_EVENT["involvedObject"], "reason": "Pulled", "note": "pulled it",
                  "type": "Normal", "deprecatedSource": {"component": "kubelet", "host": "n1"},
                  "deprecatedFirstTimestamp": "2024-01-01T00:00:00Z",
                  "deprecatedLastTimestamp": "2024-01-01T00:00:05Z", "deprecatedCount": 2,
                  "reportingController": "kubelet", "reportingInstance": "n1", "action": "Pull",
                  "related": {"kind": "Node", "name": "n1"}, "series": CORE_EVENT["series"], "eventTime": None}
    assert events.to_core(v1) == CORE_EVENT
    assert versions.to_view(EVENTS_V1, CORE_EVENT) == v1 and versions.to_stored(EVENTS_V1, v1) == CORE_EVENT


@pytest.mark.parametrize(("selector", "stored"), [
    ("regarding.name=p", "involvedObject.name=p"),
    ("regarding.kind=Pod,reportingController!=kubelet", "involvedObject.kind=Pod,reportingComponent!=kubelet"),
    ("reason=a\\,b,type=Normal", "reason=a\\,b,type=Normal"),
    ("metadata.name==e", "metadata.name==e"),
])
def test_events_v1_field_selectors_use_upstreams_labels(selector: str, stored: str) -> None:
    assert versions.stored_field_selector(EVENTS_V1, selector) == stored


@pytest.mark.parametrize("selector", ["involvedObject.name=p", "note=x", "reportingComponent=k"])
def test_core_only_labels_are_refused_on_events_v1(selector: str) -> None:
    with pytest.raises(errors.ApiError) as e:
        versions.stored_field_selector(EVENTS_V1, selector)
    assert e.value.code == 400 and f"field label not supported: {selector.split('=')[0]}" in str(e.value)


NEW = {"metadata": {"name": "e", "namespace": "ns"}, "eventTime": "2024-01-01T00:00:00.000000Z",
       "reportingComponent": "example.com/ctl", "reportingInstance": "i", "action": "Act", "reason": "Why",
       "type": "Normal", "involvedObject": {"kind": "Pod", "name": "p", "namespace": "ns"}}


@pytest.mark.parametrize(("change", "fields"), [
    ({}, set()),
    ({"eventTime": None}, {"eventTime"}),
    ({"type": "Bad"}, {"type"}),
    ({"count": 3, "firstTimestamp": "2024-01-01T00:00:00Z"}, {"count", "firstTimestamp"}),
    ({"source": {"component": "x"}}, {"source"}),
    ({"reportingComponent": "", "action": "", "reason": "x" * 129}, {"reportingController", "action", "reason"}),
    ({"series": {"count": 1}}, {"series.count", "series.lastObservedTime"}),
    ({"involvedObject": {"kind": "Node", "name": "n"}}, {"involvedObject.namespace"}),
    ({"message": "x" * 1025}, {"message"}),
])
def test_strict_rules_of_events_written_through_events_k8s_io(change: dict[str, Any], fields: set[str]) -> None:
    body = {k: v for k, v in {**NEW, **change}.items() if v is not None}
    assert {c.field for c in events.create_causes(body)} == fields


def test_event_updates_through_events_k8s_io_keep_the_event_fields() -> None:
    changed = {**NEW, "reason": "Other", "reportingComponent": "example.com/b", "series": {
        "count": 2, "lastObservedTime": "2024-01-01T00:00:01.000000Z"}}
    assert {c.field for c in events.update_causes(changed, NEW)} == {"reason", "reportingController"}
    # the same instant spelled another way is no change (clients re-serialize what they read)
    assert events.update_causes({**NEW, "eventTime": "2024-01-01T00:00:00+00:00"}, NEW) == []
    # core/v1 writes keep only the legacy rules: an old-style event needs no eventTime
    old_style = {"metadata": {"name": "e", "namespace": "default"}, "involvedObject": {"kind": "Node", "name": "n"}}
    assert events.legacy_causes(old_style, via_core=True) == []
    assert {c.field for c in events.legacy_causes({**NEW, "reportingComponent": ""}, via_core=True)} == {
        "reportingComponent"}


# ---- the one Event store after an upgrade ---------------------------------------------------------------------

def old_events_v1(name: str, uid: str) -> dict[str, Any]:
    return {"apiVersion": "events.k8s.io/v1", "kind": "Event",
            "metadata": {"name": name, "namespace": "default", "uid": uid,
                         "creationTimestamp": "2024-01-01T00:00:00Z"},
            "eventTime": "2024-01-01T00:00:00.000000Z", "reportingController": "c", "reportingInstance": "i",
            "action": "A", "reason": "R", "type": "Normal", "note": f"old {name}",
            "regarding": {"kind": "Node", "name": "n1"}}


async def test_events_kept_apart_by_an_older_lite_move_into_the_one_store(tmp_path: Path) -> None:
    store = await Store.open(str(tmp_path / "lite.db"))
    try:
        await store.create("events.k8s.io/events/default/moved", old_events_v1("moved", "u-1"))
        await store.create("events.k8s.io/events/default/clash", old_events_v1("clash", "u-2"))
        await store.create("core/events/default/clash", {"apiVersion": "v1", "kind": "Event", "metadata": {
            "name": "clash", "namespace": "default", "uid": "u-3"}, "message": "core one"})
        # a copy already made before a crash (same uid): only the old row goes
        await store.create("events.k8s.io/events/default/again", old_events_v1("again", "u-4"))
        await store.create("core/events/default/again", events.to_core(old_events_v1("again", "u-4")))
        kinds = KindRegistry()
        res = Resources(store, kinds, default_strategies())
        await res.start()
        core = kinds.by_gvk("", "v1", "Event")
        ev1 = kinds.by_gvk("events.k8s.io", "v1", "Event")
        assert core is not None and ev1 is not None
        moved = await res.get(core, "default", "moved")
        assert (moved["message"], moved["metadata"]["uid"]) == ("old moved", "u-1")
        assert moved["metadata"]["creationTimestamp"] == "2024-01-01T00:00:00Z"
        assert (await res.get(ev1, "default", "moved"))["note"] == "old moved"
        assert (await res.get(core, "default", "clash"))["message"] == "core one"
        assert store.get("events.k8s.io/events/default/clash") is not None  # never overwritten, never lost
        assert store.get("events.k8s.io/events/default/moved") is None
        assert store.get("events.k8s.io/events/default/again") is None
        assert orjson.loads(store.get("core/events/default/again")[1])["metadata"]["uid"] == "u-4"  # type: ignore[index]
        names = [e["metadata"]["name"] for e in (await res.list(ev1, "default"))["items"]]
        assert sorted(names) == ["again", "clash", "moved"]
        await res.start()  # idempotent
        assert store.get("events.k8s.io/events/default/clash") is not None
    finally:
        await store.close()


# ---- managedFields of writes through a view -------------------------------------------------------------------

HPA_V2 = KINDS.by_gvk("autoscaling", "v2", "HorizontalPodAutoscaler")


def hpa_v1(cpu: int | None = 50) -> dict[str, Any]:
    spec: dict[str, Any] = {"scaleTargetRef": REF, "minReplicas": 1, "maxReplicas": 5}
    if cpu is not None:
        spec["targetCPUUtilizationPercentage"] = cpu
    return {"apiVersion": "autoscaling/v1", "kind": "HorizontalPodAutoscaler", "metadata": {"name": "h"},
            "spec": spec}


def hpa_v2(metrics: list[dict[str, Any]] | None) -> dict[str, Any]:
    spec: dict[str, Any] = {"scaleTargetRef": REF, "minReplicas": 1, "maxReplicas": 5}
    if metrics is not None:
        spec["metrics"] = metrics
    return {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler", "metadata": {"name": "h"},
            "spec": spec}


def cpu(utilization: int) -> dict[str, Any]:
    return {"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization",
                                                                       "averageUtilization": utilization}}}


def entries(obj: dict[str, Any]) -> dict[tuple[str, str, str], dict[str, Any]]:
    """(manager, operation, apiVersion) -> fieldsV1 of every managedFields entry."""
    return {(e["manager"], e["operation"], e["apiVersion"]): e["fieldsV1"] for e in obj["metadata"]["managedFields"]}


async def test_entries_keep_the_version_they_were_written_in(res: Resources) -> None:
    """As upstream: an apply through autoscaling/v1 is an autoscaling/v1 entry naming v1's fields, shown so
    through v2 too; a v2 apply changing the CPU target conflicts with it on v1's field; forced, the v1 entry
    loses that field, seen in v1."""
    assert HPA_V1 is not None and HPA_V2 is not None
    await res.patch(HPA_V1, "default", "h", hpa_v1(50), patch_type="apply", field_manager="kubectl")
    got = entries(await res.get(HPA_V2, "default", "h"))
    assert got == {("kubectl", "Apply", "autoscaling/v1"): {"f:spec": {
        "f:maxReplicas": {}, "f:minReplicas": {}, "f:targetCPUUtilizationPercentage": {},
        "f:scaleTargetRef": {"f:apiVersion": {}, "f:kind": {}, "f:name": {}}}}}
    with pytest.raises(errors.ApiError) as e:
        await res.patch(HPA_V2, "default", "h", hpa_v2([cpu(70)]), patch_type="apply", field_manager="other")
    assert e.value.code == 409
    assert [(c.reason, c.field) for c in e.value.causes] == [("FieldManagerConflict",
                                                              ".spec.targetCPUUtilizationPercentage")]
    assert 'conflict with "kubectl"' in e.value.message
    # the same value is shared, not a conflict (compared in v1: 50 stays 50)
    await res.patch(HPA_V2, "default", "h", hpa_v2([cpu(50)]), patch_type="apply", field_manager="sharer")
    out = await res.patch(HPA_V2, "default", "h", hpa_v2([cpu(70)]), patch_type="apply", field_manager="other",
                          force=True)
    got = entries(out)
    assert "f:targetCPUUtilizationPercentage" not in got[("kubectl", "Apply", "autoscaling/v1")]["f:spec"]
    assert "f:metrics" in got[("other", "Apply", "autoscaling/v2")]["f:spec"]
    assert out["spec"]["metrics"] == [cpu(70)]


async def test_an_update_through_v1_is_a_v1_entry_apart_from_the_same_managers_v2_one(res: Resources) -> None:
    assert HPA_V1 is not None and HPA_V2 is not None
    await res.create(HPA_V1, "default", hpa_v1(50), field_manager="editor")
    cur = await res.get(HPA_V1, "default", "h")
    cur["spec"]["targetCPUUtilizationPercentage"] = 60
    await res.update(HPA_V1, "default", "h", cur, field_manager="editor")
    got = entries(await res.get(HPA_V2, "default", "h"))
    assert list(got) == [("editor", "Update", "autoscaling/v1")]
    assert "f:targetCPUUtilizationPercentage" in got[("editor", "Update", "autoscaling/v1")]["f:spec"]
    v2obj = await res.get(HPA_V2, "default", "h")
    v2obj["spec"]["maxReplicas"] = 7
    out = await res.update(HPA_V2, "default", "h", v2obj, field_manager="editor")
    got = entries(out)
    # upstream's manager identity of an Update includes its apiVersion: two entries; the v1 one lost maxReplicas
    assert got[("editor", "Update", "autoscaling/v2")] == {"f:spec": {"f:maxReplicas": {}}}
    assert "f:maxReplicas" not in got[("editor", "Update", "autoscaling/v1")]["f:spec"]
    assert "f:targetCPUUtilizationPercentage" in got[("editor", "Update", "autoscaling/v1")]["f:spec"]


async def test_an_apply_through_v2_prunes_what_the_managers_v1_apply_set(res: Resources) -> None:
    """The same manager applies v1 with a CPU target, then v2 without metrics: upstream prunes, in v1, the
    target that manager no longer applies (v2's default CPU metric, 80%, comes back); applied again with
    metrics, they are kept."""
    assert HPA_V1 is not None and HPA_V2 is not None
    await res.patch(HPA_V1, "default", "h", hpa_v1(50), patch_type="apply", field_manager="kubectl")
    out = await res.patch(HPA_V2, "default", "h", hpa_v2(None), patch_type="apply", field_manager="kubectl")
    assert out["spec"]["metrics"] == [cpu(80)]
    assert list(entries(out)) == [("kubectl", "Apply", "autoscaling/v2")]
    await res.patch(HPA_V1, "default", "h", hpa_v1(50), patch_type="apply", field_manager="kubectl")
    out = await res.patch(HPA_V2, "default", "h", hpa_v2([cpu(50)]), patch_type="apply", field_manager="kubectl")
    assert out["spec"]["metrics"] == [cpu(50)]
    assert entries(out)[("kubectl", "Apply", "autoscaling/v2")]["f:spec"]["f:metrics"] == {}


# ---- componentstatuses ----------------------------------------------------------------------------------------

NOW = datetime.datetime(2024, 1, 1, 0, 1, tzinfo=datetime.UTC)


def lease(renewed: str, holder: str = "server-a") -> dict[str, Any]:
    return {"spec": {"holderIdentity": holder, "renewTime": renewed, "leaseDurationSeconds": 15}}


LIVE, OLD = "2024-01-01T00:00:55.000000Z", "2024-01-01T00:00:40.000000Z"


@pytest.mark.parametrize(("controllers", "scheduler", "store_error", "healthy", "why"), [
    (lease(LIVE), lease(LIVE, "server-b"), "", {"controller-manager", "etcd-0", "scheduler"}, ""),
    (None, None, "", {"etcd-0"}, "no server has taken the Lease kube-system/kube-"),
    (lease(OLD), lease(LIVE), "", {"etcd-0", "scheduler"}, "kube-controller-manager held by server-a expired"),
    (lease(LIVE), lease(OLD), "", {"etcd-0", "controller-manager"}, "kube-scheduler held by server-a expired"),
    (lease(LIVE, holder=""), lease(LIVE), "", {"etcd-0", "scheduler"}, "has no holder"),
    (lease(LIVE), None, "", {"etcd-0", "controller-manager"}, "no server has taken the Lease kube-system/kube-sch"),
    (None, None, "the store did not answer: x", set(), "the store did not answer"),
])
def test_componentstatuses_follow_the_controller_and_scheduler_leases(
        controllers: dict[str, Any] | None, scheduler: dict[str, Any] | None, store_error: str, healthy: set[str],
        why: str) -> None:
    got = {s["metadata"]["name"]: s["conditions"][0]
           for s in componentstatus.statuses(controllers, scheduler, store_error, NOW)}
    assert set(got) == {"controller-manager", "etcd-0", "scheduler"}
    assert {n for n, c in got.items() if c["status"] == "True"} == healthy
    for cond in got.values():
        assert cond["type"] == "Healthy"
        if cond["status"] == "False":
            assert why in cond["error"]


async def test_two_servers_moving_the_same_events_at_once(tmp_path: Path) -> None:
    """Servers sharing one backend start together: each row moves once, and neither start fails."""
    store = await Store.open(str(tmp_path / "lite.db"))
    try:
        for i in range(20):
            await store.create(f"events.k8s.io/events/default/e{i}", old_events_v1(f"e{i}", f"u-{i}"))
        a = Resources(store, KindRegistry(), default_strategies())
        b = Resources(store, KindRegistry(), default_strategies())
        await asyncio.gather(a.start(), b.start())
        rows, _, _ = store.list("core/events/default/")
        assert sorted(orjson.loads(raw)["metadata"]["uid"] for _k, _r, raw in rows) == sorted(
            f"u-{i}" for i in range(20))
        assert store.list("events.k8s.io/events/")[0] == []
    finally:
        await store.close()
