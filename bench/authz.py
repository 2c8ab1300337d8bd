"""Authorization benchmark: pod creates/s by a non-admin user authorised by RBAC, with 1,000 RoleBindings
and 200 ClusterRoles in the cluster, against the same creates by the admin (system:masters, the baseline),
on one lite server in the same run.

Starts `lite server` (scheduler, controller manager and agent off), creates 200 ClusterRoles of 10 rules each
(none granting pod creates) and 1,000 RoleBindings: 900 for other users and groups over 30 namespaces, and 100
in namespace `rbac-user` binding the user's group `bench-team` to 99 of those ClusterRoles and, last in name
order, to `pod-creator`. The non-admin requests are the admin's with `Impersonate-User: bench-user` and
`Impersonate-Group: bench-team` (the admin may impersonate; the request is then authorised as bench-user by
RBAC, which has to walk the 100 bindings of its group). Bursts of `--pods` creates with `--concurrency`
clients alternate between admin (namespace `rbac-admin`) and user (`rbac-user`); prints creates/s and p50/p99
per round, the ratio user/admin of the medians, and the median of the per-round ratios (each user burst
against the admin burst just before it, which is steadier on a shared machine) (target >= 0.9).

Usage: python bench/authz.py [--pods 600] [--concurrency 16] [--rounds 3]
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

from api import API_ONLY, Target, create_burst, ensure_namespace, pct, start_lite  # noqa: E402

RBAC = "/apis/rbac.authorization.k8s.io/v1"
G = "rbac.authorization.k8s.io"
OTHER_RESOURCES = ["configmaps", "secrets", "services", "endpoints", "events", "serviceaccounts", "limitranges",
                   "resourcequotas", "persistentvolumeclaims", "podtemplates"]


def cluster_roles() -> list[dict[str, Any]]:
    roles = []
    for i in range(199):
        rules = [{"apiGroups": ["", "apps"], "resources": [OTHER_RESOURCES[(i + j) % 10], f"x{i}-{j}"],
                  "verbs": ["get", "list", "watch", "create"]} for j in range(10)]
        roles.append({"metadata": {"name": f"bench-role-{i:03d}"}, "rules": rules})
    roles.append({"metadata": {"name": "pod-creator"},
                  "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["create"]}]})
    return roles


def role_bindings() -> list[tuple[str, dict[str, Any]]]:
    out = []
    for i in range(900):
        ns = f"rbac-other-{i % 30:02d}"
        subject = {"kind": "User" if i % 2 else "Group", "name": f"someone-{i}", "apiGroup": G}
        out.append((ns, {"metadata": {"name": f"rb-{i:04d}"}, "subjects": [subject],
                         "roleRef": {"apiGroup": G, "kind": "ClusterRole", "name": f"bench-role-{i % 199:03d}"}}))
    team = {"kind": "Group", "name": "bench-team", "apiGroup": G}
    for i in range(99):
        out.append(("rbac-user", {"metadata": {"name": f"rb-team-{i:03d}"}, "subjects": [team],
                                  "roleRef": {"apiGroup": G, "kind": "ClusterRole", "name": f"bench-role-{i:03d}"}}))
    out.append(("rbac-user", {"metadata": {"name": "rb-team-zzz"}, "subjects": [team],
                              "roleRef": {"apiGroup": G, "kind": "ClusterRole", "name": "pod-creator"}}))
    return out


async def post(s: aiohttp.ClientSession, t: Target, path: str, body: dict[str, Any]) -> None:
    async with s.post(t.url + path, data=orjson.dumps(body), headers=t.headers, ssl=t.ctx) as r:
        if r.status != 201:
            raise RuntimeError(f"POST {path}: {r.status} {await r.text()}")


async def setup(t: Target) -> None:
    for ns in ("rbac-admin", "rbac-user", *(f"rbac-other-{i:02d}" for i in range(30))):
        await ensure_namespace(t, ns)
    conn = aiohttp.TCPConnector(limit=16, ssl=t.ctx)
    async with aiohttp.ClientSession(connector=conn) as s:
        # (ensure_namespace made each namespace's `default` ServiceAccount, which nothing else makes with the
        # controller manager off, and which the ServiceAccount admission needs for every pod.)
        sem = asyncio.Semaphore(16)

        async def one(path: str, body: dict[str, Any]) -> None:
            async with sem:
                await post(s, t, path, body)
        await asyncio.gather(*(one(f"{RBAC}/clusterroles", r) for r in cluster_roles()))
        await asyncio.gather(*(one(f"{RBAC}/namespaces/{ns}/rolebindings", b) for ns, b in role_bindings()))


def decision_cost() -> None:
    """The authorizer alone, in process, over the same policy: decisions/s for the RBAC user vs the admin."""
    import time

    from lite.server.authz import rbac
    from lite.server.authz.attrs import Attributes, request_info
    from lite.server.authz.chain import AuthorizerChain
    from lite.server.authz.index import PolicyIndex, binding_from
    from lite.server.authz.rules import rules_from
    from lite.server.requestuser import UserInfo

    index = PolicyIndex()
    for role in cluster_roles():
        index.put_cluster_role(role["metadata"]["name"], rules_from(role["rules"]))
    for ns, b in role_bindings():
        index.put_binding(binding_from({**b, "metadata": {**b["metadata"], "namespace": ns}}))
    chain = AuthorizerChain(index)
    info = request_info("POST", "/api/v1/namespaces/rbac-user/pods", {})
    for who, user in (("admin", UserInfo("admin", ("system:masters", "system:authenticated"))),
                      ("user", UserInfo("bench-user", ("bench-team", "system:authenticated")))):
        attrs = Attributes(user, info)
        assert chain.authorize(attrs).allowed
        compiled = rbac.compile_rules(index, user, "rbac-user")

        def warm(a: Attributes, c: rbac.Compiled = compiled) -> object:
            return rbac.decide(c, a)
        for label, decide, n in (("cached", chain.authorize, 20000), ("compiled", warm, 20000),
                                 ("cold", lambda a: rbac.authorize(index, a), 200)):
            t0 = time.perf_counter()
            for _ in range(n):
                decide(attrs)
            el = time.perf_counter() - t0
            print(f"  in-process decision, {who:<5} {label:<8}: {n / el:10.0f} decisions/s "
                  f"({el / n * 1e6:.1f} us each)")


async def main(n: int, conc: int, rounds: int) -> None:
    with tempfile.TemporaryDirectory(prefix="lite-bench-authz-") as tmp:
        admin, _ = await start_lite(Path(tmp) / "data", *API_ONLY)
        try:
            await setup(admin)
            user = Target(admin.proc, admin.url, admin.ctx, admin.token)
            user.headers = {**admin.headers, "Impersonate-User": "bench-user", "Impersonate-Group": "bench-team"}
            async with aiohttp.ClientSession() as s, s.post(
                    user.url + "/api/v1/namespaces/rbac-admin/pods", data=b"{}", headers=user.headers,
                    ssl=user.ctx) as r:
                if r.status != 403:  # bench-user may create pods only in its own namespace
                    raise RuntimeError(f"expected 403 outside rbac-user, got {r.status}")
            print(f"{n} pod creates per burst, {conc} clients, {rounds} rounds; 200 ClusterRoles, 1000 RoleBindings "
                  "(100 for the user's group in its namespace)")
            rates: dict[str, list[float]] = {"admin": [], "user": []}
            for rnd in range(rounds):
                for who, t, ns in (("admin", admin, "rbac-admin"), ("user", user, "rbac-user")):
                    rate, lat = await create_burst(t, f"/api/v1/namespaces/{ns}/pods", n, conc, f"r{rnd}")
                    rates[who].append(rate)
                    print(f"  round {rnd + 1} {who:<6} {rate:8.0f} creates/s   p50 {pct(lat, 50) * 1000:6.2f} ms   "
                          f"p99 {pct(lat, 99) * 1000:6.2f} ms")
            base, mine = statistics.median(rates["admin"]), statistics.median(rates["user"])
            paired = statistics.median(u / a for u, a in zip(rates["user"], rates["admin"], strict=True))
            print(f"median: admin (baseline) {base:.0f} creates/s, RBAC user {mine:.0f} creates/s, "
                  f"ratio {mine / base:.2f}; median of the per-round ratios {paired:.2f} (target >= 0.9)")
        finally:
            admin.stop()


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pods", type=int, default=600)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    import benchlib  # bench/ is on sys.path: the script's own directory

    def body() -> None:
        decision_cost()
        asyncio.run(main(a.pods, a.concurrency, a.rounds))

    benchlib.run(benchlib.Results("authz"), body)
