"""Volume ownership for a pod's `securityContext.fsGroup`, as kubelet's SetVolumeOwnership does.

Every file and directory of a supporting volume (emptyDir; configMap, secret, downwardAPI and projected, whose
files kubelet treats as read-only) gets the fsGroup as its group (lchown, so symlinks are not followed), group
read/write (read-only volumes: group read) added to its mode, and directories also group search and setgid, so
files a container creates later inherit the group. `fsGroupChangePolicy: OnRootMismatch` skips a volume whose
root already has the group and those bits; `Always` (the default) walks it every time.

Invariants: only paths under the volume directories given are touched; modes only gain bits. Blocking (a tree
walk): callers run it in a thread.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from typing import Any

RW, RO, EXEC = 0o660, 0o440, 0o110
SUPPORTED = ("emptyDir", "configMap", "secret", "downwardAPI", "projected")
READ_ONLY = ("configMap", "secret", "downwardAPI", "projected")


def needs_change(root: str, gid: int, readonly: bool) -> bool:
    """kubelet's OnRootMismatch test: False only when the root already has the group, the bits and setgid."""
    st = os.stat(root)
    if st.st_gid != gid or not stat.S_ISDIR(st.st_mode):
        return True
    want = (RO if readonly else RW) | EXEC
    return (st.st_mode & want) != want or not st.st_mode & stat.S_ISGID


def _change(path: str, gid: int, readonly: bool) -> None:
    st = os.lstat(path)
    os.lchown(path, -1, gid)
    if stat.S_ISLNK(st.st_mode):
        return
    mask = RO if readonly else RW
    if stat.S_ISDIR(st.st_mode):
        mask |= stat.S_ISGID | EXEC
    os.chmod(path, stat.S_IMODE(st.st_mode) | mask)


def set_ownership(root: str, gid: int, *, readonly: bool, policy: str = "Always") -> bool:
    """Apply fsGroup `gid` to the tree at `root`; returns whether anything was walked."""
    if policy == "OnRootMismatch" and not needs_change(root, gid, readonly):
        return False
    for dirpath, dirnames, filenames in os.walk(root):
        _change(dirpath, gid, readonly)
        for name in filenames + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]:
            _change(os.path.join(dirpath, name), gid, readonly)
    return True


def volume_kind(volume: Mapping[str, Any]) -> str | None:
    return next((k for k in SUPPORTED if volume.get(k) is not None), None)


def apply_pod(spec: Mapping[str, Any], volume_paths: Mapping[str, str],
              kinds: tuple[str, ...] = SUPPORTED) -> list[str]:
    """Apply the pod's fsGroup to each volume of `kinds` set up at `volume_paths`; the names walked. After a
    content refresh only the content volumes need it (an emptyDir is set up once, as kubelet's is)."""
    sc = spec.get("securityContext") or {}
    if sc.get("fsGroup") is None:
        return []
    gid, policy = int(sc["fsGroup"]), str(sc.get("fsGroupChangePolicy") or "Always")
    walked = []
    for v in spec.get("volumes") or []:
        kind, path = volume_kind(v), volume_paths.get(str(v.get("name")))
        if kind not in kinds or path is None or not os.path.isdir(path):
            continue
        if set_ownership(path, gid, readonly=kind in READ_ONLY, policy=policy):
            walked.append(str(v.get("name")))
    return walked
