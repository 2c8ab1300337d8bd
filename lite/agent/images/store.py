"""Content store on disk: blobs by digest, one unpacked snapshot directory per layer, one record per image.

Layout under `root`:
```
blobs/sha256/<hex>          manifests, indexes, configs and layer blobs, shared between images
layers/<diff hex>/fs        a layer unpacked on its own (overlay whiteouts), an overlay lowerdir
layers/<diff hex>/size      bytes of file data in fs (for sizing; informative)
images/<config hex>.json    ImageRecord: the image id is the config digest
tmp/                        downloads and unpacks in progress; emptied at open
```
Invariants:
- A blob file exists only with content that hashes to its name; a layer directory exists only when its
  unpack finished and its diff_id was verified (both are committed by an atomic rename from `tmp/`).
- A tag belongs to at most one image record: writing a record takes its tags away from the others.
- Records live in memory (`records`) and are written through on every change (small files, `lite.atomicfile`:
  fsync + atomic replace); a record torn by a crash is dropped at open, so its image is simply pulled again, and
  a crash's leftover temporary files (`*.tmp`) are removed at open.
The methods that touch many files (`ingest`, `unpack`, `on_disk`, `delete_unreferenced`) block: run them in
a thread; `records` is only touched from the event loop thread.
The others do bounded, tiny I/O.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
import tempfile
from dataclasses import asdict, field
from pathlib import Path

from lite import atomicfile
from lite.agent.images.errors import DigestMismatchError, ImagePullError
from lite.agent.images.reference import SHA256_DIGEST
from lite.agent.images.unpack import unpack_layer
from lite.records import dataclass

log = logging.getLogger(__name__)
_HEX = re.compile(r"[a-f0-9]{64}")


@dataclass
class ImageRecord:
    id: str  # config digest
    config: str
    layers: list[str]  # diff_ids, bottom first
    blobs: list[str]  # every blob the image holds: index/manifest(s), config, layer blobs
    size: int  # bytes of the image's blobs (what kubelet reports as sizeBytes)
    repo_tags: list[str] = field(default_factory=list)
    repo_digests: list[str] = field(default_factory=list)
    pulled_at: float = 0.0
    last_used: float = 0.0

    @classmethod
    def from_json(cls, data: dict[str, object]) -> ImageRecord:
        return cls(**data)  # type: ignore[arg-type]


def write_atomic(path: Path, data: bytes) -> None:
    """Replace `path` with `data` (0644) so that a crash leaves the old or the new content: `lite.atomicfile`."""
    atomicfile.write(path, data, mode=0o644)


def hex_of(digest: str) -> str:
    """The hex part of a sha256 digest; rejects anything else (digests name files)."""
    if not SHA256_DIGEST.fullmatch(digest):
        raise ImagePullError(f"unsupported or malformed digest {digest!r}")
    return digest[7:]


class ContentStore:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.blobs = root / "blobs" / "sha256"
        self.layers = root / "layers"
        self.images = root / "images"
        self.tmp = root / "tmp"
        for d in (self.blobs, self.layers, self.images):
            d.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(self.tmp, ignore_errors=True)  # leftovers of a crash mid-download or mid-unpack
        self.tmp.mkdir()
        for torn in [*self.blobs.glob("*.tmp"), *self.images.glob("*.tmp")]:
            torn.unlink()
        self.records: dict[str, ImageRecord] = {}
        for path in self.images.glob("*.json"):
            try:
                rec = ImageRecord.from_json(json.loads(path.read_text()))
            except (ValueError, TypeError) as e:  # torn by a crash: forget it, the image is pulled again
                log.warning("dropping unreadable image record %s: %s", path.name, e)
                path.unlink()
                continue
            self.records[rec.id] = rec

    # -- blobs
    def blob_path(self, digest: str) -> Path:
        return self.blobs / hex_of(digest)

    def has_blob(self, digest: str) -> bool:
        return self.blob_path(digest).exists()

    def temp_file(self) -> Path:
        fd, name = tempfile.mkstemp(dir=self.tmp, prefix="blob-")
        os.close(fd)
        return Path(name)

    def commit_blob(self, tmp: Path, digest: str) -> Path:
        """Move a verified temp file into place (atomic; a concurrent identical commit is harmless)."""
        dest = self.blob_path(digest)
        os.replace(tmp, dest)
        return dest

    def write_blob(self, data: bytes, digest: str) -> None:
        """Store small content already in memory (manifests, configs) after checking its digest."""
        actual = "sha256:" + hashlib.sha256(data).hexdigest()
        if actual != digest:
            raise DigestMismatchError(f"content digest {actual} does not match {digest}")
        if not self.has_blob(digest):
            write_atomic(self.blob_path(digest), data)

    def ingest(self, path: Path, expected: str | None = None) -> str:
        """Hash a file and move it into the blob store (blocking). `path` must be on the store's filesystem."""
        sha = hashlib.sha256()
        with path.open("rb") as f:
            while chunk := f.read(1 << 20):
                sha.update(chunk)
        digest = "sha256:" + sha.hexdigest()
        if expected and expected != digest:
            raise DigestMismatchError(f"{path.name}: content digest {digest} does not match {expected}")
        self.commit_blob(path, digest)
        return digest

    def blob_size(self, digest: str) -> int:
        try:
            return self.blob_path(digest).stat().st_size
        except FileNotFoundError:
            return 0

    # -- layers
    def layer_dir(self, diff_id: str) -> Path:
        return self.layers / hex_of(diff_id) / "fs"

    def has_layer(self, diff_id: str) -> bool:
        return self.layer_dir(diff_id).is_dir()

    def unpack(self, diff_id: str, blob_digest: str) -> Path:
        """Unpack a layer blob into its snapshot dir, verifying the diff_id (blocking)."""
        final = self.layers / hex_of(diff_id)
        work = Path(tempfile.mkdtemp(dir=self.tmp, prefix="layer-"))
        try:
            (work / "fs").mkdir()
            actual, size = unpack_layer(self.blob_path(blob_digest), work / "fs")
            if actual != diff_id:
                raise DigestMismatchError(f"layer {blob_digest}: diff_id {actual} does not match config {diff_id}")
            (work / "size").write_text(str(size))
            if final.exists():
                return final / "fs"  # another pull finished the same layer first
            os.replace(work, final)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        return final / "fs"

    # -- image records
    def put(self, rec: ImageRecord) -> None:
        for other in list(self.records.values()):
            if other.id != rec.id and set(other.repo_tags) & set(rec.repo_tags):
                other.repo_tags = [t for t in other.repo_tags if t not in rec.repo_tags]
                self._write(other)
        self.records[rec.id] = rec
        self._write(rec)

    def _write(self, rec: ImageRecord) -> None:
        path = self.images / f"{hex_of(rec.id)}.json"
        write_atomic(path, json.dumps(asdict(rec), indent=1).encode())

    def find(self, name: str) -> ImageRecord | None:
        """Look up by image id (`sha256:…` or bare hex), normalised tag, or `name@digest`."""
        if name in self.records:
            return self.records[name]
        if f"sha256:{name}" in self.records:
            return self.records[f"sha256:{name}"]
        for rec in self.records.values():
            if name in rec.repo_tags or name in rec.repo_digests:
                return rec
        return None

    def forget(self, image_id: str) -> ImageRecord:
        rec = self.records.pop(image_id)
        (self.images / f"{hex_of(image_id)}.json").unlink(missing_ok=True)
        return rec

    def referenced(self) -> tuple[set[str], set[str]]:
        """(blob digests, diff_ids) still used by some record."""
        blobs: set[str] = set()
        layers: set[str] = set()
        for rec in self.records.values():
            blobs.update(rec.blobs)
            layers.update(rec.layers)
        return blobs, layers

    def on_disk(self) -> tuple[set[str], set[str]]:
        """(blob digests, diff_ids) present on disk (blocking: lists two directories)."""
        blobs = {f"sha256:{p.name}" for p in self.blobs.iterdir() if _HEX.fullmatch(p.name)}
        layers = {f"sha256:{p.name}" for p in self.layers.iterdir() if _HEX.fullmatch(p.name)}
        return blobs, layers

    def delete_unreferenced(self, blobs: set[str], layers: set[str]) -> None:
        """Remove the given blobs and layer dirs (blocking). The caller checked no record uses them."""
        for diff_id in layers:
            shutil.rmtree(self.layers / hex_of(diff_id), ignore_errors=True)
        for digest in blobs:
            self.blob_path(digest).unlink(missing_ok=True)
