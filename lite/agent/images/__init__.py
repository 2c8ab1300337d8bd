"""Node agent image subsystem: registry pulls, content store, per-layer snapshots, overlay rootfs, import, GC.

Public API (see each module's docstring for its contract):
- `ImageService` (`service.py`): `open(root, registries)`, `ensure(image, policy, pull_secrets)`, `get`,
  `list`, `remove`, `gc(high_pct, low_pct, in_use)`, `rootfs_layers(image)`, `import_archive`, `import_dir`,
  `on_pull` (the agent's metrics hook).
- `ImageInfo`: id (config digest), repo_tags, repo_digests, size, layers, config (Entrypoint, Cmd, Env …).
- `RegistriesConfig` (`registries.py`): k3s `registries.yaml` mirrors, rewrites, auth and TLS.
- `mount_rootfs` / `unmount_rootfs` (`overlay.py`).
- Errors (`errors.py`): `ImageError` and subclasses, each with the kubelet `reason` the pod status shows.
"""

from lite.agent.images.errors import (
    DigestMismatchError,
    ImageError,
    ImageImportError,
    ImageNeverPullError,
    ImageNotFoundError,
    ImageNotPresentError,
    ImagePullError,
    InvalidImageNameError,
)
from lite.agent.images.overlay import mount_rootfs, unmount_rootfs
from lite.agent.images.reference import ImageRef, parse
from lite.agent.images.registries import RegistriesConfig
from lite.agent.images.service import ImageInfo, ImageService

__all__ = [
    "DigestMismatchError",
    "ImageError",
    "ImageImportError",
    "ImageInfo",
    "ImageNeverPullError",
    "ImageNotFoundError",
    "ImageNotPresentError",
    "ImagePullError",
    "ImageRef",
    "ImageService",
    "InvalidImageNameError",
    "RegistriesConfig",
    "mount_rootfs",
    "parse",
    "unmount_rootfs",
]
