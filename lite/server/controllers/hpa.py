"""HorizontalPodAutoscaler controller (autoscaling/v2), as upstream pkg/controller/podautoscaler.

reconcile(namespace/name), every `period` (15 s):
    scale subresource of spec.scaleTargetRef (AbleToScale False FailedGetScale when it cannot be read)
    replicas 0                ──► ScalingActive False ScalingDisabled, nothing else
    outside [min, max]        ──► clamp, no metrics needed
    else, per Resource metric ──► pod usage from the injected `MetricsSource` (none: ScalingActive False
                                  FailedGetResourceMetric) → `hpa_calc.resource_replicas`; the largest wins
    ──► scale-down stabilisation (5 min window of recommendations), scale-up limit, [min, max] clamp
        (ScalingLimited TooManyReplicas / TooFewReplicas / DesiredWithinRange)
    ──► write spec.replicas through the scale subresource when it differs (event SuccessfulRescale,
        lastScaleTime), then status: currentReplicas, desiredReplicas, currentMetrics, conditions.

Invariants: the recommendation history is per-leadership-term memory; the clock and the metrics source
are injected. Only Resource metrics are computed; other metric types are reported and skipped.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from fractions import Fraction
from typing import Any, ClassVar, Protocol

from lite.client import Client
from lite.errors import ApiError
from lite.events import EventRecorder
from lite.informer import NAMESPACE_INDEX, SharedInformers
from lite.kinds import Kind
from lite.objects import deep_copy, labels_of, meta, name_of, namespace_of, rfc3339
from lite.quantity import format_quantity, parse_quantity
from lite.selectors import parse_label_selector
from lite.server.controllers.hpa_calc import MetricError, resource_replicas, scale_up_limit, stabilize
from lite.server.controllers.runtime import Controller, builtin

Obj = dict[str, Any]
SYNC_PERIOD = 15.0
DOWNSCALE_WINDOW = 300.0
Usage = dict[str, dict[str, Fraction]]  # pod name -> resource -> usage


MANAGER = "kube-controller-manager"  # the field manager of its scale writes, as upstream's


class MetricsSource(Protocol):
    async def pod_usage(self, namespace: str, pod_names: list[str]) -> Usage:
        """Current usage per pod (cpu in cores, memory in bytes); pods without metrics are absent."""
        ...


class ClientMetricsSource:
    """Reads metrics.k8s.io PodMetrics through the API (empty while no node reports metrics)."""

    def __init__(self, client: Client) -> None:
        self.client = client
        self.kind = builtin("metrics.k8s.io", "PodMetrics")

    async def pod_usage(self, namespace: str, pod_names: list[str]) -> Usage:
        try:
            items = (await self.client.list(self.kind, namespace))["items"]
        except ApiError:
            return {}
        wanted, out = set(pod_names), {}
        for m in items:
            if name_of(m) in wanted:
                total: dict[str, Fraction] = {}
                for c in m.get("containers") or []:
                    for res, q in (c.get("usage") or {}).items():
                        total[res] = total.get(res, Fraction(0)) + parse_quantity(str(q))
                out[name_of(m)] = total
        return out


def _cond(ctype: str, status: str, reason: str, message: str, stamp: str) -> Obj:
    return {"type": ctype, "status": status, "reason": reason, "message": message, "lastTransitionTime": stamp}


class HPAController(Controller):
    name: ClassVar[str] = "horizontalpodautoscaling"

    def __init__(self, client: Client, informers: SharedInformers, recorder: EventRecorder | None = None, *,
                 metrics: MetricsSource | None = None, clock: Callable[[], float] = time.monotonic,
                 period: float = SYNC_PERIOD) -> None:
        super().__init__(client, informers, recorder or EventRecorder(client, "horizontal-pod-autoscaler"))
        self.kind = builtin("autoscaling", "HorizontalPodAutoscaler")
        self.metrics = metrics
        self.clock = clock
        self.period = period
        self.hpas = self.informer(self.kind, primary=True)
        self.pods = self.informer(builtin("", "Pod"))
        self.watch_primary(self.hpas)
        self.history: dict[str, list[tuple[float, int]]] = {}

    def on_start(self) -> None:
        self.history = {}

    async def reconcile(self, key: str) -> float | None:
        hpa = self.hpas.get(key)
        if hpa is None:
            self.history.pop(key, None)
            return None
        spec = hpa.get("spec") or {}
        stamp = rfc3339()
        got = await self._scale(hpa, stamp)
        if got is None:
            return self.period
        target, scale = got
        current = int((scale.get("spec") or {}).get("replicas") or 0)
        lo, hi = int(spec.get("minReplicas") or 1), int(spec.get("maxReplicas") or 1)
        conds = [_cond("AbleToScale", "True", "ReadyForNewScale", "recommended size matches current size", stamp)]
        if current == 0:
            conds.append(_cond("ScalingActive", "False", "ScalingDisabled",
                               "scaling is disabled since the replica count of the target is zero", stamp))
            await self._status(hpa, current, current, [], conds)
            return self.period
        desired, reason = current, ""
        metrics: list[Obj] = []
        if current < lo or current > hi:
            desired = lo if current < lo else hi
            reason = f"Current number of replicas {'below' if current < lo else 'above'} Spec." \
                     f"{'MinReplicas' if current < lo else 'MaxReplicas'}"
            conds.append(_cond("ScalingActive", "True", "ValidMetricFound", "the HPA was able to successfully "
                               "calculate a replica count", stamp))
        else:
            try:
                desired, metrics, reason = await self._from_metrics(hpa, scale, current)
            except MetricError as e:
                msg = f"the HPA was unable to compute the replica count: {e}"
                await self.recorder.warning(hpa, e.reason, msg)
                conds.append(_cond("ScalingActive", "False", e.reason, msg, stamp))
                await self._status(hpa, current, current, [], conds)
                return self.period
            conds.append(_cond("ScalingActive", "True", "ValidMetricFound", "the HPA was able to successfully "
                               "calculate a replica count from resource metrics", stamp))
            desired, kept = stabilize(self.history.get(key, []), self.clock(), desired, current, DOWNSCALE_WINDOW)
            self.history[key] = kept
            desired = min(desired, scale_up_limit(current))
        conds.append(self._limited(desired, lo, hi, stamp))
        desired = max(lo, min(hi, desired))
        if desired != current:
            await self._rescale(hpa, target, scale, desired, reason, conds, stamp)
        await self._status(hpa, current, desired, metrics, conds, scaled=desired != current)
        return self.period

    async def _scale(self, hpa: Obj, stamp: str) -> tuple[Kind, Obj] | None:
        """The target's Kind and Scale; None (after recording AbleToScale False) when unreadable."""
        ref = (hpa.get("spec") or {}).get("scaleTargetRef") or {}
        try:
            target = builtin(str(ref.get("apiVersion", "")).rpartition("/")[0], str(ref.get("kind", "")))
            scale = await self.client.get(target, namespace_of(hpa), str(ref.get("name", "")), subresource="scale")
        except (KeyError, ApiError) as e:
            msg = f"the HPA controller was unable to get the target's current scale: {e}"
            await self.recorder.warning(hpa, "FailedGetScale", msg)
            await self._status(hpa, None, None, [], [_cond("AbleToScale", "False", "FailedGetScale", msg, stamp)])
            return None
        return target, scale

    @staticmethod
    def _limited(desired: int, lo: int, hi: int, stamp: str) -> Obj:
        if desired > hi:
            return _cond("ScalingLimited", "True", "TooManyReplicas", "the desired replica count is more than the "
                         "maximum replica count", stamp)
        if desired < lo:
            return _cond("ScalingLimited", "True", "TooFewReplicas", "the desired replica count is less than the "
                         "minimum replica count", stamp)
        return _cond("ScalingLimited", "False", "DesiredWithinRange", "the desired count is within the acceptable "
                     "range", stamp)

    async def _from_metrics(self, hpa: Obj, scale: Obj, current: int) -> tuple[int, list[Obj], str]:
        selector = parse_label_selector(str((scale.get("status") or {}).get("selector") or ""))
        pods = [p for p in self.pods.by_index(NAMESPACE_INDEX, namespace_of(hpa)) if selector.matches(labels_of(p))]
        specs = [m for m in (hpa.get("spec") or {}).get("metrics") or [] if m.get("type") == "Resource"]
        if not specs:
            specs = [{"type": "Resource", "resource": {"name": "cpu",
                                                       "target": {"type": "Utilization", "averageUtilization": 80}}}]
        if self.metrics is None:
            name = specs[0]["resource"]["name"]
            raise MetricError("FailedGetResourceMetric", f"failed to get {name} utilization: unable to get metrics "
                              f"for resource {name}: no metrics returned from resource metrics API")
        usage = await self.metrics.pod_usage(namespace_of(hpa), [name_of(p) for p in pods])
        best, reason, current_metrics = -1, "", []
        for m in specs:
            res, target = m["resource"]["name"], m["resource"].get("target") or {}
            per_pod = {n: u[res] for n, u in usage.items() if res in u}
            if target.get("type") == "Utilization":
                r = resource_replicas(pods, per_pod, res, current, target_utilization=int(target["averageUtilization"]))
                cur: Obj = {"averageUtilization": r.utilization, "averageValue": format_quantity(r.average)}
            else:
                r = resource_replicas(pods, per_pod, res, current,
                                      target_value=parse_quantity(str(target.get("averageValue"))))
                cur = {"averageValue": format_quantity(r.average)}
            current_metrics.append({"type": "Resource", "resource": {"name": res, "current": cur}})
            if r.replicas > best:
                best = r.replicas
                what = "utilization (percentage of request)" if target.get("type") == "Utilization" else "usage"
                reason = f"{res} resource {what} {'above' if r.replicas > current else 'below'} target"
        return best, current_metrics, reason

    async def _rescale(self, hpa: Obj, target: Kind, scale: Obj, desired: int, reason: str, conds: list[Obj],
                       stamp: str) -> None:
        new = deep_copy(scale)
        new.setdefault("spec", {})["replicas"] = desired
        # upstream's controller manager writes as `kube-controller-manager`: its entry owns spec.replicas
        await self.client.update(target, namespace_of(hpa), name_of(scale), new, subresource="scale",
                                 field_manager=MANAGER)
        conds[0] = _cond("AbleToScale", "True", "SucceededRescale",
                         f"the HPA controller was able to update the target scale to {desired}", stamp)
        await self.recorder.normal(hpa, "SuccessfulRescale", f"New size: {desired}; reason: {reason}")

    async def _status(self, hpa: Obj, current: int | None, desired: int | None, metrics: list[Obj],
                      conds: list[Obj], *, scaled: bool = False) -> None:
        old = hpa.get("status") or {}
        status: Obj = {"currentReplicas": current if current is not None else old.get("currentReplicas", 0),
                       "desiredReplicas": desired if desired is not None else old.get("desiredReplicas", 0),
                       "observedGeneration": meta(hpa).get("generation", 1)}
        if metrics:
            status["currentMetrics"] = metrics
        last = rfc3339() if scaled else old.get("lastScaleTime")
        if last:
            status["lastScaleTime"] = last
        status["conditions"] = [self._keep_time(c, old.get("conditions") or []) for c in conds]
        if status == old:
            return
        new = deep_copy(hpa)
        new["status"] = status
        await self.client.update(self.kind, namespace_of(hpa), name_of(hpa), new, subresource="status")

    @staticmethod
    def _keep_time(cond: Obj, old: list[Obj]) -> Obj:
        prev = next((c for c in old if c.get("type") == cond["type"]), None)
        if prev is not None and prev.get("status") == cond["status"]:
            return {**cond, "lastTransitionTime": prev.get("lastTransitionTime", cond["lastTransitionTime"])}
        return cond
