"""The bootstrap policy against the real store (`Resources` over SQLite in tmp_path): created on the first
start, idempotent on the next, repaired where autoupdate allows, left alone where it says "false"; and the
policy feed plus the aggregation controller fill `view`/`edit`/`admin` from it."""

from __future__ import annotations

import asyncio
from pathlib import Path

from lite.kinds import KindRegistry
from lite.server.api.resources import Resources
from lite.server.api.strategies import default_strategies
from lite.server.authz import policy
from lite.server.authz.aggregation import ClusterRoleAggregator
from lite.server.authz.bootstrap import reconcile_policy
from lite.server.authz.index import PolicyFeed, PolicyIndex
from lite.server.authz.rules import rules_from
from lite.server.store import Store

G = policy.GROUP


async def test_reconcile_on_the_real_store(tmp_path: Path) -> None:
    store = await Store.open(str(tmp_path / "lite.db"))
    try:
        kinds = KindRegistry()
        res = Resources(store, kinds, default_strategies())
        await res.start()
        croles = kinds.by_resource(G, "v1", "clusterroles")
        crbs = kinds.by_resource(G, "v1", "clusterrolebindings")
        assert croles is not None and crbs is not None
        await reconcile_policy(res, kinds)
        names = {o["metadata"]["name"] for o in (await res.list(croles))["items"]}
        assert names == {r["metadata"]["name"] for r in policy.cluster_roles()}
        rev = store.current_rev
        await reconcile_policy(res, kinds)
        assert store.current_rev == rev  # nothing written the second time

        basic = await res.get(croles, "", "system:basic-user")
        basic["rules"] = basic["rules"][:1]
        await res.update(croles, "", "system:basic-user", basic)
        admin = await res.get(croles, "", "cluster-admin")
        admin["metadata"]["annotations"][policy.AUTOUPDATE] = "false"
        admin["rules"] = admin["rules"][:1]
        await res.update(croles, "", "cluster-admin", admin)
        binding = await res.get(crbs, "", "system:discovery")
        binding["subjects"] = []
        await res.update(crbs, "", "system:discovery", binding)

        await reconcile_policy(res, kinds)
        repaired = await res.get(croles, "", "system:basic-user")
        assert set(rules_from(repaired["rules"])) >= set(rules_from(policy.cluster_roles()[8]["rules"]))
        assert len((await res.get(croles, "", "cluster-admin"))["rules"]) == 1  # autoupdate "false": untouched
        assert (await res.get(crbs, "", "system:discovery"))["subjects"] == [
            policy.subject("Group", "system:authenticated")]

        index = PolicyIndex()
        feed = PolicyFeed(res, kinds, index)
        aggregator = ClusterRoleAggregator(res, croles, feed.informers["clusterroles"].list)
        feed.on_cluster_roles.append(aggregator.changed)
        async with asyncio.TaskGroup() as tg:
            tasks = [tg.create_task(feed.run()), tg.create_task(aggregator.run())]
            await asyncio.wait_for(index.ready.wait(), 30)
            for _ in range(300):
                if all(index.cluster_roles.get(n) for n in ("view", "edit", "admin")):
                    break
                await asyncio.sleep(0.05)
            view, edit, admin_rules = (set(index.cluster_roles[n]) for n in ("view", "edit", "admin"))
            assert view and view < edit < admin_rules
            for t in tasks:
                t.cancel()
    finally:
        await store.close()
