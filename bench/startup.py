"""Start-up of the shipped executable against the pip install, to choose the build mode by figures.

Builds, in one run: the PyInstaller onedir (packaging/build.sh, dist/lite/), the one file made from it
(packaging/sfx.sh: a shell header + gzip'd tar, unpacked once per version, then exec'd), and PyInstaller's own
onefile (LITE_PYI_ONEFILE=1: unpacks into a fresh /tmp/_MEI* dir on every start). Then prints, for each and
for the pip install's console script (the baseline, measured in the same run):
- size on disk (the onedir unpacked; the one files as shipped);
- `lite --version` wall time;
- exec -> first 200 from GET /readyz of `lite server --disable-agent`, with a fresh data dir (certificates,
  token and store created) and with the existing one (a restart);
- for the sfx file, its first start too (the one-time unpack into an empty LITE_UNPACK_DIR).
Figures are min / median over --runs runs. The machine is shared: compare columns within one run only.

Usage: python bench/startup.py [--runs 5] [--dist DIR (reuse a build there)]   Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import http.client
import os
import shutil
import signal
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _build(dist: Path, work: Path) -> None:
    env = {**os.environ, "DIST_DIR": str(dist), "WORK_DIR": str(work)}
    t = time.perf_counter()
    subprocess.run(["bash", str(ROOT / "packaging" / "build.sh"), sys.executable], env=env, check=True,
                   stdout=subprocess.DEVNULL)
    print(f"build onedir + sfx: {time.perf_counter() - t:.1f} s")
    t = time.perf_counter()
    subprocess.run([sys.executable, "-m", "PyInstaller", "--noconfirm", "--log-level", "WARN", "--distpath",
                    str(dist), "--workpath", str(work), str(ROOT / "packaging" / "lite.spec")],
                   env={**env, "LITE_PYI_ONEFILE": "1"}, check=True, stdout=subprocess.DEVNULL, cwd=ROOT)
    print(f"build PyInstaller onefile: {time.perf_counter() - t:.1f} s")


def _du(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def _readyz(port: int, ctx: ssl.SSLContext) -> bool:
    try:
        conn = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=1)
        conn.request("GET", "/readyz")
        ok = conn.getresponse().status == 200
        conn.close()
        return ok
    except (OSError, http.client.HTTPException):
        return False


def _to_ready(cmd: list[str], data: Path, env: dict[str, str]) -> float:
    """Seconds from exec to the first 200 on /readyz (anonymous, as a load balancer's probe)."""
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    port = _free_port()
    t = time.perf_counter()
    proc = subprocess.Popen([*cmd, "server", "--data-dir", str(data), "--https-listen-port", str(port),
                             "--bind-address", "127.0.0.1", "--disable-agent", "--disable-snapshots"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    try:
        while not _readyz(port, ctx):
            if proc.poll() is not None:
                raise RuntimeError(f"{cmd[0]} server exited with {proc.returncode}")
            if time.perf_counter() - t > 60:
                raise RuntimeError(f"{cmd[0]} server not ready in 60 s")
            time.sleep(0.005)
        return time.perf_counter() - t
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _version_time(cmd: list[str], env: dict[str, str]) -> float:
    t = time.perf_counter()
    subprocess.run([*cmd, "--version"], env=env, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t


def _fmt(xs: list[float]) -> str:
    return f"{min(xs):6.3f} / {statistics.median(xs):6.3f} s"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--dist", default=None, help="reuse the builds in DIR instead of building")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="lite-bench-startup-"))
    try:
        dist = Path(args.dist) if args.dist else tmp / "dist"
        if not args.dist:
            _build(dist, tmp / "work")
        pip = Path(sys.executable).with_name("lite")
        unpack = tmp / "unpack"
        env = {**os.environ, "LITE_UNPACK_DIR": str(unpack)}
        variants = {"pip console script (baseline)": [str(pip)],
                    "onedir (dist/lite/lite)": [str(dist / "lite" / "lite")],
                    "sfx one file, unpacked": [str(dist / "bin" / "lite")],
                    "PyInstaller onefile": [str(dist / "lite-pyi-onefile")]}
        sizes = {"onedir (dist/lite/lite)": dist / "lite", "sfx one file, unpacked": dist / "bin" / "lite",
                 "PyInstaller onefile": dist / "lite-pyi-onefile"}
        print("\nsizes: " + ", ".join(f"{k}: {_du(v) / 1e6:.1f} MB" for k, v in sizes.items()))
        # Round-robin: each run measures every variant once, so a change of load hits all columns alike.
        first_unpack: list[float] = []
        first_ready: list[float] = []
        rows: dict[str, tuple[list[float], list[float], list[float]]] = {
            name: ([], [], []) for name in variants}  # --version, fresh dir, existing dir
        sfx = variants["sfx one file, unpacked"]
        for i in range(args.runs):
            shutil.rmtree(unpack, ignore_errors=True)
            first_unpack.append(_version_time(sfx, env))
            shutil.rmtree(unpack, ignore_errors=True)
            first_ready.append(_to_ready(sfx, tmp / f"first-{i}", env))
            for j, (name, cmd) in enumerate(variants.items()):
                version, fresh, again = rows[name]
                version.append(_version_time(cmd, env))
                data = tmp / f"data-{j}-{i}"
                fresh.append(_to_ready(cmd, data, env))
                again.append(_to_ready(cmd, data, env))
        print(f"\n{args.runs} runs each, min / median (load average {os.getloadavg()[0]:.1f}, "
              f"{os.cpu_count()} CPUs)")
        print(f"{'':32} {'--version':>18} {'readyz, fresh dir':>20} {'readyz, existing dir':>20}")
        for name, (version, fresh, again) in rows.items():
            print(f"{name:32} {_fmt(version):>18} {_fmt(fresh):>20} {_fmt(again):>20}")
        print(f"{'sfx one file, first run (unpack)':32} {_fmt(first_unpack):>18} {_fmt(first_ready):>20}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    import benchlib  # bench/ is on sys.path: the script's own directory

    benchlib.run(benchlib.Results("startup"), main)
