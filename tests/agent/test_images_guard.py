"""Deletions versus pulls: leases pin content, claims make pulls wait, GC sweeps what nobody holds."""

from __future__ import annotations

import asyncio
from pathlib import Path

from lite.agent.images import ImageService
from lite.agent.images.guard import ContentGuard
from tests.helpers.images import PushedImages
from tests.helpers.registry import RegistryServer


async def test_pinned_keys_are_not_claimed() -> None:
    guard = ContentGuard()
    lease = guard.lease()
    lease.pin("a", "b")
    assert guard.claim({"a", "c"}) == {"c"}
    lease.release()
    lease.release()  # idempotent
    assert guard.claim({"a", "b"}) == {"a", "b"}
    assert guard.pins == {}


async def test_settle_waits_for_a_claimed_deletion() -> None:
    guard = ContentGuard()
    victims = guard.claim({"x"})
    waiter = asyncio.create_task(guard.settle("x", "y"))
    await asyncio.sleep(0.01)
    assert not waiter.done()
    guard.release(victims)
    await asyncio.wait_for(waiter, 5)
    await guard.settle("x")  # nothing being deleted: returns at once


async def test_remove_spares_leased_content_and_gc_sweeps_it_later(
    store_root: Path, registry: RegistryServer, pushed_images: PushedImages
) -> None:
    async with await ImageService.open(store_root) as svc:
        image = await svc.ensure(f"{registry.host}/test/busybox:oci")
        (diff_id,) = image.layers
        lease = svc.guard.lease()
        lease.pin(diff_id)  # as a pull that found this layer present would
        await svc.remove(image.id)
        assert svc.store.has_layer(diff_id)
        assert not svc.store.has_blob(image.id)  # the unpinned config went
        lease.release()
        assert await svc.gc(high_pct=0, low_pct=0, in_use=set()) == []  # no images left; orphans swept
        assert not svc.store.has_layer(diff_id)
        assert list(svc.store.blobs.iterdir()) == []
