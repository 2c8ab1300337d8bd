"""Builders for plugin table tests: NodeInfo and Snapshot from node and pod dicts (no API)."""

from __future__ import annotations

from typing import Any

from conftest import node, pod

from lite.client import Obj
from lite.server.scheduler.podinfo import PodInfo, pod_info
from lite.server.scheduler.snapshot import NodeInfo, Snapshot, build_node_info, make_snapshot, node_data

__all__ = ["affinity_term", "info", "ni", "node", "pod", "snap", "spread"]


def info(p: Obj) -> PodInfo:
    return pod_info(p)


def ni(n: Obj, *pods: Obj) -> NodeInfo:
    return build_node_info(node_data(n), [pod_info(p) for p in pods])


def snap(*infos: NodeInfo, **kw: Any) -> Snapshot:
    return make_snapshot(infos, **kw)


def affinity_term(labels: dict[str, str], key: str, **extra: Any) -> Obj:
    return {"labelSelector": {"matchLabels": labels}, "topologyKey": key, **extra}


def spread(key: str, labels: dict[str, str], max_skew: int = 1, when: str = "DoNotSchedule", **extra: Any) -> Obj:
    return {"maxSkew": max_skew, "topologyKey": key, "whenUnsatisfiable": when,
            "labelSelector": {"matchLabels": labels}, **extra}
