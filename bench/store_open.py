"""What the damaged-file check costs at start-up: `Store.open` time next to its `PRAGMA quick_check` part.

`Store.open` runs `PRAGMA quick_check` before it loads anything (lite/server/store/faults.py), so a damaged
state.db is reported instead of half-loaded. This prints, for stores of N objects of ~2 KB each, the time of
a whole open (quick_check included) and, measured in the same run on the same file, the quick_check alone
and a full `PRAGMA integrity_check` (what `lite server --check-db` runs) for comparison.

Usage: python bench/store_open.py [--dir DIR] [--sizes 1000,10000,50000]   Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sqlite3
import tempfile
import time
from pathlib import Path

from lite.server.store import Store
from lite.server.store.faults import integrity_check


def _obj(i: int) -> dict[str, object]:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": f"cm-{i:06d}", "namespace": "default"}, "data": {"pad": "x" * 1900}}


async def _fill(path: str, n: int) -> None:
    s = await Store.open(path)
    try:
        for start in range(0, n, 1000):
            await asyncio.gather(*(s.create(f"core/configmaps/default/cm-{i:06d}", _obj(i))
                                   for i in range(start, min(n, start + 1000))))
    finally:
        await s.close()


def _timed_pragma(path: str, pragma: str) -> float:
    conn = sqlite3.connect(path)
    try:
        t = time.perf_counter()
        conn.execute(pragma).fetchall()
        return time.perf_counter() - t
    finally:
        conn.close()


def _size_mb(path: str) -> float:
    return os.path.getsize(path) / 1e6


async def _open_time(path: str) -> float:
    t = time.perf_counter()
    s = await Store.open(path)
    elapsed = time.perf_counter() - t
    await s.close()
    return elapsed


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", default=None)
    ap.add_argument("--sizes", default="1000,10000,50000")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        print(f"{'objects':>8} {'file MB':>8} {'open s':>8} {'quick_check s':>14} {'share':>6} "
              f"{'integrity_check s':>18}")
        for n in (int(x) for x in args.sizes.split(",")):
            path = os.path.join(tmp, f"s{n}.db")
            await _fill(path, n)
            await _open_time(path)  # warm the page cache: every figure below reads from memory
            opened = min([await _open_time(path) for _ in range(3)])
            quick = min(_timed_pragma(path, "PRAGMA quick_check") for _ in range(3))
            t = time.perf_counter()
            ok, _ = integrity_check(Path(path))
            full = time.perf_counter() - t
            assert ok
            size = _size_mb(path)
            print(f"{n:>8} {size:>8.1f} {opened:>8.3f} {quick:>14.3f} {quick / opened:>6.0%} {full:>18.3f}")


if __name__ == "__main__":
    import benchlib  # bench/ is on sys.path: the script's own directory

    benchlib.run(benchlib.Results("store_open"), lambda: asyncio.run(main()))
