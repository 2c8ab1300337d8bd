"""Garbage collector: ownerReferences between any stored objects (upstream `pkg/controller/garbagecollector`).

The graph is the set of informers over every stored, watchable Kind (events excepted), each indexed by the
uids its objects name as owners; CRD kinds are added when their CustomResourceDefinition appears. Keys are
`group|version|Kind|namespace|name`.

reconcile(key):
- object being deleted with the `orphan` finalizer → remove the ownerReferences pointing at it from every
  dependent, then remove the finalizer (Orphan propagation);
- object being deleted with `foregroundDeletion` → judge each dependent by all its owners (the next rule, with
  this owner counting as gone): one with another solid owner only loses the reference, the others are deleted
  (Foreground for those that have dependents themselves); once no dependent with blockOwnerDeletion still
  references it, remove the finalizer (Foreground propagation);
- object with ownerReferences → classify each owner (absent by uid: dangling; being deleted in foreground:
  waiting; else solid). No solid owner left → delete the object (its own finalizers pick the policy,
  Background by default); some solid → drop the dangling/waiting references (Background propagation is
  the owner's disappearance followed by this rule).

Invariants:
- An owner is declared absent only after a live GET (404 or another uid): a cache that has not caught up
  (or a kind whose informer is still syncing) never gets a dependent deleted.
- Deletes carry a uid precondition, so a recreated object of the same name is never collected by mistake.
- Handlers only enqueue: the object itself on add/update, its dependents when it is deleted, its owners
  when it goes (a foreground owner may be waiting for it).
"""

from __future__ import annotations

import logging
from typing import Any, ClassVar

from lite.client import Client
from lite.errors import ApiError
from lite.events import EventRecorder
from lite.informer import Informer, SharedInformers
from lite.kinds import Kind, KindRegistry
from lite.objects import deep_copy, is_deleting, meta, name_of, namespace_of, uid_of
from lite.server.controllers.runtime import Controller, builtin

Obj = dict[str, Any]
log = logging.getLogger("lite.controllers.gc")

ORPHAN = "orphan"
FOREGROUND = "foregroundDeletion"
OWNER_INDEX = "gc-owner-uid"
RECHECK = 5.0  # safety net while a foreground owner waits for blocking dependents
_SKIP = {("", "Event"), ("events.k8s.io", "Event")}


def _owner_uids(obj: Obj) -> list[str]:
    return [str(r.get("uid")) for r in meta(obj).get("ownerReferences") or [] if r.get("uid")]


