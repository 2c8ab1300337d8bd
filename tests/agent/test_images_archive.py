"""Air-gap archive extraction: what `read_archive` accepts and refuses, and that it runs on Debian 12's own
Python 3.11.2, whose tarfile has no extraction filters (the `filter=` argument came in 3.11.4)."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import sysconfig
import tarfile
from pathlib import Path

import pytest

from lite.agent.images.archive import read_archive
from lite.agent.images.errors import ImageImportError
from lite.agent.images.store import ContentStore
from tests.helpers.images import Entry, Image, Layer, docker_save_tar, oci_layout_tar

ROOT = Path(__file__).resolve().parents[2]
DEBIAN_PYTHON = Path("/usr/bin/python3")
PLATFORM = ("amd64", "")


def _image() -> Image:
    return Image([Layer.build([Entry("etc/motd", data=b"hi\n")])], cmd=["/bin/true"])


def _tar(path: Path, *members: tarfile.TarInfo) -> Path:
    with tarfile.open(path, "w") as tar:
        for m in members:
            tar.addfile(m, io.BytesIO(b"x" * m.size) if m.isfile() else None)
    return path


def _member(name: str, kind: bytes = tarfile.REGTYPE, link: str = "", size: int = 0) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.size = kind, link, size
    return info


@pytest.mark.parametrize(("members", "words"), [
    ([_member("../evil", size=1)], "points outside the archive"),
    ([_member("/abs/evil", size=1)], "points outside the archive"),
    ([_member("l", tarfile.SYMTYPE, "../../etc/passwd")], "points outside the archive"),
    ([_member("d", tarfile.CHRTYPE)], "neither a file, a directory nor a symlink"),
    ([_member("f", size=1), _member("h", tarfile.LNKTYPE, "f")], "neither a file, a directory nor a symlink"),
])
def test_entries_that_leave_the_archive_or_are_not_plain_are_refused(
        tmp_path: Path, members: list[tarfile.TarInfo], words: str) -> None:
    archive = _tar(tmp_path / "bad.tar", *members)
    with pytest.raises(ImageImportError, match=words):
        read_archive(archive, ContentStore(tmp_path / "store"), PLATFORM)
    assert not (tmp_path / "evil").exists()


def test_docker_save_with_a_symlinked_repeated_layer(tmp_path: Path) -> None:
    """`docker save` stores a layer once and links its other places to it."""
    image = _image()
    plain = tmp_path / "plain.tar"
    docker_save_tar(plain, image, ["app:1"])
    linked = tmp_path / "linked.tar"
    with tarfile.open(plain) as src, tarfile.open(linked, "w") as dst:
        for m in src:
            data = src.extractfile(m) if m.isfile() else None
            if m.name.endswith("manifest.json") and data is not None:
                doc = json.loads(data.read())
                layer = doc[0]["Layers"][0]
                doc[0]["Layers"].append("again/layer.tar")
                body = json.dumps(doc).encode()
                m.size = len(body)
                dst.addfile(m, io.BytesIO(body))
                dst.addfile(_member("again/layer.tar", tarfile.SYMTYPE, f"../{layer}"))
            else:
                dst.addfile(m, data)
    (got,) = read_archive(linked, ContentStore(tmp_path / "store"), PLATFORM)
    assert got.names == ["docker.io/library/app:1"] and len(got.layers) == 2
    assert got.layers[0].digest == got.layers[1].digest


SCRIPT = """
import sys, tarfile
from pathlib import Path
from lite.agent.images.archive import read_archive
from lite.agent.images.store import ContentStore
assert not hasattr(tarfile, "data_filter"), "this Python has extraction filters"
for arg in sys.argv[1:]:
    (image,) = read_archive(Path(arg), ContentStore(Path(arg + ".store")), ("amd64", ""))
    print(image.names[0], image.config_digest)
"""


@pytest.mark.skipif(not DEBIAN_PYTHON.exists(), reason="no /usr/bin/python3 (Debian's own Python)")
def test_import_runs_on_debian_12s_python_without_extraction_filters(tmp_path: Path) -> None:
    """The agent's import on the Python a `pip install` on stock Debian 12 runs (3.11.2), with this venv's
    compiled dependencies (same cp311 ABI) on its path."""
    probe = subprocess.run([DEBIAN_PYTHON, "-c", "import sys, tarfile; "
                            "print(sys.version_info[:2] == (3, 11) and not hasattr(tarfile, 'data_filter'))"],
                           capture_output=True, text=True, check=True)
    if probe.stdout.strip() != "True":
        pytest.skip(f"{DEBIAN_PYTHON} is not a Python 3.11 without tarfile extraction filters")
    image = _image()
    docker_save_tar(tmp_path / "d.tar", image, ["app:1"])
    oci_layout_tar(tmp_path / "o.tar", image, "registry.local/app:2")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), sysconfig.get_paths()["purelib"],
                                                        sysconfig.get_paths()["platlib"]])}
    out = subprocess.run([DEBIAN_PYTHON, "-c", SCRIPT, str(tmp_path / "d.tar"), str(tmp_path / "o.tar")],
                         capture_output=True, text=True, env=env, timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split("\n")[:2] == [f"docker.io/library/app:1 {image.config(docker=True).digest}",
                                          f"registry.local/app:2 {image.config().digest}"], (out.stdout, sys.version)
