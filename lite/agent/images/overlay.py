"""Mount and unmount an image rootfs as overlayfs over per-layer snapshot directories (root only).

Blocking but tiny (one mount(2)/umount2(2) syscall): callable from the loop or a thread.

Invariants:
- `layers` are given top first, exactly as `ImageService.rootfs_layers` returns them.
- Paths may not contain `,` or `:` (overlay's option separators) and the option string must fit in a page,
  the kernel's limit for mount data (about 40 layers with the store's path layout).
- `unmount_rootfs` is idempotent: unmounting something not mounted is not an error.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
from pathlib import Path

_MNT_DETACH = 2
_PAGE = os.sysconf("SC_PAGE_SIZE")


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


def overlay_options(layers: list[Path], upper: Path, work: Path) -> str:
    if not layers:
        raise ValueError("overlay needs at least one lower layer")
    for p in (*layers, upper, work):
        if "," in str(p) or ":" in str(p):
            raise ValueError(f"overlay path {p} contains ',' or ':'")
    # index=off: several containers mount the same lowerdirs; the inode index would tie them to one upper
    opts = "lowerdir=" + ":".join(map(str, layers)) + f",upperdir={upper},workdir={work},index=off"
    if len(opts) >= _PAGE:
        raise ValueError(f"overlay options are {len(opts)} bytes, over the {_PAGE}-byte mount data limit")
    return opts


def mount_rootfs(layers: list[Path], upper: Path, work: Path, target: Path) -> None:
    """Mount overlay(layers top first, upper, work) at `target`.

    `upper` and `work` must be empty directories on one filesystem. A read-only root filesystem is made by
    remounting the result read-only (as runc does), not by leaving out the upper dir: overlay without one
    needs two lowerdirs.
    """
    opts = overlay_options(layers, upper, work)
    rc = _libc().mount(b"overlay", os.fsencode(target), b"overlay", 0, opts.encode())
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount overlay on {target}: {os.strerror(err)}")


def unmount_rootfs(target: Path, *, lazy: bool = False) -> None:
    """Unmount `target`; ignores 'not mounted'. `lazy` detaches a busy mount (MNT_DETACH)."""
    rc = _libc().umount2(os.fsencode(target), _MNT_DETACH if lazy else 0)
    if rc != 0:
        err = ctypes.get_errno()
        if err in (errno.EINVAL, errno.ENOENT):
            return
        raise OSError(err, f"umount {target}: {os.strerror(err)}")
