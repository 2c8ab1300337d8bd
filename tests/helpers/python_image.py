"""The small Python test image: busybox plus python3.11 and its libraries unpacked from Debian debs.

`python_layer(workdir)` downloads 17 debs once (`apt-get download`, network to the Debian mirror) into a
cache (`$LITE_TEST_DEB_CACHE`, default /var/tmp/lite-test-debs), `dpkg -x`es them into a scratch rootfs,
adds `usr/bin/python3 -> python3.11`, and returns one deterministic layer (about 45 MB, 16 MB gz) meant to
sit on top of the busybox layer. `import http.server, sqlite3, ssl, ctypes, asyncio` works in it.
Raises `PythonImageUnavailable` when apt-get or dpkg cannot provide the debs (tests skip on it).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from tests.helpers.images import Entry, Layer

PYTHON_DEBS = [
    "python3.11-minimal",
    "libpython3.11-minimal",
    "libpython3.11-stdlib",
    "libc6",
    "libexpat1",
    "zlib1g",
    "libffi8",
    "libbz2-1.0",
    "liblzma5",
    "libsqlite3-0",
    "libssl3",
    "libuuid1",
    "libcrypt1",
    "libncursesw6",
    "libtinfo6",
    "libreadline8",
    "libgcc-s1",
]


class PythonImageUnavailable(RuntimeError):
    pass


def deb_cache() -> Path:
    return Path(os.environ.get("LITE_TEST_DEB_CACHE", "/var/tmp/lite-test-debs"))


def download_debs(cache: Path) -> list[Path]:
    cache.mkdir(parents=True, exist_ok=True)
    missing = [p for p in PYTHON_DEBS if not list(cache.glob(f"{p}_*.deb"))]
    if missing:
        if not shutil.which("apt-get"):
            raise PythonImageUnavailable("apt-get is not available")
        proc = subprocess.run(["apt-get", "download", *missing], cwd=cache, capture_output=True, text=True)
        if proc.returncode != 0:
            raise PythonImageUnavailable(f"apt-get download failed: {proc.stderr.strip()[-500:]}")
    return [next(iter(sorted(cache.glob(f"{p}_*.deb")))) for p in PYTHON_DEBS]


def dir_entries(root: Path, prefix: str = "") -> list[Entry]:
    """Entries for a directory tree, sorted, owners 0, modes as on disk (hardlinks become copies)."""
    out = []
    for path in sorted(root.rglob("*")):
        name = f"{prefix}{path.relative_to(root)}"
        mode = path.lstat().st_mode & 0o7777
        if path.is_symlink():
            out.append(Entry(name, "symlink", target=str(path.readlink()), mode=0o777))
        elif path.is_dir():
            out.append(Entry(name, "dir", mode=mode))
        elif path.is_file():
            out.append(Entry(name, data=path.read_bytes(), mode=mode))
    return out


def python_layer(workdir: Path) -> Layer:
    debs = download_debs(deb_cache())
    rootfs = workdir / "python-rootfs"
    shutil.rmtree(rootfs, ignore_errors=True)
    rootfs.mkdir(parents=True)
    for deb in debs:
        proc = subprocess.run(["dpkg", "-x", str(deb), str(rootfs)], capture_output=True, text=True)
        if proc.returncode != 0:
            raise PythonImageUnavailable(f"dpkg -x {deb.name} failed: {proc.stderr.strip()}")
    for doc in ("usr/share/doc", "usr/share/man", "usr/share/lintian"):
        shutil.rmtree(rootfs / doc, ignore_errors=True)
    (rootfs / "usr/bin/python3").symlink_to("python3.11")
    try:
        return Layer.build(dir_entries(rootfs))
    finally:
        shutil.rmtree(rootfs, ignore_errors=True)
