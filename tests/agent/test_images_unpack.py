"""Layer extraction on its own: whiteouts, modes, owners, links, escapes, truncated tars, diff_ids."""

from __future__ import annotations

import gzip
import os
import stat
from pathlib import Path

import pytest

from lite.agent.images.errors import ImagePullError
from lite.agent.images.unpack import OPAQUE_XATTR, unpack_layer
from tests.helpers.images import Entry, sha256, tar_bytes

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (mknod whiteouts, chown, trusted xattrs)")


def unpack(tmp_path: Path, entries: list[Entry], *, compress: bool = True, truncate: bool = False) -> Path:
    raw = tar_bytes(entries, truncate=truncate)
    blob = tmp_path / "blob"
    blob.write_bytes(gzip.compress(raw, mtime=0) if compress else raw)
    dest = tmp_path / "fs"
    dest.mkdir()
    diff_id, _ = unpack_layer(blob, dest)
    assert diff_id == sha256(raw)
    return dest


@pytest.mark.root
@needs_root
def test_whiteouts_become_overlay_whiteouts(tmp_path: Path) -> None:
    fs = unpack(tmp_path, [Entry("bin/.wh.vi"), Entry("www/.wh..wh..opq"), Entry("www/new.html", data=b"x")])
    st = os.lstat(fs / "bin" / "vi")
    assert stat.S_ISCHR(st.st_mode) and st.st_rdev == os.makedev(0, 0)
    assert os.getxattr(fs / "www", OPAQUE_XATTR) == b"y"
    assert not (fs / "www" / ".wh..wh..opq").exists() and not (fs / "bin" / ".wh.vi").exists()
    assert (fs / "www" / "new.html").read_bytes() == b"x"


@pytest.mark.root
@needs_root
def test_whiteout_never_hides_its_own_layer(tmp_path: Path) -> None:
    fs = unpack(tmp_path, [Entry("a", data=b"kept"), Entry(".wh.a"), Entry(".wh.b"), Entry("b", data=b"also")])
    assert (fs / "a").read_bytes() == b"kept" and (fs / "b").read_bytes() == b"also"


@pytest.mark.root
@needs_root
def test_modes_owners_and_xattrs_kept(tmp_path: Path) -> None:
    fs = unpack(
        tmp_path,
        [
            Entry("tmp", "dir", mode=0o1777),
            Entry("bin/su", data=b"#!", mode=0o4755, uid=0, gid=0),
            Entry("bin/wall", data=b"#!", mode=0o2755, uid=1234, gid=5678),
            Entry("data", "dir", mode=0o700, uid=1000, gid=1000),
            Entry("bin/ping", data=b"p", mode=0o755, xattrs=(("user.lite", "yes"),)),
            Entry("dev/null", "char", mode=0o666, target=""),
            Entry("run/fifo", "fifo", mode=0o600),
        ],
    )
    assert stat.S_IMODE((fs / "tmp").stat().st_mode) == 0o1777
    assert stat.S_IMODE((fs / "bin/su").stat().st_mode) == 0o4755
    wall = (fs / "bin/wall").stat()
    assert stat.S_IMODE(wall.st_mode) == 0o2755 and (wall.st_uid, wall.st_gid) == (1234, 5678)
    data = (fs / "data").stat()
    assert stat.S_IMODE(data.st_mode) == 0o700 and (data.st_uid, data.st_gid) == (1000, 1000)
    assert os.getxattr(fs / "bin/ping", "user.lite") == b"yes"
    assert stat.S_ISCHR(os.lstat(fs / "dev/null").st_mode)
    assert stat.S_ISFIFO(os.lstat(fs / "run/fifo").st_mode)


def test_links(tmp_path: Path) -> None:
    fs = unpack(
        tmp_path,
        [
            Entry("bin/busybox", data=b"bb", mode=0o755),
            Entry("bin/sh", "symlink", target="/bin/busybox"),
            Entry("bin/ash", "hardlink", target="bin/busybox"),
            Entry("usr/bin/env", "hardlink", target="./bin/busybox"),
        ],
        compress=False,
    )
    assert os.readlink(fs / "bin/sh") == "/bin/busybox"
    ino = (fs / "bin/busybox").stat().st_ino
    assert (fs / "bin/ash").stat().st_ino == ino == (fs / "usr/bin/env").stat().st_ino


