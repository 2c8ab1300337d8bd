"""Memory of the store: values are held packed (`packing`), once, shared by the index and the watch window.

A realistic pod (defaults, managedFields, a projected token volume; ~1.7 KB of JSON) must cost well under a
half of its JSON in memory, counting keys, tuples and window events; fails if values were held plain, twice
(index and window, or a plain `prev` beside the packed value), or as parsed dicts.
"""

from __future__ import annotations

import asyncio
import gc
import tracemalloc
import uuid
from typing import Any

from lite.server.store import Store

N = 10_000


def real_pod(i: int) -> dict[str, Any]:
    """A pod as the API server stores it, each with its own name, uid, times, labels and env values."""
    name = f"web-{i:05d}-{uuid.UUID(int=i * 7919).hex[:5]}"
    stamp = f"2026-12-05T08:{i // 600 % 60:02d}:{i % 60:02d}Z"
    fields = {"f:metadata": {"f:labels": {".": {}, "f:app": {}, "f:shard": {}}},
              "f:spec": {"f:containers": {'k:{"name":"app"}': {".": {}, "f:env": {}, "f:image": {}, "f:name": {},
                                                                "f:resources": {"f:requests": {"f:cpu": {}}}}}}}
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "uid": str(uuid.UUID(int=i * 104729 + 1)),
                     "creationTimestamp": stamp, "labels": {"app": "web", "shard": str(i % 97)},
                     "managedFields": [{"manager": "kubectl-create", "operation": "Update", "apiVersion": "v1",
                                        "time": stamp, "fieldsType": "FieldsV1", "fieldsV1": fields}]},
        "spec": {
            "volumes": [{"name": f"kube-api-access-{i % 99991:05x}", "projected": {"defaultMode": 420, "sources": [
                {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}}]}}],
            "containers": [{"name": "app", "image": f"registry.local/team-{i % 13}/web:1.{i % 7}",
                            "env": [{"name": f"SETTING_{k}", "value": f"{uuid.UUID(int=i * 31 + k).hex[:12]}"}
                                    for k in range(4)],
                            "resources": {"requests": {"cpu": "100m"}},
                            "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File",
                            "imagePullPolicy": "IfNotPresent"}],
            "restartPolicy": "Always", "terminationGracePeriodSeconds": 30, "dnsPolicy": "ClusterFirst",
            "serviceAccountName": "default", "serviceAccount": "default", "securityContext": {},
            "schedulerName": "default-scheduler", "tolerations": [
                {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute",
                 "tolerationSeconds": 300}],
            "priority": 0, "enableServiceLinks": True, "preemptionPolicy": "PreemptLowerPriority"},
        "status": {"phase": "Pending", "qosClass": "Burstable"},
    }


async def fill(s: Store) -> None:
    async def create(i: int) -> None:
        await s.create(f"core/pods/default/p{i:05d}", real_pod(i))

    for lo in range(0, N, 1000):
        await asyncio.gather(*(create(i) for i in range(lo, lo + 1000)))


def traced_mb() -> float:
    gc.collect()
    return tracemalloc.get_traced_memory()[0] / 2**20


async def test_memory_of_10000_real_pods(db_path: str) -> None:
    tracemalloc.start()
    try:
        base = traced_mb()
        s = await Store.open(db_path)
        await fill(s)
        json_mb = sum(len(v) for _, _, v in s.list("")[0]) / 2**20
        assert 12 < json_mb < 24
        held = traced_mb() - base
        assert held < json_mb / 2, (held, json_mb)
        await s.close()
        del s
        base = traced_mb()
        s = await Store.open(db_path)  # reopen: index and seeded window must share packed values too
        assert len(s) == N and len(s._hub.events) == N
        assert traced_mb() - base < json_mb / 2
        await s.close()
    finally:
        tracemalloc.stop()


async def test_window_shares_the_index_packed_values(store: Store) -> None:
    """A create's window event holds the index's bytes object; an update's event holds the replaced value as
    the index held it (packed), not the writer's plain bytes, also when both writes were in one batch."""
    key = "core/pods/default/p00001"
    await store.create(key, real_pod(1))
    held = store.get_packed(key)
    assert held is not None and held[1][0] == 0x01  # packed
    assert store._hub.events[-1].packed_value is held[1]
    rev, _ = await store.update(key, {**real_pod(1), "status": {"phase": "Running"}}, held[0])
    ev = store._hub.events[-1]
    assert ev.rev == rev and ev.packed_prev is held[1]
    # two updates queued together: the second replaces a value that was pending (plain) when it was submitted
    cur = store.get_packed(key)
    assert cur is not None
    first = store.update(key, {**real_pod(1), "status": {"phase": "Failed"}}, cur[0])
    second = store.update(key, {**real_pod(1), "status": {"phase": "Succeeded"}}, cur[0] + 1)
    await asyncio.gather(first, second)
    a, b = list(store._hub.events)[-2:]
    assert b.packed_prev is a.packed_value and a.packed_value[0] == 0x01
    assert b.prev == a.value and b"Failed" in a.value


def sqlite_memory_used() -> int:
    """Bytes SQLite holds in this process (`sqlite3_memory_used`, from the library the sqlite3 module uses)."""
    import _sqlite3
    import ctypes

    used = ctypes.CDLL(_sqlite3.__file__).sqlite3_memory_used
    used.restype = ctypes.c_int64
    return int(used())


async def test_release_memory_frees_sqlites_page_cache(store: Store) -> None:
    """After a burst of commits SQLite keeps up to `CACHE_KB` of pages cached on the writer connection (not its
    default 2 MB); `release_memory` (what the server's quiet-time trim awaits) gives them back, and the store
    works on as before."""
    from lite.server.store.sqlite import CACHE_KB

    async def create(i: int) -> None:
        await store.create(f"core/pods/default/p{i:05d}", real_pod(i))

    for lo in range(0, 3000, 500):
        await asyncio.gather(*(create(i) for i in range(lo, lo + 500)))
    before = sqlite_memory_used()
    await store.release_memory()
    after = sqlite_memory_used()
    assert (CACHE_KB << 10) // 2 < before - after < (CACHE_KB << 10) + (256 << 10), (before, after)
    await create(3000)
    assert len(store) == 3001 and store.get_packed("core/pods/default/p00042") is not None
    await store.close()
    await store.release_memory()  # closed: nothing to do, no error
