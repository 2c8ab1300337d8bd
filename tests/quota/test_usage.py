"""Pure tables: what a pod, Service, PVC or other object costs against a quota, and which scopes match."""

from __future__ import annotations

import datetime as dt
from fractions import Fraction
from typing import Any

import pytest

from lite.kinds import BUILTIN_KINDS, Kind
from lite.server.admission.quota import usage as u

NOW = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def kind(group: str, name: str) -> Kind:
    return next(k for k in BUILTIN_KINDS if k.group == group and k.kind == name)


POD, SVC, PVC = kind("", "Pod"), kind("", "Service"), kind("", "PersistentVolumeClaim")


def pod(*containers: dict[str, Any], init: list[dict[str, Any]] | None = None, **spec: Any) -> dict[str, Any]:
    cs = [{"name": f"c{i}", "image": "x", "resources": r} for i, r in enumerate(containers)]
    body: dict[str, Any] = {"metadata": {"name": "p"}, "spec": {"containers": cs, **spec}}
    if init is not None:
        body["spec"]["initContainers"] = init
    return body


@pytest.mark.parametrize("obj,want", [
    (pod({}), {"count/pods": 1, "pods": 1}),
    (pod({"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"cpu": "1"}},
         {"requests": {"cpu": "250m"}}),
     {"count/pods": 1, "pods": 1, "cpu": Fraction(35, 100), "requests.cpu": Fraction(35, 100),
      "memory": 64 * 2**20, "requests.memory": 64 * 2**20, "limits.cpu": 1}),
    # an init container bigger than the sum is the floor; a sidecar adds to the sum
    (pod({"requests": {"cpu": "100m"}},
         init=[{"name": "i", "resources": {"requests": {"cpu": "500m"}}},
               {"name": "s", "restartPolicy": "Always", "resources": {"requests": {"cpu": "50m"}}}]),
     {"count/pods": 1, "pods": 1, "cpu": Fraction(1, 2), "requests.cpu": Fraction(1, 2)}),
    (pod({"requests": {"ephemeral-storage": "1Gi"}}),
     {"count/pods": 1, "pods": 1, "ephemeral-storage": 2**30, "requests.ephemeral-storage": 2**30}),
    # a finished pod keeps only its object count
    ({**pod({"requests": {"cpu": "1"}}), "status": {"phase": "Succeeded"}}, {"count/pods": 1}),
])
def test_pod_usage(obj: dict[str, Any], want: dict[str, Any]) -> None:
    assert u.object_usage(POD, obj, NOW) == {k: Fraction(v) for k, v in want.items()}
    assert u.object_usage_nano(POD, obj, NOW) == {k: int(Fraction(v) * 10**9) for k, v in want.items()}
    effective = (u.pod_effective_nano(obj, "requests"), u.pod_effective_nano(obj, "limits"))
    assert u.pod_usage_nano(obj, NOW, effective) == u.object_usage_nano(POD, obj, NOW)


def test_pod_past_its_deletion_grace_uses_no_compute() -> None:
    p = pod({"requests": {"cpu": "1"}})
    p["metadata"].update(deletionTimestamp="2025-12-31T23:59:00Z", deletionGracePeriodSeconds=30)
    assert u.object_usage(POD, p, NOW) == {"count/pods": 1}
    p["metadata"]["deletionGracePeriodSeconds"] = 3600
    assert u.object_usage(POD, p, NOW)["pods"] == 1


@pytest.mark.parametrize("spec,want", [
    ({"ports": [{"port": 80}]}, {"count/services": 1, "services": 1}),
    ({"type": "NodePort", "ports": [{"port": 80}, {"port": 81}]},
     {"count/services": 1, "services": 1, "services.nodeports": 2}),
    ({"type": "LoadBalancer", "ports": [{"port": 80}]},
     {"count/services": 1, "services": 1, "services.nodeports": 1, "services.loadbalancers": 1}),
])
def test_service_usage(spec: dict[str, Any], want: dict[str, int]) -> None:
    assert u.object_usage(SVC, {"spec": spec}, NOW) == want


def test_pvc_usage_per_storage_class() -> None:
    got = u.object_usage(PVC, {"spec": {"storageClassName": "fast",
                                        "resources": {"requests": {"storage": "2Gi"}}}}, NOW)
    assert got == {"count/persistentvolumeclaims": 1, "persistentvolumeclaims": 1, "requests.storage": 2 * 2**30,
                   "fast.storageclass.storage.k8s.io/persistentvolumeclaims": 1,
                   "fast.storageclass.storage.k8s.io/requests.storage": 2 * 2**30}


def test_other_kinds_count_by_resource_and_group() -> None:
    assert u.object_usage(kind("apps", "Deployment"), {}, NOW) == {"count/deployments.apps": 1}
    assert u.object_usage(kind("", "ConfigMap"), {}, NOW) == {"count/configmaps": 1, "configmaps": 1}
    assert u.tracks(kind("apps", "Deployment"), "count/deployments.apps")
    assert not u.tracks(kind("apps", "Deployment"), "pods")
    assert u.tracks(POD, "limits.memory") and not u.tracks(POD, "requests.storage")


BE = pod({})
BURST = pod({"requests": {"cpu": "1"}})
TERM = pod({}, activeDeadlineSeconds=30)
HIGH = pod({}, priorityClassName="high")


@pytest.mark.parametrize("quota_spec,obj,want", [
    ({}, BE, True),
    ({"scopes": ["BestEffort"]}, BE, True),
    ({"scopes": ["BestEffort"]}, BURST, False),
    ({"scopes": ["NotBestEffort"]}, BURST, True),
    ({"scopes": ["Terminating"]}, TERM, True),
    ({"scopes": ["Terminating"]}, BE, False),
    ({"scopes": ["NotTerminating"]}, BE, True),
    ({"scopes": ["NotTerminating", "BestEffort"]}, TERM, False),
    ({"scopeSelector": {"matchExpressions": [{"scopeName": "PriorityClass", "operator": "In",
                                              "values": ["high"]}]}}, HIGH, True),
    ({"scopeSelector": {"matchExpressions": [{"scopeName": "PriorityClass", "operator": "In",
                                              "values": ["high"]}]}}, BE, False),
    ({"scopeSelector": {"matchExpressions": [{"scopeName": "PriorityClass", "operator": "NotIn",
                                              "values": ["high"]}]}}, BE, True),
    ({"scopeSelector": {"matchExpressions": [{"scopeName": "PriorityClass", "operator": "Exists"}]}}, HIGH, True),
    ({"scopeSelector": {"matchExpressions": [{"scopeName": "PriorityClass", "operator": "DoesNotExist"}]}},
     HIGH, False),
])
def test_scopes(quota_spec: dict[str, Any], obj: dict[str, Any], want: bool) -> None:
    assert u.matches({"spec": quota_spec}, POD, obj) is want


def test_scoped_quota_never_matches_other_kinds() -> None:
    assert not u.matches({"spec": {"scopes": ["NotTerminating"]}}, SVC, {"spec": {}})


def test_exceeded_and_pretty() -> None:
    hard = {"pods": Fraction(2), "requests.memory": Fraction(2**30)}
    assert u.exceeded({"pods": Fraction(2)}, {"pods": Fraction(1)}, hard) == ["pods"]
    assert u.exceeded({"pods": Fraction(1)}, {"pods": Fraction(1)}, hard) == []
    assert u.pretty({"requests.memory": Fraction(2**29), "pods": Fraction(1)}, {"requests.memory": "1Gi"}) \
        == "pods=1,requests.memory=512Mi"
    assert u.pretty({"cpu": Fraction(3, 2)}) == "cpu=1500m"


def test_missing_requirements() -> None:
    p = pod({"requests": {"cpu": "1"}}, {})
    assert u.missing_requirements({"pods": "3"}, p) == ""
    assert u.missing_requirements({"requests.cpu": "2", "limits.memory": "1Gi"}, p) == \
        "must specify limits.memory for: c0,c1; requests.cpu for: c1"


def _base(**spec: Any) -> dict[str, Any]:
    return pod({"requests": {"cpu": "100m"}, "limits": {"memory": "1Gi"}}, **spec)


@pytest.mark.parametrize("change,same", [
    (lambda p: p["metadata"].update(name="other", labels={"a": "b"}), True),
    (lambda p: p["spec"]["containers"][0].update(image="y", env=[{"name": "A", "value": "1"}]), True),
    (lambda p: p["spec"].update(nodeSelector={"a": "b"}, restartPolicy="Never"), True),
    (lambda p: p["spec"]["containers"][0]["resources"]["requests"].update(cpu="200m"), False),
    (lambda p: p["spec"]["containers"][0]["resources"]["requests"].update(memory="1Gi"), False),
    (lambda p: p["spec"]["containers"][0].update(name="renamed"), False),
    (lambda p: p["spec"].update(initContainers=[{"name": "i", "restartPolicy": "Always"}]), False),
    (lambda p: p["spec"].update(overhead={"cpu": "10m"}), False),
    (lambda p: p["spec"].update(activeDeadlineSeconds=30), False),
    (lambda p: p["spec"].update(priorityClassName="high"), False),
])
def test_pod_shape_covers_what_limits_and_quotas_read(change: Any, same: bool) -> None:
    """Pods with equal shapes get equal usage, facts, stated names and requirement texts; anything those read
    changes the shape."""
    a, b = _base(), _base()
    change(b)
    assert (u.pod_shape(a) == u.pod_shape(b)) is same
    if same:
        hard = {"requests.memory": "1", "limits.cpu": "1"}
        assert u.pod_usage_nano(a, NOW) == u.pod_usage_nano(b, NOW)
        assert u.pod_facts(a) == u.pod_facts(b) and u.stated(a) == u.stated(b)
        assert u.missing_requirements(hard, a) == u.missing_requirements(hard, b)


@pytest.mark.parametrize("body", [
    {"metadata": {"name": "p", "deletionTimestamp": "2026-01-01T00:00:00Z"}, "spec": {"containers": []}},
    {"metadata": {"name": "p"}, "spec": {"containers": []}, "status": {"phase": "Succeeded"}},
    {"metadata": {"name": "p"}, "spec": {"containers": {"name": "c"}}},
    {"metadata": {"name": "p"}, "spec": "x"},
    {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "resources": {1: "x"}}]}},
])
def test_pod_shape_is_none_when_usage_depends_on_time_or_the_body_is_odd(body: dict[str, Any]) -> None:
    assert u.pod_shape(body) is None
