"""Mount and unmount an image rootfs as overlayfs over per-layer snapshot directories (root only).

Blocking but tiny (a few syscalls): callable from the loop or a thread.

Invariants:
- `layers` are given top first, exactly as `ImageService.rootfs_layers` returns them.
- Paths may not contain `,` or `:` (overlay's option separators).
- When the classic option string fits in a page (the kernel's limit for mount(2) data; about 40 layers with
  the store's path layout) one mount(2) does it; longer stacks go through the new mount API (fsopen,
  fsconfig `lowerdir+` once per layer, fsmount, move_mount; Linux 6.8+), which has no such limit.
- `unmount_rootfs` is idempotent: unmounting something not mounted is not an error.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
from pathlib import Path

_MNT_DETACH = 2
# the new mount API syscalls have the same numbers on every architecture
_SYS_MOVE_MOUNT, _SYS_FSOPEN, _SYS_FSCONFIG, _SYS_FSMOUNT = 429, 430, 431, 432
_FSCONFIG_SET_STRING, _FSCONFIG_CMD_CREATE = 1, 6
_CLOEXEC = 1  # FSOPEN_CLOEXEC, FSMOUNT_CLOEXEC
_MOVE_MOUNT_F_EMPTY_PATH = 0x4
_AT_FDCWD = -100


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


def _check(rc: int, what: str) -> int:
    if rc < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")
    return rc


def overlay_options(layers: list[Path], upper: Path, work: Path) -> str:
    """The classic mount(2) data string (may be longer than a page; `mount_rootfs` decides)."""
    if not layers:
        raise ValueError("overlay needs at least one lower layer")
    for p in (*layers, upper, work):
        if "," in str(p) or ":" in str(p):
            raise ValueError(f"overlay path {p} contains ',' or ':'")
    # index=off: several containers mount the same lowerdirs; the inode index would tie them to one upper
    return "lowerdir=" + ":".join(map(str, layers)) + f",upperdir={upper},workdir={work},index=off"


def mount_rootfs(layers: list[Path], upper: Path, work: Path, target: Path) -> None:
    """Mount overlay(layers top first, upper, work) at `target`.

    `upper` and `work` must be empty directories on one filesystem. A read-only root filesystem is made by
    remounting the result read-only (as runc does), not by leaving out the upper dir: overlay without one
    needs two lowerdirs.
    """
    opts = overlay_options(layers, upper, work)
    if len(opts) < os.sysconf("SC_PAGE_SIZE"):
        libc = _libc()
        _check(libc.mount(b"overlay", os.fsencode(target), b"overlay", 0, opts.encode()), f"mount overlay on {target}")
    else:
        _mount_fsconfig(layers, upper, work, target)


def _mount_fsconfig(layers: list[Path], upper: Path, work: Path, target: Path) -> None:
    libc = _libc()
    libc.syscall.restype = ctypes.c_long
    what = f"mount overlay ({len(layers)} layers) on {target}"
    fs = _check(libc.syscall(_SYS_FSOPEN, b"overlay", _CLOEXEC), f"{what}: fsopen")
    try:
        settings = [*(("lowerdir+", p) for p in layers), ("upperdir", upper), ("workdir", work)]
        for key, path in settings:
            rc = libc.syscall(_SYS_FSCONFIG, fs, _FSCONFIG_SET_STRING, key.encode(), os.fsencode(path), 0)
            _check(rc, f"{what}: {key}={path}")
        _check(libc.syscall(_SYS_FSCONFIG, fs, _FSCONFIG_SET_STRING, b"index", b"off", 0), f"{what}: index")
        _check(libc.syscall(_SYS_FSCONFIG, fs, _FSCONFIG_CMD_CREATE, None, None, 0), f"{what}: create")
        mnt = _check(libc.syscall(_SYS_FSMOUNT, fs, _CLOEXEC, 0), f"{what}: fsmount")
        try:
            rc = libc.syscall(_SYS_MOVE_MOUNT, mnt, b"", _AT_FDCWD, os.fsencode(target), _MOVE_MOUNT_F_EMPTY_PATH)
            _check(rc, f"{what}: move_mount")
        finally:
            os.close(mnt)
    finally:
        os.close(fs)


def unmount_rootfs(target: Path, *, lazy: bool = False) -> None:
    """Unmount `target`; ignores 'not mounted'. `lazy` detaches a busy mount (MNT_DETACH)."""
    rc = _libc().umount2(os.fsencode(target), _MNT_DETACH if lazy else 0)
    if rc != 0:
        err = ctypes.get_errno()
        if err in (errno.EINVAL, errno.ENOENT):
            return
        raise OSError(err, f"umount {target}: {os.strerror(err)}")
