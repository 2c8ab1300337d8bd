"""Tables: column sets, cell formats (ages, pod status reasons, ports, selectors) and the Table envelope."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from lite.kinds import BUILTIN_KINDS, Kind, KindRegistry
from lite.server.api.tables import columns, custom, human_duration, to_table

NOW = dt.datetime(2026, 1, 10, 12, 0, 0, tzinfo=dt.UTC)
KINDS = {k.gk: k for k in BUILTIN_KINDS}


def ago(**kw: float) -> str:
    return (NOW - dt.timedelta(**kw)).strftime("%Y-%m-%dT%H:%M:%SZ")


def cells(gk: str, obj: dict[str, Any]) -> list[Any]:
    table = to_table(KINDS[gk], [obj], {}, now=NOW)
    row: list[Any] = table["rows"][0]["cells"]
    return row


def names(gk: str, wide: bool | None = None) -> list[str]:
    return [c["name"] for c in columns(KINDS[gk]) if wide is None or (c["priority"] == 1) == wide]


# --- ages ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("seconds", "text"), [
    (0, "0s"), (1, "1s"), (70, "70s"), (119, "119s"), (120, "2m"), (150, "2m30s"), (599, "9m59s"),
    (600, "10m"), (3 * 3600 - 1, "179m"), (3 * 3600, "3h"), (3 * 3600 + 1800, "3h30m"), (8 * 3600 - 60, "7h59m"),
    (8 * 3600, "8h"), (48 * 3600 - 1, "47h"), (48 * 3600, "2d"), (51 * 3600, "2d3h"), (8 * 86400 - 3600, "7d23h"),
    (8 * 86400, "8d"), (729 * 86400, "729d"), (730 * 86400, "2y"), (750 * 86400, "2y20d"),
    (8 * 365 * 86400, "8y"), (-1.5, "0s"), (-2, "<invalid>"), (1.9, "1s"),
])
def test_human_duration(seconds: float, text: str) -> None:
    assert human_duration(dt.timedelta(seconds=seconds)) == text


# --- envelope ------------------------------------------------------------------------------------------

def test_table_envelope_and_partial_object_metadata() -> None:
    meta = {"name": "p", "namespace": "ns", "labels": {"a": "b"}, "uid": "u1", "creationTimestamp": ago(minutes=5)}
    table = to_table(KINDS["Pod"], [{"metadata": meta, "spec": {"containers": [{"name": "c"}]}}],
                     {"resourceVersion": "42", "continue": "tok"}, now=NOW)
    assert table["kind"] == "Table" and table["apiVersion"] == "meta.k8s.io/v1"
    assert table["metadata"] == {"resourceVersion": "42", "continue": "tok"}
    row = table["rows"][0]
    assert row["object"] == {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": meta}
    assert row["cells"][0] == "p" and row["cells"][4] == "5m"
    assert [c["name"] for c in table["columnDefinitions"]][:5] == ["Name", "Ready", "Status", "Restarts", "Age"]
    assert table["columnDefinitions"][0]["format"] == "name"


def test_include_object() -> None:
    obj = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"a": "b"}}
    assert to_table(KINDS["ConfigMap"], [obj], {}, now=NOW, include_object="Object")["rows"][0]["object"] == obj
    assert "object" not in to_table(KINDS["ConfigMap"], [obj], {}, now=NOW, include_object="None")["rows"][0]


@pytest.mark.parametrize("kind", BUILTIN_KINDS, ids=lambda k: k.gk)
def test_every_kind_null_safe_and_cells_match_columns(kind: Kind) -> None:
    weird: list[dict[str, Any]] = [{}, {"metadata": None, "spec": "x", "status": []},
                                   {"metadata": {"name": "n", "creationTimestamp": "garbage"}, "spec": {"x": 1}}]
    table = to_table(kind, weird, {}, now=NOW)
    ncols = len(table["columnDefinitions"])
    assert len(table["rows"]) == 3
    for row in table["rows"]:
        assert len(row["cells"]) == ncols
    assert all(c["priority"] in (0, 1) for c in table["columnDefinitions"])
    name_at = [c["name"] for c in table["columnDefinitions"]].index("Name")
    assert table["rows"][2]["cells"][name_at] == "n"


# --- pods ----------------------------------------------------------------------------------------------

def pod(status: dict[str, Any], *, init: int = 0, containers: int = 1, **meta: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": f"c{n}"} for n in range(containers)], "nodeName": "node1"}
    if init:
        spec["initContainers"] = [{"name": f"i{n}"} for n in range(init)]
    return {"metadata": {"name": "p", "creationTimestamp": ago(hours=2), **meta}, "spec": spec, "status": status}


def running(ready: bool = True, restarts: int = 0, last: str = "") -> dict[str, Any]:
    cs: dict[str, Any] = {"name": "c0", "ready": ready, "restartCount": restarts,
                          "state": {"running": {"startedAt": ago(hours=1)}}}
    if last:
        cs["lastState"] = {"terminated": {"exitCode": 1, "finishedAt": last}}
    return cs


def test_pod_running_ready_and_wide() -> None:
    st = {"phase": "Running", "podIPs": [{"ip": "10.0.0.5"}], "podIP": "10.0.0.5",
          "containerStatuses": [running()]}
    assert cells("Pod", pod(st)) == ["p", "1/1", "Running", "0", "120m", "10.0.0.5", "node1", "<none>", "<none>"]
    assert names("Pod", wide=True) == ["IP", "Node", "Nominated Node", "Readiness Gates"]


def test_pod_pending_without_statuses() -> None:
    p = pod({"phase": "Pending"}, containers=2)
    p["spec"].pop("nodeName")
    assert cells("Pod", p)[1:4] == ["0/2", "Pending", "0"]
    assert cells("Pod", p)[5:7] == ["<none>", "<none>"]


@pytest.mark.parametrize(("state", "reason"), [
    ({"waiting": {"reason": "ContainerCreating"}}, "ContainerCreating"),
    ({"waiting": {"reason": "ImagePullBackOff", "message": "x"}}, "ImagePullBackOff"),
    ({"terminated": {"exitCode": 0, "reason": "Completed"}}, "Completed"),
    ({"terminated": {"exitCode": 137, "reason": "OOMKilled"}}, "OOMKilled"),
    ({"terminated": {"exitCode": 2}}, "ExitCode:2"),
    ({"terminated": {"exitCode": 0, "signal": 9}}, "Signal:9"),
])
def test_pod_container_reasons(state: dict[str, Any], reason: str) -> None:
    st = {"phase": "Running", "containerStatuses": [{"name": "c0", "ready": False, "restartCount": 0, "state": state}]}
    assert cells("Pod", pod(st))[1:3] == ["0/1", reason]


def test_pod_crashloop_restarts_with_last_time() -> None:
    cs = {"name": "c0", "ready": False, "restartCount": 5, "state": {"waiting": {"reason": "CrashLoopBackOff"}},
          "lastState": {"terminated": {"exitCode": 1, "finishedAt": ago(minutes=5, seconds=10)}}}
    assert cells("Pod", pod({"phase": "Running", "containerStatuses": [cs]}))[1:4] == \
        ["0/1", "CrashLoopBackOff", "5 (5m10s ago)"]


def test_pod_succeeded_has_completed_row_condition() -> None:
    cs = {"name": "c0", "ready": False, "restartCount": 0,
          "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}
    table = to_table(KINDS["Pod"], [pod({"phase": "Succeeded", "containerStatuses": [cs]})], {}, now=NOW)
    assert table["rows"][0]["cells"][2] == "Completed"
    assert table["rows"][0]["conditions"][0]["reason"] == "Succeeded"
    assert "conditions" not in to_table(KINDS["Pod"], [pod({"phase": "Running"})], {}, now=NOW)["rows"][0]


def test_pod_terminating_and_node_lost() -> None:
    st = {"phase": "Running", "containerStatuses": [running()]}
    assert cells("Pod", pod(st, deletionTimestamp=ago(seconds=3)))[2] == "Terminating"
    assert cells("Pod", pod({**st, "reason": "NodeLost"}, deletionTimestamp=ago(seconds=3)))[2] == "Unknown"
    done = {"phase": "Succeeded", "containerStatuses": [
        {"name": "c0", "ready": False, "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}]}
    assert cells("Pod", pod(done, deletionTimestamp=ago(seconds=3)))[2] == "Completed"


def test_pod_init_containers() -> None:
    waiting = {"name": "i0", "ready": False, "restartCount": 0, "state": {"waiting": {"reason": "PodInitializing"}}}
    assert cells("Pod", pod({"phase": "Pending", "initContainerStatuses": [waiting]}, init=2))[2] == "Init:0/2"
    done = {"name": "i0", "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}
    crash = {"name": "i1", "restartCount": 3, "state": {"waiting": {"reason": "CrashLoopBackOff"}}}
    c = cells("Pod", pod({"phase": "Pending", "initContainerStatuses": [done, crash]}, init=2))
    assert c[2:4] == ["Init:CrashLoopBackOff", "3"]
    failed = {"name": "i0", "state": {"terminated": {"exitCode": 3}}}
    assert cells("Pod", pod({"phase": "Pending", "initContainerStatuses": [failed]}, init=1))[2] == "Init:ExitCode:3"


def test_pod_sidecar_counts_in_total_and_ready() -> None:
    p = pod({"phase": "Running", "conditions": [{"type": "Initialized", "status": "True"}],
             "initContainerStatuses": [{"name": "side", "ready": True, "started": True, "restartCount": 1,
                                        "state": {"running": {}}}],
             "containerStatuses": [running()]})
    p["spec"]["initContainers"] = [{"name": "side", "restartPolicy": "Always"}]
    assert cells("Pod", p)[1:4] == ["2/2", "Running", "1"]


def test_pod_scheduling_gated_and_readiness_gates() -> None:
    p = pod({"phase": "Pending", "conditions": [
        {"type": "PodScheduled", "status": "False", "reason": "SchedulingGated"},
        {"type": "example.com/lb", "status": "True"}]})
    p["spec"]["readinessGates"] = [{"conditionType": "example.com/lb"}, {"conditionType": "example.com/other"}]
    c = cells("Pod", p)
    assert c[2] == "SchedulingGated" and c[8] == "1/2"


# --- nodes ---------------------------------------------------------------------------------------------

def test_node_status_roles_and_wide() -> None:
    node = {"metadata": {"name": "n1", "creationTimestamp": ago(days=2, hours=3),
                         "labels": {"node-role.kubernetes.io/worker": "", "node-role.kubernetes.io/control-plane": "",
                                    "kubernetes.io/role": "edge"}},
            "spec": {"unschedulable": True},
            "status": {"conditions": [{"type": "MemoryPressure", "status": "False"},
                                      {"type": "Ready", "status": "True"}],
                       "addresses": [{"type": "Hostname", "address": "n1"},
                                     {"type": "InternalIP", "address": "10.1.0.2"}],
                       "nodeInfo": {"kubeletVersion": "v1.32.4-lite", "osImage": "Debian", "kernelVersion": "6.1",
                                    "containerRuntimeVersion": "lite://1"}}}
    assert cells("Node", node) == ["n1", "Ready,SchedulingDisabled", "control-plane,edge,worker", "2d3h",
                                   "v1.32.4-lite", "10.1.0.2", "<none>", "Debian", "6.1", "lite://1"]
    assert names("Node", wide=True) == ["Internal-IP", "External-IP", "OS-Image", "Kernel-Version", "Container-Runtime"]


def test_node_not_ready_and_unknown() -> None:
    nr = {"metadata": {"name": "n"}, "status": {"conditions": [{"type": "Ready", "status": "Unknown"}]}}
    assert cells("Node", nr)[1:3] == ["NotReady", "<none>"]
    assert cells("Node", {"metadata": {"name": "n"}})[1] == "Unknown"
    assert cells("Node", {"metadata": {"name": "n"}})[7:] == ["<unknown>", "<unknown>", "<unknown>"]


# --- workloads -----------------------------------------------------------------------------------------

def test_deployment() -> None:
    d = {"metadata": {"name": "web", "creationTimestamp": ago(days=10)},
         "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"},
                                              "matchExpressions": [{"key": "tier", "operator": "In",
                                                                    "values": ["b", "a"]}]},
                  "template": {"spec": {"containers": [{"name": "nginx", "image": "nginx:1.25"},
                                                       {"name": "side", "image": "busybox"}]}}},
         "status": {"readyReplicas": 2, "updatedReplicas": 3, "availableReplicas": 2}}
    assert cells("Deployment.apps", d) == ["web", "2/3", 3, 2, "10d", "nginx,side", "nginx:1.25,busybox",
                                           "app=web,tier in (a,b)"]
    assert names("Deployment.apps") == ["Name", "Ready", "Up-to-date", "Available", "Age", "Containers", "Images",
                                        "Selector"]
    assert names("Deployment.apps", wide=True) == ["Containers", "Images", "Selector"]
    assert cells("Deployment.apps", {"metadata": {"name": "x"}})[1:4] == ["0/0", 0, 0]


def test_replicaset_statefulset_daemonset_rc() -> None:
    rs = {"metadata": {"name": "rs"}, "spec": {"replicas": 2, "selector": {"matchLabels": {"a": "1"}}},
          "status": {"replicas": 2, "readyReplicas": 1}}
    assert cells("ReplicaSet.apps", rs)[:4] == ["rs", 2, 2, 1]
    assert cells("ReplicaSet.apps", rs)[7] == "a=1"
    assert cells("StatefulSet.apps", {"metadata": {"name": "s"}, "spec": {"replicas": 3},
                                      "status": {"readyReplicas": 1}})[:2] == ["s", "1/3"]
    ds = {"metadata": {"name": "d"}, "spec": {"template": {"spec": {"nodeSelector": {"os": "linux"}}}},
          "status": {"desiredNumberScheduled": 3, "currentNumberScheduled": 3, "numberReady": 2,
                     "updatedNumberScheduled": 3, "numberAvailable": 2}}
    assert cells("DaemonSet.apps", ds)[:7] == ["d", 3, 3, 2, 3, 2, "os=linux"]
    assert cells("DaemonSet.apps", ds)[10] == "<none>"
    rc = {"metadata": {"name": "rc"}, "spec": {"replicas": 1, "selector": {"b": "2", "a": "1"}}}
    assert cells("ReplicationController", rc)[:4] == ["rc", 1, 0, 0]
    assert cells("ReplicationController", rc)[7] == "a=1,b=2"


def test_jobs() -> None:
    done = {"metadata": {"name": "j", "creationTimestamp": ago(minutes=30)},
            "spec": {"completions": 1, "selector": {"matchLabels": {"batch.kubernetes.io/controller-uid": "u"}}},
            "status": {"succeeded": 1, "startTime": ago(minutes=30), "completionTime": ago(minutes=29, seconds=15),
                       "conditions": [{"type": "Complete", "status": "True"}]}}
    assert cells("Job.batch", done)[:5] == ["j", "Complete", "1/1", "45s", "30m"]
    assert names("Job.batch", wide=False) == ["Name", "Status", "Completions", "Duration", "Age"]
    par = {"metadata": {"name": "p"}, "spec": {"parallelism": 3}, "status": {"startTime": ago(minutes=2)}}
    assert cells("Job.batch", par)[1:4] == ["Running", "0/1 of 3", "2m"]
    failed = {"metadata": {"name": "f"}, "status": {"conditions": [{"type": "Failed", "status": "True"}]}}
    assert cells("Job.batch", failed)[1:4] == ["Failed", "0/1", ""]
    susp = {"metadata": {"name": "s"}, "status": {"conditions": [{"type": "Suspended", "status": "True"}]}}
    assert cells("Job.batch", susp)[1] == "Suspended"


def test_cronjob() -> None:
    cj = {"metadata": {"name": "cj", "creationTimestamp": ago(hours=5)},
          "spec": {"schedule": "*/5 * * * *", "suspend": False,
                   "jobTemplate": {"spec": {"template": {"spec": {
                       "containers": [{"name": "c", "image": "busybox"}]}}}}},
          "status": {"active": [{"name": "j1"}], "lastScheduleTime": ago(minutes=3)}}
    assert cells("CronJob.batch", cj) == ["cj", "*/5 * * * *", "<none>", "False", 1, "3m", "5h", "c", "busybox",
                                          "<none>"]
    assert cells("CronJob.batch", {"metadata": {"name": "x"}, "spec": {"timeZone": "Etc/UTC"}})[2:6] == \
        ["Etc/UTC", "<unset>", 0, "<none>"]


def test_pdb_and_hpa() -> None:
    pdb = {"metadata": {"name": "b"}, "spec": {"minAvailable": "50%"}, "status": {"disruptionsAllowed": 1}}
    assert cells("PodDisruptionBudget.policy", pdb)[:4] == ["b", "50%", "N/A", 1]
    hpa = {"metadata": {"name": "h"},
           "spec": {"scaleTargetRef": {"kind": "Deployment", "name": "web"}, "minReplicas": 1, "maxReplicas": 5,
                    "metrics": [{"type": "Resource", "resource": {"name": "cpu", "target": {
                        "type": "Utilization", "averageUtilization": 80}}}]},
           "status": {"currentReplicas": 2, "currentMetrics": [{"type": "Resource", "resource": {
               "name": "cpu", "current": {"averageUtilization": 35}}}]}}
    assert cells("HorizontalPodAutoscaler.autoscaling", hpa)[:6] == ["h", "Deployment/web", "cpu: 35%/80%", "1", 5, 2]
    hpa["status"] = {}
    assert cells("HorizontalPodAutoscaler.autoscaling", hpa)[2] == "cpu: <unknown>/80%"


# --- services and the rest ------------------------------------------------------------------------------

def test_services() -> None:
    svc = {"metadata": {"name": "s", "creationTimestamp": ago(seconds=45)},
           "spec": {"type": "ClusterIP", "clusterIP": "10.96.0.10", "clusterIPs": ["10.96.0.10"],
                    "ports": [{"port": 80, "protocol": "TCP"}, {"port": 53, "protocol": "UDP"}],
                    "selector": {"app": "web"}}}
    assert cells("Service", svc) == ["s", "ClusterIP", "10.96.0.10", "<none>", "80/TCP,53/UDP", "45s", "app=web"]
    np = {"metadata": {"name": "n"}, "spec": {"type": "NodePort", "clusterIP": "10.96.0.11", "externalIPs": ["1.2.3.4"],
                                               "ports": [{"port": 80, "nodePort": 30080, "protocol": "TCP"}]}}
    assert cells("Service", np)[1:5] == ["NodePort", "10.96.0.11", "1.2.3.4", "80:30080/TCP"]
    lb = {"metadata": {"name": "l"}, "spec": {"type": "LoadBalancer", "clusterIPs": ["10.96.0.12"]}}
    assert cells("Service", lb)[3:5] == ["<pending>", "<none>"]
    lb["status"] = {"loadBalancer": {"ingress": [{"ip": "5.6.7.8"}, {"hostname": "lb.example"}]}}
    assert cells("Service", lb)[3] == "5.6.7.8,lb.example"
    en = {"metadata": {"name": "e"}, "spec": {"type": "ExternalName", "externalName": "example.com"}}
    assert cells("Service", en)[1:4] == ["ExternalName", "<none>", "example.com"]
    assert cells("Service", en)[6] == "<none>"


def test_endpoints() -> None:
    ep = {"metadata": {"name": "e"}, "subsets": [
        {"addresses": [{"ip": "10.0.0.1"}, {"ip": "10.0.0.2"}, {"ip": "fd00::3"}],
         "ports": [{"port": 8080}, {"port": 9090}]}]}
    assert cells("Endpoints", ep)[1] == "10.0.0.1:8080,10.0.0.2:8080,[fd00::3]:8080 + 3 more..."
    assert cells("Endpoints", {"metadata": {"name": "e"}})[1] == "<none>"
    headless = {"metadata": {"name": "h"}, "subsets": [{"addresses": [{"ip": "10.0.0.9"}]}]}
    assert cells("Endpoints", headless)[1] == "10.0.0.9"


def test_events_core_and_v1() -> None:
    ev = {"metadata": {"name": "p.1"}, "type": "Warning", "reason": "BackOff", "message": "Back-off restarting \n",
          "involvedObject": {"kind": "Pod", "name": "p", "fieldPath": "spec.containers{c}"},
          "source": {"component": "kubelet", "host": "node1"},
          "firstTimestamp": ago(minutes=10), "lastTimestamp": ago(seconds=30), "count": 4}
    assert cells("Event", ev) == ["30s", "Warning", "BackOff", "pod/p", "spec.containers{c}", "kubelet, node1",
                                  "Back-off restarting", "10m", 4, "p.1"]
    assert names("Event", wide=False) == ["Last Seen", "Type", "Reason", "Object", "Message"]
    v1 = {"metadata": {"name": "x"}, "type": "Normal", "reason": "Scheduled", "note": "assigned",
          "regarding": {"kind": "Pod", "name": "q"},
          "eventTime": (NOW - dt.timedelta(seconds=90)).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
          "reportingController": "default-scheduler"}
    assert cells("Event.events.k8s.io", v1) == ["90s", "Normal", "Scheduled", "pod/q", "", "default-scheduler",
                                                "assigned", "90s", 1, "x"]


def test_simple_core_kinds() -> None:
    m = {"name": "o", "creationTimestamp": ago(days=3)}
    assert cells("ConfigMap", {"metadata": m, "data": {"a": "1", "b": "2"}, "binaryData": {"c": ""}}) == ["o", 3, "3d"]
    assert cells("Secret", {"metadata": m, "type": "Opaque", "data": {"a": ""}}) == ["o", "Opaque", 1, "3d"]
    assert cells("ServiceAccount", {"metadata": m}) == ["o", 0, "3d"]
    assert cells("Namespace", {"metadata": m, "status": {"phase": "Active"}}) == ["o", "Active", "3d"]
    assert cells("Lease.coordination.k8s.io", {"metadata": m, "spec": {"holderIdentity": "n1"}}) == ["o", "n1", "3d"]
    pc = {"metadata": m, "value": 1000, "globalDefault": False, "preemptionPolicy": "Never"}
    assert cells("PriorityClass.scheduling.k8s.io", pc) == ["o", 1000, False, "3d", "Never"]
    q = {"metadata": m, "status": {"hard": {"pods": "10", "requests.cpu": "1", "limits.memory": "1Gi"},
                                   "used": {"pods": "2"}}}
    assert cells("ResourceQuota", q) == ["o", "3d", "pods: 2/10, requests.cpu: 0/1", "limits.memory: 0/1Gi"]


def test_volumes() -> None:
    pv = {"metadata": {"name": "pv1"}, "spec": {"capacity": {"storage": "5Gi"}, "accessModes": [
        "ReadWriteMany", "ReadWriteOnce"], "persistentVolumeReclaimPolicy": "Retain", "storageClassName": "local",
        "claimRef": {"namespace": "ns", "name": "c"}}, "status": {"phase": "Bound"}}
    assert cells("PersistentVolume", pv)[:9] == ["pv1", "5Gi", "RWO,RWX", "Retain", "Bound", "ns/c", "local",
                                                 "<unset>", ""]
    pvc = {"metadata": {"name": "c"}, "spec": {"volumeName": "pv1", "storageClassName": "local",
                                                "volumeMode": "Filesystem"},
           "status": {"phase": "Bound", "capacity": {"storage": "5Gi"}, "accessModes": ["ReadWriteOnce"]}}
    assert cells("PersistentVolumeClaim", pvc) == ["c", "Bound", "pv1", "5Gi", "RWO", "local", "<unset>",
                                                   "<unknown>", "Filesystem"]
    pending = {"metadata": {"name": "c", "deletionTimestamp": ago(seconds=1)}, "spec": {}}
    assert cells("PersistentVolumeClaim", pending)[1:5] == ["Terminating", "", "", ""]


def test_fallbacks_crd_and_custom_resources() -> None:
    crd = {"metadata": {"name": "widgets.example.com", "creationTimestamp": "2026-01-01T00:00:00Z"}}
    assert names("CustomResourceDefinition.apiextensions.k8s.io") == ["Name", "Created At"]
    assert cells("CustomResourceDefinition.apiextensions.k8s.io", crd) == ["widgets.example.com",
                                                                           "2026-01-01T00:00:00Z"]
    assert names("ControllerRevision.apps") == ["Name", "Controller", "Revision", "Age"]
    plain = Kind("example.com", "v1", "Widget", "widgets", True, crd=True)
    table = to_table(plain, [{"metadata": {"name": "w", "creationTimestamp": ago(hours=1)}}], {}, now=NOW)
    assert [c["name"] for c in table["columnDefinitions"]] == ["Name", "Age"]
    assert table["rows"][0]["cells"] == ["w", "60m"]
    columns_ = ({"name": "Size", "type": "integer", "jsonPath": ".spec.size"},
                {"name": "Ports", "type": "string", "jsonPath": ".spec.ports[0].name", "priority": 1,
                 "description": "the first port"},
                {"name": "Ready", "type": "string", "jsonPath": '.status.conditions[?(@.type=="Ready")].status'},
                {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"})
    # upstream keeps the columns on the CRD version, beside `schema`: one in the schema is not a column
    in_schema = Kind("example.com", "v1", "Gadget", "gadgets", True, crd=True,
                     schema={"additionalPrinterColumns": list(columns_)})
    assert [c["name"] for c in to_table(in_schema, [], {}, now=NOW)["columnDefinitions"]] == ["Name", "Age"]
    printed = Kind("example.com", "v1", "Gadget", "gadgets", True, crd=True, printer_columns=columns_)
    obj = {"metadata": {"name": "g", "creationTimestamp": ago(minutes=7)},
           "spec": {"size": 3, "ports": [{"name": "h"}]},
           "status": {"conditions": [{"type": "Issuing", "status": "False"}, {"type": "Ready", "status": "True"}]}}
    table = to_table(printed, [obj, {"metadata": {"name": "bare"}}], {}, now=NOW)
    assert [(c["name"], c["type"], c["priority"]) for c in table["columnDefinitions"]] == [
        ("Name", "string", 0), ("Size", "integer", 0), ("Ports", "string", 1), ("Ready", "string", 0),
        ("Age", "date", 0)]
    descriptions = [c["description"] for c in table["columnDefinitions"]]
    assert descriptions[2:4] == ["the first port", "Custom resource definition column (in JSONPath format): "
                                                   '.status.conditions[?(@.type=="Ready")].status']
    assert table["rows"][0]["cells"] == ["g", 3, "h", "True", "7m"]
    assert table["rows"][1]["cells"] == ["bare", None, None, None, None]


@pytest.mark.parametrize(("ctype", "value", "shown"), [
    ("integer", 3, 3), ("integer", 2.9, 2), ("integer", "3", None), ("integer", True, None),
    ("number", 3, 3.0), ("number", 1.5, 1.5), ("number", "1.5", None),
    ("boolean", True, True), ("boolean", "true", None),
    ("string", "s", "s"), ("string", 3, "3"), ("string", 1.5, "1.5"), ("string", True, "true"),
    ("string", ["a", "b"], '["a","b"]'), ("string", {"k": 1}, '{"k":1}'),
    ("date", "2025-12-31T23:00:00Z", "60m"), ("date", "yesterday", "<invalid>"), ("date", 5, None),
    ("date", "", "<unknown>"),
    ("string", None, None),
])
def test_custom_column_types(ctype: str, value: Any, shown: Any) -> None:
    """Upstream's cellForJSONValue, and PrintResults for string columns."""
    now = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    assert custom.cell(value, ctype, now) == shown


