"""Scheduler test kit: the real in-process API (`Resources` over a real SQLite Store in tmp_path), real
shared informers, and a running scheduler; plus builders for nodes and pods (also used by plugin tables)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from lite.client import Obj
from lite.informer import SharedInformers
from lite.kinds import BUILTIN_KINDS, Kind, KindRegistry
from lite.server.admission.priority import PriorityAdmission
from lite.server.api.resources import Resources
from lite.server.api.strategies import default_strategies
from lite.server.scheduler.registry import Profile
from lite.server.scheduler.scheduler import Scheduler, build_scheduler
from lite.server.store.store import Store

GUARD = 15.0  # a hang guard, never a speed assertion


def kind(group: str, name: str) -> Kind:
    return next(k for k in BUILTIN_KINDS if k.group == group and k.kind == name)


POD, NODE, EVENT, SVC = kind("", "Pod"), kind("", "Node"), kind("", "Event"), kind("", "Service")
PC, PDB = kind("scheduling.k8s.io", "PriorityClass"), kind("policy", "PodDisruptionBudget")


def node(name: str, cpu: str = "4", memory: str = "8Gi", pods: int = 110, labels: dict[str, str] | None = None,
         taints: list[Obj] | None = None, unschedulable: bool = False, images: list[Obj] | None = None) -> Obj:
    alloc = {"cpu": cpu, "memory": memory, "pods": str(pods), "ephemeral-storage": "100Gi"}
    spec: Obj = {}
    if taints:
        spec["taints"] = taints
    if unschedulable:
        spec["unschedulable"] = True
    status: Obj = {"capacity": dict(alloc), "allocatable": alloc}
    if images:
        status["images"] = images
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
            "spec": spec, "status": status}


def pod(name: str, cpu: str = "", memory: str = "", ns: str = "default", labels: dict[str, str] | None = None,
        priority: int | None = None, image: str = "nginx:1", **spec: Any) -> Obj:
    requests: Obj = {}
    if cpu:
        requests["cpu"] = cpu
    if memory:
        requests["memory"] = memory
    container: Obj = {"name": "c", "image": image}
    if requests:
        container["resources"] = {"requests": requests}
    s: Obj = {"containers": [container], **spec}
    if priority is not None:
        s["priority"] = priority
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": ns, "labels": dict(labels or {})}, "spec": s}


class Kit:
    def __init__(self, api: Resources) -> None:
        self.api = api
        # read-only: a plugin or handler that changes a cached object in place fails (lite.informer)
        self.informers = SharedInformers(api, read_only=True)
        self.scheduler: Scheduler | None = None

    async def until(self, pred: Callable[[], Any]) -> Any:
        async with asyncio.timeout(GUARD):
            while True:
                v = pred()
                if asyncio.iscoroutine(v):
                    v = await v
                if v:
                    return v
                await asyncio.sleep(0.01)

    async def get_pod(self, name: str, ns: str = "default") -> Obj:
        return await self.api.get(POD, ns, name)

    async def node_of(self, name: str, ns: str = "default") -> str:
        return str((await self.get_pod(name, ns))["spec"].get("nodeName") or "")

    async def bound(self, name: str, ns: str = "default") -> str:
        return str(await self.until(lambda: self.node_of(name, ns)))

    async def events(self, name: str, reason: str) -> list[Obj]:
        items = (await self.api.list(EVENT, "default"))["items"]
        return [e for e in items if e["involvedObject"]["name"] == name and e["reason"] == reason]


@contextlib.asynccontextmanager
async def open_kit(path: Path, profile: Profile | None = None, **options: Any) -> AsyncIterator[Kit]:
    store = await Store.open(str(path / "state.db"))
    api = Resources(store, KindRegistry(), default_strategies())
    api.strategies.add_admission(PriorityAdmission(api).admit)  # spec.priority/preemptionPolicy, as a server sets them
    try:
        await api.start()
        kit = Kit(api)
        kit.scheduler = build_scheduler(api, kit.informers, profile=profile, **options)
        async with asyncio.TaskGroup() as tg:
            tasks = [tg.create_task(kit.informers.run()), tg.create_task(kit.scheduler.run())]
            try:
                yield kit
            finally:
                for t in tasks:
                    t.cancel()
        assert not kit.informers.mutations(), "handlers changed shared objects in place"
    finally:
        stop = getattr(api, "stop", None)
        if stop is not None:
            await stop()
        await store.close()


@pytest.fixture
async def kit(tmp_path: Path) -> AsyncIterator[Kit]:
    async with open_kit(tmp_path) as k:
        yield k
