"""CEL benchmark: creates/s of a custom object whose CRD carries 20 `x-kubernetes-validations` rules, against
creates of the same object under a CRD of the same shape with the rules removed (the baseline), on one lite
server in the same run.

Starts `lite server` (API only), creates both CRDs, then alternates bursts of `--objects` creates with
`--concurrency` clients against each kind and prints creates/s and p50/p99 latency per round, the ratio
ruled/plain of the medians, and the median of per-pair ratios of short back-to-back bursts (order alternating,
so a drifting machine load favours neither side), and the server process's CPU time per create of each kind
(from /proc/<pid>/stat over the same bursts: on a shared machine it moves much less than wall-clock rates).
Target (issue 18 item 4): the 20-rule create costs at most 2x the plain one, i.e. ratio >= 0.5. Every create
must answer 201 (the object passes all 20 rules): any other answer makes the run exit non-zero, the error on
the last line.

Usage: python bench/cel.py [--objects 600] [--concurrency 16] [--rounds 3] [--short-objects 150]
       [--short-rounds 10] [--json FILE]
Traffic goes only to 127.0.0.1; the lite server is a child process stopped at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import orjson

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import benchlib  # noqa: E402
from api import Target, ensure_namespace, pct, start_lite  # noqa: E402

GROUP = "bench.example.com"

# 20 rules at several levels, of the kinds real CRDs carry (Gateway API, cert-manager, Istio): presence and
# exclusivity, string shapes, bounded list walks, map values, quantities, URLs, IPs, a transition rule.
ROOT_RULES = [
    {"rule": "self.metadata.name.size() <= 63", "message": "name too long"},
    {"rule": "!has(self.spec.backup) || self.spec.backup.schedule.size() > 0"},
]
SPEC_RULES = [
    {"rule": "self.minReplicas <= self.maxReplicas", "message": "minReplicas must not exceed maxReplicas",
     "fieldPath": ".minReplicas"},
    {"rule": "has(self.image) != has(self.imageRef)", "message": "exactly one of image and imageRef"},
    {"rule": "self.mode in ['Fast', 'Safe', 'Balanced']"},
    {"rule": "self.mode != 'Fast' || self.maxReplicas <= 10", "messageExpression": "'Fast allows 10, not ' + "
                                                                                   "string(self.maxReplicas)"},
    {"rule": "quantity(self.memory).isLessThan(quantity('64Gi'))", "message": "memory must be below 64Gi"},
    {"rule": "isURL(self.endpoint) && url(self.endpoint).getScheme() == 'https'", "message": "https only"},
    {"rule": "self.routes.all(r, r.path.startsWith('/'))", "message": "paths must be absolute"},
    {"rule": "self.routes.exists_one(r, r.default == true)", "message": "exactly one default route"},
    {"rule": "self.labels.all(k, k.size() <= 32 && self.labels[k].size() <= 63)"},
    {"rule": "self.tags.isSorted()", "message": "tags must be sorted"},
    {"rule": "self.image.matches('^[a-z0-9./-]+(:[A-Za-z0-9._-]+)?$')", "message": "bad image"},
    {"rule": "!has(self.replicas) || self.replicas >= oldSelf.replicas || true"},
]
ROUTE_RULES = [
    {"rule": "self.weight >= 0 && self.weight <= 1000"},
    {"rule": "self.path.size() <= 256"},
    {"rule": "!has(self.timeout) || self.timeout.endsWith('s')", "message": "timeout in seconds"},
    {"rule": "self.backend.port > 0 && self.backend.port < 65536"},
    {"rule": "isIP(self.backend.address) || self.backend.address.contains('.')"},
    {"rule": "self.backend.name.lowerAscii() == self.backend.name", "message": "lowercase backend names"},
]
assert len(ROOT_RULES) + len(SPEC_RULES) + len(ROUTE_RULES) == 20


def schema(with_rules: bool) -> dict[str, Any]:
    def rules(r: list[dict[str, Any]]) -> dict[str, Any]:
        return {"x-kubernetes-validations": r} if with_rules else {}

    route = {"type": "object", "required": ["path", "weight", "backend"], "properties": {
        "path": {"type": "string", "maxLength": 256}, "weight": {"type": "integer"},
        "default": {"type": "boolean"}, "timeout": {"type": "string", "maxLength": 16},
        "backend": {"type": "object", "properties": {"name": {"type": "string", "maxLength": 63},
                                                     "port": {"type": "integer"},
                                                     "address": {"type": "string", "maxLength": 253}}}},
             **rules(ROUTE_RULES)}
    spec = {"type": "object", "required": ["minReplicas", "maxReplicas", "mode", "memory", "endpoint"],
            "properties": {
                "minReplicas": {"type": "integer"}, "maxReplicas": {"type": "integer"},
                "replicas": {"type": "integer"}, "image": {"type": "string", "maxLength": 256},
                "imageRef": {"type": "string", "maxLength": 256}, "mode": {"type": "string", "maxLength": 16},
                "memory": {"type": "string", "maxLength": 32}, "endpoint": {"type": "string", "maxLength": 256},
                "routes": {"type": "array", "maxItems": 16, "items": route},
                "labels": {"type": "object", "maxProperties": 16,
                           "additionalProperties": {"type": "string", "maxLength": 63}},
                "tags": {"type": "array", "maxItems": 16, "items": {"type": "string", "maxLength": 32}},
                "backup": {"type": "object", "properties": {"schedule": {"type": "string", "maxLength": 64}}}},
            **rules(SPEC_RULES)}
    return {"type": "object", "properties": {"spec": spec}, **rules(ROOT_RULES)}


def crd(kind: str, with_rules: bool) -> dict[str, Any]:
    plural = kind.lower() + "s"
    return {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": f"{plural}.{GROUP}"},
            "spec": {"group": GROUP, "scope": "Namespaced",
                     "names": {"plural": plural, "singular": kind.lower(), "kind": kind},
                     "versions": [{"name": "v1", "served": True, "storage": True,
                                   "schema": {"openAPIV3Schema": schema(with_rules)}}]}}


SPEC = {"minReplicas": 1, "maxReplicas": 5, "replicas": 2, "image": "registry.example/app:1.2", "mode": "Fast",
        "memory": "512Mi", "endpoint": "https://api.example.com/v1",
        "routes": [{"path": f"/r{i}", "weight": 10 * i, "default": i == 0, "timeout": "5s",
                    "backend": {"name": f"svc-{i}", "port": 8080 + i, "address": f"10.0.0.{i + 1}"}}
                   for i in range(4)],
        "labels": {"app": "bench", "tier": "web", "team": "lite"}, "tags": ["a", "b", "c"],
        "backup": {"schedule": "@daily"}}


def body(kind: str, name: str) -> bytes:
    return orjson.dumps({"apiVersion": f"{GROUP}/v1", "kind": kind, "metadata": {"name": name},
                         "spec": copy.deepcopy(SPEC)})


Failed = benchlib.BenchFailed


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (and its reaped children), from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return sum(int(f) for f in fields[11:15]) / ticks


async def burst(t: Target, kind: str, n: int, concurrency: int, prefix: str) -> tuple[float, list[float]]:
    """n creates of `kind` with `concurrency` clients; (creates/s, latencies); raises Failed on any non-201."""
    path = f"/apis/{GROUP}/v1/namespaces/bench/{kind.lower()}s"
    bodies = [body(kind, f"{prefix}-{i}") for i in range(n)]
    lat: list[float] = []
    failures: list[str] = []
    next_i = 0

    async def worker(s: aiohttp.ClientSession) -> None:
        nonlocal next_i
        while next_i < n:
            i = next_i
            next_i += 1
            t0 = time.perf_counter()
            async with s.post(t.url + path, data=bodies[i], headers=t.headers) as r:
                text = await r.read()
                if r.status != 201:
                    failures.append(f"{r.status} {text[:300]!r}")
            lat.append(time.perf_counter() - t0)

    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=concurrency, ssl=t.ctx)) as s:
        t0 = time.perf_counter()
        await asyncio.gather(*(worker(s) for _ in range(concurrency)))
        elapsed = time.perf_counter() - t0
    if failures:
        raise Failed(f"{len(failures)} of {n} {kind} creates failed, first: {failures[0]}")
    return n / elapsed, lat


async def setup(t: Target) -> None:
    await ensure_namespace(t, "bench")
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=t.ctx)) as s:
        for c in (crd("Ruled", True), crd("Plain", False)):
            async with s.post(t.url + "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
                              data=orjson.dumps(c), headers=t.headers) as r:
                if r.status != 201:
                    raise Failed(f"CRD {c['metadata']['name']}: {r.status} {await r.text()}")
        for kind in ("Ruled", "Plain"):  # wait until served
            for _ in range(400):
                async with s.get(f"{t.url}/apis/{GROUP}/v1/namespaces/bench/{kind.lower()}s",
                                 headers=t.headers) as r:
                    if r.status == 200:
                        break
                await asyncio.sleep(0.025)
            else:
                raise Failed(f"{kind} was never served")


async def main(n: int, conc: int, rounds: int, short_n: int, short_rounds: int, res: benchlib.Results) -> None:
    with tempfile.TemporaryDirectory(prefix="lite-bench-cel-") as tmp:
        t, _ = await start_lite(Path(tmp) / "data", "--disable-scheduler", "--disable-controller-manager")
        try:
            await setup(t)
            await burst(t, "Ruled", 50, conc, "warm")  # first use compiles the rules; keep it out of the figure
            await burst(t, "Plain", 50, conc, "warm")
            rates: dict[str, list[float]] = {"Plain": [], "Ruled": []}
            cpu: dict[str, float] = {"Plain": 0.0, "Ruled": 0.0}
            done: dict[str, int] = {"Plain": 0, "Ruled": 0}
            print(f"{n} creates per burst, {conc} clients, {rounds} rounds; 'Ruled' has 20 CEL rules, 'Plain' the "
                  "same schema without them")
            for r in range(rounds):
                for kind in ("Plain", "Ruled"):
                    c0 = cpu_seconds(t.proc.pid)
                    rate, lat = await burst(t, kind, n, conc, f"r{r}")
                    cpu[kind] += cpu_seconds(t.proc.pid) - c0
                    done[kind] += n
                    rates[kind].append(rate)
                    print(f"  round {r + 1} {kind:<6} {rate:8.0f} creates/s   p50 {pct(lat, 50) * 1000:6.2f} ms   "
                          f"p99 {pct(lat, 99) * 1000:6.2f} ms")
            plain, ruled = statistics.median(rates["Plain"]), statistics.median(rates["Ruled"])
            print(f"median: plain (baseline) {plain:.0f} creates/s, 20 rules {ruled:.0f} creates/s, ratio "
                  f"{ruled / plain:.2f} (target >= 0.5, i.e. a create with 20 rules costs at most 2x)")
            if short_rounds > 0:
                ratios = []
                for r in range(short_rounds):
                    order = ("Plain", "Ruled") if r % 2 == 0 else ("Ruled", "Plain")
                    got = {}
                    for k in order:
                        c0 = cpu_seconds(t.proc.pid)
                        got[k] = (await burst(t, k, short_n, conc, f"s{r}"))[0]
                        cpu[k] += cpu_seconds(t.proc.pid) - c0
                        done[k] += short_n
                    ratios.append(got["Ruled"] / got["Plain"])
                print(f"{short_rounds} short pairs of {short_n} creates, back to back, order alternating: ratios "
                      + " ".join(f"{x:.2f}" for x in ratios))
                print(f"median of per-pair ratios {statistics.median(ratios):.2f} (target >= 0.5)")
                res.set("pair_ratio", statistics.median(ratios))
            per = {k: cpu[k] / done[k] * 1000 for k in cpu}
            print(f"server CPU per create: plain (baseline) {per['Plain']:.3f} ms, 20 rules {per['Ruled']:.3f} ms "
                  f"({per['Ruled'] / per['Plain']:.2f}x; as a throughput ratio {per['Plain'] / per['Ruled']:.2f}, "
                  "target >= 0.5)")
            res.set("plain_creates_per_s", plain)
            res.set("ruled_creates_per_s", ruled)
            res.set("rate_ratio", ruled / plain)
            res.set("plain_cpu_ms_per_create", per["Plain"])
            res.set("ruled_cpu_ms_per_create", per["Ruled"])
            res.set("cpu_ratio", per["Plain"] / per["Ruled"])
        finally:
            t.stop()


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--objects", type=int, default=600)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--short-objects", type=int, default=150)
    ap.add_argument("--short-rounds", type=int, default=10)
    benchlib.add_args(ap)
    a = ap.parse_args()
    results = benchlib.Results.from_args("cel", a)
    benchlib.run(results, lambda: asyncio.run(main(a.objects, a.concurrency, a.rounds, a.short_objects,
                                                   a.short_rounds, results)))
