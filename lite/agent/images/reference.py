"""Image references: parse and normalise the way Docker and containerd do.

`busybox` → `docker.io/library/busybox:latest`; `host:5000/ns/img:tag` keeps its registry; a reference may
carry a tag, a digest (`@sha256:<64 hex>`) or both (then the digest is what gets pulled).
Invariant: `str(ImageRef)` is the fully qualified, normalised form and parses back to an equal value.
"""

from __future__ import annotations

import re

from lite.agent.images.errors import InvalidImageNameError
from lite.records import dataclass

DOCKER_HUB = "docker.io"
_COMPONENT = re.compile(r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*")
_DOMAIN = re.compile(r"(?:[a-zA-Z0-9-]+(?:\.[a-zA-Z0-9-]+)*|\[[0-9a-fA-F:]+\])(?::[0-9]+)?")
_TAG = re.compile(r"[\w][\w.-]{0,127}")
_DIGEST = re.compile(r"[a-z0-9]+(?:[.+_-][a-z0-9]+)*:[a-zA-Z0-9=_-]{32,}")
SHA256_DIGEST = re.compile(r"sha256:[a-f0-9]{64}")


@dataclass(frozen=True)
class ImageRef:
    registry: str  # "docker.io", "127.0.0.1:5000"
    repository: str  # "library/busybox", "ns/img"
    tag: str | None = None
    digest: str | None = None

    @property
    def name(self) -> str:
        """Registry plus repository, without tag or digest."""
        return f"{self.registry}/{self.repository}"

    @property
    def reference(self) -> str:
        """What to ask the registry for: the digest when there is one, else the tag."""
        return self.digest or self.tag or "latest"

    def with_digest(self, digest: str) -> str:
        """The `name@digest` form kubelet reports as a repo digest / imageID."""
        return f"{self.name}@{digest}"

    def __str__(self) -> str:
        out = self.name
        if self.tag:
            out += f":{self.tag}"
        if self.digest:
            out += f"@{self.digest}"
        return out


def _split_domain(name: str) -> tuple[str, str]:
    first, sep, rest = name.partition("/")
    if sep and ("." in first or ":" in first or first == "localhost" or first != first.lower()):
        return first, rest
    return DOCKER_HUB, name


def parse(image: str) -> ImageRef:
    """Parse and normalise `image`; raise `InvalidImageNameError` when it is not a valid reference."""
    if not image or image != image.strip() or len(image) > 4096:
        raise InvalidImageNameError(f'invalid reference format: "{image}"')
    rest, _, digest = image.partition("@")
    if digest and not _DIGEST.fullmatch(digest):
        raise InvalidImageNameError(f'invalid reference format: "{image}": bad digest')
    tag = None
    slash = rest.rfind("/")
    colon = rest.rfind(":")
    if colon > slash:
        rest, tag = rest[:colon], rest[colon + 1 :]
        if not _TAG.fullmatch(tag):
            raise InvalidImageNameError(f'invalid reference format: "{image}": bad tag')
    registry, path = _split_domain(rest)
    if registry == "index.docker.io":
        registry = DOCKER_HUB
    if not _DOMAIN.fullmatch(registry):
        raise InvalidImageNameError(f'invalid reference format: "{image}": bad registry')
    parts = path.split("/")
    if not path or not all(_COMPONENT.fullmatch(p) for p in parts):
        raise InvalidImageNameError(f'invalid reference format: "{image}": repository name must be lowercase')
    if registry == DOCKER_HUB and len(parts) == 1:
        path = f"library/{path}"
    if tag is None and not digest:
        tag = "latest"
    return ImageRef(registry, path, tag, digest or None)
