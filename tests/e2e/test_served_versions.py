"""Every version upstream serves, one stored object (issue 18 item 7): autoscaling/v1 and v2 HorizontalPodAutoscalers,
events.k8s.io/v1 and core/v1 Events, driven by the real kubectl and the official Python client."""

from __future__ import annotations

import json
import re
import time
from datetime import UTC, datetime
from typing import Any

import pytest
from e2ekit import Cluster
from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException

OTHER_METRICS = "autoscaling.alpha.kubernetes.io/metrics"


def wait_for(what: str, fn: Any, timeout: float = 30) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        got = fn()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.3)


def kjson(cluster: Cluster, *args: str) -> Any:
    return json.loads(cluster.kubectl(*args, "-o", "json").stdout)


# ---- autoscaling/v1 <-> v2 -----------------------------------------------------------------------------------

V1_MANIFEST = """apiVersion: autoscaling/v1
kind: HorizontalPodAutoscaler
metadata:
  name: api
spec:
  scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: api}
  maxReplicas: 4
  targetCPUUtilizationPercentage: %d
"""


def test_kubectl_apply_of_a_v1_manifest(cluster: Cluster, ns: str) -> None:
    cluster.kubectl("-n", ns, "apply", "-f", "-", input=V1_MANIFEST % 50)
    cluster.kubectl("-n", ns, "apply", "-f", "-", input=V1_MANIFEST % 65)
    assert cluster.kubectl("-n", ns, "diff", "-f", "-", input=V1_MANIFEST % 65, check=False).returncode == 0
    v2 = kjson(cluster, "-n", ns, "get", "hpa", "api")
    assert v2["spec"]["metrics"][0]["resource"]["target"]["averageUtilization"] == 65
    cluster.kubectl("-n", ns, "apply", "--server-side", "-f", "-", input=V1_MANIFEST % 70)
    v1 = kjson(cluster, "-n", ns, "get", "horizontalpodautoscalers.v1.autoscaling", "api")
    assert v1["spec"]["targetCPUUtilizationPercentage"] == 70

def test_kubectl_autoscale_and_both_versions(cluster: Cluster, ns: str) -> None:
    cluster.kubectl("-n", ns, "create", "deployment", "web", "--image=registry.k8s.io/pause:3.10")
    cluster.kubectl("-n", ns, "autoscale", "deployment", "web", "--cpu-percent=60", "--min=2", "--max=5")
    # (kubectl expands the short name `hpa` to the preferred version, so the long name picks v1)
    v1 = kjson(cluster, "-n", ns, "get", "horizontalpodautoscalers.v1.autoscaling", "web")
    assert v1["apiVersion"] == "autoscaling/v1"
    assert v1["spec"]["targetCPUUtilizationPercentage"] == 60
    assert (v1["spec"]["minReplicas"], v1["spec"]["maxReplicas"]) == (2, 5)
    v2 = kjson(cluster, "-n", ns, "get", "hpa.v2.autoscaling", "web")
    assert v2["apiVersion"] == "autoscaling/v2"
    assert v2["spec"]["metrics"] == [{"type": "Resource", "resource": {
        "name": "cpu", "target": {"type": "Utilization", "averageUtilization": 60}}}]
    assert v2["metadata"]["uid"] == v1["metadata"]["uid"]
    # one stored object, one resourceVersion: read v1, v2, v1 until the HPA controller's status writes leave
    # the object alone between the two v1 reads
    for _ in range(10):
        before = kjson(cluster, "-n", ns, "get", "horizontalpodautoscalers.v1.autoscaling", "web")
        v2 = kjson(cluster, "-n", ns, "get", "hpa.v2.autoscaling", "web")
        after = kjson(cluster, "-n", ns, "get", "horizontalpodautoscalers.v1.autoscaling", "web")
        if before["metadata"]["resourceVersion"] == after["metadata"]["resourceVersion"]:
            assert v2["metadata"]["resourceVersion"] == after["metadata"]["resourceVersion"]
            break
    else:
        raise AssertionError("the HPA changed between every pair of v1 reads")
    table = cluster.kubectl("-n", ns, "get", "horizontalpodautoscalers.v1.autoscaling").stdout
    assert "Deployment/web" in table and "cpu: <unknown>/60%" in table, table
    # an edit through v1 shows in v2 and the other way round
    cluster.kubectl("-n", ns, "patch", "horizontalpodautoscalers.v1.autoscaling", "web", "--type=merge",
                    "-p", '{"spec":{"targetCPUUtilizationPercentage":75}}')
    v2 = kjson(cluster, "-n", ns, "get", "hpa.v2.autoscaling", "web")
    assert v2["spec"]["metrics"][0]["resource"]["target"]["averageUtilization"] == 75


