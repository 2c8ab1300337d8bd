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
            # Aggregation converges role by role (view into edit into admin): wait for the end state, not for
            # the first moment all three are non-empty.
            for _ in range(300):
                view, edit, admin_rules = (set(index.cluster_roles.get(n) or ()) for n in ("view", "edit", "admin"))
                if view and view < edit < admin_rules:
                    break
                await asyncio.sleep(0.05)
            assert view and view < edit < admin_rules
            # The feed's caches keep the store's bytes, not decoded objects: the index holds what it compiled.
            held = [inf.encoded(key) for inf in feed.informers.values() for key in list(inf.keys())]
            assert held and all(isinstance(b, bytes) for b in held)
            for t in tasks:
                t.cancel()
    finally:
        await store.close()


async def test_retired_bindings_are_deleted_at_start(tmp_path: Path) -> None:
    """Bindings an earlier lite created and this one must not keep: `lite:node-agents` (every node could do
    everything) and `lite:node-simulator` (the join token's user could register Nodes and delete pods)."""
    store = await Store.open(str(tmp_path / "lite.db"))
    try:
        kinds = KindRegistry()
        res = Resources(store, kinds, default_strategies())
        await res.start()
        crbs = kinds.by_resource(G, "v1", "clusterrolebindings")
        assert crbs is not None
        for name, role, subject in (("lite:node-agents", "system:node", policy.subject("Group", "system:nodes")),
                                    ("lite:node-simulator", "lite:node-simulator", policy.subject("User", "node"))):
            await res.create(crbs, "", {"apiVersion": f"{G}/v1", "kind": "ClusterRoleBinding",
                                        "metadata": {"name": name},
                                        "roleRef": {"apiGroup": G, "kind": "ClusterRole", "name": role},
                                        "subjects": [subject]})
        await reconcile_policy(res, kinds)
        names = {o["metadata"]["name"] for o in (await res.list(crbs))["items"]}
        assert "lite:node-agents" not in names and "lite:node-simulator" not in names
        assert names == {b["metadata"]["name"] for b in policy.cluster_role_bindings()}
        sims = await res.get(crbs, "", "lite:node-simulators")
        assert sims["roleRef"]["name"] == "lite:node-simulator"
        assert sims["subjects"] == [policy.subject("Group", "lite:node-simulators")]
    finally:
        await store.close()
