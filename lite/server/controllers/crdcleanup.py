"""CRD cleanup: delete a deleted CRD's custom objects, then let the CRD go (upstream's crdfinalizer controller).

Run by the API server itself (`run_synced`, as upstream's apiextensions server runs it), not by the controller
manager: deleting a CRD completes whatever roles the server has.

reconcile(name) for a CRD with deletionTimestamp and the `customresourcecleanup.apiextensions.k8s.io` finalizer
(the API adds both on the first DELETE, with Terminating=True/InstanceDeletionPending):
    Terminating=True InstanceDeletionInProgress "CustomResource deletion is in progress"
    ──► group/plural of a built-in kind: nothing deleted (the objects are the built-in's),
        Terminating=False OverlappingBuiltInResource
    ──► not Established: Terminating=False NeverEstablished
    ──► else: each namespace's custom objects deleted through the API (normal deletes: admission, finalizers,
        garbage-collection policy), then a fresh list: objects left (finalizers pending) → look again shortly;
        after a minute of that, Terminating=True InstanceDeletionCheck "could not confirm zero CustomResources
        remaining: timed out waiting for the condition"; a delete refused → InstanceDeletionFailed
    ──► none left: Terminating=False InstanceDeletionCompleted "removed all instances", then the finalizer is
        removed (with the read resourceVersion as precondition) and the API removes the CRD.

Invariants: idempotent; `Established` is never touched (the objects stay served so they can be deleted and
their finalizers removed); the finalizer goes only once a fresh list of every served version comes back empty.
"""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any, ClassVar

from lite.client import Client
from lite.crds import CRD_CLEANUP_FINALIZER, ESTABLISHED, TERMINATING, condition_true, set_condition
from lite.errors import ApiError
from lite.events import EventRecorder
from lite.informer import SharedInformers
from lite.kinds import Kind, KindRegistry
from lite.objects import is_deleting, meta, now, parse_time
from lite.server.controllers.runtime import Controller, builtin

Obj = dict[str, Any]
log = logging.getLogger("lite.controllers.crdcleanup")

RECHECK = 1.0  # seconds between looks at a CRD whose objects are still going away
CHECK_TIMEOUT = 60.0  # upstream polls one minute before it reports InstanceDeletionCheck


def needs_sync(old: Obj, new: Obj) -> bool:
    """Whether a change of a CRD asks for a cleanup round (upstream's crdfinalizer update filter): only a CRD being
    deleted that still has the cleanup finalizer, and then a resync (same resourceVersion) or any change beyond
    the Terminating condition (and the bookkeeping that comes with writing it). This controller writes that
    condition itself every round; waking on its own writes would turn a CRD whose objects cannot be deleted
    (a conversion webhook gone, a delete refused) into a busy loop instead of one look per `RECHECK`."""
    if not is_deleting(new) or CRD_CLEANUP_FINALIZER not in (meta(new).get("finalizers") or []):
        return False
    if meta(old).get("resourceVersion") == meta(new).get("resourceVersion"):
        return True
    return _without_terminating(old) != _without_terminating(new)


def _without_terminating(crd: Obj) -> Obj:
    """A shallow view of `crd` without its resourceVersion, managedFields and Terminating condition (never
    mutates `crd`: informer objects are shared)."""
    md = {k: v for k, v in meta(crd).items() if k not in ("resourceVersion", "managedFields")}
    status = dict(crd.get("status") or {})
    status["conditions"] = [c for c in status.get("conditions") or [] if (c or {}).get("type") != TERMINATING]
    return {**crd, "metadata": md, "status": status}


