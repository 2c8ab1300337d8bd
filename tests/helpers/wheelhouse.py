"""A wheelhouse of lite and its dependencies, for `pip install --no-index --find-links` where there is no network.

`built_wheelhouse()` returns `<cache>/<key>/wheels`: lite's own wheel (built from a copy of the source tree, so
the checkout gets no build/ or egg-info) and a wheel of every dependency, at the versions installed in the test
interpreter's environment (`pip freeze` as constraints: the guest runs what the host tested). The key hashes
lite's sources, pyproject.toml, README.md (the package's readme), the interpreter's version and those pins: a
changed source means a new build, an unchanged one is reused across runs. The wheels are for the interpreter
that builds them (cp311 from a 3.11 venv), so they install on another Python of the same minor version, e.g.
Debian 12's own 3.11.2.

Invariants: builds are serialised by a lock file and land by one rename (a concurrent run waits and reuses the
result, never sees a half-built wheelhouse); only the newest few are kept; nothing is written into the repo.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

from tests.helpers.onefile import ROOT, hash_files, source_files

CACHE = Path(os.environ.get("LITE_WHEELHOUSE_CACHE", "/var/tmp/lite-wheelhouse"))
KEEP = 3  # wheelhouses kept in the cache (each ~15 MB)
SOURCES = {"tops": ("lite",), "files": ("pyproject.toml", "README.md")}


def pins(python: str = sys.executable) -> str:
    """`name==version` of every distribution installed for `python`, but lite itself (an editable install)."""
    frozen = subprocess.run([python, "-m", "pip", "freeze", "--exclude-editable"], capture_output=True, text=True,
                            check=True, timeout=120).stdout
    lines = (ln.strip() for ln in frozen.splitlines())
    return "".join(f"{ln}\n" for ln in sorted(ln for ln in lines if "==" in ln and not ln.startswith("lite==")))


def wheelhouse_key(python: str = sys.executable, root: Path = ROOT) -> tuple[str, str]:
    """(the cache key, the pins it covers)."""
    pinned = pins(python)
    version = subprocess.run([python, "-c", "import sys; print(sys.version)"], capture_output=True, text=True,
                             check=True).stdout
    h = hashlib.sha256()
    hash_files(h, root, source_files(root, **SOURCES))
    h.update(version.encode() + b"\0" + pinned.encode())
    return h.hexdigest()[:20], pinned


def built_wheelhouse(python: str = sys.executable, cache: Path = CACHE) -> Path:
    """The wheelhouse of this tree, built now (about a minute; pip fetches the wheels) unless the cache has it."""
    key, pinned = wheelhouse_key(python)
    final = cache / key
    wheels = final / "wheels"
    if (final / "done").is_file():
        return wheels
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (final / "done").is_file():
            return wheels
        work = cache / f".build-{os.getpid()}"
        shutil.rmtree(work, ignore_errors=True)
        try:
            src = work / "src"
            for name in source_files(ROOT, **SOURCES):
                (src / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(ROOT / name, src / name)
            (work / "constraints.txt").write_text(pinned)
            done = subprocess.run([python, "-m", "pip", "wheel", "-q", "--wheel-dir", str(work / "wheels"),
                                   "--constraint", str(work / "constraints.txt"), str(src)],
                                  cwd=work, capture_output=True, text=True, timeout=900)
            if done.returncode != 0:
                raise RuntimeError(f"pip wheel failed:\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
            if not list((work / "wheels").glob("lite-*.whl")):
                raise RuntimeError(f"pip wheel made no wheel of lite: {sorted(os.listdir(work / 'wheels'))}")
            shutil.rmtree(src)
            (work / "done").write_text(pinned)
            os.rename(work, final)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        old = sorted((p for p in cache.iterdir() if p.is_dir() and not p.name.startswith(".")),
                     key=lambda p: p.stat().st_mtime, reverse=True)
        for stale in old[KEEP:]:
            shutil.rmtree(stale, ignore_errors=True)
    return wheels
