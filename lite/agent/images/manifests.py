"""Pure helpers over manifest documents: platform choice in an index/list, descriptors of an image manifest.

Accepted: OCI image index, Docker manifest list v2, OCI image manifest, Docker image manifest v2 (schema 2).
Docker schema 1 is refused, as containerd 2 does. Index entries whose platform is not linux/<host arch>
(including `unknown/unknown` attestation manifests) are never chosen.
"""

from __future__ import annotations

import platform
from typing import Any

from lite.agent.images.errors import ImagePullError
from lite.records import dataclass

_MACHINE_TO_ARCH = {
    "x86_64": ("amd64", ""),
    "amd64": ("amd64", ""),
    "aarch64": ("arm64", ""),
    "arm64": ("arm64", ""),
    "armv7l": ("arm", "v7"),
    "armv6l": ("arm", "v6"),
    "i686": ("386", ""),
    "i386": ("386", ""),
    "ppc64le": ("ppc64le", ""),
    "s390x": ("s390x", ""),
    "riscv64": ("riscv64", ""),
}


@dataclass(frozen=True)
class Descriptor:
    digest: str
    size: int
    media_type: str = ""


@dataclass(frozen=True)
class ImageManifest:
    config: Descriptor
    layers: tuple[Descriptor, ...]


def host_platform() -> tuple[str, str]:
    """(GOARCH-style architecture, variant) of this machine."""
    machine = platform.machine().lower()
    return _MACHINE_TO_ARCH.get(machine, (machine, ""))


def descriptor(d: Any) -> Descriptor:
    if not isinstance(d, dict) or not isinstance(d.get("digest"), str):
        raise ImagePullError("malformed descriptor in manifest")
    return Descriptor(d["digest"], int(d.get("size", -1)), str(d.get("mediaType", "")))


def select_platform(index: dict[str, Any], arch: str, variant: str = "") -> Descriptor:
    """The manifest for linux/arch(/variant) in an index or manifest list."""
    candidates = [
        e
        for e in index.get("manifests") or ()
        if (e.get("platform") or {}).get("os") == "linux" and e["platform"].get("architecture") == arch
    ]
    want = variant or ("v8" if arch == "arm64" else "")
    for entry in candidates:
        if (entry["platform"].get("variant") or want) == want:
            return descriptor(entry)
    best = candidates[0] if candidates and not variant else None
    if best is None:
        raise ImagePullError(f"no match for platform linux/{arch}{'/' + variant if variant else ''} in manifest")
    return descriptor(best)


def parse_image_manifest(doc: dict[str, Any]) -> ImageManifest:
    if doc.get("schemaVersion") == 1:
        raise ImagePullError("Docker schema 1 manifests are not supported; push the image with a newer client")
    if "config" not in doc:
        raise ImagePullError("manifest has no config descriptor")
    return ImageManifest(descriptor(doc["config"]), tuple(descriptor(d) for d in doc.get("layers") or ()))


def diff_ids(config: dict[str, Any], layer_count: int) -> list[str]:
    ids = (config.get("rootfs") or {}).get("diff_ids") or []
    if not isinstance(ids, list) or len(ids) != layer_count or not all(isinstance(i, str) for i in ids):
        raise ImagePullError(f"image config lists {len(ids)} diff_ids for {layer_count} layers")
    return ids