class CRDCleanupController(Controller):
    name: ClassVar[str] = "crd-finalizer"
    workers = 2

    def __init__(self, client: Client, informers: SharedInformers, kinds: KindRegistry,
                 recorder: EventRecorder | None = None) -> None:
        super().__init__(client, informers, recorder or EventRecorder(client, "crd-finalizer"))
        self.kinds = kinds
        self.kind = builtin("apiextensions.k8s.io", "CustomResourceDefinition")
        self.crds = self.informer(self.kind, primary=True)
        self.crds.add_handlers(on_add=self.enqueue, on_update=self._on_update, on_delete=self.enqueue)

    def _on_update(self, old: Obj, new: Obj) -> None:
        if needs_sync(old, new):
            self.enqueue(new)

    async def run_synced(self) -> None:
        """`run` once the CRD cache has synced: the API server runs this controller itself, outside the
        leader-elected controller manager (upstream's crdfinalizer is part of the API server)."""
        await self.crds.wait_synced()
        await self.run()

    def served_kind(self, crd: Obj) -> Kind | None:
        """A Kind serving this CRD's objects (every version shares one store), or None."""
        spec = crd.get("spec") or {}
        plural = str((spec.get("names") or {}).get("plural") or "")
        for k in self.kinds:
            if k.crd and k.group == spec.get("group") and k.plural == plural:
                return k
        return None

    def overlaps_builtin(self, crd: Obj) -> bool:
        spec = crd.get("spec") or {}
        plural = (spec.get("names") or {}).get("plural")
        return any(not k.crd and k.group == spec.get("group") and k.plural == plural for k in self.kinds)

    async def reconcile(self, key: str) -> float | None:
        cached = self.crds.get(key)
        if cached is None or not is_deleting(cached) or CRD_CLEANUP_FINALIZER not in (meta(cached).get("finalizers")
                                                                                       or []):
            return None
        crd = await self._condition(cached, "True", "InstanceDeletionInProgress",
                                    "CustomResource deletion is in progress")
        if crd is None:
            return None
        kind = self.served_kind(crd)
        if self.overlaps_builtin(crd):
            done = ("False", "OverlappingBuiltInResource", "instances overlap with built-in resources in storage")
        elif not condition_true(crd, ESTABLISHED):
            done = ("False", "NeverEstablished", "resource was never established")
        elif kind is None:
            done = ("False", "InstanceDeletionCompleted", "removed all instances")  # nothing is served or stored
        else:
            try:
                left = await self._delete_instances(kind)
            except ApiError as e:
                await self._condition(crd, "True", "InstanceDeletionFailed",
                                      f"could not issue all deletes: {e.message}")
                return RECHECK
            if left:
                started = parse_time(str(meta(crd)["deletionTimestamp"]))
                if now() - started > dt.timedelta(seconds=CHECK_TIMEOUT):
                    await self._condition(crd, "True", "InstanceDeletionCheck", "could not confirm zero "
                                          "CustomResources remaining: timed out waiting for the condition")
                log.debug("%s waiting for %d items to be removed", key, left)
                return RECHECK
            done = ("False", "InstanceDeletionCompleted", "removed all instances")
        crd = await self._condition(crd, *done)
        if crd is not None:
            await self._drop_finalizer(crd)
        return None

    async def _delete_instances(self, kind: Kind) -> int:
        """Delete every object (per namespace, as upstream); return how many a fresh list still holds."""
        items = (await self.client.list(kind))["items"]
        namespaces = sorted({str(meta(o).get("namespace") or "") for o in items if not is_deleting(o)})
        for ns in namespaces:
            try:
                await self.client.delete_collection(kind, ns)
            except ApiError as e:
                if e.code != 404:
                    raise
        return len((await self.client.list(kind))["items"])

    async def _condition(self, crd: Obj, status: str, reason: str, message: str) -> Obj | None:
        """The CRD with its Terminating condition set (written through `status` when it changed); None if gone."""
        conditions = (crd.get("status") or {}).get("conditions") or []
        wanted = set_condition(conditions, TERMINATING, status, reason, message)
        if wanted == conditions:
            return crd
        body = {**crd, "status": {**(crd.get("status") or {}), "conditions": wanted}}
        try:
            return await self.client.update(self.kind, "", str(meta(crd)["name"]), body, subresource="status")
        except ApiError as e:
            if e.code == 404:
                return None
            if e.code == 409:  # changed meanwhile: the next round reads it again
                self.enqueue_key(str(meta(crd)["name"]), RECHECK)
                return None
            raise

    async def _drop_finalizer(self, crd: Obj) -> None:
        m = meta(crd)
        rest = [f for f in m.get("finalizers") or [] if f != CRD_CLEANUP_FINALIZER]
        try:
            await self.client.patch(self.kind, "", str(m["name"]),
                                    {"metadata": {"finalizers": rest or None, "resourceVersion": m["resourceVersion"]}})
        except ApiError as e:
            if e.code == 409:
                self.enqueue_key(str(m["name"]), RECHECK)
            elif e.code != 404:
                raise
