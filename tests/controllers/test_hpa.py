"""HPA: the replica arithmetic (table) and the controller against the real in-process API with an injected
metrics source."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import pytest
from conftest import DEPLOY, EVENT, POD, Kit, bare_pod

from lite.errors import ApiError
from lite.server.controllers.hpa import HPAController, Usage
from lite.server.controllers.hpa_calc import MetricError, resource_replicas, stabilize
from lite.server.controllers.runtime import builtin

HPA = builtin("autoscaling", "HorizontalPodAutoscaler")
Obj = dict[str, Any]


def pod(name: str, cpu: str = "100m", ready: bool = True) -> Obj:
    p = bare_pod(name, {"app": "web"})
    p["spec"]["containers"][0]["resources"] = {"requests": {"cpu": cpu, "memory": "64Mi"}}
    p["status"] = {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}
    return p


def m(cores: str) -> Fraction:
    return Fraction(cores)


@pytest.mark.parametrize(("usage", "target", "want"), [
    ({"a": m("0.1"), "b": m("0.1")}, 50, 4),     # 100 % of request vs 50 % target: double
    ({"a": m("0.052"), "b": m("0.052")}, 50, 2),  # 104 % of target: inside the 10 % tolerance
    ({"a": m("0.02"), "b": m("0.02")}, 80, 1),   # 20 % vs 80 %: ceil(0.25 * 2) = 1
    ({"a": m("0.16")}, 80, 2),                   # b has no metrics and we scale up: counts as 0 → 1.0 → keep
])
def test_utilization(usage: dict[str, Fraction], target: int, want: int) -> None:
    got = resource_replicas([pod("a"), pod("b")], usage, "cpu", 2, target_utilization=target)
    assert got.replicas == want


def test_average_value_and_unready_pods() -> None:
    pods = [pod("a"), pod("b"), pod("c", ready=False)]
    r = resource_replicas(pods, {"a": m("0.3"), "b": m("0.3")}, "cpu", 3, target_value=Fraction("0.1"))
    assert r.replicas == 6  # scaling up, the unready pod counts as 0: ratio 0.2 / 0.1 = 2 over 3 pods
    with pytest.raises(MetricError):
        resource_replicas(pods, {}, "cpu", 3, target_value=Fraction("0.1"))
    bare = bare_pod("x", {"app": "web"})
    bare["status"] = {"conditions": [{"type": "Ready", "status": "True"}]}
    with pytest.raises(MetricError, match="missing request for cpu"):
        resource_replicas([bare], {"x": m("1")}, "cpu", 1, target_utilization=50)


def test_stabilize_scale_down_window() -> None:
    d, hist = stabilize([], 0.0, 5, 5, 300)
    d, hist = stabilize(hist, 100.0, 2, 5, 300)
    assert d == 5  # a recommendation of 5 within the window holds the scale
    d, hist = stabilize(hist, 301.0, 2, 5, 300)
    assert d == 2


class Metrics:
    def __init__(self) -> None:
        self.usage: Usage = {}

    async def pod_usage(self, namespace: str, pod_names: list[str]) -> Usage:
        return {n: u for n, u in self.usage.items() if n in pod_names}


def deployment(replicas: int) -> Obj:
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": "default"},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}},
                     "template": {"metadata": {"labels": {"app": "web"}},
                                  "spec": {"containers": [{"name": "c", "image": "nginx:1"}]}}}}


def hpa(**spec: Any) -> Obj:
    return {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                     "minReplicas": 1, "maxReplicas": 5, **spec}}


def cond(obj: Obj, ctype: str) -> Obj:
    return next(c for c in obj["status"]["conditions"] if c["type"] == ctype)


async def make_pods(kit: Kit, n: int) -> None:
    for i in range(n):
        p = pod(f"web-{i}")
        del p["status"]
        await kit.make_ready(await kit.api.create(POD, "default", p))


async def test_no_metrics_source_reports_failed_get_resource_metric(kit: Kit) -> None:
    await kit.api.create(DEPLOY, "default", deployment(2))
    await make_pods(kit, 2)
    await kit.api.create(HPA, "default", hpa())
    c = HPAController(kit.api, kit.informers)
    await kit.settle(c)
    assert await c.reconcile("default/web") == 15.0
    got = await kit.api.get(HPA, "default", "web")
    assert (cond(got, "ScalingActive")["status"], cond(got, "ScalingActive")["reason"]) == \
        ("False", "FailedGetResourceMetric")
    assert got["status"]["currentReplicas"] == 2 and got["status"]["desiredReplicas"] == 2


async def test_scales_up_through_scale_subresource_and_clamps(kit: Kit) -> None:
    await kit.api.create(DEPLOY, "default", deployment(2))
    await make_pods(kit, 2)
    metrics_spec = [{"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization",
                                                                                "averageUtilization": 50}}}]
    await kit.api.create(HPA, "default", hpa(metrics=metrics_spec, maxReplicas=3))
    metrics = Metrics()
    metrics.usage = {"web-0": {"cpu": m("0.1")}, "web-1": {"cpu": m("0.1")}}
    c = HPAController(kit.api, kit.informers, metrics=metrics, clock=lambda: 0.0)
    await kit.settle(c)
    await c.reconcile("default/web")
    assert (await kit.api.get(DEPLOY, "default", "web"))["spec"]["replicas"] == 3
    got = await kit.api.get(HPA, "default", "web")
    assert got["status"]["desiredReplicas"] == 3 and got["status"]["currentReplicas"] == 2
    assert got["status"]["currentMetrics"][0]["resource"]["current"]["averageUtilization"] == 100
    assert cond(got, "ScalingLimited")["reason"] == "TooManyReplicas"
    assert cond(got, "AbleToScale")["reason"] == "SucceededRescale"
    assert got["status"]["lastScaleTime"]
    events = (await kit.api.list(EVENT, "default"))["items"]
    assert any(e["reason"] == "SuccessfulRescale" and e["message"].startswith("New size: 3;") for e in events)


async def test_scale_write_is_owned_by_kube_controller_manager(kit: Kit) -> None:
    """As upstream, the HPA's scale write is a managedFields entry `{kube-controller-manager, Update, scale}`
    owning spec.replicas, so a later server-side apply that sets replicas conflicts with it."""
    await kit.api.patch(DEPLOY, "default", "web", deployment(2), patch_type="apply", field_manager="kubectl")
    await make_pods(kit, 2)
    metrics_spec = [{"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization",
                                                                                "averageUtilization": 50}}}]
    await kit.api.create(HPA, "default", hpa(metrics=metrics_spec, maxReplicas=3))
    metrics = Metrics()
    metrics.usage = {"web-0": {"cpu": m("0.1")}, "web-1": {"cpu": m("0.1")}}
    c = HPAController(kit.api, kit.informers, metrics=metrics, clock=lambda: 0.0)
    await kit.settle(c)
    await c.reconcile("default/web")
    got = await kit.api.get(DEPLOY, "default", "web")
    scale = [e for e in got["metadata"]["managedFields"] if e.get("subresource") == "scale"]
    assert [(e["manager"], e["operation"], e["fieldsV1"]) for e in scale] == \
        [("kube-controller-manager", "Update", {"f:spec": {"f:replicas": {}}})]
    with pytest.raises(ApiError) as raised:
        await kit.api.patch(DEPLOY, "default", "web", deployment(2), patch_type="apply", field_manager="kubectl")
    assert raised.value.code == 409 and 'conflict with "kube-controller-manager" with subresource "scale"' \
        in raised.value.message


async def test_scale_down_waits_for_stabilisation(kit: Kit) -> None:
    await kit.api.create(DEPLOY, "default", deployment(2))
    await make_pods(kit, 2)
    await kit.api.create(HPA, "default", hpa(metrics=[{"type": "Resource", "resource": {
        "name": "memory", "target": {"type": "AverageValue", "averageValue": "64Mi"}}}]))
    metrics = Metrics()
    mib = 2**20
    metrics.usage = {"web-0": {"memory": Fraction(64 * mib)}, "web-1": {"memory": Fraction(64 * mib)}}
    now = [0.0]
    c = HPAController(kit.api, kit.informers, metrics=metrics, clock=lambda: now[0])
    await kit.settle(c)
    await c.reconcile("default/web")  # on target: recommendation 2
    metrics.usage = {"web-0": {"memory": Fraction(8 * mib)}, "web-1": {"memory": Fraction(8 * mib)}}
    now[0] = 60.0
    await kit.settle(c)
    await c.reconcile("default/web")
    assert (await kit.api.get(DEPLOY, "default", "web"))["spec"]["replicas"] == 2
    now[0] = 400.0
    await kit.settle(c)
    await c.reconcile("default/web")
    assert (await kit.api.get(DEPLOY, "default", "web"))["spec"]["replicas"] == 1


async def test_missing_target_is_failed_get_scale(kit: Kit) -> None:
    await kit.api.create(HPA, "default", hpa())
    c = HPAController(kit.api, kit.informers)
    await kit.settle(c)
    await c.reconcile("default/web")
    got = await kit.api.get(HPA, "default", "web")
    assert (cond(got, "AbleToScale")["status"], cond(got, "AbleToScale")["reason"]) == ("False", "FailedGetScale")
