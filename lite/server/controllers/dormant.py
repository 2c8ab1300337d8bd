"""A controller that is built the first time its kind has something to do: `Dormant`.

Most clusters never create a DaemonSet, a StatefulSet, a CronJob or a HorizontalPodAutoscaler, yet every
controller's module (its code, several hundred KB for the workload controllers together) used to be imported
and the controller built at start. `Dormant` stands in for such a controller: it watches only the informers
that could give the controller work, and the first time one of them shows something the controller would act
on, it imports and builds the real controller (`build`), which then runs exactly as if it had been built at
start.

What wakes it: an object of the primary kind appearing (an add, including those of the initial list), or a
child object (a kind of `children`) whose controllerRef names the primary kind: a controller also acts on
children whose owner is gone (the Job controller releasing its finalizer from pods of a deleted Job), so the
owner keys of such children are handed to the real controller's first run, as the built controller's own
handlers would have enqueued them. Anything else the real controller watches only matters once one of those
exists.

Invariants:
- Nothing is missed: the real controller registers its handlers after it is built (existing objects are
  replayed to them) and its `run` starts, like every leadership term, by enqueueing every key of its primary
  informer once its informers have synced; reconciles are level-triggered, reading only caches and the API.
- Once woken it stays built for the life of the process; the wake-up is decided in a handler (cheap, no
  I/O) and the build happens in `run`, that is only while this process holds the lease.
- `active()` is the real controller once built (the manager reports its queue), else the stand-in.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Sequence
from typing import Any, ClassVar

from lite.client import Client
from lite.informer import SharedInformers
from lite.kinds import Kind
from lite.objects import controller_of, namespace_of
from lite.server.controllers.runtime import Controller

Obj = dict[str, Any]
log = logging.getLogger("lite.controllers")


class Dormant(Controller):
    """Stands in for the controller `build()` makes until its kind has work for it; see the module doc."""

    name: ClassVar[str] = "dormant"

    def __init__(self, client: Client, informers: SharedInformers, primary: Kind, build: Callable[[], Controller],
                 *, children: Sequence[Kind] = ()) -> None:
        super().__init__(client, informers)
        self.build = build
        self.real: Controller | None = None
        self.woken = asyncio.Event()
        self.pending: set[str] = set()  # owner keys of the children seen while dormant (their owner may be gone)
        self.informer(primary, primary=True).add_handlers(on_add=self._wake)
        self.owner = (primary.kind, primary.group)
        for kind in children:
            self.informer(kind).add_handlers(on_add=self._child, on_update=self._child_updated,
                                             on_delete=self._child)

    def _child_updated(self, _old: Obj, new: Obj) -> None:
        self._child(new)

    def _child(self, obj: Obj) -> None:
        if self.real is not None or not (obj.get("metadata") or {}).get("ownerReferences"):
            return  # built (its own handlers take the children's events), or no owner at all (most pods)
        ref = controller_of(obj)
        if ref is not None and (ref.get("kind"), str(ref.get("apiVersion", "")).rpartition("/")[0]) == self.owner:
            ns = namespace_of(obj)
            self.pending.add(f"{ns}/{ref.get('name', '')}" if ns else str(ref.get("name", "")))
            self.woken.set()

    def _wake(self, _obj: Obj) -> None:
        self.woken.set()

    def active(self) -> Controller:
        return self.real if self.real is not None else self

    async def run(self, also: Iterable[str] = ()) -> None:
        """Wait for work, build the real controller once, then run it for this leadership term."""
        await self.woken.wait()
        if self.real is None:
            self.real = self.build()
            log.info("controller %s: built on its first object", self.real.name)
        for inf in self.real.watched:
            await inf.wait_synced()
        keys, self.pending = [*self.pending, *also], set()
        await self.real.run(keys)


def dormant(name: str, client: Client, informers: SharedInformers, primary: Kind,
            build: Callable[[], Controller], *, children: Sequence[Kind] = ()) -> Dormant:
    """A `Dormant` named like the controller it stands in for (metrics and `ControllerManager.controller`)."""
    cls = type(f"Dormant[{name}]", (Dormant,), {"name": name})
    made: Dormant = cls(client, informers, primary, build, children=children)
    return made
