"""ImageService: what the pod runner asks of images — ensure per pull policy, list, remove, GC, air-gap import.

Contract:
- `ensure(image, policy)` follows kubelet: `Never` → `ImageNeverPullError` unless present; `IfNotPresent`
  → no network when present; `Always` → always resolves the manifest (blobs already held are not fetched
  again). Failures raise typed `ImageError`s whose `reason`/message go into the container status.
- Concurrent pulls of one reference share one pull. Blobs and layers an in-flight pull or import relies on
  are pinned through a lease (`guard.py`): `remove` and `gc` never delete them.
- `gc` behaves like kubelet's image GC: when the store's filesystem is at or above `high_pct` used, delete
  images not in use, least recently used first, until usage is at or below `low_pct`.
- `import_dir` imports each `*.tar`/`*.tar.gz`/`*.tgz`/`*.tar.bz2`/`*.tar.xz` once (remembered by name,
  size and mtime).
All blocking work (unpacking, hashing, deleting trees, reading archives) runs in worker threads.
"""

from __future__ import annotations

import asyncio
import builtins
import functools
import json
import logging
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import aiohttp

from lite.agent.images.distribution import RegistryClient
from lite.agent.images.errors import (
    ImageError,
    ImageImportError,
    ImageNeverPullError,
    ImageNotPresentError,
    ImagePullError,
)
from lite.agent.images.guard import ContentGuard
from lite.agent.images.manifests import host_platform
from lite.agent.images.pull import TRANSIENT_ERRORS, Puller, Resolved
from lite.agent.images.reference import ImageRef, parse
from lite.agent.images.registries import RegistriesConfig
from lite.agent.images.store import ContentStore, ImageRecord, write_atomic
from lite.records import dataclass

if TYPE_CHECKING:
    from lite.agent.images.archive import ArchiveImage

log = logging.getLogger(__name__)
PullPolicy = Literal["Always", "IfNotPresent", "Never"]
ARCHIVE_SUFFIXES = (".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tar.xz")


@dataclass(frozen=True)
class ImageInfo:
    id: str  # config digest
    repo_tags: tuple[str, ...]
    repo_digests: tuple[str, ...]
    size: int
    layers: tuple[str, ...]  # diff_ids, bottom first
    config: Mapping[str, Any] = field(default_factory=dict, compare=False)  # Entrypoint, Cmd, Env, User…

    @property
    def image_ref(self) -> str:
        """What kubelet reports as `containerStatuses[].imageID`."""
        return self.repo_digests[0] if self.repo_digests else self.id


def statvfs_usage(path: Path) -> tuple[int, int]:
    """(capacity, available) bytes of the filesystem holding `path`."""
    st = os.statvfs(path)
    return st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize


