"""Bench: what a seccomp filter costs a container start — sequential `true` containers (busybox root, namespaced
runtime, no network, no cgroups) started and waited for, Unconfined (the baseline, same run) versus
RuntimeDefault (the profile compiled with libseccomp for each start, as the agent does, and installed by init);
plus the compile time alone. Needs root and busybox-static. Prints its figures; asserts nothing about speed.

    python bench/secctx.py [--containers 40]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import io
import statistics
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from lite.agent import seccomp  # noqa: E402
from lite.agent.runtime.container import ContainerSpec, Runtime  # noqa: E402
from tests.helpers.images import busybox_entries, tar_bytes  # noqa: E402


def _spec(base: Path, i: int, rootfs: Path, filtered: bool) -> ContainerSpec:
    d = base / f"c{i}"
    for sub in ("upper", "work"):
        (d / sub).mkdir(parents=True)
    program = ""
    if filtered:
        program = base64.b64encode(seccomp.compile_profile(seccomp.runtime_default(set()))).decode()
    return ContainerSpec(id=f"bench-secctx-{i}", argv=["true"], state_dir=str(d / "state"),
                         log_path=str(d / "log"), rootfs_lowerdirs=[str(rootfs)], upperdir=str(d / "upper"),
                         workdir=str(d / "work"), seccomp=program)


async def _starts(runtime: Runtime, base: Path, rootfs: Path, n: int, filtered: bool, offset: int) -> list[float]:
    times = []
    for i in range(n):
        t = time.perf_counter()
        spec = _spec(base, offset + i, rootfs, filtered)
        status = await runtime.wait(await runtime.start(spec))
        if status.code != 0:
            raise SystemExit(f"container failed: {status}")
        times.append(time.perf_counter() - t)
    return times


async def main(n: int) -> None:
    with tempfile.TemporaryDirectory(prefix="bench-secctx-") as tmp:
        base = Path(tmp)
        rootfs = base / "rootfs"
        with tarfile.open(fileobj=io.BytesIO(tar_bytes(busybox_entries()))) as tar:
            tar.extractall(rootfs, filter="fully_trusted")
        runtime = Runtime()
        try:
            await _starts(runtime, base, rootfs, 3, False, 10_000)  # warm the zygote
            plain: list[float] = []
            filtered: list[float] = []
            for rnd in range(4):  # interleaved rounds: load changes hit both alike
                plain += await _starts(runtime, base, rootfs, n // 4, False, rnd * n)
                filtered += await _starts(runtime, base, rootfs, n // 4, True, rnd * n + n // 2)
        finally:
            runtime.close()
        t = time.perf_counter()
        for _ in range(100):
            seccomp.compile_profile(seccomp.runtime_default(set()))
        compile_ms = (time.perf_counter() - t) * 10
    for name, xs in (("Unconfined (baseline)", plain), ("RuntimeDefault", filtered)):
        print(f"{name:24} {len(xs)} starts: p50 {statistics.median(xs) * 1000:6.1f} ms, "
              f"{len(xs) / sum(xs):6.1f} starts/s")
    print(f"RuntimeDefault compile (libseccomp) alone: {compile_ms:.2f} ms")


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--containers", type=int, default=40)
    import benchlib  # bench/ is on sys.path: the script's own directory

    benchlib.run(benchlib.Results("secctx"), lambda: asyncio.run(main(ap.parse_args().containers)))
