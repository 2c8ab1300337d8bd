"""Service IP / NodePort allocation by two servers on one datastore: two Resources with their allocators over two
MirrorStores on one real SqliteBackend. Their informers are not run, so neither server's memory knows what the
other handed out: only the reservations in the datastore keep the values apart."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from lite.errors import ApiError
from lite.kinds import BUILTIN_KINDS, KindRegistry
from lite.server.admission.serviceips import ServiceAllocators, items_of
from lite.server.api.resources import Resources
from lite.server.api.strategies import default_strategies
from lite.server.services.reservations import Reservations, key_for
from lite.server.store.mirror import MirrorStore
from lite.server.store.sqlitebackend import SqliteBackend

SVC = next(k for k in BUILTIN_KINDS if k.kind == "Service")
Obj = dict[str, Any]
CIDR, PORTS = "10.44.0.0/28", "30000-30011"  # 14 addresses, 12 ports


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


Server = tuple[Resources, ServiceAllocators]


@contextlib.asynccontextmanager
async def servers(tmp_path: Path, clock: Clock, *, reserve: bool = True) -> AsyncIterator[tuple[Server, Server]]:
    backend = await SqliteBackend.open(str(tmp_path / "shared.db"))
    stores: list[MirrorStore] = []
    made: list[Server] = []
    try:
        for _ in range(2):
            store = await MirrorStore.open(backend)
            stores.append(store)
            strategies = default_strategies()
            api = Resources(store, KindRegistry(), strategies)
            alloc = ServiceAllocators(api, CIDR, PORTS, clock=clock, pending_ttl=30,
                                      reservations=Reservations(store) if reserve else None)
            strategies.add_admission(alloc.admit)
            await api.start()
            await alloc.start()
            made.append((api, alloc))
        yield made[0], made[1]
    finally:
        for store in stores:
            await store.close()
        await backend.close()


def svc(name: str, **spec: Any) -> Obj:
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": "default"},
            "spec": {"type": "NodePort", "selector": {"app": name}, "ports": [{"port": 80}], **spec}}


async def race(a: Server, b: Server, n: int) -> list[Obj]:
    """`n` Services created on each server at once; the stored ones."""
    await asyncio.gather(*(api.create(SVC, "default", svc(f"{tag}{i}"))
                           for i in range(n) for tag, (api, _) in (("a", a), ("b", b))))
    await fresh(a[0])
    return list((await a[0].list(SVC, "default"))["items"])


async def fresh(server: Resources) -> None:
    """Let `server`'s mirror apply everything committed so far (what a consistent read awaits)."""
    wait = server.store.fresh()
    assert wait is not None
    await wait


async def test_two_servers_never_hand_out_the_same_ip_or_port(tmp_path: Path) -> None:
    async with servers(tmp_path, Clock()) as (a, b):
        stored = await race(a, b, 6)
        assert len(stored) == 12
        ips = [s["spec"]["clusterIP"] for s in stored]
        ports = [s["spec"]["ports"][0]["nodePort"] for s in stored]
        assert len(set(ips)) == 12 and len(set(ports)) == 12
        assert Reservations(a[0].store).stored().__len__() == 24  # one reservation per value held
        with pytest.raises(ApiError) as e:  # all 12 ports are held: the 13th is refused, not a duplicate
            await b[0].create(SVC, "default", svc("more"))
        assert e.value.code == 500 and "range is full" in e.value.message


async def test_without_reservations_the_servers_collide(tmp_path: Path) -> None:
    """What the test above guards against: with each server's memory alone, the values clash."""
    async with servers(tmp_path, Clock(), reserve=False) as (a, b):
        stored = await race(a, b, 6)
        ips = [s["spec"]["clusterIP"] for s in stored]
        ports = [s["spec"]["ports"][0]["nodePort"] for s in stored]
        assert len(set(ports)) < 12 or len(set(ips)) < 12  # both apart by chance: about 1 in 100,000


async def test_a_requested_value_reserved_elsewhere_is_taken_unless_it_is_the_same_service(tmp_path: Path) -> None:
    async with servers(tmp_path, Clock()) as ((api_a, _), (api_b, _)):
        await api_a.create(SVC, "default", svc("one", clusterIP="10.44.0.5"))
        with pytest.raises(ApiError) as e:
            await api_b.create(SVC, "default", svc("two", clusterIP="10.44.0.5"))
        assert e.value.code == 422 and "already allocated" in e.value.message
        # the same name with the same address on both servers at once (default/kubernetes at two starts): one
        # create wins, the other is AlreadyExists, and the reservation stays with the Service that holds it
        got = await asyncio.gather(api_a.create(SVC, "default", svc("k", clusterIP="10.44.0.1")),
                                   api_b.create(SVC, "default", svc("k", clusterIP="10.44.0.1")),
                                   return_exceptions=True)
        assert sorted(type(g).__name__ for g in got) == ["ApiError", "dict"]
        assert next(g for g in got if isinstance(g, ApiError)).code == 409
        await fresh(api_a)
        assert api_a.store.get(key_for(("ip", "10.44.0.1"))) is not None


async def test_released_when_let_go_and_reclaimed_when_orphaned(tmp_path: Path) -> None:
    clock = Clock()
    async with servers(tmp_path, clock) as ((api_a, alloc_a), (api_b, alloc_b)):
        out = await api_a.create(SVC, "default", svc("gone"))
        alloc_a.observe("default/gone", out)
        held = items_of(out)
        await api_a.delete(SVC, "default", "gone")
        alloc_a.observe("default/gone", None)  # as the informer tells it
        assert await alloc_a.release_reservations() == len(held) == 2
        assert all(api_a.store.get(key_for(item)) is None for item in held)
        # a server that died between reserving and storing: nobody releases it, the sweep reclaims it
        kept = await api_b.create(SVC, "default", svc("kept"))
        alloc_b.observe("default/kept", kept)
        orphan = ("port", str(next(p for p in range(30000, 30012) if not alloc_b.ports.has(p))))
        assert await Reservations(api_b.store).reserve(orphan, "default/never") is not None
        assert await alloc_b.reclaim() == 0  # orphaned from now on
        clock.t = 31
        assert await alloc_b.reclaim() == 1
        assert api_b.store.get(key_for(orphan)) is None
        assert all(api_b.store.get(key_for(item)) is not None for item in items_of(kept))
        # a failed create gives its reservation back at once
        free = next(ip for ip in (f"10.44.0.{i}" for i in range(1, 15)) if not alloc_b.ips.has(ip))
        with pytest.raises(ApiError) as e:
            await api_a.create(SVC, "default", svc("kept", clusterIP=free))
        assert e.value.code == 409
        assert api_a.store.get(key_for(("ip", free))) is None


async def test_deleted_and_created_again_at_once_keeps_its_reservation(tmp_path: Path) -> None:
    """The same Service asks for the same address again before its server deleted the old reservation: the old
    one is deleted first, so the new Service's reservation is not the one deleted afterwards."""
    async with servers(tmp_path, Clock()) as ((api, alloc), _):
        out = await api.create(SVC, "default", svc("again", type="ClusterIP", clusterIP="10.44.0.3"))
        alloc.observe("default/again", out)
        await api.delete(SVC, "default", "again")
        alloc.observe("default/again", None)  # queued for deletion, not deleted yet
        again = await api.create(SVC, "default", svc("again", type="ClusterIP", clusterIP="10.44.0.3"))
        alloc.observe("default/again", again)
        assert await alloc.release_reservations() == 0
        got = Reservations(api.store).holder(("ip", "10.44.0.3"))
        assert got is not None and got[1] == "default/again"
