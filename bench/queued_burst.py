"""Queued burst benchmark: a burst well past the in-flight budgets from a user outside system:masters, which
waits in its queue, against the same burst from the admin (system:masters: never queued, never refused), same
server, same run (issue 18, item 8).

Each round sends `--count` creates and `--count` lists of ConfigMaps at once, each on a fresh TLS connection (as
`@kubernetes/client-node` 2.x does), first as the admin (the baseline), then as a ServiceAccount bound to
cluster-admin, against a `lite server` with `--max-requests-inflight` / `--max-mutating-requests-inflight` set
to `--limit` (default: lite's defaults, 400 and 200). Prints, per identity, the wall time of the burst, its
requests/s and failures, the ratio of the queued burst's time to the baseline's, and the most requests that
waited in the queues at once (`apiserver_current_inqueue_requests`). Exits 1 when any request fails (a 429,
a reset, any status but 201/200).

Usage: python bench/queued_burst.py [--count 400] [--limit 0] [--rounds 3]
Traffic goes only to 127.0.0.1; the server is a child process stopped at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import tempfile
import time
from pathlib import Path

import aiohttp
from api import Target, start_lite

GUARD = 120.0


async def _call(t: Target, method: str, path: str, body: object = None, token: str | None = None) -> tuple[int, str]:
    headers = dict(t.headers) if token is None else {**t.headers, "Authorization": f"Bearer {token}"}
    connector = aiohttp.TCPConnector(ssl=t.ctx)
    async with aiohttp.ClientSession(connector=connector, headers=headers) as session, \
            session.request(method, t.url + path, data=None if body is None else json.dumps(body)) as r:
        return r.status, await r.text()


async def _service_account(t: Target, name: str) -> str:
    for path, body in (
        ("/api/v1/namespaces/default/serviceaccounts", {"metadata": {"name": name}}),
        ("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
         {"metadata": {"name": f"{name}-admin"},
          "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
          "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": "default"}]}),
    ):
        code, text = await _call(t, "POST", path, body)
        assert code == 201, text
    code, text = await _call(t, "POST", f"/api/v1/namespaces/default/serviceaccounts/{name}/token",
                             {"spec": {"expirationSeconds": 3600}})
    assert code == 201, text
    return str(json.loads(text)["status"]["token"])


async def _burst(t: Target, token: str, namespace: str, count: int) -> tuple[float, list[str]]:
    """`count` creates and `count` lists at once, a fresh connection each: wall seconds and failures."""
    path = f"{t.url}/api/v1/namespaces/{namespace}/configmaps"
    connector = aiohttp.TCPConnector(ssl=t.ctx, force_close=True, limit=0)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=GUARD),
                                     headers={"Authorization": f"Bearer {token}"}) as session:
        async def one(method: str, i: int) -> str:
            body = {"metadata": {"name": f"b-{i}"}, "data": {"i": str(i)}} if method == "POST" else None
            async with session.request(method, path, json=body) as r:
                text = await r.text()
                return "" if r.status in (200, 201) else f"{method} {i}: {r.status} {text[:120]}"

        start = time.perf_counter()
        got = await asyncio.gather(*(one("POST", i) for i in range(count)), *(one("GET", i) for i in range(count)),
                                   return_exceptions=True)
        return time.perf_counter() - start, [str(e) for e in got if e]


async def _inqueue_peaks(t: Target) -> str:
    _, text = await _call(t, "GET", "/metrics")
    prefix = 'apiserver_current_inqueue_requests{request_kind="'
    return ", ".join(f"{kind} {float(value):.0f}" for kind, value in
                     (line[len(prefix):].split('"} ') for line in text.splitlines() if line.startswith(prefix)))


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--count", type=int, default=400, help="creates and lists per burst (each)")
    ap.add_argument("--limit", type=int, default=0, help="both in-flight budgets (0: lite's defaults, 400/200)")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(max(soft, 8192), hard), hard))
    flags = ("--max-requests-inflight", str(args.limit), "--max-mutating-requests-inflight", str(args.limit)) \
        if args.limit else ()
    failed: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        t, _ = await start_lite(Path(tmp) / "data", *flags)
        try:
            sa = await _service_account(t, "bench-burst")
            print(f"lite, budgets {args.limit or '400/200'}: {args.count} creates + {args.count} lists at once, "
                  "a fresh TLS connection each")
            for r in range(args.rounds):
                times: dict[str, float] = {}
                for who, token in (("admin (system:masters, baseline)", t.token), ("ServiceAccount (queued)", sa)):
                    ns = f"r{r}-{'admin' if token == t.token else 'sa'}"
                    code, text = await _call(t, "POST", "/api/v1/namespaces", {"metadata": {"name": ns}})
                    assert code == 201, text
                    await _inqueue_peaks(t)  # the peaks start afresh
                    seconds, errors = await _burst(t, token, ns, args.count)
                    times[who] = seconds
                    failed += errors
                    print(f"  round {r + 1} {who:34} {seconds:6.2f} s  {2 * args.count / seconds:7.0f} req/s  "
                          f"failed {len(errors)}{' e.g. ' + errors[0] if errors else ''}  "
                          f"most queued: {await _inqueue_peaks(t)}")
                admin, queued = times.values()
                print(f"  round {r + 1} queued / baseline time: {queued / admin:.2f}x")
        finally:
            t.stop()
    if failed:
        raise RuntimeError(f"{len(failed)} requests failed, first: {failed[0]}")


if __name__ == "__main__":
    import benchlib  # bench/ is on sys.path: the script's own directory

    benchlib.run(benchlib.Results("queued_burst"), lambda: asyncio.run(main()))
