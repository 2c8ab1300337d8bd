"""Local-path volume directories on this node: which directory a deleted PersistentVolume leaves behind, and
removing it (the node half of k3s's local-path provisioner; the server creates and deletes the PV objects).

The server relays to each agent the PersistentVolumes the local-path provisioner made for that node
(`lite.server.join.relay.node_needs_volume`). When one is withdrawn because it was deleted (reclaim policy
Delete, after its claim went away), or is missing from a resync, its directory is removed here. Relaying
through the agent's session rather than an agent-side watch keeps the agent's single connection and its
existing object cache; a directory whose PV is deleted while the agent is down is removed at the next
resync (the agent remembers the volumes it was told about since it started).

Invariants: only a volume annotated `pv.kubernetes.io/provisioned-by: rancher.io/local-path` for this node
(`local.path.provisioner/selected-node`) with reclaim policy Delete, whose hostPath is absolute and whose last
element is `pvc-<...>`, is ever removed (a node that mounted another node's volume by a forced nodeName keeps
its copy); the removal
never follows a symlink out of that directory (`shutil.rmtree` does not follow them). Blocking: call
`remove_dir` in a thread.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

Obj = dict[str, Any]


def removable_dir(pv: Obj, node: str) -> Path | None:
    """The directory to remove on `node` once `pv` is gone, or None when its data must stay."""
    meta, spec = pv.get("metadata") or {}, pv.get("spec") or {}
    ann = meta.get("annotations") or {}
    if ann.get("pv.kubernetes.io/provisioned-by") != "rancher.io/local-path" \
            or ann.get("local.path.provisioner/selected-node") != node:
        return None
    if spec.get("persistentVolumeReclaimPolicy") != "Delete":
        return None
    raw = str((spec.get("hostPath") or {}).get("path") or (spec.get("local") or {}).get("path") or "")
    path = Path(raw)
    if not path.is_absolute() or ".." in path.parts or not path.name.startswith("pvc-"):
        return None
    return path


def remove_dir(path: Path) -> None:
    if path.is_symlink():
        path.unlink()
    elif path.exists():
        shutil.rmtree(path, ignore_errors=True)
