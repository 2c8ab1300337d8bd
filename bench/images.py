"""Image subsystem benchmark: pull + unpack times against a local docker-registry.

Prints: busybox layer build and push; cold pull+unpack of busybox (1 layer, ~1 MB gz); IfNotPresent hit;
Always re-resolve (one HEAD); cold pull+unpack of a large layer made from /usr/lib/python3.11 (~50 MiB,
thousands of files) with its MiB/s; and the same layer through GNU tar for comparison.

Usage: python bench/images.py [--runs 5] [--dir /var/tmp]
The scratch directory matters: on the measurement VM file creation in /tmp cost ~1.4 ms per entry against
~0.07 ms in /var/tmp (something watches /tmp there), which made unpacking ~10x slower; default /var/tmp.
Needs /usr/bin/docker-registry and /bin/busybox. Traffic goes only to 127.0.0.1; the registry is a child
process stopped at the end. Run from the repository root (it uses tests/helpers).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from lite.agent.images import ImageService
from tests.helpers.images import Entry, Image, Layer, Pusher, busybox_entries
from tests.helpers.registry import RegistryServer


def dir_entries(root: Path, prefix: str) -> list[Entry]:
    out = []
    for path in sorted(root.rglob("*")):
        name = f"{prefix}/{path.relative_to(root)}"
        if path.is_symlink():
            out.append(Entry(name, "symlink", target=str(path.readlink())))
        elif path.is_dir():
            out.append(Entry(name, "dir", mode=0o755))
        elif path.is_file():
            out.append(Entry(name, data=path.read_bytes(), mode=path.stat().st_mode & 0o7777))
    return out


async def timed(fn: Callable[[], Awaitable[object]]) -> float:
    t0 = time.perf_counter()
    await fn()
    return time.perf_counter() - t0


def fmt(xs: list[float]) -> str:
    return f"median {statistics.median(xs) * 1000:8.1f} ms  min {min(xs) * 1000:8.1f} ms  (n={len(xs)})"


async def main(runs: int, scratch: str) -> None:
    with tempfile.TemporaryDirectory(prefix="lite-bench-images-", dir=scratch) as tmp:
        work = Path(tmp)
        server = RegistryServer.start(work / "registry")
        try:
            t0 = time.perf_counter()
            bb = Image([Layer.build(busybox_entries())])
            build = time.perf_counter() - t0
            t0 = time.perf_counter()
            Pusher(server.url).push_image("bench/busybox", "1", bb)
            push = time.perf_counter() - t0
            print(f"busybox layer build  {build * 1000:8.1f} ms  ({len(bb.layers[0].gz) / 1e6:.2f} MB gz)")
            print(f"busybox push         {push * 1000:8.1f} ms")
            image = f"{server.host}/bench/busybox:1"
            cold, hit, always = [], [], []
            for n in range(runs):
                async with await ImageService.open(work / f"store-bb{n}") as svc:
                    cold.append(await timed(lambda s=svc: s.ensure(image, "IfNotPresent")))  # type: ignore[misc]
                    hit.append(await timed(lambda s=svc: s.ensure(image, "IfNotPresent")))  # type: ignore[misc]
                    always.append(await timed(lambda s=svc: s.ensure(image, "Always")))  # type: ignore[misc]
            print(f"busybox cold pull+unpack   {fmt(cold)}")
            print(f"busybox IfNotPresent hit   {fmt(hit)}")
            print(f"busybox Always (HEAD only) {fmt(always)}")
            await big_layer(server, work, runs)
        finally:
            server.stop()


async def big_layer(server: RegistryServer, work: Path, runs: int) -> None:
    src = Path("/usr/lib/python3.11")
    layer = Layer.build(dir_entries(src, "usr/lib/python3"))
    files = layer.tar.count(b"ustar")
    Pusher(server.url).push_image("bench/big", "1", Image([layer]))
    mib = len(layer.tar) / (1 << 20)
    print(f"big layer: {mib:.1f} MiB tar, {len(layer.gz) / (1 << 20):.1f} MiB gz, ~{files} members")
    times = []
    for n in range(runs):
        async with await ImageService.open(work / f"store-big{n}") as svc:
            times.append(await timed(lambda s=svc: s.ensure(f"{server.host}/bench/big:1")))  # type: ignore[misc]
    print(f"big cold pull+unpack       {fmt(times)}  = {mib / statistics.median(times):.0f} MiB/s of tar")
    gz = work / "big.tar.gz"
    gz.write_bytes(layer.gz)
    gnu = []
    for n in range(runs):
        dest = work / f"gnu{n}"
        dest.mkdir()
        t0 = time.perf_counter()
        subprocess.run(["tar", "-xzf", str(gz), "--numeric-owner", "-C", str(dest)], check=True)
        gnu.append(time.perf_counter() - t0)
    print(f"GNU tar -xzf (same layer)  {fmt(gnu)}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--dir", default="/var/tmp", help="scratch directory (store, registry data)")
    args = parser.parse_args()
    import benchlib  # bench/ is on sys.path: the script's own directory

    benchlib.run(benchlib.Results("images"), lambda: asyncio.run(main(args.runs, args.dir)))
