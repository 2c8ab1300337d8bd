"""Safe extraction of one image layer (tar, optionally gzip) into its own snapshot directory.

Blocking: call it in a worker thread, never on the event loop.

Invariants:
- Nothing is ever written outside `dest`: member names are cleaned lexically (`..` stops at the root), and
  every parent directory is resolved component by component with symlinks followed *inside* `dest`
  (chroot-style, like containerd's `fs.RootPath`); the final component is replaced, never written through.
- OCI whiteouts become overlayfs whiteouts so layer directories stack as overlay lowerdirs: `.wh.<name>`
  → a 0/0 character device `<name>`, `.wh..wh..opq` → xattr `trusted.overlay.opaque=y` on the directory.
  As the image spec says, a whiteout never hides an entry of its own layer.
- Modes are kept exactly (setuid, setgid, sticky), owners are numeric, absolute symlinks stay as written,
  hardlinks must point at an earlier member of the same layer, PAX `SCHILY.xattr.*` xattrs are applied.
- The sha256 of the uncompressed stream (the layer's diff_id) is returned; the caller compares it with the
  image config. A tar that ends right after the last member's data (no padding, no end-of-archive blocks,
  as umoci writes) is accepted; data cut short inside a member is not.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import posixpath
import shutil
import stat
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO, Protocol

from lite.agent.images.errors import ImagePullError

if TYPE_CHECKING:
    import tarfile  # loaded by the first pull or import (an idle agent with cached images never unpacks)

GZIP_MAGIC = b"\x1f\x8b"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
OPAQUE_XATTR = "trusted.overlay.opaque"
_MAX_SYMLINK_HOPS = 40


class Readable(Protocol):
    def read(self, n: int = -1, /) -> bytes: ...


class _HashingReader:
    """Counts and hashes everything read through it (the uncompressed layer stream)."""

    def __init__(self, inner: Readable) -> None:
        self.inner = inner
        self.sha = hashlib.sha256()

    def read(self, n: int = -1) -> bytes:
        data = self.inner.read(n)
        self.sha.update(data)
        return data

    def drain(self) -> None:
        """Hash what follows the archive's end too (diff_ids cover the whole stream). Junk after the
        compressed stream is tolerated: the diff_id comparison is what decides whether content is right."""
        try:
            while self.read(1 << 20):
                pass
        except (gzip.BadGzipFile, EOFError):
            pass


def open_layer(f: BinaryIO) -> Readable:
    """Wrap a layer blob in the right decompressor (by magic bytes, not media type)."""
    head = f.read(4)
    f.seek(0)
    if head.startswith(GZIP_MAGIC):
        return gzip.GzipFile(fileobj=f, mode="rb")
    if head == ZSTD_MAGIC:
        raise ImagePullError("zstd-compressed layers are not supported")
    return f


def unpack_layer(blob: Path, dest: Path) -> tuple[str, int]:
    """Extract `blob` into the existing directory `dest`; return (diff_id, bytes of file data written)."""
    import tarfile

    with blob.open("rb") as f:
        reader = _HashingReader(open_layer(f))
        try:
            with tarfile.open(fileobj=reader, mode="r|") as tar:  # type: ignore[call-overload]
                written = _extract_all(tar, dest)
            reader.drain()
        except (tarfile.TarError, EOFError, gzip.BadGzipFile, OSError) as e:
            raise ImagePullError(f"failed to extract layer {blob.name}: {e}") from e
    return f"sha256:{reader.sha.hexdigest()}", written


def _extract_all(tar: tarfile.TarFile, dest: Path) -> int:
    import tarfile

    written, count = 0, 0
    dir_times: list[tuple[Path, float]] = []
    while True:
        try:
            member = tar.next()
        except tarfile.ReadError:
            if count == 0:
                raise
            break  # truncated after the last complete member (umoci): everything is extracted
        if member is None:
            break
        count += 1
        written += _extract_member(tar, member, dest, dir_times)
    for path, mtime in reversed(dir_times):
        os.utime(path, (mtime, mtime), follow_symlinks=False)
    return written


def _clean(name: str) -> list[str]:
    return [p for p in posixpath.normpath("/" + name).split("/") if p]


def resolve_in_root(root: Path, parts: list[str], *, create: bool) -> Path:
    """Resolve directory `parts` under `root` following symlinks inside root; optionally mkdir missing."""
    stack, done, hops = list(reversed(parts)), list[str](), 0
    while stack:
        part = stack.pop()
        if part in ("", "."):
            continue
        if part == "..":
            if done:
                done.pop()
            continue
        path = root.joinpath(*done, part)
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            if not create:
                raise ImagePullError(f"layer path {'/'.join([*done, part])} does not exist") from None
            os.mkdir(path, 0o755)
            done.append(part)
            continue
        if stat.S_ISLNK(st.st_mode):
            hops += 1
            if hops > _MAX_SYMLINK_HOPS:
                raise ImagePullError(f"too many symlinks resolving {'/'.join(parts)}")
            target = os.readlink(path)
            if target.startswith("/"):
                done = []
            stack.extend(reversed(target.split("/")))
        elif stat.S_ISDIR(st.st_mode):
            done.append(part)
        else:
            raise ImagePullError(f"layer path {'/'.join([*done, part])} is not a directory")
    return root.joinpath(*done)


def _remove(path: Path) -> None:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(st.st_mode):
        shutil.rmtree(path)
    else:
        os.unlink(path)


def _extract_member(tar: tarfile.TarFile, m: tarfile.TarInfo, root: Path, dir_times: list[tuple[Path, float]]) -> int:
    parts = _clean(m.name)
    if not parts:
        if m.isdir():
            _set_meta(root, m)
        return 0
    parent = resolve_in_root(root, parts[:-1], create=True)
    base = parts[-1]
    if base == ".wh..wh..opq":
        os.setxattr(parent, OPAQUE_XATTR, b"y")
        return 0
    if base.startswith(".wh..wh."):
        return 0  # aufs bookkeeping (.wh..wh.plnk etc.), meaningless for overlay
    if base.startswith(".wh."):
        target = parent / base[4:]
        if not os.path.lexists(target):  # a whiteout hides lower layers only, never its own layer's file
            _mknod_whiteout(target)
        return 0
    target = parent / base
    if m.isdir():
        if not (target.is_dir() and not target.is_symlink()):
            _remove(target)
            os.mkdir(target, 0o755)
        _set_meta(target, m)
        dir_times.append((target, m.mtime))
        return 0
    _remove(target)
    return _create(tar, m, root, target)


def _create(tar: tarfile.TarFile, m: tarfile.TarInfo, root: Path, target: Path) -> int:
    size = 0
    if m.isreg():
        src = tar.extractfile(m)
        assert src is not None
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        with os.fdopen(fd, "wb") as out:
            shutil.copyfileobj(src, out, 1 << 20)
        size = m.size
    elif m.issym():
        os.symlink(m.linkname, target)
    elif m.islnk():
        os.link(_hardlink_source(root, m), target, follow_symlinks=False)
        return 0  # shares the inode (and its metadata) with the target
    elif m.ischr() or m.isblk():
        kind = stat.S_IFCHR if m.ischr() else stat.S_IFBLK
        os.mknod(target, kind | stat.S_IMODE(m.mode), os.makedev(m.devmajor, m.devminor))
    elif m.isfifo():
        os.mkfifo(target, 0o600)
    else:
        return 0  # unknown member types (e.g. GNU sparse headers already folded) carry no file
    _set_meta(target, m)
    return size


def _hardlink_source(root: Path, m: tarfile.TarInfo) -> Path:
    parts = _clean(m.linkname)
    try:
        src = resolve_in_root(root, parts[:-1], create=False) / parts[-1] if parts else None
    except ImagePullError:
        src = None
    if src is None or not os.path.lexists(src) or (src.is_dir() and not src.is_symlink()):
        raise ImagePullError(f"hardlink {m.name} -> {m.linkname}: target is not an earlier file of this layer")
    return src


def _mknod_whiteout(target: Path) -> None:
    try:
        os.mknod(target, stat.S_IFCHR | 0o000, os.makedev(0, 0))
    except PermissionError as e:
        raise ImagePullError("unpacking a layer with whiteouts needs root (CAP_MKNOD)") from e


def _set_meta(path: Path, m: tarfile.TarInfo) -> None:
    if os.geteuid() == 0:
        os.chown(path, m.uid, m.gid, follow_symlinks=False)
    for key, value in m.pax_headers.items():
        if key.startswith("SCHILY.xattr."):
            try:
                os.setxattr(path, key[13:], value.encode("utf-8", "surrogateescape"), follow_symlinks=False)
            except OSError:
                pass  # xattrs the filesystem or our privileges do not allow are dropped, as containerd does
    if not m.issym():
        os.chmod(path, stat.S_IMODE(m.mode))  # after chown: chown clears setuid/setgid
        os.utime(path, (m.mtime, m.mtime))
    else:
        try:
            os.utime(path, (m.mtime, m.mtime), follow_symlinks=False)
        except NotImplementedError:
            pass
