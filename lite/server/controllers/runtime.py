"""The controller runtime: the `Controller` base class and the `ControllerManager` that runs them.

A controller (sample-controller anatomy):
- declares the informers it reads through `self.informer(kind)` (shared with every other controller);
- registers handlers that only turn events into work-queue keys, children mapped to their owner through
  the controllerRef (`enqueue_owner`);
- implements `async reconcile(key)`, which looks only at the caches and the API, never at the event, writes
  through the client, and is safe to run again (level-triggered). It may return a delay to be called again.

The manager:

    informers.run() ─┐
    wait for every controller's informer to sync
    run_elected(Lease kube-system/kube-controller-manager):    (lite.server.leaderelection)
          while held: every controller's guarded workers, and the `leader_tasks` (loops of the server's
                      own that must run once in the cluster, e.g. ClusterRole aggregation), started afresh
          lease lost (LostLease) → workers cancelled and awaited → back to acquiring

Invariants:
- Workers run only while this process holds the lease. Each leadership term starts every controller with a
  fresh work queue filled with every key of its primary informer (`initial_keys`), and calls `on_start`
  so per-term memory (expectations) starts empty; events arriving while not leading are dropped, which
  is safe because the next term enqueues everything.
- A key is never reconciled by two workers at once (the work queue guarantees it); failures are logged
  and retried with per-key backoff (`lite.controllerkit.run_workers`).
- Controllers never import `lite.server.store`: they get a `lite.client.Client` and `SharedInformers`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any, ClassVar

from lite.client import Client
from lite.controllerkit import guarded, run_workers
from lite.events import EventRecorder
from lite.informer import Informer, SharedInformers
from lite.kinds import BUILTIN_KINDS, Kind
from lite.objects import controller_of, key_of, namespace_of
from lite.server.leaderelection import LeaderElector, run_elected
from lite.workqueue import WorkQueue

Obj = dict[str, Any]
log = logging.getLogger("lite.controllers")


def builtin(group: str, kind: str) -> Kind:
    """The built-in Kind for (group, kind); the preferred version is the only one lite serves."""
    for k in BUILTIN_KINDS:
        if k.group == group and k.kind == kind:
            return k
    raise KeyError(f"{kind}.{group}")


class Controller:
    """Base class: a name, informers, handlers that enqueue keys, and `reconcile(key)`. See module doc."""

    name: ClassVar[str] = "controller"
    workers: int = 1

    def __init__(self, client: Client, informers: SharedInformers, recorder: EventRecorder | None = None) -> None:
        self.client = client
        self.informers = informers
        self.recorder = recorder or EventRecorder(client, "lite-controller-manager")
        self.watched: list[Informer] = []
        self.primary: Informer | None = None
        self.queue: WorkQueue[str] = WorkQueue(name=self.name)
        self.queue.shut_down()  # not leading yet: `run` installs a live queue

    # -- wiring --

    def informer(self, kind: Kind, *, primary: bool = False, resync: float = 0.0) -> Informer:
        inf = self.informers.informer(kind, resync=resync)
        if inf not in self.watched:
            self.watched.append(inf)
        if primary:
            self.primary = inf
        return inf

    def enqueue(self, obj: Obj) -> None:
        self.queue.add(key_of(obj))

    def enqueue_key(self, key: str, delay: float = 0.0) -> None:
        self.queue.add_after(key, delay)

    def enqueue_owner(self, obj: Obj, kind: str, api_group: str = "") -> bool:
        """Enqueue `namespace/name` of obj's controller when it is a `kind` of `api_group`; True if so."""
        ref = controller_of(obj)
        if ref is None or ref.get("kind") != kind:
            return False
        group = str(ref.get("apiVersion", "")).rpartition("/")[0]
        if group != api_group:
            return False
        ns = namespace_of(obj)
        self.queue.add(f"{ns}/{ref.get('name', '')}" if ns else str(ref.get("name", "")))
        return True

    def watch_primary(self, inf: Informer) -> None:
        """The usual handlers for the controller's own kind: every add, change and delete enqueues it."""
        inf.add_handlers(on_add=self.enqueue, on_update=lambda old, new: self.enqueue(new),
                         on_delete=self.enqueue)

    # -- running --

    def active(self) -> Controller:
        """The controller doing the work: itself (a `dormant.Dormant` answers the one it built, once built)."""
        return self

    def initial_keys(self) -> Iterable[str]:
        return self.primary.keys() if self.primary is not None else ()

    def on_start(self) -> None:
        """Reset per-leadership-term state (expectations, caches of in-flight work)."""

    async def reconcile(self, key: str) -> float | None:
        raise NotImplementedError

    async def run(self, also: Iterable[str] = ()) -> None:
        """Workers over a fresh queue holding every current key (and the keys `also`, events a stand-in saw
        before this controller was built); returns only when cancelled."""
        self.queue.shut_down()
        self.queue = WorkQueue(name=self.name, stats=self.queue.stats)  # one series across leadership terms
        self.on_start()
        for key in self.initial_keys():
            self.queue.add(key)
        for key in also:
            self.queue.add(key)
        try:
            await run_workers(self.queue, self.reconcile, workers=self.workers, name=self.name)
        finally:
            self.queue.shut_down()


