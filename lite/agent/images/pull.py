"""Resolve an image over a list of endpoints and bring its config and layers into the content store.

Contract:
- `resolve` tries the endpoints in order; a 404 moves on quietly, any other failure is remembered and also
  moves on; when all fail the first non-404 error is raised (else `ImageNotFoundError`), as containerd does.
- `fetch` downloads what the store lacks (at most `parallel` blobs at a time), verifies every digest and
  every layer's diff_id, and unpacks each layer once even when several pulls want it at the same time
  (per-diff_id lock). Unpacking runs in worker threads.
"""

from __future__ import annotations

import asyncio
import json
import weakref
from collections.abc import Iterator
from typing import Any

import aiohttp

from lite.agent.images.distribution import INDEX_TYPES, Manifest, RegistryClient
from lite.agent.images.errors import ImageError, ImageNotFoundError, ImagePullError
from lite.agent.images.guard import ContentGuard, Lease
from lite.agent.images.manifests import (
    Descriptor,
    ImageManifest,
    diff_ids,
    parse_image_manifest,
    select_platform,
)
from lite.agent.images.reference import ImageRef
from lite.agent.images.registries import Endpoint
from lite.agent.images.store import ContentStore
from lite.records import dataclass

_MAX_INDEX_DEPTH = 4
# network and disk failures (ENOSPC, reset connections, read timeouts): reported as ErrImagePull
TRANSIENT_ERRORS = (OSError, aiohttp.ClientError, TimeoutError)


@dataclass(frozen=True)
class Resolved:
    endpoint: Endpoint
    chain: tuple[Manifest, ...]  # what the reference named first (index or manifest) … the image manifest
    manifest: ImageManifest


class Puller:
    def __init__(
        self,
        client: RegistryClient,
        store: ContentStore,
        guard: ContentGuard,
        platform: tuple[str, str],
        *,
        parallel: int = 3,
    ) -> None:
        self.client = client
        self.store = store
        self.guard = guard
        self.arch, self.variant = platform
        self._sem = asyncio.Semaphore(parallel)
        self._locks: weakref.WeakValueDictionary[str, asyncio.Lock] = weakref.WeakValueDictionary()

    async def resolve(self, ref: ImageRef, endpoints: list[Endpoint], lease: Lease) -> Resolved:
        first_error: ImageError | None = None
        for ep in endpoints:
            try:
                return await self._resolve_on(ep, ref.reference, lease)
            except ImageNotFoundError:
                continue
            except ImageError as e:
                first_error = first_error or e
        if first_error:
            raise first_error
        raise ImageNotFoundError(f'failed to resolve reference "{ref}": {ref}: not found')

    async def _resolve_on(self, ep: Endpoint, reference: str, lease: Lease) -> Resolved:
        top = reference
        if not reference.startswith("sha256:"):
            top = await self.client.head_manifest(ep, reference) or reference
        chain = [await self._manifest(ep, top, lease)]
        doc = chain[-1].json()
        while chain[-1].media_type in INDEX_TYPES or "manifests" in doc:
            if len(chain) > _MAX_INDEX_DEPTH:
                raise ImagePullError(f"image index nesting deeper than {_MAX_INDEX_DEPTH}")
            desc = select_platform(doc, self.arch, self.variant)
            chain.append(await self._manifest(ep, desc.digest, lease))
            doc = chain[-1].json()
        return Resolved(ep, tuple(chain), parse_image_manifest(doc))

    async def _manifest(self, ep: Endpoint, reference: str, lease: Lease) -> Manifest:
        """A manifest by tag from the registry, by digest from the store when it is already there."""
        if reference.startswith("sha256:"):
            lease.pin(reference)
            await self.guard.settle(reference)
            if self.store.has_blob(reference):
                data = await asyncio.to_thread(self.store.blob_path(reference).read_bytes)
                doc = Manifest(data, "", reference).json()
                media_type = str(doc.get("mediaType") or (INDEX_TYPES[0] if "manifests" in doc else ""))
                return Manifest(data, media_type, reference)
        return await self.client.get_manifest(ep, reference)

    async def fetch(self, resolved: Resolved, lease: Lease) -> tuple[dict[str, Any], list[str]]:
        """Bring config and layers in; return (config document, diff_ids bottom first)."""
        ep, im = resolved.endpoint, resolved.manifest
        config = json.loads(await self._small_blob(ep, im.config, lease))
        if not isinstance(config, dict):
            raise ImagePullError(f"image config {im.config.digest} is not a JSON object")
        ids = diff_ids(config, len(im.layers))
        try:
            async with asyncio.TaskGroup() as tg:
                for desc, diff_id in zip(im.layers, ids, strict=True):
                    tg.create_task(self._layer(ep, desc, diff_id, lease))
        except BaseExceptionGroup as eg:
            raise first_image_error(eg) from None
        return config, ids

    async def _small_blob(self, ep: Endpoint, desc: Descriptor, lease: Lease) -> bytes:
        lease.pin(desc.digest)
        await self.guard.settle(desc.digest)
        async with self._lock(desc.digest):
            if not self.store.has_blob(desc.digest):
                await self._download(ep, desc)
        return await asyncio.to_thread(self.store.blob_path(desc.digest).read_bytes)

    async def _layer(self, ep: Endpoint, desc: Descriptor, diff_id: str, lease: Lease) -> None:
        lease.pin(desc.digest, diff_id)
        await self.guard.settle(desc.digest, diff_id)
        async with self._lock(diff_id):
            if self.store.has_layer(diff_id):
                return
            if not self.store.has_blob(desc.digest):
                async with self._sem:
                    await self._download(ep, desc)
            await asyncio.to_thread(self.store.unpack, diff_id, desc.digest)

    async def _download(self, ep: Endpoint, desc: Descriptor) -> None:
        tmp = self.store.temp_file()
        await self.client.fetch_blob(ep, desc.digest, desc.size, tmp)
        self.store.commit_blob(tmp, desc.digest)

    def _lock(self, key: str) -> asyncio.Lock:
        lock = self._locks.get(key)
        if lock is None:
            lock = asyncio.Lock()
            self._locks[key] = lock
        return lock


def first_image_error(eg: BaseExceptionGroup[BaseException]) -> BaseException:
    """The error a task group failure stands for: its first ImageError, else its first transport or disk
    error (mapped to ErrImagePull by the caller), else the group itself."""
    leaves = list(_leaves(eg))
    for exc in leaves:
        if isinstance(exc, ImageError):
            return exc
    for exc in leaves:
        if isinstance(exc, TRANSIENT_ERRORS):
            return exc
    return eg


def _leaves(eg: BaseExceptionGroup[BaseException]) -> Iterator[BaseException]:
    for exc in eg.exceptions:
        if isinstance(exc, BaseExceptionGroup):
            yield from _leaves(exc)
        else:
            yield exc