def test_python_client_v1_and_v2_see_one_object(cluster: Cluster, ns: str) -> None:
    v1api, v2api = client.AutoscalingV1Api(cluster.api), client.AutoscalingV2Api(cluster.api)
    ref = client.V1CrossVersionObjectReference(api_version="apps/v1", kind="Deployment", name="app")
    made = v1api.create_namespaced_horizontal_pod_autoscaler(ns, client.V1HorizontalPodAutoscaler(
        metadata=client.V1ObjectMeta(name="app"),
        spec=client.V1HorizontalPodAutoscalerSpec(scale_target_ref=ref, max_replicas=4,
                                                  target_cpu_utilization_percentage=50)))
    assert made.spec.target_cpu_utilization_percentage == 50 and made.spec.min_replicas == 1
    w = watch.Watch()
    stream = w.stream(v1api.list_namespaced_horizontal_pod_autoscaler, ns,
                      resource_version=made.metadata.resource_version, timeout_seconds=20)

    # v2 adds a memory metric and a behavior, which v1 cannot express: v1 carries them in annotations
    v2api.patch_namespaced_horizontal_pod_autoscaler("app", ns, {"spec": {
        "metrics": [{"type": "Resource", "resource": {"name": "memory", "target": {
            "type": "AverageValue", "averageValue": "200Mi"}}},
                    {"type": "Resource", "resource": {"name": "cpu", "target": {
                        "type": "Utilization", "averageUtilization": 50}}}],
        "behavior": {"scaleDown": {"stabilizationWindowSeconds": 60}}}})
    first = next(iter(stream))
    w.stop()
    assert first["type"] == "MODIFIED" and first["object"].api_version == "autoscaling/v1"
    got = v1api.read_namespaced_horizontal_pod_autoscaler("app", ns)
    assert got.spec.target_cpu_utilization_percentage == 50
    others = json.loads(got.metadata.annotations[OTHER_METRICS])
    assert others == [{"type": "Resource", "resource": {"name": "memory", "targetAverageValue": "200Mi"}}]
    assert "autoscaling.alpha.kubernetes.io/behavior" in got.metadata.annotations

    # a v1 read-modify-write keeps what only v2 has (retried on 409: the HPA controller writes status meanwhile)
    for _ in range(20):
        got = v1api.read_namespaced_horizontal_pod_autoscaler("app", ns)
        got.spec.target_cpu_utilization_percentage = 65
        try:
            v1api.replace_namespaced_horizontal_pod_autoscaler("app", ns, got)
            break
        except ApiException as e:
            if e.status != 409:
                raise
    now = v2api.read_namespaced_horizontal_pod_autoscaler("app", ns)
    assert [(m.resource.name, m.resource.target.type) for m in now.spec.metrics] == [
        ("memory", "AverageValue"), ("cpu", "Utilization")]
    assert now.spec.metrics[1].resource.target.average_utilization == 65
    assert now.spec.behavior.scale_down.stabilization_window_seconds == 60
    assert not (now.metadata.annotations or {}), "v2 never shows the round-trip annotations"

    # a status write through v1 (the HPA controller writes its own status at any time: only the answer to the
    # write itself is compared)
    st = v1api.patch_namespaced_horizontal_pod_autoscaler_status("app", ns, {"status": {
        "currentCPUUtilizationPercentage": 42, "currentReplicas": 2, "desiredReplicas": 3}}).status
    assert (st.current_cpu_utilization_percentage, st.current_replicas, st.desired_replicas) == (42, 2, 3)

    names = [h.metadata.name for h in v1api.list_namespaced_horizontal_pod_autoscaler(ns).items]
    assert names == ["app"]
    v1api.delete_namespaced_horizontal_pod_autoscaler("app", ns)
    with pytest.raises(ApiException) as e:
        v2api.read_namespaced_horizontal_pod_autoscaler("app", ns)
    assert e.value.status == 404