def test_hardlink_outside_layer_rejected(tmp_path: Path) -> None:
    with pytest.raises(ImagePullError, match="hardlink"):
        unpack(tmp_path, [Entry("etc", "dir", mode=0o755), Entry("bin/x", "hardlink", target="etc/shadow")])
    (tmp_path / "2").mkdir()
    with pytest.raises(ImagePullError, match="hardlink"):  # `..` stops at the root: no /etc/passwd there
        unpack(tmp_path / "2", [Entry("x", "hardlink", target="../../../etc/passwd")])


def test_nothing_escapes_the_layer(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    fs = unpack(
        tmp_path,
        [
            Entry("../../../escape1", data=b"1"),
            Entry("/top/escape2", data=b"2"),
            Entry("up", "symlink", target="../../../../.."),
            Entry("up/escape3", data=b"3"),
            Entry("abs", "symlink", target=str(outside)),
            Entry("abs/escape4", data=b"4"),
            Entry("victim", "symlink", target=str(outside / "victim")),
            Entry("victim", data=b"5"),  # replaces the symlink, never writes through it
        ],
    )
    assert list(outside.iterdir()) == []
    assert not (tmp_path / "escape1").exists()
    assert (fs / "escape1").read_bytes() == b"1"
    assert (fs / "top" / "escape2").read_bytes() == b"2"
    assert (fs / "escape3").read_bytes() == b"3"  # `..` stops at the layer root
    assert (fs / str(outside).lstrip("/") / "escape4").read_bytes() == b"4"  # absolute link: inside the root
    assert not (fs / "victim").is_symlink() and (fs / "victim").read_bytes() == b"5"


def test_later_entries_replace_earlier(tmp_path: Path) -> None:
    fs = unpack(
        tmp_path,
        [
            Entry("a", data=b"old"),
            Entry("a", data=b"new"),
            Entry("d", data=b"file"),
            Entry("d", "dir", mode=0o755),
            Entry("d/f", data=b"in"),
        ],
    )
    assert (fs / "a").read_bytes() == b"new"
    assert (fs / "d" / "f").read_bytes() == b"in"


@pytest.mark.parametrize("compress", [True, False])
def test_truncated_final_block_tolerated(tmp_path: Path, compress: bool) -> None:
    entries = [Entry("a", data=b"x" * 100), Entry("b", data=b"y" * 700)]
    fs = unpack(tmp_path, entries, compress=compress, truncate=True)
    assert (fs / "b").read_bytes() == b"y" * 700


def test_data_cut_inside_a_member_rejected(tmp_path: Path) -> None:
    raw = tar_bytes([Entry("a", data=b"x" * 100), Entry("b", data=b"y" * 5000)])
    blob = tmp_path / "blob"
    blob.write_bytes(raw[: 512 * 3 + 1000])
    (tmp_path / "fs").mkdir()
    with pytest.raises(ImagePullError, match="unexpected end of data"):
        unpack_layer(blob, tmp_path / "fs")


def test_zstd_refused(tmp_path: Path) -> None:
    blob = tmp_path / "blob"
    blob.write_bytes(b"\x28\xb5\x2f\xfd" + b"\0" * 100)
    with pytest.raises(ImagePullError, match="zstd"):
        unpack_layer(blob, tmp_path)


def test_junk_after_gzip_stream_tolerated(tmp_path: Path) -> None:
    raw = tar_bytes([Entry("a", data=b"x")])
    blob = tmp_path / "blob"
    blob.write_bytes(gzip.compress(raw, mtime=0) + b"\0" * 1024)
    (tmp_path / "fs").mkdir()
    diff_id, _ = unpack_layer(blob, tmp_path / "fs")
    assert diff_id == sha256(raw)
