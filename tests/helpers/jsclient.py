"""The official JavaScript client, `@kubernetes/client-node` 2.x, on Node 22, for the tests of what it sends.

npm installs both (the `node` package carries a Node 22 binary) into a cache directory outside the repository;
`.ci/run` installs them on a fresh machine (`python -m tests.helpers.jsclient`). `js_client()` returns the cache
directory, installing on first use when npm is there, or None when they cannot be had; callers skip then,
except under CI. `run(script, *args)` runs one of the scripts beside this module with that Node, from the
cache directory (ES modules resolve packages next to the script, so the script is copied there first).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

CACHE = Path(os.environ.get("LITE_TEST_CACHE", "/var/cache/lite-tests")) / "jsclient"
PACKAGES = ("node@22.23.3", "@kubernetes/client-node@2.0.1")
NODE = CACHE / "node_modules" / ".bin" / "node"
CLIENT = CACHE / "node_modules" / "@kubernetes" / "client-node" / "package.json"
HERE = Path(__file__).resolve().parent


def install() -> bool:
    """npm install the pinned packages into CACHE (a no-op once there); False when npm is missing or fails."""
    if NODE.exists() and CLIENT.exists():
        return True
    npm = shutil.which("npm")
    if npm is None:
        return False
    try:
        CACHE.mkdir(parents=True, exist_ok=True)
    except OSError:
        return False
    got = subprocess.run([npm, "install", "--no-audit", "--no-fund", "--prefix", str(CACHE), *PACKAGES],
                         capture_output=True, text=True, timeout=600)
    if got.returncode != 0:
        sys.stderr.write(got.stdout + got.stderr)
    return NODE.exists() and CLIENT.exists()


def js_client() -> Path | None:
    return CACHE if install() else None


def run(script: str, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    target = CACHE / script
    shutil.copyfile(HERE / script, target)
    return subprocess.run([str(NODE), str(target), *args], capture_output=True, text=True, timeout=timeout,
                          cwd=CACHE)


if __name__ == "__main__":
    ok = install()
    print(f"@kubernetes/client-node on Node 22 in {CACHE}: {'ready' if ok else 'NOT INSTALLED'}")
    sys.exit(0 if ok else 1)
