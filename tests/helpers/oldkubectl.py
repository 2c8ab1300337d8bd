"""Debian's kubectl 1.20 (package `kubernetes-client`) for the tests of what older clients need.

`/usr/bin/kubectl` is kubectl 1.32 and the Debian package would replace it, so the package is fetched with
`apt-get download` and unpacked into a cache directory outside the repository instead of being installed.
`kubectl_120()` returns the binary's path, or None when it cannot be had (not root, no apt); callers skip
then, except under CI, where the package must be reachable.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

CACHE = Path(os.environ.get("LITE_TEST_CACHE", "/var/cache/lite-tests")) / "kubectl-1.20"
BINARY = CACHE / "usr" / "bin" / "kubectl"


def kubectl_120() -> str | None:
    given = os.environ.get("LITE_KUBECTL_120")
    if given:
        return given
    if BINARY.exists():
        return str(BINARY)
    if os.geteuid() != 0 or shutil.which("apt-get") is None or shutil.which("dpkg-deb") is None:
        return None
    with tempfile.TemporaryDirectory() as tmp:
        os.chmod(tmp, 0o755)  # apt's sandbox user writes the download here
        got = subprocess.run(["apt-get", "download", "-qq", "kubernetes-client"], cwd=tmp, capture_output=True,
                             text=True, timeout=300)
        debs = list(Path(tmp).glob("kubernetes-client_*.deb"))
        if got.returncode != 0 or not debs:
            return None
        CACHE.mkdir(parents=True, exist_ok=True)
        subprocess.run(["dpkg-deb", "-x", str(debs[0]), str(CACHE)], check=True, timeout=120)
    return str(BINARY) if BINARY.exists() else None
