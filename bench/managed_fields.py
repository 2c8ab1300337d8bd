"""Cost of recording managedFields on writes, next to the same writes without a field manager (same run,
alternating rounds, medians).

Every HTTP write now has a field manager (its `fieldManager`, else its User-Agent, as upstream), so every
create and update records an `Update` entry. This prints, for 2 KB pods written through the real registry
(SQLite store, strategies, admission) in process: creates/s and label updates/s with no manager (the
baseline, as in-process controllers write) and with a manager, and their ratio; plus the microseconds of one
`record_update` on a create.

Usage: python bench/managed_fields.py [--n 500] [--rounds 8]. No network; the store lives in a temporary directory.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from lite.kinds import KindRegistry
from lite.patch import record_update
from lite.server.api.resources import Resources
from lite.server.api.strategies import default_strategies
from lite.server.store import Store


def pod(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": {f"l{i}": "v" * 20 for i in range(8)},
                         "annotations": {f"a{i}": "x" * 100 for i in range(8)}},
            "spec": {"containers": [{"name": "c", "image": "registry.local/app:1.2.3", "command": ["sleep", "1d"],
                                     "env": [{"name": f"E{i}", "value": "v"} for i in range(6)],
                                     "ports": [{"containerPort": 8080, "protocol": "TCP"}],
                                     "resources": {"requests": {"cpu": "100m", "memory": "64Mi"},
                                                   "limits": {"cpu": "1", "memory": "256Mi"}}}],
                     "restartPolicy": "Always"}}


async def _round(res: Resources, ns: str, n: int, manager: str) -> tuple[float, float]:
    kind = res.core_kind("pods")
    await res.create(res.core_kind("namespaces"), "", {"metadata": {"name": ns}})
    await res.create(res.core_kind("serviceaccounts"), ns, {"metadata": {"name": "default"}})
    start = time.perf_counter()
    await asyncio.gather(*(res.create(kind, ns, pod(f"p{i}"), field_manager=manager) for i in range(n)))
    creates = n / (time.perf_counter() - start)
    start = time.perf_counter()
    await asyncio.gather(*(res.patch(kind, ns, f"p{i}", {"metadata": {"labels": {"x": "y"}}}, field_manager=manager)
                           for i in range(n)))
    return creates, n / (time.perf_counter() - start)


async def run(n: int, rounds: int, directory: Path) -> None:
    store = await Store.open(str(directory / "lite.db"))
    try:
        res = Resources(store, KindRegistry(), default_strategies())
        await res.start()
        got: dict[str, list[tuple[float, float]]] = {"": [], "bench": []}
        for r in range(rounds):  # alternating, so a busy moment of the machine hits both alike
            for manager in ("", "bench") if r % 2 == 0 else ("bench", ""):
                got[manager].append(await _round(res, f"r{r}{manager or 'none'}", n, manager))
        base_c, base_u = (statistics.median(x[i] for x in got[""]) for i in (0, 1))
        rec_c, rec_u = (statistics.median(x[i] for x in got["bench"]) for i in (0, 1))
        ratios_c = statistics.median(b[0] / a[0] for a, b in zip(got[""], got["bench"], strict=True))
        ratios_u = statistics.median(b[1] / a[1] for a, b in zip(got[""], got["bench"], strict=True))
        print(f"{n} pods x {rounds} rounds, medians")
        print(f"{'no manager (baseline)':24} creates/s {base_c:8.0f}   label patches/s {base_u:8.0f}")
        print(f"{'manager recorded':24} creates/s {rec_c:8.0f}   label patches/s {rec_u:8.0f}")
        print(f"{'ratio (recorded/base)':24} creates   {ratios_c:8.2f}   label patches   {ratios_u:8.2f}")
        schema = res.schema(res.core_kind("pods"))
        body = pod("one")
        old = record_update(None, body, manager="bench", api_version="v1", now="2026-01-01T00:00:00Z", schema=schema)
        new = {**old, "metadata": {**old["metadata"], "labels": {**old["metadata"]["labels"], "x": "y"}}}
        for what, before in (("a create", None), ("a label update", old)):
            start = time.perf_counter()
            for _ in range(n):
                record_update(before, new, manager="bench", api_version="v1", now="2026-01-02T00:00:00Z",
                              schema=schema)
            print(f"record_update on {what}: {(time.perf_counter() - start) / n * 1e6:.0f} µs")
    finally:
        await store.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=500)
    ap.add_argument("--rounds", type=int, default=8)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        asyncio.run(run(args.n, args.rounds, Path(d)))


if __name__ == "__main__":
    import benchlib  # bench/ is on sys.path: the script's own directory

    benchlib.run(benchlib.Results("managed_fields"), main)
