"""The store's telemetry as `/metrics` reports it: a real Store, its commit hook and scrape-time totals."""

from __future__ import annotations

import os

from lite.server.metrics import ServerMetrics, StoreTotals
from lite.server.store import Store


def metrics_for(store: Store) -> ServerMetrics:
    prom = ServerMetrics(store_path=store.path, store_stats=lambda: StoreTotals(
        store.commits, store.writes, store.compactions, store.compacted_rows))
    store.on_commit = prom.committed
    return prom


async def test_commits_batches_and_compaction_reported(store: Store) -> None:
    prom = metrics_for(store)
    get = prom.registry.get_sample_value
    rev, _ = await store.create("/configmaps/a/x", {"metadata": {"name": "x"}, "n": 0})
    for n in range(1, 4):
        rev, _ = await store.update("/configmaps/a/x", {"metadata": {"name": "x"}, "n": n}, rev)
    assert get("lite_store_commits_total") == store.commits >= 1
    assert get("lite_store_rows_written_total") == 4
    assert get("lite_store_commit_batch_size_sum") == 4
    assert get("lite_store_commit_batch_size_count") == store.commits
    assert get("lite_store_compactions_total") == 0

    removed = await store.compact(keep=0)
    assert removed >= 3  # the superseded versions of x
    assert get("lite_store_compactions_total") == 1
    assert get("lite_store_compacted_rows_total") == removed
    size = get("lite_store_file_size_bytes", {"file": "db"})
    assert size == os.stat(store.path).st_size > 0
