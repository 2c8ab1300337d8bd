"""Bench: the node-local desired-state cache (lite.agent.cache, issue 21): bytes on disk per pod, the event-loop
cost of recording, and the time to load it back and build the replay, each against a baseline of the same run.

N pods (default 100), each a Deployment-like pod with its own ConfigMap and Secret (mounted, plus an env from
the Secret and the usual kube-api-access projected volume), are recorded as the server relays them (objects
before their pod), flushed, then loaded by a fresh cache and replayed. Baselines:
- bytes: the compact JSON of the same pods, ConfigMaps and Secrets (what the server sent);
- record: `json.dumps` of the same pod (the least a write-through cache would pay per message on the loop);
- load + replay: reading the same files and `json.loads` of the same plain JSON (no decryption, no checks).
Timings are medians of `--rounds` A/B alternations. A failure (a file missing, the loaded replay differing
from what was recorded, a Secret value readable on disk) exits non-zero.

    python bench/edge_cache.py [--pods 100] [--rounds 7]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

import benchlib  # noqa: E402

from lite import wire  # noqa: E402
from lite.agent.cache import DesiredCache  # noqa: E402

Obj = dict[str, Any]


def _objects(i: int) -> tuple[Obj, Obj, Obj]:
    ns, app = "edge", f"app-{i}"
    cm = {"apiVersion": "v1", "kind": "ConfigMap",
          "metadata": {"name": f"{app}-config", "namespace": ns, "uid": f"cm-{i:08d}", "resourceVersion": str(i)},
          "data": {"settings.yaml": f"listen: 8080\nupstream: plc-{i}.local\nretries: 3\n"}}
    secret = {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
              "metadata": {"name": f"{app}-creds", "namespace": ns, "uid": f"s-{i:08d}", "resourceVersion": str(i)},
              "data": {"password": base64.b64encode(f"secret-value-{i:06d}".encode()).decode()}}
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": f"{app}-7d9f8c6b5-x{i:04d}", "namespace": ns, "uid": f"pod-{i:08d}",
                        "resourceVersion": str(1000 + i), "creationTimestamp": "2026-01-01T00:00:00Z",
                        "labels": {"app": app, "pod-template-hash": "7d9f8c6b5"},
                        "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": f"{app}-7d9f8c6b5",
                                             "uid": f"rs-{i:08d}", "controller": True, "blockOwnerDeletion": True}]},
           "spec": {"nodeName": "edge-1", "serviceAccountName": "default", "restartPolicy": "Always",
                    "terminationGracePeriodSeconds": 30, "dnsPolicy": "ClusterFirst",
                    "containers": [{"name": "app", "image": "registry.local/edge/app:1.4.2",
                                    "ports": [{"containerPort": 8080, "protocol": "TCP"}],
                                    "env": [{"name": "PASSWORD", "valueFrom": {"secretKeyRef": {
                                        "name": f"{app}-creds", "key": "password"}}}],
                                    "resources": {"requests": {"cpu": "50m", "memory": "32Mi"},
                                                  "limits": {"memory": "64Mi"}},
                                    "readinessProbe": {"httpGet": {"path": "/healthz", "port": 8080},
                                                       "periodSeconds": 5},
                                    "volumeMounts": [{"name": "config", "mountPath": "/etc/app"},
                                                     {"name": "kube-api-access-abcde", "readOnly": True,
                                                      "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}]}],
                    "volumes": [{"name": "config", "configMap": {"name": f"{app}-config"}},
                                {"name": "creds", "secret": {"secretName": f"{app}-creds"}},
                                {"name": "kube-api-access-abcde", "projected": {"sources": [
                                    {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                                    {"configMap": {"name": "kube-root-ca.crt",
                                                   "items": [{"key": "ca.crt", "path": "ca.crt"}]}}]}}],
                    "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists",
                                     "effect": "NoExecute", "tolerationSeconds": 300}]},
           "status": {"phase": "Running", "podIP": f"10.42.0.{i % 250 + 2}"}}
    return pod, cm, secret


def _messages(n: int) -> tuple[list[wire.Message], bytes]:
    msgs: list[wire.Message] = [wire.Welcome(config={"podCIDR": "10.42.0.0/24", "clusterDNS": ["10.43.0.10"],
                                                     "clusterDomain": "cluster.local"})]
    plain = []
    for i in range(n):
        pod, cm, secret = _objects(i)
        msgs += [wire.ObjectUpsert("ConfigMap", cm), wire.ObjectUpsert("Secret", secret), wire.PodUpsert(pod)]
        plain += [pod, cm, secret]
    msgs.append(wire.Synced([f"pod-{i:08d}" for i in range(n)]))
    return msgs, json.dumps(plain, separators=(",", ":")).encode()


def _median(xs: list[float]) -> float:
    return statistics.median(xs)


async def main(args: argparse.Namespace, results: benchlib.Results) -> None:
    msgs, plain = _messages(args.pods)
    pods = [m.pod for m in msgs if isinstance(m, wire.PodUpsert)]
    with tempfile.TemporaryDirectory(prefix="edge-cache-") as tmp:
        root = Path(tmp)
        cache = DesiredCache(root / "cache", root / "cache.key")
        record_s, dumps_s = [], []
        for _ in range(args.rounds):  # A: record every message; B: json.dumps of every pod
            t = time.perf_counter()
            for m in msgs:
                cache.record(m)
            record_s.append((time.perf_counter() - t) / len(pods))
            t = time.perf_counter()
            for p in pods:
                json.dumps(p)
            dumps_s.append((time.perf_counter() - t) / len(pods))
        t = time.perf_counter()
        await cache.flush()
        flush_s = time.perf_counter() - t
        files = sorted((root / "cache").iterdir())
        disk = sum(p.stat().st_size for p in files)
        on_disk = b"".join(p.read_bytes() for p in files)
        for i in (0, args.pods - 1):
            value = base64.b64encode(f"secret-value-{i:06d}".encode())
            results.check(value not in on_disk, f"secret {i} readable on disk")
        results.check({p.name for p in files} >= {"config.json", "pods.json", "secrets.enc",
                                                   "objects-ConfigMap.json"}, f"cache files: {files}")
        want = cache.replay()
        load_s, base_s = [], []
        for _ in range(args.rounds):  # A: load + replay; B: read + json.loads of the same plain JSON
            t = time.perf_counter()
            again = DesiredCache(root / "cache", root / "cache.key")
            again.load()
            got = again.replay()
            load_s.append(time.perf_counter() - t)
            results.check(got == want, "the loaded cache replays differently from what was recorded")
            t = time.perf_counter()
            b"".join(p.read_bytes() for p in files)
            json.loads(plain)
            base_s.append(time.perf_counter() - t)
    per_pod, base_per_pod = disk / args.pods, len(plain) / args.pods
    results.set("cache_bytes_per_pod", per_pod)
    results.set("relayed_json_bytes_per_pod", base_per_pod)
    results.set("record_us_per_pod", _median(record_s) * 1e6)
    results.set("json_dumps_us_per_pod", _median(dumps_s) * 1e6)
    results.set("flush_ms", flush_s * 1e3)
    results.set("load_replay_ms", _median(load_s) * 1e3)
    results.set("json_loads_ms", _median(base_s) * 1e3)
    print(f"{args.pods} pods, each with a ConfigMap and a Secret; medians of {args.rounds} A/B rounds")
    print(f"  on disk: {per_pod:.0f} B per pod  vs  {base_per_pod:.0f} B of relayed JSON  "
          f"(x{per_pod / base_per_pod:.2f}; {len(files)} files, {disk} B)")
    print(f"  record (event loop): {_median(record_s) * 1e6:.1f} us per pod message set  vs  json.dumps of the pod "
          f"{_median(dumps_s) * 1e6:.1f} us (x{_median(record_s) / _median(dumps_s):.2f})")
    print(f"  flush (thread, encode + encrypt + fsync): {flush_s * 1e3:.1f} ms")
    print(f"  load + replay: {_median(load_s) * 1e3:.2f} ms  vs  read + json.loads {_median(base_s) * 1e3:.2f} ms "
          f"(x{_median(load_s) / _median(base_s):.2f}); spread A {min(load_s) * 1e3:.2f}-{max(load_s) * 1e3:.2f} ms, "
          f"B {min(base_s) * 1e3:.2f}-{max(base_s) * 1e3:.2f} ms")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pods", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=7)
    benchlib.add_args(ap)
    arguments = ap.parse_args()
    res = benchlib.Results.from_args("edge_cache", arguments)
    benchlib.run(res, lambda: asyncio.run(main(arguments, res)))
