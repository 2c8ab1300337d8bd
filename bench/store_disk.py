"""Store files after a burst of large updates, and after they settle (one compaction round).

Scenario of issue 10: N updates spread over a few ConfigMaps of S bytes each. Prints live bytes, the files'
size (db + WAL) right after the burst and after one compaction round, for lite's compaction (revisions and
size) against the same-run baseline of compaction by revision count only (the rule before size counted).

    python bench/store_disk.py [--objects 50] [--updates 20000] [--size 80000]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time

from lite.server.store import Store


def files(path: str) -> int:
    return sum(os.path.getsize(p) for p in (path, path + "-wal") if os.path.exists(p))


async def burst(path: str, objects: int, updates: int, size: int, by_size: bool) -> tuple[int, int, int, float]:
    s = await Store.open(path, window=1000)
    pad = "z" * size
    revs: dict[str, int] = {}
    t0 = time.perf_counter()
    for i in range(objects):
        key = f"core/configmaps/default/c{i}"
        revs[key], _ = await s.create(key, {"metadata": {"name": f"c{i}"}, "data": {"n": "0", "pad": pad}})

    async def worker(keys: list[str], n: int) -> None:
        for j in range(n):
            key = keys[j % len(keys)]
            obj = {"metadata": {"name": key.rsplit("/", 1)[1]}, "data": {"n": str(j), "pad": pad}}
            revs[key], _ = await s.update(key, obj, revs[key])

    keys = list(revs)
    await asyncio.gather(*(worker(keys[w::8], updates // 8) for w in range(8)))
    elapsed = time.perf_counter() - t0
    live = sum(len(s.get(k)[1]) for k in keys)  # type: ignore[index]
    after_burst = files(path)
    if by_size:
        await s.compact(10_000)
    else:
        await s.compact(10_000, history_factor=1e12)
    settled = files(path)
    await s.close()
    return live, after_burst, settled, elapsed


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--objects", type=int, default=50)
    ap.add_argument("--updates", type=int, default=20_000)
    ap.add_argument("--size", type=int, default=80_000)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        for label, by_size in (("baseline: by revisions only", False), ("lite: by revisions and size", True)):
            live, after, settled, secs = asyncio.run(burst(f"{d}/{int(by_size)}.db", a.objects, a.updates,
                                                           a.size, by_size))
            print(f"{label:30} live {live / 2**20:7.1f} MiB | after the burst {after / 2**20:8.1f} MiB "
                  f"({after / live:5.1f}x) | settled {settled / 2**20:8.1f} MiB ({settled / live:5.1f}x) "
                  f"| {a.updates / secs:7.0f} updates/s")


if __name__ == "__main__":
    import benchlib  # bench/ is on sys.path: the script's own directory

    benchlib.run(benchlib.Results("store_disk"), main)
