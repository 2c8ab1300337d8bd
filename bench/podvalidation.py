"""Cost of value-level pod validation per write, next to baselines measured in the same run.

Prints microseconds per call of `validate_pod` (the full upstream-style rules) for a minimal pod and for a
pod using most features (volumes of every kind, probes, env, resources, affinity), next to two baselines on
the same objects: defaulting them (`default_pod`) and encoding them with orjson (what every write does anyway).

Usage: python bench/podvalidation.py [--n 20000]
Pure CPU, no I/O, no network.
"""

from __future__ import annotations

import argparse
import copy
import time
from collections.abc import Callable
from typing import Any

import orjson

from lite.server.api.strategies.pods import default_pod, validate_pod

MINIMAL: dict[str, Any] = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
                           "spec": {"containers": [{"name": "c", "image": "busybox"}]}}
FULL: dict[str, Any] = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {
    "volumes": [
        {"name": "e", "emptyDir": {"sizeLimit": "64Mi"}},
        {"name": "c", "configMap": {"name": "cm", "items": [{"key": "k", "path": "a/b.conf", "mode": 0o400}]}},
        {"name": "s", "secret": {"secretName": "s"}},
        {"name": "d", "downwardAPI": {"items": [{"path": "l", "fieldRef": {"fieldPath": "metadata.labels"}}]}},
        {"name": "p", "projected": {"sources": [{"configMap": {"name": "a"}}, {"secret": {"name": "b"}}]}}],
    "containers": [{
        "name": "web", "image": "nginx:1.25",
        "ports": [{"name": "http", "containerPort": 8080}],
        "env": [{"name": "A", "value": "1"},
                {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
        "envFrom": [{"configMapRef": {"name": "cm"}}],
        "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"cpu": "1", "memory": "1Gi"}},
        "volumeMounts": [{"name": n, "mountPath": f"/{n}"} for n in ("e", "c", "s", "d", "p")],
        "livenessProbe": {"httpGet": {"port": "http"}}, "readinessProbe": {"tcpSocket": {"port": 8080}},
        "securityContext": {"runAsUser": 1000}}],
    "tolerations": [{"key": "k", "operator": "Exists", "effect": "NoSchedule"}],
    "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]}]}]}}},
    "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "ScheduleAnyway"}],
}}


def per_call_us(fn: Callable[[dict[str, Any]], object], objs: list[dict[str, Any]]) -> float:
    start = time.perf_counter()
    for o in objs:
        fn(o)
    return (time.perf_counter() - start) / len(objs) * 1e6


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=20000)
    n = ap.parse_args().n
    print(f"{'pod':8} {'validate_pod µs':>16} {'default_pod µs':>15} {'orjson.dumps µs':>16}")
    for label, pod in (("minimal", MINIMAL), ("full", FULL)):
        fresh = [copy.deepcopy(pod) for _ in range(n)]
        d = per_call_us(default_pod, fresh)
        assert validate_pod(fresh[0]) == [], validate_pod(fresh[0])
        v = per_call_us(validate_pod, fresh)
        j = per_call_us(orjson.dumps, fresh)
        print(f"{label:8} {v:16.1f} {d:15.1f} {j:16.1f}")


if __name__ == "__main__":
    import benchlib  # bench/ is on sys.path: the script's own directory

    benchlib.run(benchlib.Results("podvalidation"), main)