# ---- events.k8s.io/v1 <-> core/v1 ----------------------------------------------------------------------------

def micro_now() -> datetime:
    return datetime.now(UTC)


def events_v1(name: str, regarding: str, ns: str, note: str, uid: str | None = None) -> client.EventsV1Event:
    return client.EventsV1Event(
        metadata=client.V1ObjectMeta(name=name), event_time=micro_now(), reporting_controller="example.com/tester",
        reporting_instance="tester-1", action="Testing", reason="Checked", type="Normal", note=note,
        regarding=client.V1ObjectReference(kind="ConfigMap", name=regarding, namespace=ns, api_version="v1",
                                           uid=uid))


def test_one_event_store_in_both_shapes(cluster: Cluster, ns: str) -> None:
    core, ev = client.CoreV1Api(cluster.api), client.EventsV1Api(cluster.api)
    uid = core.create_namespaced_config_map(ns, client.V1ConfigMap(
        metadata=client.V1ObjectMeta(name="cfg"))).metadata.uid
    ev.create_namespaced_event(ns, events_v1("from-v1", "cfg", ns, "written through events.k8s.io", uid))
    # core/v1 reads it with the core names
    got = core.read_namespaced_event("from-v1", ns)
    assert got.message == "written through events.k8s.io"
    assert got.involved_object.name == "cfg" and got.reporting_component == "example.com/tester"
    assert got.reporting_instance == "tester-1" and got.action == "Testing"
    # a core event with eventTime reads back through events.k8s.io with the new names
    core.create_namespaced_event(ns, client.CoreV1Event(
        metadata=client.V1ObjectMeta(name="from-core"), involved_object=client.V1ObjectReference(
            kind="ConfigMap", name="cfg", namespace=ns, uid=uid), reason="Legacy", message="written through core",
        type="Warning", source=client.V1EventSource(component="old-style"), count=3,
        first_timestamp=micro_now(), last_timestamp=micro_now()))
    # (a core event without eventTime has `eventTime: null` in events.k8s.io, as upstream; the client's model
    # requires one, so that list is read raw)
    listed = json.loads(ev.list_namespaced_event(ns, _preload_content=False).data)
    assert {i["metadata"]["name"]: i.get("note") for i in listed["items"]} == {
        "from-v1": "written through events.k8s.io", "from-core": "written through core"}
    assert listed["apiVersion"] == "events.k8s.io/v1" and listed["kind"] == "EventList"
    raw = json.loads(ev.read_namespaced_event("from-core", ns, _preload_content=False).data)
    assert raw["apiVersion"] == "events.k8s.io/v1" and raw["note"] == "written through core"
    assert raw["regarding"]["name"] == "cfg" and raw["deprecatedSource"] == {"component": "old-style"}
    assert raw["deprecatedCount"] == 3 and "message" not in raw and "involvedObject" not in raw
    # field selectors in each version's own names
    by_regarding = ev.list_namespaced_event(ns, field_selector="regarding.name=cfg,reportingController="
                                            "example.com/tester")
    assert [e.metadata.name for e in by_regarding.items] == ["from-v1"]
    by_involved = core.list_namespaced_event(ns, field_selector="involvedObject.name=cfg")
    assert sorted(e.metadata.name for e in by_involved.items) == ["from-core", "from-v1"]
    with pytest.raises(ApiException) as e:
        ev.list_namespaced_event(ns, field_selector="involvedObject.name=cfg")
    assert e.value.status == 400 and "field label not supported: involvedObject.name" in e.value.body
    # kubectl: events, describe, and the events.k8s.io resource all show both
    events = cluster.kubectl("-n", ns, "events").stdout
    assert "written through events.k8s.io" in events and "written through core" in events
    described = cluster.kubectl("-n", ns, "describe", "configmap", "cfg").stdout
    assert "written through events.k8s.io" in described and "written through core" in described
    names = {i["metadata"]["name"] for i in kjson(cluster, "-n", ns, "get", "events.v1.events.k8s.io")["items"]}
    assert {"from-v1", "from-core"} <= names
    # one object: delete through one version, gone in the other
    ev.delete_namespaced_event("from-core", ns)
    with pytest.raises(ApiException) as e:
        core.read_namespaced_event("from-core", ns)
    assert e.value.status == 404


