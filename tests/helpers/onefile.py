"""The single `lite` executable (packaging/build.sh), built at most once per source tree and reused.

`built_onefile()` returns `<cache>/<key>/dist/bin/lite`, where the key hashes every tracked and untracked
(not ignored) file under lite/ and packaging/, pyproject.toml, the Python version and the PyInstaller version:
a changed source means a new build, an unchanged one is reused across test modules and test runs.

Invariants: builds are serialised by a lock file and land by one rename (a concurrent run waits and reuses
the result, never sees a half-written file); only the newest few builds are kept; nothing goes into the repo.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CACHE = Path(os.environ.get("LITE_ONEFILE_CACHE", "/var/tmp/lite-onefile"))
KEEP = 3  # builds kept in the cache (each ~40 MB plus its onedir)


def source_files(root: Path = ROOT, tops: tuple[str, ...] = ("lite", "packaging"),
                 files: tuple[str, ...] = ("pyproject.toml",)) -> list[str]:
    """The tracked and untracked (not ignored) files under `tops`, plus `files`, relative to `root`, sorted."""
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z", *tops, *files], cwd=root,
                            capture_output=True)
    if listed.returncode == 0:
        names = [os.fsdecode(f) for f in listed.stdout.split(b"\0") if f]
    else:  # not a git checkout: every file but caches
        names = [str(p.relative_to(root)) for top in tops for p in (root / top).rglob("*")
                 if p.is_file() and "__pycache__" not in p.parts] + list(files)
    return sorted(n for n in names if (root / n).is_file())


def hash_files(h: hashlib._Hash, root: Path, names: list[str]) -> None:
    for name in names:
        h.update(os.fsencode(name) + b"\0" + (root / name).read_bytes() + b"\0")


def source_key(root: Path = ROOT, python: str = sys.executable) -> str:
    """A hash of what the executable is built from."""
    h = hashlib.sha256()
    hash_files(h, root, source_files(root))
    versions = subprocess.run([python, "-c", "import sys, PyInstaller; print(sys.version, PyInstaller.__version__)"],
                              capture_output=True, text=True, check=True).stdout
    h.update(versions.encode())
    return h.hexdigest()[:20]


def built_onefile(python: str = sys.executable, cache: Path = CACHE) -> Path:
    """The one-file executable of this tree, built now (about 30-60 s) unless the cache has it."""
    final = cache / source_key(python=python)
    exe = final / "dist" / "bin" / "lite"
    if exe.is_file():
        return exe
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if exe.is_file():
            return exe
        work = cache / f".build-{os.getpid()}"
        shutil.rmtree(work, ignore_errors=True)
        try:
            env = {**os.environ, "DIST_DIR": str(work / "dist"), "WORK_DIR": str(work / "work")}
            done = subprocess.run(["bash", str(ROOT / "packaging" / "build.sh"), python], cwd=ROOT, env=env,
                                  capture_output=True, text=True, timeout=900)
            if done.returncode != 0:
                raise RuntimeError(f"packaging/build.sh failed:\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
            shutil.rmtree(work / "work", ignore_errors=True)
            os.rename(work, final)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        old = sorted((p for p in cache.iterdir() if p.is_dir() and not p.name.startswith(".")),
                     key=lambda p: p.stat().st_mtime, reverse=True)
        for stale in old[KEEP:]:
            shutil.rmtree(stale, ignore_errors=True)
    return exe
