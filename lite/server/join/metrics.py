"""metrics.k8s.io items (PodMetrics, NodeMetrics) from the usage samples the connected agents report.

Pure over its inputs: the latest `wire.Metrics` per node and the pod/node informer caches (for labels and
creationTimestamp, and to drop samples of pods that are gone). Items carry no kind/apiVersion: the API
layer adds them. Label selectors follow the API's syntax (400 on a bad one).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from lite import wire
from lite.informer import Informer
from lite.quantity import parse_quantity
from lite.selectors import parse_label_selector

Obj = dict[str, Any]


def _meta(obj: Obj, name: str, namespace: str = "") -> Obj:
    src = obj.get("metadata") or {}
    meta: Obj = {"name": name, "creationTimestamp": src.get("creationTimestamp")}
    if namespace:
        meta["namespace"] = namespace
    if src.get("labels"):
        meta["labels"] = src["labels"]
    return meta


def pod_metrics(samples: Iterable[wire.Metrics], pods: Informer, namespace: str, label_selector: str) -> list[Obj]:
    selector = parse_label_selector(label_selector)
    items: list[Obj] = []
    for m in samples:
        for p in m.pods:
            ns, name = str(p.get("namespace", "")), str(p.get("name", ""))
            if namespace and ns != namespace:
                continue
            pod = pods.get(f"{ns}/{name}")
            if pod is None or not selector.matches((pod.get("metadata") or {}).get("labels")):
                continue
            items.append({"metadata": _meta(pod, name, ns), "timestamp": m.timestamp, "window": m.window,
                          "containers": [{"name": c.get("name", ""), "usage": dict(c.get("usage") or {})}
                                         for c in p.get("containers") or []]})
    return sorted(items, key=lambda i: (i["metadata"]["namespace"], i["metadata"]["name"]))


def node_metrics(samples: Iterable[tuple[str, wire.Metrics]], nodes: Informer, label_selector: str) -> list[Obj]:
    selector = parse_label_selector(label_selector)
    items: list[Obj] = []
    for node_name, m in samples:
        node = nodes.get(node_name)
        if node is None or not m.node or not selector.matches((node.get("metadata") or {}).get("labels")):
            continue
        items.append({"metadata": _meta(node, node_name), "timestamp": m.timestamp, "window": m.window,
                      "usage": dict(m.node)})
    return sorted(items, key=lambda i: str(i["metadata"]["name"]))


def _usage_stats(usage: Obj, timestamp: str) -> tuple[Obj, Obj]:
    """kubelet summary `cpu` and `memory` blocks from a metrics.k8s.io usage ({"cpu": "250m", "memory": ...})."""
    cpu = parse_quantity(str(usage.get("cpu", "0")))
    memory = parse_quantity(str(usage.get("memory", "0")))
    return ({"time": timestamp, "usageNanoCores": int(cpu * 1_000_000_000)},
            {"time": timestamp, "workingSetBytes": int(memory)})


def stats_summary(node_name: str, m: wire.Metrics) -> Obj:
    """The kubelet's `/stats/summary` shape (node, then pods with containers) from one agent sample."""
    cpu, memory = _usage_stats(m.node, m.timestamp)
    pods: list[Obj] = []
    for p in m.pods:
        containers = []
        for c in p.get("containers") or []:
            ccpu, cmem = _usage_stats(dict(c.get("usage") or {}), m.timestamp)
            containers.append({"name": c.get("name", ""), "cpu": ccpu, "memory": cmem})
        pods.append({"podRef": {"name": p.get("name", ""), "namespace": p.get("namespace", ""),
                                "uid": p.get("uid", "")},
                     "cpu": {"time": m.timestamp,
                             "usageNanoCores": sum(c["cpu"]["usageNanoCores"] for c in containers)},
                     "memory": {"time": m.timestamp,
                                "workingSetBytes": sum(c["memory"]["workingSetBytes"] for c in containers)},
                     "containers": containers})
    return {"node": {"nodeName": node_name, "cpu": cpu, "memory": memory}, "pods": pods}
