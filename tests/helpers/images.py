"""Test image builders and a registry pusher, stdlib only and synchronous (usable from session fixtures).

- `Layer.build(entries)`: one deterministic layer (PAX tar, mtime 0, gzip mtime 0) from `Entry` values.
- `busybox_entries()`: /bin/busybox (busybox-static) with its applet symlinks, /etc/passwd, /etc/group,
  /www/index.html, /tmp (1777), /root — the standard small test image.
- `whiteout_entries()`: a top layer hiding /bin/vi, making /www opaque, adding /www/new.html and /etc/hello.
- `Image`: layers + config → OCI or Docker v2 manifest; `index_of` builds an OCI index or Docker list.
- `Pusher`: blob upload (HEAD, POST, monolithic PUT) and manifest PUT against a distribution registry.
- `docker_save_tar` / `oci_layout_tar`: air-gap archives of an `Image`.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import ssl
import subprocess
import tarfile
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

OCI_INDEX = "application/vnd.oci.image.index.v1+json"
DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
DOCKER_CONFIG = "application/vnd.docker.container.image.v1+json"
OCI_LAYER_GZ = "application/vnd.oci.image.layer.v1.tar+gzip"
DOCKER_LAYER_GZ = "application/vnd.docker.image.rootfs.diff.tar.gzip"
BUSYBOX = Path("/bin/busybox")


def sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class Blob:
    data: bytes
    media_type: str

    @property
    def digest(self) -> str:
        return sha256(self.data)

    def descriptor(self, **extra: Any) -> dict[str, Any]:
        return {"mediaType": self.media_type, "digest": self.digest, "size": len(self.data), **extra}


@dataclass(frozen=True)
class Entry:
    """One tar member: kind is file, dir, symlink, hardlink, char or fifo."""

    name: str
    kind: str = "file"
    data: bytes = b""
    mode: int = 0o644
    target: str = ""
    uid: int = 0
    gid: int = 0
    xattrs: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Layer:
    tar: bytes  # uncompressed
    gz: bytes

    @property
    def diff_id(self) -> str:
        return sha256(self.tar)

    @classmethod
    def build(cls, entries: list[Entry], *, truncate: bool = False) -> Layer:
        tar = tar_bytes(entries, truncate=truncate)
        return cls(tar, gzip.compress(tar, mtime=0))


_KINDS = {
    "file": tarfile.REGTYPE,
    "dir": tarfile.DIRTYPE,
    "symlink": tarfile.SYMTYPE,
    "hardlink": tarfile.LNKTYPE,
    "char": tarfile.CHRTYPE,
    "fifo": tarfile.FIFOTYPE,
}


def tar_bytes(entries: list[Entry], *, truncate: bool = False) -> bytes:
    """A PAX tar of `entries`; `truncate` cuts the padding and end blocks after the last member (as umoci)."""
    buf = io.BytesIO()
    end_of_data = 0
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for e in entries:
            info = tarfile.TarInfo(e.name)
            info.type = _KINDS[e.kind]
            info.mode, info.uid, info.gid, info.mtime = e.mode, e.uid, e.gid, 0
            info.linkname = e.target
            info.size = len(e.data) if e.kind == "file" else 0
            if e.xattrs:
                info.pax_headers = {f"SCHILY.xattr.{k}": v for k, v in e.xattrs}
            tar.addfile(info, io.BytesIO(e.data) if e.kind == "file" else None)
            end_of_data = buf.tell() - (-info.size % 512)
    data = buf.getvalue()
    return data[:end_of_data] if truncate else data


def busybox_entries() -> list[Entry]:
    out = [Entry(d, "dir", mode=0o755) for d in ("bin", "sbin", "usr", "usr/bin", "usr/sbin", "etc", "www", "root")]
    out.append(Entry("tmp", "dir", mode=0o1777))
    out.append(Entry("bin/busybox", data=BUSYBOX.read_bytes(), mode=0o755))
    applets = subprocess.run([str(BUSYBOX), "--list-full"], capture_output=True, text=True, check=True).stdout
    for path in sorted(set(applets.split()) - {"bin/busybox"}):
        out.append(Entry(path, "symlink", target="/bin/busybox", mode=0o777))
    out += [
        Entry("etc/passwd", data=b"root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n"),
        Entry("etc/group", data=b"root:x:0:\nnogroup:x:65534:\n"),
        Entry("www/index.html", data=b"<h1>hello from lite</h1>\n"),
    ]
    return out


def whiteout_entries() -> list[Entry]:
    return [
        Entry("bin/.wh.vi"),
        Entry("www", "dir", mode=0o755),
        Entry("www/.wh..wh..opq"),
        Entry("www/new.html", data=b"new\n"),
        Entry("etc/hello", data=b"hello\n"),
    ]


@dataclass
class Image:
    layers: list[Layer]
    arch: str = "amd64"
    cmd: list[str] = field(default_factory=lambda: ["/bin/sh"])
    env: list[str] = field(default_factory=lambda: ["PATH=/usr/sbin:/usr/bin:/sbin:/bin"])

    def config(self, docker: bool = False) -> Blob:
        doc = {
            "architecture": self.arch,
            "os": "linux",
            "config": {"Cmd": self.cmd, "Env": self.env, "WorkingDir": "/"},
            "rootfs": {"type": "layers", "diff_ids": [layer.diff_id for layer in self.layers]},
        }
        return Blob(json.dumps(doc, sort_keys=True).encode(), DOCKER_CONFIG if docker else OCI_CONFIG)

    def manifest(self, docker: bool = False) -> Blob:
        layer_type = DOCKER_LAYER_GZ if docker else OCI_LAYER_GZ
        doc = {
            "schemaVersion": 2,
            "mediaType": DOCKER_MANIFEST if docker else OCI_MANIFEST,
            "config": self.config(docker).descriptor(),
            "layers": [Blob(layer.gz, layer_type).descriptor() for layer in self.layers],
        }
        return Blob(json.dumps(doc).encode(), DOCKER_MANIFEST if docker else OCI_MANIFEST)

    def blobs(self, docker: bool = False) -> list[Blob]:
        layer_type = DOCKER_LAYER_GZ if docker else OCI_LAYER_GZ
        return [self.config(docker), *(Blob(layer.gz, layer_type) for layer in self.layers)]


def index_of(images: list[Image], docker: bool = False) -> Blob:
    media = DOCKER_LIST if docker else OCI_INDEX
    doc = {
        "schemaVersion": 2,
        "mediaType": media,
        "manifests": [
            img.manifest(docker).descriptor(platform={"os": "linux", "architecture": img.arch}) for img in images
        ],
    }
    return Blob(json.dumps(doc).encode(), media)


class Pusher:
    """Push to a registry at `base` (e.g. http://127.0.0.1:5000) with the distribution spec's upload flow."""

    def __init__(self, base: str, *, ca_file: Path | None = None) -> None:
        self.base = base.rstrip("/")
        self.context = ssl.create_default_context(cafile=str(ca_file)) if ca_file else None

    def _open(self, req: urllib.request.Request) -> Any:
        return urllib.request.urlopen(req, timeout=30, context=self.context)

    def push_blob(self, repo: str, blob: Blob) -> None:
        head = urllib.request.Request(f"{self.base}/v2/{repo}/blobs/{blob.digest}", method="HEAD")
        try:
            with self._open(head):
                return
        except urllib.error.HTTPError as e:
            if e.code != 404:
                raise
        with self._open(urllib.request.Request(f"{self.base}/v2/{repo}/blobs/uploads/", method="POST")) as r:
            location = r.headers["Location"]
        if location.startswith("/"):
            location = self.base + location
        sep = "&" if "?" in location else "?"
        put = urllib.request.Request(
            f"{location}{sep}digest={blob.digest}",
            data=blob.data,
            method="PUT",
            headers={"Content-Type": "application/octet-stream"},
        )
        with self._open(put) as r:
            assert r.status == 201, r.status

    def push_manifest(self, repo: str, ref: str, manifest: Blob) -> str:
        put = urllib.request.Request(
            f"{self.base}/v2/{repo}/manifests/{ref}",
            data=manifest.data,
            method="PUT",
            headers={"Content-Type": manifest.media_type},
        )
        with self._open(put) as r:
            assert r.status == 201, r.status
            return str(r.headers["Docker-Content-Digest"])

    def push_image(self, repo: str, tag: str, image: Image, docker: bool = False) -> str:
        for blob in image.blobs(docker):
            self.push_blob(repo, blob)
        return self.push_manifest(repo, tag, image.manifest(docker))

    def push_index(self, repo: str, tag: str, images: list[Image], docker: bool = False) -> str:
        for img in images:
            self.push_image(repo, img.manifest(docker).digest, img, docker)
        return self.push_manifest(repo, tag, index_of(images, docker))


@dataclass(frozen=True)
class PushedImages:
    """What `push_test_images` put into the registry (repository `test/busybox` unless said otherwise)."""

    busybox: Image  # one layer, amd64
    busybox_arm64: Image  # same layer, config says arm64
    whiteout: Image  # busybox layer + whiteout layer
    oci_digest: str  # test/busybox:oci  (OCI manifest)
    docker_digest: str  # test/busybox:docker  (Docker v2 manifest)
    index_digest: str  # test/busybox:index  (OCI index, amd64 + arm64)
    list_digest: str  # test/busybox:list  (Docker manifest list, amd64 + arm64)
    wh_digest: str  # test/busybox:wh  (two layers, OCI)
    hub_digest: str  # library/busybox:latest  (for docker.io mirror tests)


def push_test_images(push: Pusher, busybox_layer: Layer) -> PushedImages:
    """Push the standard forms of the busybox test image (see `PushedImages`)."""
    bb = Image([busybox_layer])
    arm = Image([busybox_layer], arch="arm64")
    wh = Image([busybox_layer, Layer.build(whiteout_entries())])
    return PushedImages(
        busybox=bb,
        busybox_arm64=arm,
        whiteout=wh,
        oci_digest=push.push_image("test/busybox", "oci", bb),
        docker_digest=push.push_image("test/busybox", "docker", bb, docker=True),
        index_digest=push.push_index("test/busybox", "index", [arm, bb]),
        list_digest=push.push_index("test/busybox", "list", [arm, bb], docker=True),
        wh_digest=push.push_image("test/busybox", "wh", wh),
        hub_digest=push.push_image("library/busybox", "latest", bb),
    )


def _add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode = len(data), 0o644
    tar.addfile(info, io.BytesIO(data))


def docker_save_tar(path: Path, image: Image, repo_tags: list[str]) -> None:
    """Legacy `docker save` layout: <id>.json config, <layer>/layer.tar (uncompressed), manifest.json."""
    config = image.config(docker=True)
    layer_names = [f"{layer.diff_id[7:]}/layer.tar" for layer in image.layers]
    manifest = [{"Config": f"{config.digest[7:]}.json", "RepoTags": repo_tags, "Layers": layer_names}]
    with tarfile.open(path, "w") as tar:
        _add(tar, f"{config.digest[7:]}.json", config.data)
        for name, layer in zip(layer_names, image.layers, strict=True):
            _add(tar, name, layer.tar)
        _add(tar, "manifest.json", json.dumps(manifest).encode())


def oci_layout_tar(
    path: Path,
    image: Image | list[Image],
    ref_name: str,
    *,
    gz: bool = False,
    annotation: str = "org.opencontainers.image.ref.name",
) -> None:
    """An OCI image layout (oci-layout, index.json, blobs/sha256/…) as a tar (gzipped when `gz`).

    A list of images is written as one multi-platform OCI index that index.json points at."""
    images = image if isinstance(image, list) else [image]
    top = index_of(images) if isinstance(image, list) else images[0].manifest()
    index = {
        "schemaVersion": 2,
        "mediaType": OCI_INDEX,
        "manifests": [top.descriptor(annotations={annotation: ref_name})],
    }
    blobs = {top.digest: top}
    for img in images:
        for blob in [img.manifest(), *img.blobs()]:
            blobs[blob.digest] = blob
    with tarfile.open(path, "w:gz" if gz else "w") as tar:
        _add(tar, "oci-layout", b'{"imageLayoutVersion":"1.0.0"}')
        _add(tar, "index.json", json.dumps(index).encode())
        for digest, blob in sorted(blobs.items()):
            _add(tar, f"blobs/sha256/{digest[7:]}", blob.data)
