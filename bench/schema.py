"""Cost of the schema checks on a create, next to the cost of decoding the same body (same run).

Prints, per body (a 2 KB pod, a deployment, the deployment as `kubectl apply` sends it with its
last-applied annotation): the time of `orjson.loads` (the baseline every request pays already), of
`fieldvalidation.check_body` in each directive (type check, unknown fields, duplicate-key screening), and
the one-off cost of loading and compiling upstream's schemas.

Usage: python bench/schema.py [--n 20000]. No network.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import orjson

from lite.kinds import KindRegistry
from lite.server.api.builtin_schemas import BuiltinSchemas
from lite.server.api.fieldvalidation import check_body


def pod() -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "bench", "namespace": "default", "labels": {f"l{i}": "v" * 20 for i in range(8)},
                         "annotations": {f"a{i}": "x" * 100 for i in range(8)}},
            "spec": {"containers": [{"name": "c", "image": "registry.local/app:1.2.3", "command": ["sleep", "1d"],
                                     "env": [{"name": f"E{i}", "value": "v"} for i in range(6)],
                                     "ports": [{"containerPort": 8080, "protocol": "TCP"}],
                                     "resources": {"requests": {"cpu": "100m", "memory": "64Mi"},
                                                   "limits": {"cpu": "1", "memory": "256Mi"}},
                                     "readinessProbe": {"httpGet": {"path": "/", "port": 8080}}}],
                     "tolerations": [{"key": "k", "operator": "Exists", "effect": "NoSchedule"}],
                     "restartPolicy": "Always"}}


def deployment(annotated: bool) -> dict[str, Any]:
    d: dict[str, Any] = {"apiVersion": "apps/v1", "kind": "Deployment",
                         "metadata": {"name": "web", "namespace": "default", "labels": {"app": "web"}},
                         "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"}},
                                  "template": {"metadata": {"labels": {"app": "web"}}, "spec": pod()["spec"]}}}
    if annotated:
        d["metadata"]["annotations"] = {"kubectl.kubernetes.io/last-applied-configuration": orjson.dumps(d).decode()}
    return d


def per_call(fn: Any, n: int) -> float:
    best = float("inf")
    for _ in range(3):
        t = time.perf_counter()
        for _ in range(n):
            fn()
        best = min(best, (time.perf_counter() - t) / n)
    return best * 1e6


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=20000)
    n = ap.parse_args().n
    kinds = {k.kind: k for k in KindRegistry()}
    schemas = BuiltinSchemas()
    t = time.perf_counter()
    schemas.node(kinds["Pod"])
    schemas.node(kinds["Deployment"])
    print(f"load + compile upstream schemas (once per server): {(time.perf_counter() - t) * 1e3:.1f} ms")
    for label, kind, body in (("pod 2KB", kinds["Pod"], pod()), ("deployment", kinds["Deployment"], deployment(False)),
                              ("deployment+last-applied", kinds["Deployment"], deployment(True))):
        raw = orjson.dumps(body)
        base = per_call(lambda raw=raw: orjson.loads(raw), n)
        print(f"{label:>24} ({len(raw)} B): baseline orjson.loads {base:6.1f} us", end="")
        for mode in ("Ignore", "Warn", "Strict"):
            cost = per_call(lambda raw=raw, kind=kind, mode=mode: check_body(
                schemas, kind, orjson.loads(raw), mode, raw, "application/json"), n) - base
            print(f" | {mode} +{cost:6.1f} us", end="")
        print()


if __name__ == "__main__":
    import benchlib  # bench/ is on sys.path: the script's own directory

    benchlib.run(benchlib.Results("schema"), main)
