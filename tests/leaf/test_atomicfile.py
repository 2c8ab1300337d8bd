"""lite.atomicfile on a real file system: exact modes whatever the umask, replacement of an existing file, a real
failure mid-write (EFBIG past RLIMIT_FSIZE, in a child) leaves the old file and no temporary file, the directory
and then the directory are fsynced (the real fsync, its descriptors identified), a link planted at the temporary
name is not followed, and `is_temp` recognises the names `write` uses."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from lite import atomicfile


@pytest.fixture
def umask_077() -> Iterator[None]:
    old = os.umask(0o077)  # narrower than any mode asked for: the result must not depend on it
    try:
        yield
    finally:
        os.umask(old)


@pytest.mark.parametrize(("mode", "data", "content"), [
    (0o600, b"key", b"key"),
    (0o644, "text é", "text é".encode()),
    (0o640, b"", b""),
    (0o755, b"x" * 300_000, b"x" * 300_000),
])
def test_writes_content_with_exact_mode(tmp_path: Path, umask_077: None, mode: int, data: bytes | str,
                                        content: bytes) -> None:
    target = tmp_path / "f"
    atomicfile.write(target, data, mode=mode)
    assert target.read_bytes() == content
    assert stat.S_IMODE(target.stat().st_mode) == mode
    assert [p.name for p in tmp_path.iterdir()] == ["f"]


@pytest.mark.parametrize(("old_mode", "new_mode"), [(0o644, 0o600), (0o600, 0o644)])
def test_replaces_an_existing_file_and_its_mode(tmp_path: Path, old_mode: int, new_mode: int) -> None:
    target = tmp_path / "f"
    atomicfile.write(target, b"old content, longer than the new", mode=old_mode)
    old_inode = target.stat().st_ino
    atomicfile.write(target, b"new", mode=new_mode)
    assert target.read_bytes() == b"new"
    assert stat.S_IMODE(target.stat().st_mode) == new_mode
    assert target.stat().st_ino != old_inode  # a new file renamed over, never the old one rewritten in place
    assert [p.name for p in tmp_path.iterdir()] == ["f"]


def test_not_durable_is_still_a_whole_replacement(tmp_path: Path) -> None:
    target = tmp_path / "hosts"
    atomicfile.write(target, "a\n", mode=0o644, durable=False)
    atomicfile.write(target, "b\n", mode=0o644, durable=False)
    assert target.read_text() == "b\n" and stat.S_IMODE(target.stat().st_mode) == 0o644
    assert [p.name for p in tmp_path.iterdir()] == ["hosts"]


def test_a_failed_write_leaves_the_old_file_and_no_temporary_file(tmp_path: Path) -> None:
    """A real write failure (EFBIG past RLIMIT_FSIZE, in a child process) in the middle of a replacement."""
    target = tmp_path / "pods.json"
    atomicfile.write(target, b"old and whole")
    script = ("import resource, signal, sys; from pathlib import Path\n"
              "from lite import atomicfile\n"
              "signal.signal(signal.SIGXFSZ, signal.SIG_IGN); resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))\n"
              "try:\n    atomicfile.write(Path(sys.argv[1]), b'n' * 100000)\nexcept OSError as e:\n"
              "    print(e.errno); sys.exit(3)\n")
    out = subprocess.run([sys.executable, "-c", script, str(target)], capture_output=True, text=True, timeout=30)
    assert out.returncode == 3, out.stderr
    assert target.read_bytes() == b"old and whole"
    assert [p.name for p in tmp_path.iterdir()] == ["pods.json"]


def test_a_failed_rename_leaves_the_old_file_and_no_temporary_file(tmp_path: Path) -> None:
    """The target is a non-empty directory: the rename fails after the data was written and fsynced."""
    target = tmp_path / "d"
    target.mkdir()
    (target / "inside").write_bytes(b"kept")
    with pytest.raises(OSError):
        atomicfile.write(target, b"new")
    assert (target / "inside").read_bytes() == b"kept"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d"]


def test_the_file_and_then_the_directory_are_fsynced(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The real fsync runs; each call's descriptor is identified (fstat) as the new file's or the directory's."""
    synced: list[str] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        st = os.fstat(fd)
        synced.append("dir" if stat.S_ISDIR(st.st_mode) and st.st_ino == tmp_path.stat().st_ino else
                      "file" if stat.S_ISREG(st.st_mode) else "other")
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    atomicfile.write(tmp_path / "f", b"data")
    assert synced == ["file", "dir"]
    synced.clear()
    atomicfile.write(tmp_path / "f", b"data", durable=False)
    assert synced == []


def test_a_link_at_the_temporary_name_is_not_followed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    victim = tmp_path / "victim"
    victim.write_bytes(b"untouched")
    monkeypatch.setattr(atomicfile, "temp_name", lambda name: f".{name}.planted.tmp")
    (tmp_path / ".f.planted.tmp").symlink_to(victim)
    with pytest.raises(FileExistsError):
        atomicfile.write(tmp_path / "f", b"evil")
    assert victim.read_bytes() == b"untouched" and not (tmp_path / "f").exists()


@pytest.mark.parametrize(("name", "temp"), [
    (atomicfile.temp_name("pods.json"), True),
    (atomicfile.temp_name("ca.pem"), True),
    ("pods.json", False),
    (".hidden", False),
    ("x.tmp", False),
])
def test_is_temp(name: str, temp: bool) -> None:
    assert atomicfile.is_temp(name) is temp


def test_temp_names_are_fresh() -> None:
    assert len({atomicfile.temp_name("f") for _ in range(100)}) == 100
