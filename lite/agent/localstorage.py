"""Local-path volume directories on this node: which directory a deleted PersistentVolume leaves behind, and
removing it (the node half of k3s's local-path provisioner; the server creates and deletes the PV objects).

The server relays to each agent the PersistentVolumes the local-path provisioner made for that node
(`lite.server.join.relay.node_needs_volume`; the hub resyncs only from synced caches). When one is withdrawn
because it was deleted (reclaim policy Delete, after its claim went away), or is missing from a resync, its
directory is removed here. Relaying through the agent's session rather than an agent-side watch keeps the
agent's single connection and its existing object cache. `LocalVolumes` records the removable directories it
was told about in `<agent-dir>/local-volumes.json`, so a volume deleted while the agent was down (or
restarting) is removed at the next resync too.

Invariants: only a volume annotated `pv.kubernetes.io/provisioned-by: rancher.io/local-path` for this node
(`local.path.provisioner/selected-node`) with reclaim policy Delete, whose hostPath is absolute and whose last
element is `pvc-<...>`, is ever removed (a node that mounted another node's volume by a forced nodeName keeps
its copy); the removal
never follows a symlink out of that directory (`shutil.rmtree` does not follow them). Blocking: call
`remove_dir` in a thread.
"""

from __future__ import annotations

import contextlib
import json
import shutil
from pathlib import Path
from typing import Any

from lite import atomicfile

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


class LocalVolumes:
    """The removable local-path directories of this node by volume name, kept in a small JSON file (written
    atomically on change; read once at start). Not thread-safe: the agent's event loop calls it."""

    def __init__(self, record: Path, node: str) -> None:
        self.record, self.node = record, node
        self.known: dict[str, str] = {}
        with contextlib.suppress(OSError, ValueError):
            loaded = json.loads(record.read_text())
            if isinstance(loaded, dict):
                self.known = {str(k): str(v) for k, v in loaded.items()}

    def seen(self, pv: Obj) -> None:
        """A relayed volume: remember its directory if it is one to remove later (forget it otherwise)."""
        name = str((pv.get("metadata") or {}).get("name", ""))
        path = removable_dir(pv, self.node)
        want = str(path) if path is not None else None
        if self.known.get(name) != want:
            if want is None:
                self.known.pop(name, None)
            else:
                self.known[name] = want
            self._save()

    def gone(self, names: set[str]) -> list[Path]:
        """These volumes were deleted: their directories, which are forgotten from now on."""
        paths = [Path(self.known.pop(n)) for n in sorted(names) if n in self.known]
        if paths:
            self._save()
        return paths

    def _save(self) -> None:
        with contextlib.suppress(OSError):
            self.record.parent.mkdir(parents=True, exist_ok=True)
            atomicfile.write(self.record, json.dumps(self.known, sort_keys=True), mode=0o644)