class ImageService:
    def __init__(
        self,
        store: ContentStore,
        registries: RegistriesConfig,
        session: aiohttp.ClientSession,
        *,
        platform: tuple[str, str] | None = None,
        own_session: bool = False,
        disk_usage: Callable[[Path], tuple[int, int]] = statvfs_usage,
    ) -> None:
        self.store = store
        self.registries = registries
        self.session = session
        self.platform = platform or host_platform()
        self.client = RegistryClient(session)
        self.guard = ContentGuard()
        self._puller = Puller(self.client, store, self.guard, self.platform)
        self._own_session = own_session
        self._disk_usage = disk_usage
        self._inflight: dict[str, asyncio.Task[ImageInfo]] = {}
        self._importing = 0
        self._configs: dict[str, dict[str, Any]] = {}
        # (seconds, image size or None when it failed) after each pull that ran: the agent's metrics
        self.on_pull: Callable[[float, int | None], None] | None = None

    @classmethod
    async def open(
        cls,
        root: Path,
        registries: RegistriesConfig | None = None,
        *,
        session: aiohttp.ClientSession | None = None,
        platform: tuple[str, str] | None = None,
    ) -> ImageService:
        store = await asyncio.to_thread(ContentStore, root)
        own = session is None
        # trust_env: HTTP(S)_PROXY / NO_PROXY are honoured, as containerd does
        session = session or aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=30, sock_read=120), trust_env=True
        )
        return cls(store, registries or RegistriesConfig(), session, platform=platform, own_session=own)

    async def close(self) -> None:
        tasks = list(self._inflight.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self._own_session:
            await self.session.close()

    async def __aenter__(self) -> ImageService:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- queries
    def get(self, image: str) -> ImageInfo | None:
        """The local image named by id, reference or `name@digest`; no network."""
        rec = self._find(image)
        return self._info(rec) if rec else None

    def list(self) -> builtins.list[ImageInfo]:
        return [self._info(r) for r in sorted(self.store.records.values(), key=lambda r: r.pulled_at)]

    def rootfs_layers(self, image: str) -> builtins.list[Path]:
        """Overlay lowerdirs for the image, top layer first."""
        rec = self._find(image)
        if rec is None:
            raise ImageNotPresentError(f"image {image!r} is not present")
        return [self.store.layer_dir(d) for d in reversed(rec.layers)]

    def _find(self, image: str) -> ImageRecord | None:
        rec = self.store.find(image)
        if rec is not None:
            return rec
        try:
            ref = parse(image)
        except ImageError:
            return None
        return self._local(ref)

    def _local(self, ref: ImageRef) -> ImageRecord | None:
        if ref.digest:
            return self.store.find(ref.with_digest(ref.digest)) or self.store.records.get(ref.digest)
        return self.store.find(str(ref))

    # -- ensure / pull
    async def ensure(
        self, image: str, policy: PullPolicy = "IfNotPresent", pull_secrets: Sequence[Mapping[str, Any]] | None = None
    ) -> ImageInfo:
        ref = parse(image)
        rec = self._local(ref)
        if policy == "Never" and rec is None:
            raise ImageNeverPullError(f'Container image "{image}" is not present with pull policy of Never')
        if policy not in ("Always", "IfNotPresent", "Never"):
            raise ValueError(f"unknown image pull policy {policy!r}")
        if rec is not None and policy != "Always":
            rec.last_used = time.time()
            return self._info(rec)
        return await self.pull(ref, pull_secrets or ())

    async def pull(self, ref: ImageRef, pull_secrets: Sequence[Mapping[str, Any]] = ()) -> ImageInfo:
        """Pull now. Callers asking for the same reference with the same secrets share one pull task, which
        finishes even if they are cancelled (the content stays useful); `close()` cancels it."""
        key = f"{ref} {hash(json.dumps(list(pull_secrets), sort_keys=True))}"
        task = self._inflight.get(key)
        if task is None:
            task = asyncio.create_task(self._pull(ref, pull_secrets), name=f"image pull {ref}")
            self._inflight[key] = task
            task.add_done_callback(functools.partial(self._pull_done, key))
        return await asyncio.shield(task)

    def _pull_done(self, key: str, task: asyncio.Task[ImageInfo]) -> None:
        if self._inflight.get(key) is task:
            del self._inflight[key]
        if not task.cancelled():
            task.exception()  # retrieved here: the callers that wanted it may all be gone

    async def _pull(self, ref: ImageRef, pull_secrets: Sequence[Mapping[str, Any]]) -> ImageInfo:
        endpoints = self.registries.endpoints(ref, pull_secrets)
        lease = self.guard.lease()
        started = time.monotonic()
        try:
            resolved = await self._puller.resolve(ref, endpoints, lease)
            config, ids = await self._puller.fetch(resolved, lease)
            rec = self._record_pull(ref, resolved, config, ids)
        except ImageError as e:
            self._pulled(started, None)
            raise type(e)(f'failed to pull and unpack image "{ref}": {e.message}') from e
        except TRANSIENT_ERRORS as e:
            self._pulled(started, None)
            raise ImagePullError(f'failed to pull and unpack image "{ref}": {type(e).__name__}: {e}') from e
        finally:
            lease.release()  # after the record is written: from now on the record protects the content
        self._pulled(started, rec.size)
        return self._info(rec)

    def _pulled(self, started: float, size: int | None) -> None:
        if self.on_pull is not None:
            self.on_pull(time.monotonic() - started, size)

    def _record_pull(
        self, ref: ImageRef, res: Resolved, config: dict[str, Any], ids: builtins.list[str]
    ) -> ImageRecord:
        for m in res.chain:
            self.store.write_blob(m.data, m.digest)  # small: manifests are capped at 4 MiB
        im = res.manifest
        size = len(res.chain[-1].data) + im.config.size + sum(max(d.size, 0) for d in im.layers)
        blobs = [m.digest for m in res.chain] + [im.config.digest] + [d.digest for d in im.layers]
        tags = [str(ref)] if not ref.digest else []
        return self._commit(im.config.digest, ids, blobs, size, tags, [ref.with_digest(res.chain[0].digest)], config)

    def _commit(
        self,
        image_id: str,
        ids: builtins.list[str],
        blobs: builtins.list[str],
        size: int,
        tags: builtins.list[str],
        digests: builtins.list[str],
        config: dict[str, Any],
    ) -> ImageRecord:
        now = time.time()
        old = self.store.records.get(image_id)
        rec = ImageRecord(image_id, image_id, ids, blobs, size, tags, digests, now, now)
        if old is not None:
            rec.blobs = sorted(set(old.blobs) | set(blobs))
            rec.repo_tags = old.repo_tags + [t for t in tags if t not in old.repo_tags]
            rec.repo_digests = old.repo_digests + [d for d in digests if d not in old.repo_digests]
            rec.size = max(old.size, size)
            rec.pulled_at = old.pulled_at  # first seen: GC ties on last use break by age
        self._configs[image_id] = config
        self.store.put(rec)
        return rec

    def _info(self, rec: ImageRecord) -> ImageInfo:
        config = self._configs.get(rec.id)
        if config is None:
            config = json.loads(self.store.blob_path(rec.config).read_bytes())  # a few KiB, once per image
            self._configs[rec.id] = config
        return ImageInfo(
            rec.id,
            tuple(rec.repo_tags),
            tuple(rec.repo_digests),
            rec.size,
            tuple(rec.layers),
            config.get("config") or {},
        )

    # -- removal and garbage collection
    async def remove(self, image: str) -> None:
        """Delete the image and whatever content no other image shares. The caller makes sure no container
        uses it (their overlay mounts have its layers as lowerdirs)."""
        rec = self._find(image)
        if rec is None:
            raise ImageNotPresentError(f"image {image!r} is not present")
        self.store.forget(rec.id)
        self._configs.pop(rec.id, None)
        await self._delete_unreferenced(set(rec.blobs), set(rec.layers))

    async def _delete_unreferenced(self, blobs: set[str], layers: set[str]) -> None:
        """Delete those of `blobs`/`layers` (blob digests, diff_ids) no record uses and no lease pins."""
        used_blobs, used_layers = self.store.referenced()
        victims = self.guard.claim((blobs - used_blobs) | (layers - used_layers))
        try:
            await asyncio.to_thread(self.store.delete_unreferenced, blobs & victims, layers & victims)
        finally:
            self.guard.release(victims)

    async def gc(self, high_pct: int, low_pct: int, in_use: set[str]) -> builtins.list[str]:
        """Free disk as kubelet's image GC does; returns the ids of the images removed.

        `in_use` holds ids or references of images that containers on the node use: never removed. Content
        no image references (left by failed pulls or imports) goes first."""
        keep = {rec.id for name in in_use if (rec := self._find(name)) is not None}
        now = time.time()
        for image_id in keep:
            self.store.records[image_id].last_used = now
        if self._used_pct() < high_pct:
            return []
        if not self._inflight and not self._importing:  # an import's blobs are unreferenced for a while
            await self._delete_unreferenced(*await asyncio.to_thread(self.store.on_disk))
        removed: builtins.list[str] = []
        victims = sorted(
            (r for r in self.store.records.values() if r.id not in keep), key=lambda r: (r.last_used, r.pulled_at)
        )
        for rec in victims:
            if self._used_pct() <= low_pct:
                break
            await self.remove(rec.id)
            removed.append(rec.id)
            log.info("image gc removed %s (%s)", rec.id, ", ".join(rec.repo_tags) or "untagged")
        return removed

    def _used_pct(self) -> float:
        capacity, available = self._disk_usage(self.store.root)
        return 100.0 * (capacity - available) / capacity if capacity else 0.0

    # -- air-gap import
    async def import_archive(self, path: Path) -> builtins.list[ImageInfo]:
        """Import one docker-save or OCI-layout tarball (optionally gzipped); return the images it held."""
        from lite.agent.images.archive import read_archive  # loaded by the first air-gap tarball

        self._importing += 1
        try:
            images = await asyncio.to_thread(read_archive, path, self.store, self.platform)
            return [await self._import_one(img) for img in images]
        finally:
            self._importing -= 1

    async def _import_one(self, img: ArchiveImage) -> ImageInfo:
        ids = [str(i) for i in (img.config.get("rootfs") or {}).get("diff_ids") or ()]
        if len(ids) != len(img.layers):
            raise ImageImportError(f"image {img.config_digest}: {len(ids)} diff_ids for {len(img.layers)} layers")
        blobs = [*img.manifest_digests, img.config_digest, *(d.digest for d in img.layers)]
        lease = self.guard.lease()
        lease.pin(*blobs, *ids)
        try:
            await self.guard.settle(*blobs, *ids)
            if not all(self.store.has_blob(b) for b in blobs):
                raise ImageImportError(f"image {img.config_digest}: content was removed while importing; retry")
            for desc, diff_id in zip(img.layers, ids, strict=True):
                if not self.store.has_layer(diff_id):
                    await asyncio.to_thread(self.store.unpack, diff_id, desc.digest)
            size = self.store.blob_size(img.config_digest) + sum(d.size for d in img.layers)
            rec = self._commit(img.config_digest, ids, blobs, size, img.names, [], img.config)
        finally:
            lease.release()
        return self._info(rec)

    async def import_dir(self, directory: Path) -> builtins.list[ImageInfo]:
        """Import every archive in `directory` not imported before; a bad archive is logged and skipped."""
        state_path = self.store.root / "imported.json"
        seen, pending = await asyncio.to_thread(_pending_archives, directory, state_path)
        out: builtins.list[ImageInfo] = []
        for path, stamp in pending:
            try:
                out += await self.import_archive(path)
            except ImageError as e:
                log.error("image import of %s failed: %s", path, e)
                continue
            seen[path.name] = stamp
            write_atomic(state_path, json.dumps(seen).encode())  # tiny
        return out


def _pending_archives(
    directory: Path, state_path: Path
) -> tuple[dict[str, list[float]], list[tuple[Path, list[float]]]]:
    try:
        seen: dict[str, list[float]] = json.loads(state_path.read_text())
    except (FileNotFoundError, ValueError):
        seen = {}  # nothing imported yet, or torn by a crash: importing again is harmless
    pending = []
    for path in sorted(directory.iterdir()) if directory.is_dir() else ():
        if path.name.endswith(ARCHIVE_SUFFIXES) and path.is_file():
            st = path.stat()
            stamp = [float(st.st_size), st.st_mtime]
            if seen.get(path.name) != stamp:
                pending.append((path, stamp))
    return seen, pending
