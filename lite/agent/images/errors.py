"""Typed image errors whose `reason` and message the pod runner puts into container status.

Invariants:
- `reason` is exactly the kubelet waiting reason the runner reports for this failure (`ErrImagePull`,
  `ErrImageNeverPull`, `InvalidImageName`); the runner turns repeated `ErrImagePull` into
  `ImagePullBackOff` itself.
- `str(error)` is the human message shown in `containerStatuses[].state.waiting.message`.
"""

from __future__ import annotations


class ImageError(Exception):
    """Base class: any failure of the image subsystem."""

    reason = "ErrImagePull"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class ImagePullError(ImageError):
    """The image could not be resolved, fetched, verified or unpacked."""

    reason = "ErrImagePull"


class ImageNotFoundError(ImagePullError):
    """Every endpoint answered 404 for the manifest (unknown repository or tag)."""


class DigestMismatchError(ImagePullError):
    """Fetched content did not hash to the digest that names it; nothing was stored."""


class ImageNeverPullError(ImageError):
    """imagePullPolicy Never and the image is not present on the node."""

    reason = "ErrImageNeverPull"


class InvalidImageNameError(ImageError):
    """The image reference does not parse."""

    reason = "InvalidImageName"


class ImageNotPresentError(ImageError):
    """A local operation (remove, rootfs_layers) named an image the store does not hold."""

    reason = "ImageNotPresent"


class ImageImportError(ImageError):
    """An air-gap archive could not be imported."""

    reason = "ImageImportFailed"