def test_events_k8s_io_writes_are_validated_as_upstream(cluster: Cluster, ns: str) -> None:
    ev = client.EventsV1Api(cluster.api)
    bad = {**client.ApiClient().sanitize_for_serialization(events_v1("bad", "cfg", ns, "x")),
           "apiVersion": "events.k8s.io/v1", "kind": "Event", "deprecatedCount": 2}
    bad.pop("eventTime")
    out = cluster.kubectl("-n", ns, "create", "-f", "-", input=json.dumps(bad), check=False)
    assert out.returncode != 0
    assert "eventTime: Required value" in out.stderr and "count: Invalid value" in out.stderr, out.stderr
    ev.create_namespaced_event(ns, events_v1("ok", "cfg", ns, "fine"))
    # a read-modify-write through the client (which re-spells eventTime) is no change of the immutable fields
    got = ev.read_namespaced_event("ok", ns)
    got.metadata.labels = {"seen": "yes"}
    assert ev.replace_namespaced_event("ok", ns, got).metadata.labels == {"seen": "yes"}
    with pytest.raises(ApiException) as e:
        ev.patch_namespaced_event("ok", ns, {"reason": "Changed"})
    assert e.value.status == 422 and "reason: Invalid value" in json.loads(e.value.body)["message"]
    # the same change through core/v1 is allowed (upstream validates core writes by the legacy rules only)
    assert client.CoreV1Api(cluster.api).patch_namespaced_event("ok", ns, {"reason": "Changed"}).reason == "Changed"


def test_scheduler_events_show_through_events_k8s_io(cluster: Cluster, ns: str) -> None:
    """The scheduler records through events.k8s.io as kube-scheduler does; core clients see the same objects
    (no node: FailedScheduling)."""
    cluster.kubectl("-n", ns, "run", "lonely", "--image=registry.k8s.io/pause:3.10", "--restart=Never")

    def scheduler_event() -> dict[str, Any] | None:
        items = kjson(cluster, "-n", ns, "get", "events.v1.events.k8s.io",
                      "--field-selector", "regarding.name=lonely,reason=FailedScheduling")["items"]
        return items[0] if items else None

    found = wait_for("a FailedScheduling event through events.k8s.io", scheduler_event)
    assert found["regarding"]["kind"] == "Pod" and found["note"] and found["eventTime"]
    assert found["reportingController"] == "default-scheduler" and found["action"] == "Scheduling"
    assert "deprecatedSource" not in found and "deprecatedCount" not in found
    core = kjson(cluster, "-n", ns, "get", "event", found["metadata"]["name"])
    assert core["reportingComponent"] == "default-scheduler" and core["message"] == found["note"]
    assert "FailedScheduling" in cluster.kubectl("-n", ns, "events", "--for", "pod/lonely").stdout


# ---- discovery as kubectl sees it, and the core resources it lists ------------------------------------------

def api_resources(cluster: Cluster) -> dict[tuple[str, str], tuple[str, bool, tuple[str, ...], tuple[str, ...],
                                                                   tuple[str, ...]]]:
    """`kubectl api-resources -o wide`, cut at the header's column starts (SHORTNAMES may be empty)."""
    lines = cluster.kubectl("api-resources", "-o", "wide").stdout.splitlines()
    header = lines[0]
    names = ["NAME", "SHORTNAMES", "APIVERSION", "NAMESPACED", "KIND", "VERBS", "CATEGORIES"]
    starts = [header.index(n) for n in names] + [10_000]
    out = {}
    for line in lines[1:]:
        cells = [line[starts[i]:starts[i + 1]].strip() for i in range(len(names))]
        name, short, gv, namespaced, kind, verbs, cats = cells

        def split(s: str) -> tuple[str, ...]:
            return tuple(x for x in s.split(",") if x)
        out[(gv, name)] = (kind, namespaced == "true", tuple(sorted(split(verbs))), split(short), split(cats))
    return out


