"""The cache's files: one per section in `<data-dir>/agent/cache/`, each replaced atomically, some encrypted.

Layout: `<section>.json` (JSON) or, for `state.ENCRYPTED` sections (Secrets, service-account tokens),
`<section>.enc` = b"LC1" + 12-byte nonce + AES-256-GCM(JSON, associated data = the section name), under the
node key `<data-dir>/agent/credentials/cache.key` (32 random bytes, made on first use, 0600). Directory 0700,
files 0600.

Invariants:
- A section file is whole or absent: written by `lite.atomicfile` (a temporary file in the same directory,
  O_EXCL, 0600, fsynced, renamed over the old one, then the directory is fsynced). A crash leaves the old or the
  new file, plus at most a temporary file (`atomicfile.is_temp`, or `.tmp-*` from older versions), which `load`
  removes. A section removed is unlinked.
- A Secret's value is never written in clear: only its section's ciphertext reaches the disk. Removing a
  Secret rewrites its section without it (the old ciphertext is replaced, not scrubbed from the device).
- A file that cannot be read, decrypted (another key, tampering) or parsed is skipped with one logged error;
  the others still load.
Blocking (file I/O, fsync): call from a thread.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

if TYPE_CHECKING:  # loaded only when a Secret or token is written or read: ~13 MB of RSS that the agent
    # `lite server` embeds (no cache) and an agent whose pods use no Secret never pay
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from lite import atomicfile
from lite.agent.cache.state import ENCRYPTED

log = logging.getLogger("lite.agent.cache")
MAGIC = b"LC1"
KEY_BYTES = 32


def load_key(path: Path) -> bytes:
    """The node's cache key: read, or made (random, 0600) when there is none yet."""
    with contextlib.suppress(FileNotFoundError):
        key = path.read_bytes()
        if len(key) != KEY_BYTES:
            raise ValueError(f"{path}: not a {KEY_BYTES}-byte key")
        return key
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    key = secrets.token_bytes(KEY_BYTES)
    try:
        _write_new(path, key)
    except FileExistsError:  # another process made it meanwhile: use theirs
        return load_key(path)
    return key


def _write_new(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)


class CacheFiles:
    """Section files under `directory`, encrypted ones under the key at `key_file` (read or made lazily)."""

    def __init__(self, directory: Path, key_file: Path) -> None:
        self.directory, self.key_file = directory, key_file
        self._aead: AESGCM | None = None

    def _cipher(self) -> AESGCM:
        if self._aead is None:
            from cryptography.hazmat.primitives.ciphers.aead import AESGCM

            self._aead = AESGCM(load_key(self.key_file))
        return self._aead

    def path(self, section: str) -> Path:
        return self.directory / (f"{section}.enc" if section in ENCRYPTED else f"{section}.json")

    def encode(self, section: str, data: Any) -> bytes:
        """The file bytes of a section (orjson holds the GIL while it serialises: the loop cannot change the
        objects meanwhile)."""
        raw = orjson.dumps(data)
        if section not in ENCRYPTED:
            return raw
        nonce = secrets.token_bytes(12)
        return MAGIC + nonce + self._cipher().encrypt(nonce, raw, section.encode())

    def decode(self, section: str, blob: bytes) -> Any:
        if section in ENCRYPTED:
            if not blob.startswith(MAGIC) or len(blob) < len(MAGIC) + 12:
                raise ValueError("not an encrypted cache section")
            nonce, body = blob[len(MAGIC):len(MAGIC) + 12], blob[len(MAGIC) + 12:]
            blob = self._cipher().decrypt(nonce, body, section.encode())
        return orjson.loads(blob)

    def write(self, section: str, blob: bytes | None) -> None:
        """Replace (or, for None, remove) one section's file."""
        self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        path = self.path(section)
        if blob is None:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
                atomicfile.fsync_dir(self.directory)
            return
        atomicfile.write(path, blob, mode=0o600)

    def load(self) -> tuple[dict[str, Any], dict[str, int], set[str]]:
        """(section → data, section → file size, sections that exist but failed to load); removes leftover
        temporary files."""
        data: dict[str, Any] = {}
        sizes: dict[str, int] = {}
        failed: set[str] = set()
        if not self.directory.is_dir():
            return data, sizes, failed
        for path in sorted(self.directory.iterdir()):
            if atomicfile.is_temp(path.name) or path.name.startswith(".tmp-"):  # .tmp-*: before lite.atomicfile
                with contextlib.suppress(OSError):
                    path.unlink()
                continue
            section, suffix = path.stem, path.suffix
            if suffix not in (".json", ".enc") or (suffix == ".enc") != (section in ENCRYPTED):
                continue
            try:
                blob = path.read_bytes()
                data[section] = self.decode(section, blob)
                sizes[section] = len(blob)
            except Exception as e:  # unreadable, another key, tampered, bad JSON: skip this section only
                log.error("desired-state cache: cannot load %s: %s", path, e or type(e).__name__)
                failed.add(section)
        return data, sizes, failed