class ControllerManager:
    """Runs controllers' workers while holding the leader lease. `run()` is one TaskGroup child."""

    def __init__(self, client: Client, informers: SharedInformers, controllers: Sequence[Controller], *,
                 elector: LeaderElector) -> None:
        self.client = client
        self.informers = informers
        self.controllers = list(controllers)
        self.elector = elector
        self.synced = asyncio.Event()
        # (name, start) of other loops run only while leading: each term calls start() again; cancelled with it.
        self.leader_tasks: list[tuple[str, Callable[[], Awaitable[None]]]] = []

    @property
    def is_leader(self) -> bool:
        return self.elector.is_leader

    def controller(self, name: str) -> Controller:
        for c in self.controllers:
            if c.name == name:
                return c.active()
        raise KeyError(name)

    async def run(self) -> None:
        """Informers, then (while leader) workers. Never returns; cancellation releases the lease."""
        async with asyncio.TaskGroup() as tg:
            tg.create_task(self.informers.run(), name="informers")
            for c in self.controllers:
                for inf in c.watched:
                    await inf.wait_synced()
            self.synced.set()
            log.info("controller manager: caches synced; %d controllers", len(self.controllers))
            await run_elected(self.elector, self._lead, what="controller manager")

    async def _lead(self) -> None:
        """One leadership term: every controller's workers, until cancelled (lease lost or shutdown)."""
        log.info("controller manager: leading: %d controllers%s", len(self.controllers),
                 "".join(f", {name}" for name, _ in self.leader_tasks))
        async with asyncio.TaskGroup() as tg:
            for c in self.controllers:
                tg.create_task(guarded(c.name, c.run), name=c.name)
            for name, start in self.leader_tasks:
                tg.create_task(guarded(name, start), name=name)


class Expectations:
    """Creations and deletions a controller has asked for and not yet seen in its cache (upstream
    ControllerExpectations / UIDTrackingControllerExpectations).

    While a key has pending expectations its controller must not create or delete again, or it would act
    twice on the same shortfall before the informer has caught up. An expectation older than `ttl` is
    considered satisfied (a lost watch event must not wedge the controller forever).
    """

    def __init__(self, ttl: float = 300.0) -> None:
        self.ttl = ttl
        self._adds: dict[str, int] = {}
        self._dels: dict[str, set[str]] = {}
        self._at: dict[str, float] = {}

    def satisfied(self, key: str) -> bool:
        if key not in self._at:
            return True
        if self._adds.get(key, 0) <= 0 and not self._dels.get(key):
            return True
        return asyncio.get_running_loop().time() - self._at[key] > self.ttl

    def expect_creations(self, key: str, n: int) -> None:
        self._adds[key] = n
        self._dels[key] = set()
        self._at[key] = asyncio.get_running_loop().time()

    def expect_deletions(self, key: str, pod_keys: Iterable[str]) -> None:
        self._adds[key] = 0
        self._dels[key] = set(pod_keys)
        self._at[key] = asyncio.get_running_loop().time()

    def creation_observed(self, key: str) -> None:
        if key in self._adds:
            self._adds[key] -= 1

    def deletion_observed(self, key: str, pod_key: str) -> None:
        dels = self._dels.get(key)
        if dels is not None:
            dels.discard(pod_key)

    def pending(self, key: str) -> tuple[int, int]:
        return max(0, self._adds.get(key, 0)), len(self._dels.get(key, ()))

    def delete(self, key: str) -> None:
        self._adds.pop(key, None)
        self._dels.pop(key, None)
        self._at.pop(key, None)

    def clear(self) -> None:
        self._adds.clear()
        self._dels.clear()
        self._at.clear()