def test_registry_kinds_all_have_printers_or_fallback() -> None:
    reg = KindRegistry()
    for kind in BUILTIN_KINDS:
        assert columns(kind)[0]["name"] in ("Name", "Last Seen")
    assert reg is not None


# --- real kubectl renders our Tables ----------------------------------------------------------------------

KUBECTL = shutil.which("kubectl")


async def _serve_pods(tmp_path: Path, pods: list[dict[str, Any]], now: dt.datetime) -> tuple[web.AppRunner, Path]:
    """A loopback server with legacy discovery for pods and Table lists built by `to_table` at a fixed `now`."""
    async def version(_: web.Request) -> web.Response:
        return web.json_response({"major": "1", "minor": "32", "gitVersion": "v1.32.4"})

    async def api(_: web.Request) -> web.Response:
        return web.json_response({"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": [
            {"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1"}]})

    async def apis(_: web.Request) -> web.Response:
        return web.json_response({"kind": "APIGroupList", "apiVersion": "v1", "groups": []})

    async def v1(_: web.Request) -> web.Response:
        return web.json_response({"kind": "APIResourceList", "groupVersion": "v1", "resources": [
            {"name": "pods", "singularName": "pod", "namespaced": True, "kind": "Pod", "verbs": ["get", "list"]}]})

    async def pod_list(request: web.Request) -> web.Response:
        ns = request.match_info.get("ns")
        items = [p for p in pods if ns is None or p["metadata"]["namespace"] == ns]
        assert "as=Table" in request.headers.get("Accept", "")
        return web.json_response(to_table(KINDS["Pod"], items, {"resourceVersion": "7"}, now=now))

    app = web.Application()
    app.router.add_get("/version", version)
    app.router.add_get("/api", api)
    app.router.add_get("/apis", apis)
    app.router.add_get("/api/v1", v1)
    app.router.add_get("/api/v1/pods", pod_list)
    app.router.add_get("/api/v1/namespaces/{ns}/pods", pod_list)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": f"http://127.0.0.1:{port}"}}],
        "users": [{"name": "u", "user": {"token": "x"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u", "namespace": "default"}}]}))
    return runner, kubeconfig


async def _kubectl(kubeconfig: Path, tmp_path: Path, *args: str) -> list[list[str]]:
    assert KUBECTL is not None
    proc = await asyncio.create_subprocess_exec(
        KUBECTL, "--kubeconfig", str(kubeconfig), "--cache-dir", str(tmp_path / "cache"), *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await proc.communicate()
    assert proc.returncode == 0, err.decode()
    return [re.split(r"\s{2,}", line.strip()) for line in out.decode().splitlines()]


@pytest.mark.skipif(KUBECTL is None, reason="kubectl not installed")
async def test_real_kubectl_prints_pod_tables(tmp_path: Path) -> None:
    now = dt.datetime.now(dt.UTC)
    stamp = (now - dt.timedelta(minutes=5, seconds=30)).strftime("%Y-%m-%dT%H:%M:%SZ")
    crash = {"name": "c0", "ready": False, "restartCount": 2, "state": {"waiting": {"reason": "CrashLoopBackOff"}},
             "lastState": {"terminated": {"exitCode": 1, "finishedAt": stamp}}}
    pods = [
        {"metadata": {"name": "web", "namespace": "default", "creationTimestamp": stamp, "labels": {"app": "web"}},
         "spec": {"containers": [{"name": "c0"}], "nodeName": "node1"},
         "status": {"phase": "Running", "podIPs": [{"ip": "10.0.0.5"}], "containerStatuses": [running()]}},
        {"metadata": {"name": "bad", "namespace": "other", "creationTimestamp": stamp},
         "spec": {"containers": [{"name": "c0"}]}, "status": {"phase": "Running", "containerStatuses": [crash]}},
    ]
    runner, kubeconfig = await _serve_pods(tmp_path, pods, now)
    try:
        rows = await _kubectl(kubeconfig, tmp_path, "get", "pods")
        assert rows == [["NAME", "READY", "STATUS", "RESTARTS", "AGE"], ["web", "1/1", "Running", "0", "5m30s"]]
        rows = await _kubectl(kubeconfig, tmp_path, "get", "pods", "-o", "wide")
        assert rows[0] == ["NAME", "READY", "STATUS", "RESTARTS", "AGE", "IP", "NODE", "NOMINATED NODE",
                           "READINESS GATES"]
        assert rows[1] == ["web", "1/1", "Running", "0", "5m30s", "10.0.0.5", "node1", "<none>", "<none>"]
        rows = await _kubectl(kubeconfig, tmp_path, "get", "pods", "-A", "--show-labels")
        assert rows[0] == ["NAMESPACE", "NAME", "READY", "STATUS", "RESTARTS", "AGE", "LABELS"]
        assert rows[1] == ["default", "web", "1/1", "Running", "0", "5m30s", "app=web"]
        assert rows[2] == ["other", "bad", "0/1", "CrashLoopBackOff", "2 (5m30s ago)", "5m30s", "<none>"]
    finally:
        await runner.cleanup()
