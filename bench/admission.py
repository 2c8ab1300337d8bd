"""Admission benchmark: pod creates/s in a namespace with 10 ResourceQuotas and 3 LimitRanges, against the
same creates in a namespace with none (the baseline), on one lite server in the same run.

Starts `lite server` (controller manager on, so the quota controller fills in the quotas' status; scheduler
and agent off), makes namespaces `plain` and `limited`, gives `limited` 10 quotas (pods, cpu, memory,
ephemeral-storage, object counts, BestEffort/NotBestEffort/NotTerminating/PriorityClass scopes) and 3
LimitRanges (Container defaults and bounds, a Pod bound, a PVC bound), waits until every quota has a status,
then alternates bursts of `--pods` creates with `--concurrency` clients into each namespace and prints
creates/s and p50/p99 latency per round and the ratio limited/plain of the medians (target >= 0.9).
On a shared, loaded machine that ratio of medians swings with whatever else runs during a long burst, so a
steadier figure follows: `--short-rounds` pairs of short bursts (`--short-pods` creates each), the two bursts
of a pair back to back (their order alternating, so a drifting load favours neither side), and the median of
the per-pair ratios. Both figures are printed.
It also checks that `pods` usage in `limited` equals the number of pods created there.

Usage: python bench/admission.py [--pods 600] [--concurrency 16] [--rounds 3] [--short-pods 150]
       [--short-rounds 12]
Traffic goes only to 127.0.0.1; the lite server is a child process stopped at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import aiohttp
import orjson

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from api import Target, create_burst, ensure_namespace, pct, start_lite  # noqa: E402

BIG = "100000"


def quotas() -> list[dict[str, Any]]:
    hard: list[tuple[str, dict[str, str], dict[str, Any]]] = [
        ("pods", {"pods": BIG, "count/pods": BIG}, {}),
        ("cpu", {"requests.cpu": BIG, "limits.cpu": BIG}, {}),
        ("memory", {"requests.memory": "100Ti", "limits.memory": "100Ti"}, {}),
        ("storage", {"requests.ephemeral-storage": "100Ti", "requests.storage": "100Ti"}, {}),
        ("objects", {"configmaps": BIG, "secrets": BIG, "services": BIG, "count/deployments.apps": BIG}, {}),
        ("best-effort", {"pods": BIG}, {"scopes": ["BestEffort"]}),
        ("not-best-effort", {"pods": BIG, "requests.cpu": BIG}, {"scopes": ["NotBestEffort"]}),
        ("not-terminating", {"pods": BIG}, {"scopes": ["NotTerminating"]}),
        ("priority", {"pods": BIG}, {"scopeSelector": {"matchExpressions": [
            {"scopeName": "PriorityClass", "operator": "DoesNotExist"}]}}),
        ("compute", {"cpu": BIG, "memory": "100Ti"}, {}),
    ]
    return [{"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": n}, "spec": {"hard": h, **extra}}
            for n, h, extra in hard]


def limit_ranges() -> list[dict[str, Any]]:
    items = [
        [{"type": "Container", "default": {"cpu": "500m", "memory": "256Mi"},
          "defaultRequest": {"cpu": "100m", "memory": "64Mi"}, "max": {"cpu": "4", "memory": "4Gi"},
          "min": {"cpu": "10m"}}],
        [{"type": "Pod", "max": {"cpu": "8", "memory": "8Gi"}}],
        [{"type": "PersistentVolumeClaim", "max": {"storage": "100Gi"}}],
    ]
    return [{"apiVersion": "v1", "kind": "LimitRange", "metadata": {"name": f"lr-{i}"}, "spec": {"limits": it}}
            for i, it in enumerate(items)]


async def post(s: aiohttp.ClientSession, t: Target, path: str, body: dict[str, Any]) -> None:
    async with s.post(t.url + path, data=orjson.dumps(body), headers=t.headers, ssl=t.ctx) as r:
        if r.status != 201:
            raise RuntimeError(f"POST {path}: {r.status} {await r.text()}")


async def get(s: aiohttp.ClientSession, t: Target, path: str) -> Any:
    async with s.get(t.url + path, headers=t.headers, ssl=t.ctx) as r:
        body = await r.read()
        if r.status != 200:
            raise RuntimeError(f"GET {path}: {r.status} {body[:300]!r}")
        return orjson.loads(body)


async def setup(t: Target) -> None:
    for ns in ("plain", "limited"):
        await ensure_namespace(t, ns)
    async with aiohttp.ClientSession() as s:
        for q in quotas():
            await post(s, t, "/api/v1/namespaces/limited/resourcequotas", q)
        for lr in limit_ranges():
            await post(s, t, "/api/v1/namespaces/limited/limitranges", lr)
        for _ in range(600):
            items = (await get(s, t, "/api/v1/namespaces/limited/resourcequotas"))["items"]
            if all(set((i.get("status") or {}).get("used") or {}) == set(i["spec"]["hard"]) for i in items):
                return
            await asyncio.sleep(0.05)
    raise RuntimeError("the quota controller did not fill in the quotas' status")


def pair_ratios(pairs: list[tuple[float, float]]) -> list[float]:
    """limited/plain of each back-to-back pair (plain rate, limited rate)."""
    return [lim / plain for plain, lim in pairs if plain > 0]


async def short_pairs(t: Target, n: int, conc: int, rounds: int) -> list[tuple[float, float]]:
    """`rounds` pairs of short bursts, plain and limited back to back, the order alternating per pair."""
    pairs: list[tuple[float, float]] = []
    for r in range(rounds):
        order = ("plain", "limited") if r % 2 == 0 else ("limited", "plain")
        got: dict[str, float] = {}
        for ns in order:
            got[ns], _ = await create_burst(t, f"/api/v1/namespaces/{ns}/pods", n, conc, f"s{r}")
        pairs.append((got["plain"], got["limited"]))
    return pairs


async def main(n: int, conc: int, rounds: int, short_n: int, short_rounds: int) -> None:
    with tempfile.TemporaryDirectory(prefix="lite-bench-admission-") as tmp:
        t, _ = await start_lite(Path(tmp) / "data", "--disable-scheduler")
        try:
            await setup(t)
            rates: dict[str, list[float]] = {"plain": [], "limited": []}
            print(f"{n} pod creates per burst, {conc} clients, {rounds} rounds; 'limited' has 10 ResourceQuotas "
                  "and 3 LimitRanges")
            for r in range(rounds):
                for ns in ("plain", "limited"):
                    rate, lat = await create_burst(t, f"/api/v1/namespaces/{ns}/pods", n, conc, f"r{r}")
                    rates[ns].append(rate)
                    print(f"  round {r + 1} {ns:<8} {rate:8.0f} creates/s   p50 {pct(lat, 50) * 1000:6.2f} ms   "
                          f"p99 {pct(lat, 99) * 1000:6.2f} ms")
            plain, limited = statistics.median(rates["plain"]), statistics.median(rates["limited"])
            print(f"median: plain (baseline) {plain:.0f} creates/s, limited {limited:.0f} creates/s, "
                  f"ratio {limited / plain:.2f} (target >= 0.9)")
            if short_rounds > 0:
                pairs = await short_pairs(t, short_n, conc, short_rounds)
                ratios = pair_ratios(pairs)
                print(f"{short_rounds} short pairs of {short_n} creates, back to back, order alternating: ratios "
                      + " ".join(f"{x:.2f}" for x in ratios))
                q1, _, q3 = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else (ratios * 3)
                print(f"median of per-pair ratios {statistics.median(ratios):.2f} (quartiles {q1:.2f}-{q3:.2f}; "
                      f"plain median {statistics.median(p for p, _ in pairs):.0f} creates/s, limited "
                      f"{statistics.median(lim for _, lim in pairs):.0f}) (target >= 0.9)")
            async with aiohttp.ClientSession() as s:
                q = await get(s, t, "/api/v1/namespaces/limited/resourcequotas/pods")
                pods = await get(s, t, "/api/v1/namespaces/limited/pods?limit=1")
                total = len(pods["items"]) + int(pods["metadata"].get("remainingItemCount") or 0)
            print(f"quota 'pods' used {q['status']['used']['pods']}, pods stored {total}")
        finally:
            t.stop()


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pods", type=int, default=600)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--short-pods", type=int, default=150)
    ap.add_argument("--short-rounds", type=int, default=12)
    a = ap.parse_args()
    import benchlib  # bench/ is on sys.path: the script's own directory

    benchlib.run(benchlib.Results("admission"),
                 lambda: asyncio.run(main(a.pods, a.concurrency, a.rounds, a.short_pods, a.short_rounds)))
