"""The join hub reads bound pods through the node controllers' index of pods by node: one index on the shared
pods informer, not two equal ones (each a set of keys per node, kept on every pod event)."""

from __future__ import annotations

from pathlib import Path

import pytest

from lite.informer import NAMESPACE_INDEX, SharedInformers
from lite.kinds import KindRegistry
from lite.server.controllers.nodelifecycle import NODE_NAME_INDEX, ensure_node_index
from lite.server.join import JoinHub
from lite.server.store.store import Store

KINDS = KindRegistry()
POD = KINDS.by_gvk("", "v1", "Pod")


@pytest.mark.parametrize("hub_first", [False, True])
async def test_the_hub_and_the_node_controllers_share_one_index_of_pods_by_node(tmp_path: Path,
                                                                               hub_first: bool) -> None:
    resources_mod = pytest.importorskip("lite.server.api.resources")
    strategies = pytest.importorskip("lite.server.api.strategies")
    store = await Store.open(str(tmp_path / "state.db"))
    resources = resources_mod.Resources(store, KINDS, strategies.default_strategies())
    await resources.start()
    try:
        informers = SharedInformers(resources)
        pods = informers.informer(POD)
        if not hub_first:
            ensure_node_index(pods)  # as the node lifecycle, taint and pod GC controllers do
        hub = JoinHub(resources, KINDS, informers=informers, cluster_dns="10.43.0.10")
        if hub_first:
            ensure_node_index(pods)
        assert hub.pods is pods
        assert sorted(pods._indexers) == sorted([NAMESPACE_INDEX, NODE_NAME_INDEX])
    finally:
        stop = getattr(resources, "stop", None)
        if stop is not None:
            await stop()
        await store.close()
