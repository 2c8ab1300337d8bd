"""The small Python test image: busybox plus python3.11 and its libraries unpacked from Debian debs.

`python_layer(workdir)` downloads 17 debs once (`apt-get download`, network to the Debian mirror) into a
cache (`$LITE_TEST_DEB_CACHE`, default /var/tmp/lite-test-debs), `dpkg -x`es them into a scratch rootfs,
adds `usr/bin/python3 -> python3.11`, and returns one deterministic layer (about 45 MB, 16 MB gz) meant to
sit on top of the busybox layer. `import http.server, sqlite3, ssl, ctypes, asyncio` works in it.
Raises `PythonImageUnavailable` when apt-get or dpkg cannot provide the debs (tests skip on it).

`packages_layer(["kubernetes"])` is a further layer with those distributions of the running interpreter's
environment (the test venv) and their whole runtime dependency closure (`importlib.metadata` requirements,
markers evaluated here, extras left out) in `usr/lib/python3/dist-packages`, which Debian's python3.11 has on
`sys.path`: every file a distribution's RECORD lists, .dist-info included, minus `__pycache__` and anything
outside site-packages (console scripts). Compiled extensions are cp311 manylinux builds, which Debian's
python3.11 loads. No network. The layer is deterministic (sorted entries, owners 0, mtime 0) and cached as
`<cache>/layers/<key>.tar.gz`, the key hashing the helper's layout version and every distribution's name,
version and RECORD, so a changed venv makes a new layer. `from kubernetes import client, config` works in
busybox + `python_layer` + `packages_layer(["kubernetes"])`.
"""

from __future__ import annotations

import gzip
import hashlib
import importlib.metadata as metadata
import os
import shutil
import subprocess
import sys
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

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


SITE_PACKAGES = "usr/lib/python3/dist-packages"
PACKAGES_LAYOUT = "1"  # bump when the layer's layout changes (invalidates cached layers)


def dependency_closure(roots: list[str]) -> list[metadata.Distribution]:
    """The installed distributions `roots` need at run time, themselves included, sorted by name.

    Raises `PythonImageUnavailable` when one is not installed here."""
    found: dict[str, metadata.Distribution] = {}
    todo = list(roots)
    while todo:
        name = canonicalize_name(todo.pop())
        if name in found:
            continue
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError as e:
            raise PythonImageUnavailable(f"{name} is not installed in {sys.prefix}") from e
        found[name] = dist
        for text in dist.requires or []:
            req = Requirement(text)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(req.name)
    return [found[n] for n in sorted(found)]


def _dist_files(dist: metadata.Distribution) -> list[tuple[str, Path]]:
    out = []
    for rel in dist.files or []:
        name = str(rel)
        if name.startswith("..") or "__pycache__" in rel.parts:
            continue
        path = Path(str(dist.locate_file(rel)))
        if path.is_file():
            out.append((name, path))
    return out


def _layer_key(dists: list[metadata.Distribution]) -> str:
    h = hashlib.sha256(f"layout {PACKAGES_LAYOUT}\n".encode())
    for dist in dists:
        h.update(f"{dist.metadata['Name']} {dist.version}\n".encode())
        h.update((dist.read_text("RECORD") or "").encode())
    return h.hexdigest()[:24]


def packages_layer(roots: list[str]) -> Layer:
    """One layer holding `roots` and their dependency closure (see the module docstring); cached."""
    dists = dependency_closure(roots)
    cached = deb_cache() / "layers" / f"{_layer_key(dists)}.tar.gz"
    if cached.exists():
        gz = cached.read_bytes()
        return Layer(gzip.decompress(gz), gz)
    files: dict[str, Path] = {}
    for dist in dists:
        files.update(_dist_files(dist))
    dirs = {str(Path(name).parents[i]) for name in files for i in range(len(Path(name).parents) - 1)}
    entries = [Entry(f"{SITE_PACKAGES}/{d}", "dir", mode=0o755) for d in sorted(dirs)]
    entries += [Entry(f"{SITE_PACKAGES}/{name}", data=path.read_bytes(), mode=0o755 if os.access(path, os.X_OK)
                      else 0o644) for name, path in sorted(files.items())]
    parents = [Entry(p, "dir", mode=0o755) for p in ("usr", "usr/lib", "usr/lib/python3", SITE_PACKAGES)]
    layer = Layer.build(parents + sorted(entries, key=lambda e: e.name))
    cached.parent.mkdir(parents=True, exist_ok=True)
    tmp = cached.with_suffix(f".tmp{os.getpid()}")
    tmp.write_bytes(layer.gz)
    tmp.rename(cached)
    return layer