def test_kubectl_api_resources_and_versions_match_upstream(cluster: Cluster) -> None:
    from tests.api.test_upstream_discovery import EXTRA, KNOWN, upstream
    from tests.fixtures.discovery.upstream_1_32_resources import PREFERRED, RESOURCES

    # custom resources other tests of this cluster defined (a CRD being deleted is served until its objects go)
    crd_groups = set(cluster.kubectl("get", "crd", "-o", "jsonpath={.items[*].spec.group}").stdout.split())
    served = {k: v for k, v in api_resources(cluster).items() if k[0].split("/")[0] not in crd_groups}
    # kubectl lists each group's preferred version only
    preferred = {(gv, res): e for (gv, res), e in upstream().items()
                 if "/" not in gv or gv.split("/")[1] == PREFERRED.get(gv.split("/")[0], gv.split("/")[1])}
    wrong = [f"{k}: upstream {preferred.get(k)}, kubectl {served.get(k)}" for k in sorted(set(preferred) | set(served))
             if served.get(k) != preferred.get(k) and not (k in EXTRA and k not in preferred)
             and not (k in KNOWN and served.get(k) == KNOWN[k][1])]
    assert wrong == []
    versions = {gv for gv in cluster.kubectl("api-versions").stdout.split() if gv.split("/")[0] not in crd_groups}
    assert versions == {gv for gv, *_ in RESOURCES} | {"metrics.k8s.io/v1beta1"}
    # what lite keeps read-only is refused with its reason
    fs = {"apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "FlowSchema", "metadata": {"name": "mine"},
          "spec": {"priorityLevelConfiguration": {"name": "global-default"}}}
    out = cluster.kubectl("create", "-f", "-", input=json.dumps(fs), check=False)
    assert out.returncode != 0 and "no API Priority and Fairness" in out.stderr, out.stderr


def test_componentstatuses_report_the_control_plane(cluster: Cluster) -> None:
    def healthy() -> str | None:
        proc = cluster.kubectl("get", "componentstatuses")
        assert "Warning: v1 ComponentStatus is deprecated in v1.19+" in proc.stderr  # as upstream warns
        return proc.stdout if proc.stdout.count("Healthy") == 3 and "Unhealthy" not in proc.stdout else None

    out = wait_for("three healthy components", healthy)
    assert all(n in out for n in ("scheduler", "controller-manager", "etcd-0")), out
    cs = client.CoreV1Api(cluster.api).read_component_status("scheduler")
    assert cs.conditions[0].type == "Healthy" and cs.conditions[0].status == "True"
    out = cluster.kubectl("delete", "cs", "scheduler", check=False)
    assert out.returncode != 0 and "does not allow this method" in out.stderr, out.stderr
    # the controllers and the scheduler each hold their own Lease, under upstream's names, as this one server
    # (client-go's identity: hostname_uuid)
    specs = [kjson(cluster, "-n", "kube-system", "get", "lease", name)["spec"]
             for name in ("kube-controller-manager", "kube-scheduler")]
    assert specs[0]["holderIdentity"] == specs[1]["holderIdentity"], specs
    assert re.fullmatch(r".+_[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[0-9a-f]{4}-[0-9a-f]{12}", specs[0]["holderIdentity"])
    assert all(s["leaseDurationSeconds"] == 15 for s in specs), specs


def test_bindings_collection_binds_the_named_pod(cluster: Cluster, ns: str) -> None:
    core = client.CoreV1Api(cluster.api)
    cluster.kubectl("-n", ns, "run", "tobind", "--image=registry.k8s.io/pause:3.10", "--restart=Never")
    body = client.V1Binding(metadata=client.V1ObjectMeta(name="tobind"),
                            target=client.V1ObjectReference(kind="Node", name="elsewhere"))
    core.create_namespaced_binding(ns, body, _preload_content=False)
    assert core.read_namespaced_pod("tobind", ns).spec.node_name == "elsewhere"
    with pytest.raises(ApiException) as e:  # bound once, as upstream
        core.create_namespaced_binding(ns, body, _preload_content=False)
    assert e.value.status == 409
