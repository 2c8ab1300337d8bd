"""Auto-deploying manifests (k3s's `server/manifests`): every `*.yaml`/`*.yml`/`*.json` under
`<data-dir>/server/manifests/` is applied at start and whenever it changes.

- Each document (multi-document YAML; `kind: List` unrolled) is applied by server-side apply with the field
  manager `lite-deploy`, forced, as k3s's deploy controller does; a namespaced object without a namespace
  goes to `kube-system` (k3s's default for addons).
- `<file>.skip` beside a manifest keeps it from being applied (k3s's rule), until the .skip file goes.
- The record of what was applied is a ConfigMap `kube-system/lite-addon-<name>` (source path, SHA-256 of the
  content, the objects applied), which also carries the events: ApplyingManifest, AppliedManifest and
  ApplyManifestFailed (with the first error), as k3s's Addon objects do.
- A file is applied again when its checksum differs from the record's, and also after a failure, every
  scan (a CRD and its custom resources in one file succeed on a later pass). Removing a file removes nothing
  from the cluster (as in k3s).

Invariants: the directory is scanned every `interval` seconds (stat only; a file is read when its size or
mtime changed, or when its last apply failed); blocking file reads run in a worker thread; one file's bad
YAML never stops the others.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import re
from dataclasses import field
from pathlib import Path
from typing import Any

from lite.client import Client
from lite.errors import ApiError
from lite.events import EventRecorder
from lite.kinds import KindRegistry
from lite.records import dataclass

log = logging.getLogger(__name__)
Obj = dict[str, Any]
FIELD_MANAGER = "lite-deploy"
NAMESPACE = "kube-system"
SUFFIXES = (".yaml", ".yml", ".json")


@dataclass
class _Seen:
    stamp: tuple[int, float] = (0, 0.0)
    checksum: str = ""
    ok: bool = False


@dataclass
class ManifestDeployer:
    client: Client
    kinds: KindRegistry
    directory: Path
    interval: float = 5.0
    recorder: EventRecorder | None = None
    seen: dict[str, _Seen] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.recorder = self.recorder or EventRecorder(self.client, "deploy")

    async def run(self) -> None:
        while True:
            await self.scan()
            await asyncio.sleep(self.interval)

    async def scan(self) -> None:
        """One pass over the directory (see the module docstring)."""
        files = await asyncio.to_thread(_list, self.directory)
        for path, stamp in files:
            seen = self.seen.setdefault(path.name, _Seen())
            if seen.ok and seen.stamp == stamp:
                continue
            try:
                text = await asyncio.to_thread(path.read_bytes)
            except OSError:
                continue
            checksum = hashlib.sha256(text).hexdigest()
            if seen.ok and checksum == seen.checksum:
                seen.stamp = stamp
                continue
            seen.ok = await self.apply_file(path, text, checksum)
            seen.stamp, seen.checksum = stamp, checksum

    async def apply_file(self, path: Path, text: bytes, checksum: str) -> bool:
        record = await self._record(path, checksum)
        if record is not None and (record.get("data") or {}).get("checksum") == checksum and \
                (record.get("data") or {}).get("state") == "applied":
            return True  # applied before a restart: nothing changed since
        record = await self._save(path, checksum, [], "applying")
        await self._event(record, "Normal", "ApplyingManifest", f"Applying manifest at {path}")
        applied: list[str] = []
        import yaml  # a manifest to apply: PyYAML is loaded for the first one (a server with none never loads it)

        try:
            for doc in _documents(text):
                applied.append(await self._apply(doc))
        except (ApiError, ValueError, yaml.YAMLError) as e:
            log.warning("manifest %s: %s", path, e)
            record = await self._save(path, checksum, applied, f"failed: {e}")
            await self._event(record, "Warning", "ApplyManifestFailed", f"Applying manifest at {path} failed: {e}")
            return False
        record = await self._save(path, checksum, applied, "applied")
        await self._event(record, "Normal", "AppliedManifest", f"Applied manifest at {path}")
        log.info("applied manifest %s (%d objects)", path, len(applied))
        return True

    async def _apply(self, doc: Obj) -> str:
        api_version, kind_name = str(doc.get("apiVersion", "")), str(doc.get("kind", ""))
        kind = self.kinds.by_api_version(api_version, kind_name)
        if kind is None:
            raise ValueError(f"no kind {kind_name!r} in {api_version!r} is served")
        meta = doc.get("metadata") or {}
        name = str(meta.get("name") or "")
        if not name:
            raise ValueError(f"a {kind_name} without metadata.name")
        ns = str(meta.get("namespace") or NAMESPACE) if kind.namespaced else ""
        if kind.namespaced:
            doc = {**doc, "metadata": {**meta, "namespace": ns}}
        await self.client.patch(kind, ns, name, doc, patch_type="apply", field_manager=FIELD_MANAGER, force=True)
        return f"{kind_name}/{ns + '/' if ns else ''}{name}"

    def _record_name(self, path: Path) -> str:
        stem = re.sub(r"[^a-z0-9-]+", "-", path.stem.lower()).strip("-")[:40] or "manifest"
        return f"lite-addon-{stem}"

    async def _record(self, path: Path, checksum: str) -> Obj | None:
        kind = self.kinds.by_api_version("v1", "ConfigMap")
        assert kind is not None
        try:
            return await self.client.get(kind, NAMESPACE, self._record_name(path))
        except ApiError as e:
            if e.code == 404:
                return None
            raise

    async def _save(self, path: Path, checksum: str, applied: list[str], state: str) -> Obj | None:
        kind = self.kinds.by_api_version("v1", "ConfigMap")
        assert kind is not None
        body = {"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": self._record_name(path), "namespace": NAMESPACE,
                             "labels": {"lite.dev/addon": "true"}},
                "data": {"source": str(path), "checksum": checksum, "state": state, "objects": "\n".join(applied)}}
        try:
            return await self.client.patch(kind, NAMESPACE, self._record_name(path), body, patch_type="apply",
                                           field_manager=FIELD_MANAGER, force=True)
        except ApiError as e:
            log.warning("manifest %s: recording it failed: %s", path, e)
            return None

    async def _event(self, record: Obj | None, type_: str, reason: str, message: str) -> None:
        if record is not None and self.recorder is not None:
            try:
                await self.recorder.event(record, type_, reason, message)
            except ApiError as e:
                log.debug("event %s not recorded: %s", reason, e)


def _list(directory: Path) -> list[tuple[Path, tuple[int, float]]]:
    """Manifests in name order with (size, mtime), without those a `.skip` file disables."""
    if not directory.is_dir():
        return []
    names = {p.name for p in directory.iterdir()}
    out = []
    for p in sorted(directory.iterdir()):
        if p.name.endswith(SUFFIXES) and not p.name.startswith(".") and f"{p.name}.skip" not in names \
                and p.is_file():
            st = p.stat()
            out.append((p, (st.st_size, st.st_mtime)))
    return out


def _documents(text: bytes) -> list[Obj]:
    """The objects of a manifest: every non-empty YAML document, `kind: List` unrolled."""
    import yaml

    out: list[Obj] = []
    for doc in yaml.safe_load_all(text):
        if doc is None:
            continue
        if not isinstance(doc, dict):
            raise ValueError("a manifest document is not a mapping")
        if doc.get("kind") == "List" or (str(doc.get("kind", "")).endswith("List") and "items" in doc):
            out += [i for i in doc.get("items") or [] if isinstance(i, dict)]
        else:
            out.append(doc)
    return out
