"""Defaulting as upstream's `SetDefaults_*` functions (and the declarative `+default` markers) do it, one row per
rule, for core, apps, batch, policy and autoscaling: each object goes through the real create path (dry run)
of an in-process Resources over a real SQLite store, and the named fields must come out as upstream's would.

Rows cite the upstream function they come from (pkg/apis/<group>/<version>/defaults.go, release-1.32)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from lite.kinds import KindRegistry
from lite.server.admission.quota.wiring import add_quota_admission
from lite.server.api.resources import Resources
from lite.server.api.strategies import default_strategies
from lite.server.store import Store

ABSENT = object()
NS = "defaults"


def _get(obj: Any, path: str) -> Any:
    node = obj
    for part in path.replace("]", "").replace("[", ".").split("."):
        if isinstance(node, list):
            i = int(part)
            if i >= len(node):
                return ABSENT
            node = node[i]
        elif isinstance(node, dict):
            if part not in node:
                return ABSENT
            node = node[part]
        else:
            return ABSENT
    return node


def _pod_spec(**extra: Any) -> dict[str, Any]:
    return {"containers": [{"name": "c", "image": "busybox:1.36"}], **extra}


def _template(**spec: Any) -> dict[str, Any]:
    return {"metadata": {"labels": {"app": "a"}}, "spec": _pod_spec(**spec)}


_SEL = {"matchLabels": {"app": "a"}}

ROWS: list[tuple[str, str, str, dict[str, Any], dict[str, Any]]] = [
    # ---- core/v1 SetDefaults_Service
    ("service targetPort 0 is the port", "v1", "Service",
     {"spec": {"ports": [{"port": 80, "targetPort": 0}]}},
     {"spec.ports[0].targetPort": 80, "spec.ports[0].protocol": "TCP", "spec.type": "ClusterIP",
      "spec.sessionAffinity": "None", "spec.internalTrafficPolicy": "Cluster"}),
    ("service targetPort '' is the port", "v1", "Service",
     {"spec": {"ports": [{"port": 81, "targetPort": ""}]}}, {"spec.ports[0].targetPort": 81}),
    ("service without targetPort", "v1", "Service",
     {"spec": {"ports": [{"port": 82}]}}, {"spec.ports[0].targetPort": 82}),
    ("service ClientIP affinity timeout", "v1", "Service",
     {"spec": {"sessionAffinity": "ClientIP", "ports": [{"port": 80}]}},
     {"spec.sessionAffinityConfig.clientIP.timeoutSeconds": 10800}),
    ("service affinity None drops its config", "v1", "Service",
     {"spec": {"sessionAffinity": "None", "sessionAffinityConfig": {"clientIP": {"timeoutSeconds": 5}},
               "ports": [{"port": 80}]}},
     {"spec.sessionAffinityConfig": ABSENT}),
    ("service LoadBalancer", "v1", "Service",
     {"spec": {"type": "LoadBalancer", "ports": [{"port": 80}]}},
     {"spec.allocateLoadBalancerNodePorts": True, "spec.externalTrafficPolicy": "Cluster",
      "spec.internalTrafficPolicy": "Cluster"}),
    ("service NodePort", "v1", "Service",
     {"spec": {"type": "NodePort", "ports": [{"port": 80}]}},
     {"spec.externalTrafficPolicy": "Cluster", "spec.allocateLoadBalancerNodePorts": ABSENT}),
    ("service ExternalName", "v1", "Service",
     {"spec": {"type": "ExternalName", "externalName": "example.com"}},
     {"spec.internalTrafficPolicy": ABSENT, "spec.externalTrafficPolicy": ABSENT}),
    # ---- core/v1 SetDefaults_Pod, _PodSpec, _Container, _Probe, _HTTPGetAction, volumes
    ("pod spec", "v1", "Pod", {"spec": _pod_spec()},
     {"spec.dnsPolicy": "ClusterFirst", "spec.restartPolicy": "Always", "spec.securityContext": {},
      "spec.terminationGracePeriodSeconds": 30, "spec.schedulerName": "default-scheduler",
      "spec.enableServiceLinks": True, "spec.containers[0].imagePullPolicy": "IfNotPresent",
      "spec.containers[0].terminationMessagePath": "/dev/termination-log",
      "spec.containers[0].terminationMessagePolicy": "File"}),
    ("pod requests from limits (containers and init containers)", "v1", "Pod",
     {"spec": {"containers": [{"name": "c", "image": "i", "resources": {"limits": {"cpu": "1", "memory": "1Gi"},
                                                                        "requests": {"cpu": "500m"}}}],
               "initContainers": [{"name": "i", "image": "i", "resources": {"limits": {"cpu": "2"}}}]}},
     {"spec.containers[0].resources.requests": {"cpu": "500m", "memory": "1Gi"},
      "spec.initContainers[0].resources.requests": {"cpu": "2"}}),
    ("pod image pull policy for latest and untagged", "v1", "Pod",
     {"spec": {"containers": [{"name": "a", "image": "busybox"}, {"name": "b", "image": "busybox:latest"}]}},
     {"spec.containers[0].imagePullPolicy": "Always", "spec.containers[1].imagePullPolicy": "Always"}),
    ("pod hostNetwork: hostPort = containerPort", "v1", "Pod",
     {"spec": {"hostNetwork": True, "containers": [{"name": "c", "image": "i", "ports": [{"containerPort": 8080}]}]}},
     {"spec.containers[0].ports[0].hostPort": 8080, "spec.containers[0].ports[0].protocol": "TCP"}),
    ("probe and httpGet", "v1", "Pod",
     {"spec": {"containers": [{"name": "c", "image": "i", "livenessProbe": {"httpGet": {"port": 80}}}]}},
     {"spec.containers[0].livenessProbe.timeoutSeconds": 1, "spec.containers[0].livenessProbe.periodSeconds": 10,
      "spec.containers[0].livenessProbe.successThreshold": 1, "spec.containers[0].livenessProbe.failureThreshold": 3,
      "spec.containers[0].livenessProbe.httpGet.path": "/", "spec.containers[0].livenessProbe.httpGet.scheme": "HTTP"}),
    ("volume sources", "v1", "Pod",
     {"spec": {**_pod_spec(), "volumes": [
         {"name": "e"}, {"name": "s", "secret": {"secretName": "x"}}, {"name": "c", "configMap": {"name": "x"}},
         {"name": "d", "downwardAPI": {"items": [{"path": "n", "fieldRef": {"fieldPath": "metadata.name"}}]}},
         {"name": "p", "projected": {"sources": [{"serviceAccountToken": {"path": "t"}}]}},
         {"name": "h", "hostPath": {"path": "/tmp"}}]}},
     {"spec.volumes[0].emptyDir": {}, "spec.volumes[1].secret.defaultMode": 420,
      "spec.volumes[2].configMap.defaultMode": 420, "spec.volumes[3].downwardAPI.defaultMode": 420,
      "spec.volumes[3].downwardAPI.items[0].fieldRef.apiVersion": "v1",
      "spec.volumes[4].projected.defaultMode": 420,
      "spec.volumes[4].projected.sources[0].serviceAccountToken.expirationSeconds": 3600,
      "spec.volumes[5].hostPath.type": ""}),
    ("env fieldRef apiVersion", "v1", "Pod",
     {"spec": {"containers": [{"name": "c", "image": "i", "env": [
         {"name": "N", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]}]}},
     {"spec.containers[0].env[0].valueFrom.fieldRef.apiVersion": "v1"}),
    # ---- core/v1 other kinds
    ("replication controller selector and labels from the template", "v1", "ReplicationController",
     {"spec": {"template": _template()}},
     {"spec.selector": {"app": "a"}, "metadata.labels": {"app": "a"}, "spec.replicas": 1}),
    ("secret type", "v1", "Secret", {}, {"type": "Opaque"}),
    ("endpoints port protocol", "v1", "Endpoints",
     {"subsets": [{"addresses": [{"ip": "10.0.0.1"}], "ports": [{"port": 80}]}]},
     {"subsets[0].ports[0].protocol": "TCP"}),
    ("limit range container defaults", "v1", "LimitRange",
     {"spec": {"limits": [{"type": "Container", "max": {"cpu": "2"}, "min": {"memory": "64Mi"}}]}},
     {"spec.limits[0].default": {"cpu": "2"}, "spec.limits[0].defaultRequest": {"cpu": "2", "memory": "64Mi"}}),
    # ---- apps/v1
    ("deployment", "apps/v1", "Deployment", {"spec": {"selector": _SEL, "template": _template()}},
     {"spec.replicas": 1, "spec.strategy": {"type": "RollingUpdate",
                                            "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"}},
      "spec.revisionHistoryLimit": 10, "spec.progressDeadlineSeconds": 600,
      "spec.template.spec.restartPolicy": "Always", "spec.template.spec.enableServiceLinks": ABSENT}),
    ("deployment template limits do not become requests (Pod only)", "apps/v1", "Deployment",
     {"spec": {"selector": _SEL, "template": {"metadata": {"labels": {"app": "a"}}, "spec": {"containers": [
         {"name": "c", "image": "i", "resources": {"limits": {"cpu": "1"}}}]}}}},
     {"spec.template.spec.containers[0].resources": {"limits": {"cpu": "1"}}}),
    ("replicaset", "apps/v1", "ReplicaSet", {"spec": {"selector": _SEL, "template": _template()}},
     {"spec.replicas": 1}),
    ("daemonset", "apps/v1", "DaemonSet", {"spec": {"selector": _SEL, "template": _template()}},
     {"spec.updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}},
      "spec.revisionHistoryLimit": 10}),
    ("statefulset", "apps/v1", "StatefulSet",
     {"spec": {"selector": _SEL, "serviceName": "s", "template": _template()}},
     {"spec.replicas": 1, "spec.podManagementPolicy": "OrderedReady", "spec.revisionHistoryLimit": 10,
      "spec.updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"partition": 0}},
      "spec.persistentVolumeClaimRetentionPolicy": {"whenDeleted": "Retain", "whenScaled": "Retain"}}),
    # ---- batch/v1
    ("job", "batch/v1", "Job", {"spec": {"template": _template(restartPolicy="Never")}},
     {"spec.completions": 1, "spec.parallelism": 1, "spec.backoffLimit": 6, "spec.completionMode": "NonIndexed",
      "spec.suspend": False, "spec.podReplacementPolicy": "TerminatingOrFailed", "spec.manualSelector": ABSENT}),
    ("job labels from its template when it has none", "batch/v1", "Job",
     {"spec": {"template": _template(restartPolicy="Never")}},
     {"metadata.labels": {"app": "a"}}),
    ("cronjob's job template gets no Job defaults", "batch/v1", "CronJob",
     {"spec": {"schedule": "@hourly", "jobTemplate": {"spec": {"template": _template(restartPolicy="Never")}}}},
     {"spec.jobTemplate.spec.backoffLimit": ABSENT, "spec.jobTemplate.spec.completions": ABSENT,
      "spec.jobTemplate.spec.template.spec.dnsPolicy": "ClusterFirst"}),
    ("job with a pod failure policy replaces failed pods only", "batch/v1", "Job",
     {"spec": {"template": _template(restartPolicy="Never"), "podFailurePolicy": {"rules": [
         {"action": "FailJob", "onExitCodes": {"operator": "In", "values": [42]}}]}}},
     {"spec.podReplacementPolicy": "Failed"}),
    ("job with backoffLimitPerIndex", "batch/v1", "Job",
     {"spec": {"template": _template(restartPolicy="Never"), "completionMode": "Indexed", "completions": 3,
               "backoffLimitPerIndex": 1}},
     {"spec.backoffLimit": 2147483647, "spec.parallelism": 1}),
    ("job with parallelism only", "batch/v1", "Job",
     {"spec": {"template": _template(restartPolicy="Never"), "parallelism": 4}},
     {"spec.completions": ABSENT, "spec.parallelism": 4}),
    ("cronjob", "batch/v1", "CronJob",
     {"spec": {"schedule": "*/5 * * * *", "jobTemplate": {"spec": {"template": _template(restartPolicy="Never")}}}},
     {"spec.concurrencyPolicy": "Allow", "spec.suspend": False, "spec.successfulJobsHistoryLimit": 3,
      "spec.failedJobsHistoryLimit": 1}),
    # ---- autoscaling/v2 SetDefaults_HorizontalPodAutoscaler
    ("hpa", "autoscaling/v2", "HorizontalPodAutoscaler",
     {"spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "d"}, "maxReplicas": 5}},
     {"spec.minReplicas": 1,
      "spec.metrics": [{"type": "Resource", "resource": {"name": "cpu",
                                                         "target": {"type": "Utilization", "averageUtilization": 80}}}],
      "spec.behavior": ABSENT}),
    ("hpa behavior: what is given is kept, the rest filled in", "autoscaling/v2", "HorizontalPodAutoscaler",
     {"spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "d"}, "maxReplicas": 5,
               "behavior": {"scaleDown": {"stabilizationWindowSeconds": 60}}}},
     {"spec.behavior.scaleUp": {"stabilizationWindowSeconds": 0, "selectPolicy": "Max", "policies": [
          {"type": "Pods", "value": 4, "periodSeconds": 15}, {"type": "Percent", "value": 100, "periodSeconds": 15}]},
      "spec.behavior.scaleDown": {"stabilizationWindowSeconds": 60, "selectPolicy": "Max", "policies": [
          {"type": "Percent", "value": 100, "periodSeconds": 15}]}}),
    # ---- policy/v1: PodDisruptionBudget has no defaults beyond the object's own
    ("pdb", "policy/v1", "PodDisruptionBudget", {"spec": {"selector": _SEL, "minAvailable": 1}},
     {"spec.minAvailable": 1, "spec.maxUnavailable": ABSENT}),
]


@pytest.fixture
async def resources(tmp_path: Path) -> AsyncIterator[tuple[Resources, KindRegistry]]:
    store = await Store.open(str(tmp_path / "lite.db"))
    try:
        kinds = KindRegistry()
        strategies = default_strategies()
        res = Resources(store, kinds, strategies)
        add_quota_admission(res, strategies)  # the LimitRange item defaults, wired as the server wires them
        await res.start()
        ns = kinds.by_api_version("v1", "Namespace")
        assert ns is not None
        await res.create(ns, "", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
        yield res, kinds
    finally:
        await store.close()


@pytest.mark.parametrize(("what", "api_version", "kind_name", "body", "expect"), ROWS, ids=[r[0] for r in ROWS])
async def test_defaults(resources: tuple[Resources, KindRegistry], what: str, api_version: str, kind_name: str,
                        body: dict[str, Any], expect: dict[str, Any]) -> None:
    res, kinds = resources
    kind = kinds.by_api_version(api_version, kind_name)
    assert kind is not None
    obj = {"apiVersion": api_version, "kind": kind_name, "metadata": {"name": "x"}, **body}
    out = await res.create(kind, NS if kind.namespaced else "", obj, dry_run=True)
    wrong = {path: (_get(out, path), want) for path, want in expect.items() if _get(out, path) != want}
    assert not wrong, {p: f"got {g!r}, want {w!r}" for p, (g, w) in wrong.items()}
