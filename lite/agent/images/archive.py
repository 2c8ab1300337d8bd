"""Air-gap import: read a `docker save` tarball or an OCI image layout tarball into the content store.

Blocking (extracts the archive into the store's tmp dir and hashes every blob): run it in a worker thread.

- docker-save: `manifest.json` = [{"Config": "<file>", "RepoTags": ["busybox:latest"], "Layers": ["<file>",
  …]}]. Layer files are stored as blobs as they are (plain tar, or gzip when the bytes say so) and an OCI
  manifest is synthesised so that imported and pulled images look the same in the store. Newer Docker writes
  an OCI layout next to `manifest.json`; the `manifest.json` view is used then because it carries the tags.
- OCI layout: `oci-layout` + `index.json` + `blobs/<alg>/<hex>`; every blob is verified on ingest. Each
  top-level descriptor is an image (an index is narrowed to linux/<arch>); its name comes from the
  annotation `io.containerd.image.name`, else `org.opencontainers.image.ref.name` when that is a full
  reference (a bare tag such as `latest` names nothing).
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
from dataclasses import field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lite.agent.images.distribution import INDEX_TYPES, OCI_MANIFEST
from lite.agent.images.errors import ImageError, ImageImportError, InvalidImageNameError
from lite.agent.images.manifests import Descriptor, descriptor, parse_image_manifest, select_platform
from lite.agent.images.reference import parse
from lite.agent.images.store import ContentStore
from lite.agent.images.unpack import GZIP_MAGIC
from lite.records import dataclass

if TYPE_CHECKING:
    import tarfile  # loaded by the first pull or import (an idle agent with cached images never unpacks)

OCI_LAYER = "application/vnd.oci.image.layer.v1.tar"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"


@dataclass
class ArchiveImage:
    names: list[str]  # normalised references (tags)
    config_digest: str
    config: dict[str, Any]
    layers: list[Descriptor]
    manifest_digests: list[str] = field(default_factory=list)


def read_archive(path: Path, store: ContentStore, platform: tuple[str, str]) -> list[ArchiveImage]:
    import tarfile

    work = Path(tempfile.mkdtemp(dir=store.tmp, prefix="import-"))
    try:
        try:
            with tarfile.open(path, "r:*") as tar:
                _extract_archive(tar, work)  # archive paths only; layer contents stay packed
        except (tarfile.TarError, OSError, EOFError) as e:
            raise ImageImportError(f"{path.name}: not a readable tar archive: {e}") from e
        if (work / "manifest.json").is_file():
            return _docker_save(work, store)
        if (work / "index.json").is_file():
            return _oci_layout(work, store, platform)
        raise ImageImportError(f"{path.name}: neither a docker-save archive nor an OCI layout")
    except ImageImportError:
        raise
    except (ImageError, KeyError, ValueError, TypeError, OSError) as e:
        raise ImageImportError(f"{path.name}: {type(e).__name__}: {e}") from e
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _extract_archive(tar: tarfile.TarFile, work: Path) -> None:
    """Extract the archive's directories, regular files and symlinks into `work`, nothing else.

    Written out instead of `extractall(filter="data")`, whose `filter` argument Python 3.11 gained only in
    3.11.4 (Debian 12 ships 3.11.2): every name and every link target must stay inside `work`; devices, fifos
    and hard links are refused (neither image archive format uses them; `docker save` links repeated layers
    with symlinks); modes are masked to 0o755/0o644 and owners are not restored."""
    root = work.resolve()
    links: list[tuple[Path, str]] = []
    for m in tar:
        target = _inside(root, m.name)
        if m.isdir():
            target.mkdir(mode=0o755, parents=True, exist_ok=True)
        elif m.isfile():
            target.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
            src = tar.extractfile(m)
            if src is None:
                raise ImageImportError(f"archive entry {m.name!r} has no data")
            with src, open(target, "xb") as dst:
                shutil.copyfileobj(src, dst)
            target.chmod(0o755 if m.mode & 0o111 else 0o644)
        elif m.issym():
            _inside(root, str(Path(m.name).parent / m.linkname))  # the link may not point out of the archive
            links.append((target, m.linkname))
        else:
            raise ImageImportError(f"archive entry {m.name!r} is neither a file, a directory nor a symlink")
    for target, linkname in links:  # after the files, so no later member is written through a link
        target.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
        target.symlink_to(linkname)


def _inside(work: Path, name: str) -> Path:
    p = (work / name).resolve()
    if not p.is_relative_to(work.resolve()):
        raise ImageImportError(f"archive entry {name!r} points outside the archive")
    return p


def _docker_save(work: Path, store: ContentStore) -> list[ArchiveImage]:
    out = []
    for entry in json.loads((work / "manifest.json").read_text()):
        config_bytes = _inside(work, entry["Config"]).read_bytes()
        config_digest = "sha256:" + hashlib.sha256(config_bytes).hexdigest()
        store.write_blob(config_bytes, config_digest)
        layers = []
        for name in entry.get("Layers") or ():
            src = _inside(work, name)
            with src.open("rb") as f:
                media = OCI_LAYER + "+gzip" if f.read(2) == GZIP_MAGIC else OCI_LAYER
            size = src.stat().st_size
            tmp = store.temp_file()
            shutil.copyfile(src, tmp)  # copy: one file may be listed by several images
            layers.append(Descriptor(store.ingest(tmp), size, media))
        manifest = {
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "config": {"mediaType": OCI_CONFIG, "digest": config_digest, "size": len(config_bytes)},
            "layers": [{"mediaType": d.media_type, "digest": d.digest, "size": d.size} for d in layers],
        }
        data = json.dumps(manifest, separators=(",", ":")).encode()
        manifest_digest = "sha256:" + hashlib.sha256(data).hexdigest()
        store.write_blob(data, manifest_digest)
        names = [str(parse(t)) for t in entry.get("RepoTags") or ()]
        out.append(ArchiveImage(names, config_digest, json.loads(config_bytes), layers, [manifest_digest]))
    return out


def _oci_layout(work: Path, store: ContentStore, platform: tuple[str, str]) -> list[ArchiveImage]:
    blobs_dir = work / "blobs" / "sha256"
    for blob in sorted(blobs_dir.iterdir()) if blobs_dir.is_dir() else ():
        store.ingest(blob, f"sha256:{blob.name}")
    index = json.loads((work / "index.json").read_text())
    return [_oci_image(store, desc, platform) for desc in index.get("manifests") or ()]


def _read_json(store: ContentStore, digest: str) -> dict[str, Any]:
    doc = json.loads(store.blob_path(digest).read_bytes())
    if not isinstance(doc, dict):
        raise ImageImportError(f"blob {digest} is not a JSON object")
    return doc


def _oci_image(store: ContentStore, top: dict[str, Any], platform: tuple[str, str]) -> ArchiveImage:
    chain = [descriptor(top).digest]
    doc = _read_json(store, chain[0])
    while doc.get("mediaType") in INDEX_TYPES or "manifests" in doc:
        chain.append(select_platform(doc, *platform).digest)
        doc = _read_json(store, chain[-1])
    im = parse_image_manifest(doc)
    config = _read_json(store, im.config.digest)
    return ArchiveImage(_oci_names(top.get("annotations") or {}), im.config.digest, config, list(im.layers), chain)


def _oci_names(annotations: dict[str, str]) -> list[str]:
    for key in ("io.containerd.image.name", "org.opencontainers.image.ref.name"):
        name = annotations.get(key, "")
        if "/" in name or ":" in name:
            try:
                return [str(parse(name))]
            except InvalidImageNameError:
                continue
    return []
