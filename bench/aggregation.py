"""Aggregation proxy benchmark: GETs of an extension API through lite's proxy against the same GETs sent to
the extension server directly (the baseline), measured in the same run.

Starts `lite server` (API only) and the test extension server (tests/helpers/extapi.py, TLS on 127.0.0.1),
registers it with a selector-less Service, Endpoints and an APIService, waits for Available, then sends
`--requests` list GETs with `--concurrency` clients to each target and prints requests/s and p50/p99 latency,
plus the time from creating the APIService to Available.

Usage: python bench/aggregation.py [--requests 2000] [--concurrency 16]
Traffic goes only to 127.0.0.1; the lite server is a child process stopped at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import ssl
import statistics
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
import orjson

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from api import API_ONLY, start_lite  # noqa: E402

from tests.helpers.extapi import ExtensionServer  # noqa: E402

GROUP, NS, SVC = "widgets.lite.test", "default", "ext-api"


async def run_gets(url: str, ctx: ssl.SSLContext, headers: dict[str, str], n: int, conc: int) -> list[float]:
    lat: list[float] = []
    todo = iter(range(n))
    async with aiohttp.ClientSession(headers=headers) as s:
        async def worker() -> None:
            for _ in todo:
                t0 = time.perf_counter()
                async with s.get(url, ssl=ctx) as r:
                    await r.read()
                    if r.status != 200:
                        raise RuntimeError(f"GET {url}: {r.status}")
                lat.append(time.perf_counter() - t0)
        await asyncio.gather(*(worker() for _ in range(conc)))
    return lat


def line(name: str, lat: list[float], wall: float) -> str:
    q = statistics.quantiles(lat, n=100)
    return f"{name:<22} {len(lat) / wall:8.0f} req/s   p50 {q[49] * 1000:6.2f} ms   p99 {q[98] * 1000:6.2f} ms"


async def main(n: int, conc: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        ext = ExtensionServer(Path(tmp), f"{SVC}.{NS}.svc").start()
        lite, _ = await start_lite(Path(tmp) / "data", *API_ONLY)
        try:
            h = lite.headers
            async with aiohttp.ClientSession(headers=h) as s:
                async def post(path: str, body: dict[str, object]) -> None:
                    async with s.post(lite.url + path, data=orjson.dumps(body), ssl=lite.ctx) as r:
                        if r.status != 201:
                            raise RuntimeError(f"POST {path}: {r.status} {await r.text()}")
                await post(f"/api/v1/namespaces/{NS}/services", {"metadata": {"name": SVC}, "spec": {
                    "ports": [{"name": "https", "port": 443, "targetPort": ext.port}]}})
                await post(f"/api/v1/namespaces/{NS}/endpoints", {"metadata": {"name": SVC}, "subsets": [{
                    "addresses": [{"ip": "127.0.0.1"}], "ports": [{"name": "https", "port": ext.port}]}]})
                t0 = time.perf_counter()
                await post("/apis/apiregistration.k8s.io/v1/apiservices", {
                    "metadata": {"name": f"v1.{GROUP}"}, "spec": {
                        "group": GROUP, "version": "v1", "groupPriorityMinimum": 1000, "versionPriority": 15,
                        "service": {"namespace": NS, "name": SVC, "port": 443},
                        "caBundle": base64.b64encode(ext.ca_pem).decode()}})
                while True:
                    async with s.get(f"{lite.url}/apis/apiregistration.k8s.io/v1/apiservices/v1.{GROUP}",
                                     ssl=lite.ctx) as r:
                        text = await r.read()
                        if r.status != 200:
                            raise RuntimeError(f"GET APIService v1.{GROUP}: {r.status} {text[:300]!r}")
                        conds = (orjson.loads(text).get("status") or {}).get("conditions") or []
                    if any(c.get("status") == "True" for c in conds):
                        break
                    if time.perf_counter() - t0 > 60:
                        raise RuntimeError(f"APIService v1.{GROUP} not Available after 60 s: {conds}")
                    await asyncio.sleep(0.01)
                available = time.perf_counter() - t0
            path = f"/apis/{GROUP}/v1/namespaces/{NS}/widgets"
            direct_ctx = ssl.create_default_context(cadata=ext.ca_pem.decode())
            direct_ctx.check_hostname = False
            results = []
            for name, url, ctx, headers in (("direct (baseline)", f"https://127.0.0.1:{ext.port}{path}", direct_ctx,
                                             {}), ("through lite", lite.url + path, lite.ctx, h)):
                await run_gets(url, ctx, headers, min(n, 100), conc)  # warm-up
                t0 = time.perf_counter()
                lat = await run_gets(url, ctx, headers, n, conc)
                results.append(line(name, lat, time.perf_counter() - t0))
            print(f"aggregation proxy: {n} list GETs, {conc} concurrent clients")
            for r in results:
                print("  " + r)
            print(f"  APIService created -> Available: {available * 1000:.0f} ms")
        finally:
            lite.stop()
            ext.stop()


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--requests", type=int, default=2000)
    p.add_argument("--concurrency", type=int, default=16)
    a = p.parse_args()
    import benchlib  # bench/ is on sys.path: the script's own directory

    benchlib.run(benchlib.Results("aggregation"), lambda: asyncio.run(main(a.requests, a.concurrency)))
