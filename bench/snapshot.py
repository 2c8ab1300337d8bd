"""Snapshot benchmark: `lite snapshot save` of a store with 10,000 objects while writes keep arriving, and the
restore (`lite server --cluster-reset --cluster-reset-restore-path`) with the restored server's time to
/readyz and its object count. Baseline in the same run: a plain file copy of the same store file (which,
unlike the snapshot, is not consistent under writes).

Usage: python bench/snapshot.py [--objects 10000] [--write-rate 200]
Traffic goes only to 127.0.0.1; the servers are child processes stopped at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from api import create_burst, ensure_namespace, lite_command, paced_creates, start_lite  # noqa: E402


async def count(t: object, path: str) -> int:
    async with aiohttp.ClientSession(headers=t.headers) as s, s.get(  # type: ignore[attr-defined]
            t.url + path, ssl=t.ctx) as r:  # type: ignore[attr-defined]
        if r.status != 200:
            raise RuntimeError(f"list {path}: {r.status} {await r.text()}")
        return len((await r.json())["items"])


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--objects", type=int, default=10000)
    ap.add_argument("--write-rate", type=float, default=200.0)
    args = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="lite-bench-snapshot-"))
    try:
        await run(args, base)
    finally:
        shutil.rmtree(base, ignore_errors=True)  # also when the run failed


async def run(args: argparse.Namespace, base: Path) -> None:
    data = base / "data"
    t, _ = await start_lite(data)
    try:
        await ensure_namespace(t, "bench")
        path = "/api/v1/namespaces/bench/pods"
        rate, _ = await create_burst(t, path, args.objects, 32, "p")
        print(f"{args.objects} pods stored ({rate:.0f} creates/s)")
        db = data / "server" / "db" / "state.db"
        size = db.stat().st_size
        t0 = time.perf_counter()
        shutil.copyfile(db, base / "copy.db")
        copy_s = time.perf_counter() - t0
        writer = asyncio.create_task(paced_creates(t, path, args.write_rate, 3.0, "w"))
        await asyncio.sleep(0.5)
        t0 = time.perf_counter()
        out = await asyncio.to_thread(subprocess.run, [*lite_command(), "snapshot", "save", "--data-dir",
                                                       str(data), "--name", "bench"],
                                      capture_output=True, text=True, timeout=300)
        save_s = time.perf_counter() - t0
        await writer
        if out.returncode != 0:
            raise SystemExit(f"snapshot save failed: {out.stderr}")
        snap = next(data.glob("server/snapshots/bench*"))
        print(f"store file {size / 2**20:.1f} MiB; snapshot {snap.stat().st_size / 2**20:.1f} MiB")
        print(f"  baseline: plain copy of the store file   {copy_s * 1000:8.1f} ms")
        print(f"  lite snapshot save under {args.write_rate:.0f} writes/s {save_s * 1000:8.1f} ms "
              "(process start included)")
    finally:
        t.stop()
    t0 = time.perf_counter()
    out = subprocess.run([*lite_command(), "server", "--data-dir", str(data), "--cluster-reset",
                          "--cluster-reset-restore-path", str(snap), "--disable-agent"],
                         capture_output=True, text=True, timeout=300)
    reset_s = time.perf_counter() - t0
    if out.returncode != 0:
        raise SystemExit(f"restore failed: {out.stderr[-2000:]}")
    t2, ready_s = await start_lite(data)
    try:
        n = await count(t2, "/api/v1/namespaces/bench/pods")
        if n < args.objects:
            raise RuntimeError(f"the restored server serves {n} pods, not the {args.objects} saved")
        print(f"  restore (--cluster-reset)             {reset_s * 1000:8.1f} ms; restarted server ready in "
              f"{ready_s * 1000:.0f} ms serving {n} pods (>= {args.objects} expected)")
    finally:
        t2.stop()


if __name__ == "__main__":
    import benchlib  # bench/ is on sys.path: the script's own directory

    benchlib.run(benchlib.Results("snapshot"), lambda: asyncio.run(main()))
