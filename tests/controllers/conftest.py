"""Controller test kit: the real in-process API (`Resources` over a real SQLite Store in tmp_path), real
informers fed from it, and helpers to wait until caches have caught up and to play a node (pod status).

Tests call `reconcile(key)` directly after `settle()`, then check the objects the API holds.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from lite.client import Obj
from lite.informer import Informer, SharedInformers
from lite.kinds import KindRegistry
from lite.objects import key_of, name_of, rfc3339, rv_of
from lite.server.api.resources import Resources
from lite.server.api.strategies import default_strategies
from lite.server.controllers.runtime import Controller, builtin
from lite.server.store.store import Store

GUARD = 10.0  # a hang guard, never a speed assertion

POD = builtin("", "Pod")
RS = builtin("apps", "ReplicaSet")
RC = builtin("", "ReplicationController")
DEPLOY = builtin("apps", "Deployment")
NS = builtin("", "Namespace")
CM = builtin("", "ConfigMap")
SA = builtin("", "ServiceAccount")
EVENT = builtin("", "Event")
LEASE = builtin("coordination.k8s.io", "Lease")


class Kit:
    """One API, one SharedInformers running in the background, and waiting helpers."""

    def __init__(self, api: Resources, kinds: KindRegistry) -> None:
        self.api = api
        self.kinds = kinds
        # read-only: a controller that changes a cached object in place fails its test (lite.informer)
        self.informers = SharedInformers(api, read_only=True)

    async def settle(self, *controllers: Controller) -> None:
        """Wait until every informer of `controllers` (all informers if none) matches a fresh list."""
        infs: list[Informer] = [i for c in controllers for i in c.watched] if controllers else list(self.informers)
        async with asyncio.timeout(GUARD):
            for inf in infs:
                await inf.wait_synced()
                while True:
                    lst = await self.api.list(inf.kind)
                    want = {key_of(o): rv_of(o) for o in lst["items"]}
                    have = {key_of(o): rv_of(o) for o in inf.list()}
                    if want == have:
                        break
                    await asyncio.sleep(0.002)

    async def until(self, pred: Callable[[], Any]) -> None:
        async with asyncio.timeout(GUARD):
            while not await _value(pred()):
                await asyncio.sleep(0.005)

    async def pods(self, ns: str = "default", *, active_only: bool = True) -> list[Obj]:
        items = (await self.api.list(POD, ns))["items"]
        if active_only:
            items = [p for p in items if not (p.get("metadata") or {}).get("deletionTimestamp")]
        return sorted(items, key=name_of)

    async def make_ready(self, pod: Obj, *, node: str = "node-1", ready: bool = True,
                         since: dt.datetime | None = None) -> Obj:
        """Do what a node does: bind the pod (if unbound) and report it Running and Ready."""
        ns, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        if not (pod.get("spec") or {}).get("nodeName"):
            await self.api.create(POD, ns, {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": name},
                                            "target": {"kind": "Node", "name": node}}, name=name,
                                  subresource="binding")
        stamp = rfc3339(since)
        status = {"phase": "Running" if ready else "Pending", "conditions": [
            {"type": "Ready", "status": "True" if ready else "False", "lastTransitionTime": stamp}]}
        return await self.api.patch(POD, ns, name, {"status": status}, subresource="status")


async def _value(v: Any) -> Any:
    return await v if asyncio.iscoroutine(v) else v


@contextlib.asynccontextmanager
async def open_kit(path: Path) -> AsyncIterator[Kit]:
    store = await Store.open(str(path / "state.db"))
    kinds = KindRegistry()
    api = Resources(store, kinds, default_strategies())
    try:
        await api.start()
        yield Kit(api, kinds)
    finally:
        await store.close()


@pytest.fixture
async def kit(tmp_path: Path) -> AsyncIterator[Kit]:
    async with open_kit(tmp_path) as k:
        task = asyncio.create_task(k.informers.run())
        try:
            yield k
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        assert not k.informers.mutations(), "handlers changed shared objects in place"


def pod_template(labels: dict[str, str], image: str = "nginx:1") -> Obj:
    return {"metadata": {"labels": dict(labels)},
            "spec": {"containers": [{"name": "c", "image": image}]}}


def replicaset(name: str, replicas: int, labels: dict[str, str] | None = None, ns: str = "default",
               **spec: Any) -> Obj:
    labels = labels or {"app": name}
    return {"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": name, "namespace": ns},
            "spec": {"replicas": replicas, "selector": {"matchLabels": labels},
                     "template": pod_template(labels), **spec}}


def bare_pod(name: str, labels: dict[str, str], ns: str = "default") -> Obj:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns, "labels": labels},
            "spec": {"containers": [{"name": "c", "image": "nginx:1"}]}}


@contextlib.asynccontextmanager
async def running(*controllers: Controller) -> AsyncIterator[None]:
    """Run the controllers' workers for real (as the manager does while leading) for the block's duration."""
    tasks = [asyncio.create_task(c.run()) for c in controllers]
    try:
        yield
    finally:
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await t


def configmap(name: str, ns: str = "default", owners: list[Obj] | None = None,
              finalizers: list[str] | None = None) -> Obj:
    m: Obj = {"name": name, "namespace": ns}
    if owners:
        m["ownerReferences"] = owners
    if finalizers:
        m["finalizers"] = finalizers
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": m, "data": {"k": "v"}}
