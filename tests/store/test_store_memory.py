"""The index holds bytes only and shares them with the watch window: 10,000 2 KB objects cost ~20 MB."""

from __future__ import annotations

import asyncio
import gc
import tracemalloc
from typing import Any

from lite.server.store import Store

N = 10_000


def big_pod(i: int) -> dict[str, Any]:
    meta = {"name": f"p{i:05d}", "namespace": "default", "annotations": {"pad": "x" * 1900}}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta}


def traced_mb() -> float:
    gc.collect()
    return tracemalloc.get_traced_memory()[0] / 2**20


async def test_memory_of_10000_2kb_objects(db_path: str) -> None:
    """Budget: the values themselves are ~20 MB; allow 1.5x for keys, tuples, events and dict slots.

    Fails if the values were held twice (index and window), as parsed dicts, or with spare capacity.
    """
    tracemalloc.start()
    try:
        base = traced_mb()
        s = await Store.open(db_path)
        for lo in range(0, N, 1000):
            await asyncio.gather(*(s.create(f"core/pods/default/p{i:05d}", big_pod(i)) for i in range(lo, lo + 1000)))
        data_mb = sum(len(v) for _, _, v in s.list("")[0]) / 2**20
        assert 19 < data_mb < 22
        assert traced_mb() - base < 1.5 * data_mb
        await s.close()
        del s
        base = traced_mb()
        s = await Store.open(db_path)  # reopen: index and seeded window must share values too
        assert len(s) == N and len(s._hub.events) == N
        assert traced_mb() - base < 1.5 * data_mb
        await s.close()
    finally:
        tracemalloc.stop()