class GarbageCollector(Controller):
    name: ClassVar[str] = "garbagecollector"
    workers = 4

    def __init__(self, client: Client, informers: SharedInformers, kinds: KindRegistry,
                 recorder: EventRecorder | None = None) -> None:
        super().__init__(client, informers, recorder or EventRecorder(client, "garbage-collector-controller"))
        self.kinds = kinds
        self.graph: dict[Kind, Informer] = {}
        self.watch_kinds()
        crds = self.graph.get(builtin("apiextensions.k8s.io", "CustomResourceDefinition"))
        if crds is not None:
            crds.add_handlers(on_add=lambda _: self.watch_kinds(), on_update=lambda _o, _n: self.watch_kinds())

    # -- the graph --

    def watch_kinds(self) -> None:
        """Start informing on every stored kind not yet in the graph (CRD kinds appear at run time)."""
        for kind in self.kinds:
            if kind in self.graph or kind.virtual or kind.storage or (kind.group, kind.kind) in _SKIP or \
                    not {"list", "watch"} <= set(kind.verbs):
                continue
            inf = self.informer(kind)
            try:
                inf.add_index(OWNER_INDEX, _owner_uids)
            except ValueError:
                pass  # another GC instance over the same informers already indexed it
            self.graph[kind] = inf
            self._attach(kind, inf)

    def _attach(self, kind: Kind, inf: Informer) -> None:
        def changed(obj: Obj) -> None:
            self._changed(kind, obj)

        def updated(_old: Obj, new: Obj) -> None:
            self._changed(kind, new)

        def gone(obj: Obj) -> None:
            self._gone(kind, obj)

        inf.add_handlers(on_add=changed, on_update=updated, on_delete=gone)

    @staticmethod
    def key(kind: Kind, obj: Obj) -> str:
        return f"{kind.group}|{kind.version}|{kind.kind}|{namespace_of(obj)}|{name_of(obj)}"

    def _interesting(self, obj: Obj) -> bool:
        m = meta(obj)
        if m.get("ownerReferences"):
            return True
        if not is_deleting(obj):
            return False  # every event of an object without owners and not being deleted: decided here
        fins = m.get("finalizers") or []
        return ORPHAN in fins or FOREGROUND in fins

    def _changed(self, kind: Kind, obj: Obj) -> None:
        if self._interesting(obj):
            self.queue.add(self.key(kind, obj))

    def _gone(self, kind: Kind, obj: Obj) -> None:
        for dep_kind, dep in self.dependents(uid_of(obj)):
            self.queue.add(self.key(dep_kind, dep))
        for ref in meta(obj).get("ownerReferences") or []:
            owner_kind = self.kinds.by_api_version(str(ref.get("apiVersion", "")), str(ref.get("kind", "")))
            if owner_kind is not None:
                ns = namespace_of(obj) if owner_kind.namespaced else ""
                self.queue.add(self.key(owner_kind, {"metadata": {"namespace": ns, "name": ref.get("name", "")}}))

    def dependents(self, uid: str) -> list[tuple[Kind, Obj]]:
        return [(k, o) for k, inf in list(self.graph.items()) for o in inf.by_index(OWNER_INDEX, uid)]

    def initial_keys(self) -> list[str]:
        return [self.key(k, o) for k, inf in list(self.graph.items()) for o in inf.iter_objects()
                if self._interesting(o)]

    # -- reconcile --

    async def reconcile(self, key: str) -> float | None:
        group, version, kind_name, ns, name = key.split("|")
        kind = self.kinds.by_gvk(group, version, kind_name)
        inf = self.graph.get(kind) if kind is not None else None
        if kind is None or inf is None:
            return None
        obj = inf.get(f"{ns}/{name}" if ns else name)
        if obj is None:
            return None
        fins = meta(obj).get("finalizers") or []
        if is_deleting(obj):
            if ORPHAN in fins:
                await self._orphan(obj)
                await self._remove_finalizer(kind, obj, ORPHAN)
            elif FOREGROUND in fins:
                return await self._foreground(kind, obj)
            return None
        if meta(obj).get("ownerReferences"):
            await self._check_owners(kind, obj)
        return None

    async def _orphan(self, owner: Obj) -> None:
        for kind, dep in self.dependents(uid_of(owner)):
            refs = [r for r in meta(dep).get("ownerReferences") or [] if r.get("uid") != uid_of(owner)]
            await self._patch_refs(kind, dep, refs)

    async def _foreground(self, kind: Kind, owner: Obj) -> float | None:
        """Each dependent is judged by all its owners (upstream attemptToDeleteItem): one that has another,
        solid owner only loses its reference to this one and does not hold it back; the others are deleted."""
        blocking = 0
        for dep_kind, dep in self.dependents(uid_of(owner)):
            ref: Obj = next((r for r in meta(dep).get("ownerReferences") or [] if r.get("uid") == uid_of(owner)), {})
            if not is_deleting(dep) and await self._check_owners(dep_kind, dep) == "released":
                continue
            if ref.get("blockOwnerDeletion"):
                blocking += 1
        if blocking:
            return RECHECK
        await self._remove_finalizer(kind, owner, FOREGROUND)
        return None

    async def _check_owners(self, kind: Kind, obj: Obj) -> str:
        """"kept" (every owner solid), "released" (references to absent or foreground-deleting owners
        dropped, a solid one remains) or "deleted" (no solid owner left: deletion requested)."""
        solid, gone = 0, []
        for ref in meta(obj).get("ownerReferences") or []:
            state = await self._owner_state(obj, ref)
            if state == "solid":
                solid += 1
            else:
                gone.append((ref, state))
        if not gone:
            return "kept"
        if solid:
            bad = {r.get("uid") for r, _ in gone}
            await self._patch_refs(kind, obj, [r for r in meta(obj).get("ownerReferences") or []
                                               if r.get("uid") not in bad])
            return "released"
        fins = meta(obj).get("finalizers") or []
        if any(state == "waiting" for _, state in gone) and self.dependents(uid_of(obj)):
            policy: str | None = "Foreground"
        else:
            policy = "Orphan" if ORPHAN in fins else "Foreground" if FOREGROUND in fins else "Background"
        log.info("gc: deleting %s %s/%s: owners gone", kind.kind, namespace_of(obj), name_of(obj))
        await self._delete(kind, obj, policy)
        return "deleted"

    async def _owner_state(self, obj: Obj, ref: Obj) -> str:
        """"solid", "waiting" (owner in foreground deletion) or "dangling" (absent, checked live)."""
        kind = self.kinds.by_api_version(str(ref.get("apiVersion", "")), str(ref.get("kind", "")))
        if kind is None:
            return "solid"  # an owner kind we do not serve: never collect on a guess
        ns = namespace_of(obj) if kind.namespaced else ""
        inf = self.graph.get(kind)
        owner = inf.get(f"{ns}/{ref.get('name', '')}" if ns else str(ref.get("name", ""))) if inf else None
        if owner is None or uid_of(owner) != ref.get("uid"):
            try:
                owner = await self.client.get(kind, ns, str(ref.get("name", "")))
            except ApiError as e:
                if e.code == 404:
                    return "dangling"
                raise
            if uid_of(owner) != ref.get("uid"):
                return "dangling"
        if is_deleting(owner) and FOREGROUND in (meta(owner).get("finalizers") or []):
            return "waiting"
        return "solid"

    # -- writes --

    async def _delete(self, kind: Kind, obj: Obj, policy: str | None) -> None:
        try:
            await self.client.delete(kind, namespace_of(obj), name_of(obj), propagation_policy=policy,
                                     preconditions={"uid": uid_of(obj)})
        except ApiError as e:
            if e.code not in (404, 409):
                raise

    async def _patch_refs(self, kind: Kind, obj: Obj, refs: list[Obj]) -> None:
        patch = {"metadata": {"resourceVersion": meta(obj).get("resourceVersion"), "ownerReferences": refs or None}}
        try:
            await self.client.patch(kind, namespace_of(obj), name_of(obj), patch)
        except ApiError as e:
            if e.code != 404:
                raise

    async def _remove_finalizer(self, kind: Kind, obj: Obj, finalizer: str) -> None:
        try:
            live = await self.client.get(kind, namespace_of(obj), name_of(obj))
        except ApiError as e:
            if e.code == 404:
                return
            raise
        if uid_of(live) != uid_of(obj) or finalizer not in (meta(live).get("finalizers") or []):
            return
        new = deep_copy(live)
        new["metadata"]["finalizers"] = [f for f in meta(live)["finalizers"] if f != finalizer]
        try:
            await self.client.update(kind, namespace_of(obj), name_of(obj), new)
        except ApiError as e:
            if e.code != 404:
                raise
