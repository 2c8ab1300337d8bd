"""fsGroup volume ownership (kubelet's SetVolumeOwnership) on real trees in a temp dir: group, added mode bits,
setgid directories, symlinks not followed, OnRootMismatch skipping a volume that already matches. Needs root
(chown to another group)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from lite.agent import fsgroup

pytestmark = pytest.mark.root
GID = 4321


@pytest.fixture(autouse=True)
def _root() -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root (chown)")


def _tree(root: Path) -> None:
    (root / "sub").mkdir(parents=True)
    (root / "sub" / "f").write_text("x")
    (root / "secret").write_text("s")
    os.chmod(root / "secret", 0o400)
    os.chmod(root / "sub", 0o700)
    os.symlink("/etc/passwd", root / "link")


def _mode(p: Path) -> int:
    return stat.S_IMODE(os.lstat(p).st_mode)


def test_read_write_volume(tmp_path: Path) -> None:
    vol = tmp_path / "v"
    _tree(vol)
    before = os.stat("/etc/passwd")
    assert fsgroup.set_ownership(str(vol), GID, readonly=False)
    for p in (vol, vol / "sub", vol / "sub" / "f", vol / "secret", vol / "link"):
        assert os.lstat(p).st_gid == GID, p
    assert _mode(vol / "sub") == 0o2770 and _mode(vol / "secret") == 0o660 and _mode(vol / "sub" / "f") & 0o660
    after = os.stat("/etc/passwd")  # the link's target is not touched
    assert (after.st_gid, after.st_mode) == (before.st_gid, before.st_mode)


def test_read_only_volume_gets_group_read_only(tmp_path: Path) -> None:
    vol = tmp_path / "v"
    _tree(vol)
    fsgroup.set_ownership(str(vol), GID, readonly=True)
    assert _mode(vol / "secret") == 0o440 and _mode(vol / "sub") == 0o2750


def test_on_root_mismatch(tmp_path: Path) -> None:
    vol = tmp_path / "v"
    _tree(vol)
    assert fsgroup.needs_change(str(vol), GID, False)
    assert fsgroup.set_ownership(str(vol), GID, readonly=False, policy="OnRootMismatch")
    (vol / "late").write_text("y")  # root unchanged: the next pass skips the walk
    assert not fsgroup.set_ownership(str(vol), GID, readonly=False, policy="OnRootMismatch")
    assert os.stat(vol / "late").st_gid == GID  # inherited through the setgid directory
    os.chmod(vol / "sub" / "f", 0o600)
    assert fsgroup.set_ownership(str(vol), GID, readonly=False, policy="Always")
    assert _mode(vol / "sub" / "f") == 0o660


def test_apply_pod_picks_supported_volumes(tmp_path: Path) -> None:
    paths = {}
    for name in ("e", "h", "c"):
        (tmp_path / name).mkdir()
        paths[name] = str(tmp_path / name)
    spec = {"securityContext": {"fsGroup": GID}, "volumes": [
        {"name": "e", "emptyDir": {}}, {"name": "h", "hostPath": {"path": "/x"}}, {"name": "c", "configMap": {}}]}
    assert fsgroup.apply_pod(spec, paths, fsgroup.READ_ONLY) == ["c"]
    assert os.stat(tmp_path / "e").st_gid != GID
    assert fsgroup.apply_pod(spec, paths) == ["e", "c"]
    assert os.stat(tmp_path / "h").st_gid != GID
    assert fsgroup.apply_pod({"volumes": spec["volumes"]}, paths) == []
