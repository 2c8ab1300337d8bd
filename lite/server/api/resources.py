"""The generic registry: `Resources` implements `lite.client.Client` with Kubernetes semantics over the Store.

Like upstream's registry/generic/registry/store.go, one implementation serves every kind; per-kind behaviour
comes from strategies (`lite.server.api.strategies`). The parts live in sibling modules:
`reading` (get/list), `watching` (watch), `writing` (create/update/patch), `deletion` (delete,
deletecollection), `subresources` (status, scale, binding, eviction, finalize, token); this module routes
the Client verbs onto them and owns the CustomResourceDefinition lifecycle (Kinds registered on CRD create
and at start-up, removed with their objects when the CRD is finally removed: a CRD delete only marks it,
see `deletion`, and while it is Terminating no custom object of it may be created).

The HTTP layer calls this for every request and the controllers use it in process, so its behaviour is
lite's API behaviour. Invariants: every object returned carries apiVersion and kind; objects returned are
never shared with the store or with other callers.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Any

import orjson

from lite import errors
from lite.client import Obj, PatchType, WatchEvent
from lite.crds import TERMINATING, condition_true
from lite.kinds import Kind, KindRegistry
from lite.objects import deep_copy
from lite.server.api.registry_base import CRD_GK, STATUS_LIKE, EvictionCheck, shape_errors
from lite.server.api.storefaults import store_faults
from lite.server.api.strategies import Strategies
from lite.server.api.strategies.crd import kinds_of
from lite.server.api.versions import events as event_rules
from lite.server.api.viewing import ViewMixin
from lite.server.api.writing import SYSTEM_PRIORITY_CLASSES
from lite.server.store import KeyExists, KeyNotFound, RevMismatch, StoreLike

log = logging.getLogger(__name__)

_OLD_EVENTS_PREFIX = "events.k8s.io/events/"  # where lite before issue 18 kept events.k8s.io Events
SYSTEM_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
_PRIORITY_CLASS_DESCRIPTIONS = {
    "system-node-critical": "Used for system critical pods that must not be moved from their current node.",
    "system-cluster-critical": "Used for system critical pods that must run in the cluster, but can be moved "
                               "to another node if necessary.",
}


class Resources(ViewMixin):
    """`lite.client.Client` over the store. See the module docstring."""

    def __init__(self, store: StoreLike, kinds: KindRegistry, strategies: Strategies, *,
                 bookmark_interval: float = 60.0, eviction_check: EvictionCheck | None = None) -> None:
        super().__init__(store, kinds, strategies, bookmark_interval=bookmark_interval,
                         eviction_check=eviction_check)

    # ---- lifecycle ---------------------------------------------------------------------------------

    async def start(self) -> None:
        """Register the Kinds of stored CRDs and create the system namespaces if they are missing."""
        page, _, _ = self.store.list("apiextensions.k8s.io/customresourcedefinitions/")
        crd_kind = self.core_kind("customresourcedefinitions", "apiextensions.k8s.io")
        for _key, _rev, raw in page:
            self._register_crd(self.decode(crd_kind, raw))
        await self._migrate_events_v1()
        ns_kind = self.core_kind("namespaces")
        for name in SYSTEM_NAMESPACES:
            await self._ensure(ns_kind, {"metadata": {"name": name}})
        pc_kind = self.core_kind("priorityclasses", "scheduling.k8s.io")
        for name, value in SYSTEM_PRIORITY_CLASSES.items():
            await self._ensure(pc_kind, {"metadata": {"name": name}, "value": value,
                                         "description": _PRIORITY_CLASS_DESCRIPTIONS[name]})

    async def _migrate_events_v1(self) -> None:
        """Move the events.k8s.io Events an older lite stored apart (key prefix `events.k8s.io/events/`) into
        the one Event store, in the core shape, keeping name, uid and timestamps. Idempotent: a row is deleted
        only once its core copy is committed; a name already taken by a core Event is left where it is (and
        logged), never overwritten."""
        page, _, _ = self.store.list(_OLD_EVENTS_PREFIX)
        moved = 0
        for key, rev, raw in page:
            if await self._move_event(key, rev, raw):
                moved += 1
        if moved:
            log.info("moved %d events.k8s.io Events into the Event store", moved)

    async def _move_event(self, key: str, rev: int, raw: bytes) -> bool:
        """One row of `_migrate_events_v1`; False when it stays. Safe beside another server doing the same
        (several servers may share one backend): a lost race to create or delete is no error."""
        core_key = "core/events/" + key[len(_OLD_EVENTS_PREFIX):]
        event = event_rules.to_core(orjson.loads(raw))
        uid = (event.get("metadata") or {}).get("uid")
        try:
            await self.store.create(core_key, event)
        except KeyExists:
            there = self.store.get(core_key)
            if there is not None and (orjson.loads(there[1]).get("metadata") or {}).get("uid") != uid:
                log.warning("events.k8s.io Event %s left unmigrated: a core Event has its name", key)
                return False
        try:
            await self.store.delete(key, rev)  # its copy is committed (now, before a crash, or by a peer)
        except (KeyNotFound, RevMismatch):
            return False
        return True

    async def _ensure(self, kind: Kind, obj: Obj) -> None:
        if self.store.get(self.key(kind, "", obj["metadata"]["name"])) is None:
            try:
                await self.create_object(kind, "", obj)
            except errors.ApiError as e:
                if e.code != 409:
                    raise

    # ---- Client: reads -----------------------------------------------------------------------------

    async def get(self, kind: Kind, namespace: str, name: str, *, subresource: str = "") -> Obj:
        obj = self.view_get(kind, namespace, name) if kind.storage else self.get_object(kind, namespace, name)
        if kind.converts_by_webhook:
            obj = (await self.present(kind, [obj]))[0]
        if not subresource or (subresource in STATUS_LIKE and subresource in kind.subresources):
            return obj
        if subresource == "scale":
            return self.scale_of(kind, obj)
        raise errors.path_not_found()

    async def list(self, kind: Kind, namespace: str = "", *, label_selector: str = "",
                   field_selector: str = "", limit: int = 0, continue_: str = "",
                   resource_version: str = "", resource_version_match: str = "") -> Obj:
        if kind.storage:
            return self.view_list(kind, namespace, field_selector, label_selector=label_selector, limit=limit,
                                  continue_=continue_, resource_version=resource_version,
                                  resource_version_match=resource_version_match)
        out = self.list_objects(kind, namespace, label_selector=label_selector, field_selector=field_selector,
                                limit=limit, continue_=continue_, resource_version=resource_version,
                                resource_version_match=resource_version_match)
        if kind.converts_by_webhook:
            out["items"] = await self.present(kind, out["items"])
        return out

    def watch(self, kind: Kind, namespace: str = "", *, resource_version: str = "",
              label_selector: str = "", field_selector: str = "", allow_bookmarks: bool = False,
              timeout_seconds: float | None = None, send_initial_events: bool = False,
              resource_version_match: str = "") -> AsyncIterator[WatchEvent]:
        if kind.storage:
            return self.view_watch(kind, namespace, field_selector, resource_version=resource_version,
                                   label_selector=label_selector, allow_bookmarks=allow_bookmarks,
                                   timeout_seconds=timeout_seconds, send_initial_events=send_initial_events,
                                   resource_version_match=resource_version_match)
        events = self.watch_objects(kind, namespace, resource_version=resource_version,
                                    label_selector=label_selector, field_selector=field_selector,
                                    allow_bookmarks=allow_bookmarks, timeout_seconds=timeout_seconds,
                                    send_initial_events=send_initial_events,
                                    resource_version_match=resource_version_match)
        return self._presented(kind, events) if kind.converts_by_webhook else events

    async def _presented(self, kind: Kind, events: AsyncIterator[WatchEvent]) -> AsyncIterator[WatchEvent]:
        """Watch events of a kind converted by webhook, each object in the watched version."""
        try:
            async for ev in events:
                if ev.type in ("ADDED", "MODIFIED", "DELETED"):
                    ev = WatchEvent(ev.type, (await self.present(kind, [dict(ev.object)]))[0])
                yield ev
        finally:
            close = getattr(events, "aclose", None)
            if close is not None:
                await close()

    # ---- Client: writes ----------------------------------------------------------------------------

    async def create(self, kind: Kind, namespace: str, obj: Obj, *, name: str = "", subresource: str = "",
                     dry_run: bool = False, field_manager: str = "") -> Obj:
        body = deep_copy(obj) if isinstance(obj, dict) else obj
        return await self.create_owned(kind, namespace, body, name=name, subresource=subresource, dry_run=dry_run,
                                       field_manager=field_manager)

    async def create_owned(self, kind: Kind, namespace: str, obj: Obj, *, name: str = "", subresource: str = "",
                           dry_run: bool = False, field_manager: str = "") -> Obj:
        """`create` for a caller that hands over a body of plain JSON values it just decoded and never
        touches again (the HTTP layer): `obj` is consumed instead of copied first."""
        with shape_errors(kind), store_faults():
            return await self._create(kind, namespace, obj, name, subresource, dry_run, field_manager)

    async def _create(self, kind: Kind, namespace: str, body: Obj, name: str, subresource: str, dry_run: bool,
                      field_manager: str) -> Obj:
        if not subresource:
            if (kind.group, kind.kind) == ("", "Binding"):  # the `bindings` collection: bind the pod it names
                pod = str(((body.get("metadata") or {}) if isinstance(body, dict) else {}).get("name") or "")
                if not pod:
                    raise errors.invalid("Binding", "", [errors.field_required("metadata.name")])
                return await self.bind(self.core_kind("pods"), namespace, pod, body, dry_run)
            if kind.storage:
                return await self.view_create(kind, namespace, body, dry_run, field_manager)
            if kind.crd:
                self._refuse_while_terminating(kind)
            return await self.create_object(kind, namespace, body, dry_run=dry_run, manager=field_manager)
        self._need_subresource(kind, subresource)
        if subresource == "binding":
            return await self.bind(kind, namespace, name, body, dry_run)
        if subresource == "eviction":
            return await self.evict(kind, namespace, name, body, dry_run)
        if subresource == "token":
            return await self.request_token(kind, namespace, name, body)
        raise errors.method_not_allowed(f"POST is not supported on {kind.plural}/{subresource}")

    async def update(self, kind: Kind, namespace: str, name: str, obj: Obj, *, subresource: str = "",
                     dry_run: bool = False, field_manager: str = "") -> Obj:
        body = deep_copy(obj) if isinstance(obj, dict) else obj
        return await self.update_owned(kind, namespace, name, body, subresource=subresource, dry_run=dry_run,
                                       field_manager=field_manager)

    async def update_owned(self, kind: Kind, namespace: str, name: str, obj: Obj, *, subresource: str = "",
                           dry_run: bool = False, field_manager: str = "") -> Obj:
        """`update` that consumes `obj` instead of copying it first (see `create_owned`)."""
        with shape_errors(kind), store_faults():
            return await self._update(kind, namespace, name, obj, subresource, dry_run, field_manager)

    async def _update(self, kind: Kind, namespace: str, name: str, body: Obj, subresource: str, dry_run: bool,
                      field_manager: str) -> Obj:
        if subresource:
            self._need_subresource(kind, subresource)
        if subresource == "scale":
            return await self.update_scale(kind, namespace, name, body, dry_run, field_manager)
        if subresource == "finalize":
            return await self.finalize_namespace(kind, name, body, dry_run)
        if subresource and subresource not in STATUS_LIKE:
            raise errors.method_not_allowed(f"PUT is not supported on {kind.plural}/{subresource}")
        if kind.storage:
            return await self.view_update(kind, namespace, name, body, subresource, dry_run, field_manager)
        return await self.update_object(kind, namespace, name, body, subresource=subresource, dry_run=dry_run,
                                        manager=field_manager)

    async def replace_status(self, kind: Kind, namespace: str, name: str, rev: str, status: Obj) -> Obj:
        """`WriteMixin.replace_status`: an in-process sole writer's status write, narrower than `update`."""
        with store_faults():
            return await super().replace_status(kind, namespace, name, rev, status)

    async def patch(self, kind: Kind, namespace: str, name: str, patch: Any, *,
                    patch_type: PatchType = "merge", subresource: str = "", dry_run: bool = False,
                    field_manager: str = "", force: bool = False) -> Obj:
        out, _ = await self.patch_ex(kind, namespace, name, patch, patch_type=patch_type,
                                     subresource=subresource, dry_run=dry_run, field_manager=field_manager,
                                     force=force)
        return out

    async def patch_ex(self, kind: Kind, namespace: str, name: str, patch: Any, *,
                       patch_type: PatchType = "merge", subresource: str = "", dry_run: bool = False,
                       field_manager: str = "", force: bool = False) -> tuple[Obj, bool]:
        """PATCH that also says whether it created the object (apply on an absent object: HTTP 201)."""
        with shape_errors(kind), store_faults():
            return await self._patch(kind, namespace, name, patch, patch_type, subresource, dry_run, field_manager,
                                     force)

    async def _patch(self, kind: Kind, namespace: str, name: str, patch: Any, patch_type: PatchType,
                     subresource: str, dry_run: bool, field_manager: str, force: bool) -> tuple[Obj, bool]:
        if subresource:
            self._need_subresource(kind, subresource)
        if subresource == "scale":
            return await self.patch_scale(kind, namespace, name, patch, patch_type, dry_run, field_manager,
                                          force), False
        if subresource and subresource not in STATUS_LIKE:
            raise errors.method_not_allowed(f"PATCH is not supported on {kind.plural}/{subresource}")
        if kind.storage:
            return await self.view_patch(kind, namespace, name, patch, patch_type, subresource, dry_run,
                                         field_manager, force)
        return await self.patch_object(kind, namespace, name, patch, patch_type, subresource=subresource,
                                       dry_run=dry_run, manager=field_manager, force=force)

    async def delete(self, kind: Kind, namespace: str, name: str, *,
                     propagation_policy: str | None = None, grace_period_seconds: int | None = None,
                     preconditions: Obj | None = None, dry_run: bool = False) -> Obj:
        with shape_errors(kind), store_faults():
            out, _ = await self._delete(kind, namespace, name, propagation_policy=propagation_policy,
                                              grace_period_seconds=grace_period_seconds,
                                              preconditions=preconditions, dry_run=dry_run)
        return out

    async def delete_ex(self, kind: Kind, namespace: str, name: str, *,
                        propagation_policy: str | None = None, grace_period_seconds: int | None = None,
                        preconditions: Obj | None = None, dry_run: bool = False) -> tuple[Obj, int]:
        """DELETE as HTTP answers it: (body, status code). A kind that upstream answers with a Status once
        the object is gone (ConfigMaps, Deployments, ...) gets that Status here; pods, services and custom
        objects get the object."""
        with shape_errors(kind), store_faults():
            out, deleted = await self._delete(kind, namespace, name, propagation_policy=propagation_policy,
                                                    grace_period_seconds=grace_period_seconds,
                                                    preconditions=preconditions, dry_run=dry_run)
        if deleted and not self.strategy(kind).return_deleted_object:
            meta = out.get("metadata") or {}
            details = {"name": meta.get("name", ""), "group": kind.group, "kind": kind.plural,
                       "uid": meta.get("uid", "")}
            return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                    "details": details}, 200
        return out, 200

    async def delete_collection(self, kind: Kind, namespace: str = "", *, label_selector: str = "",
                                field_selector: str = "", propagation_policy: str | None = None,
                                grace_period_seconds: int | None = None, dry_run: bool = False) -> Obj:
        if "deletecollection" not in kind.verbs:
            raise errors.method_not_allowed("the server does not allow this method on the requested resource")
        with store_faults():
            if kind.storage:
                return await self.view_delete_many(kind, namespace, field_selector, label_selector=label_selector,
                                                   propagation_policy=propagation_policy,
                                                   grace_period_seconds=grace_period_seconds, dry_run=dry_run)
            return await self.delete_many(kind, namespace, label_selector=label_selector,
                                          field_selector=field_selector, propagation_policy=propagation_policy,
                                          grace_period_seconds=grace_period_seconds, dry_run=dry_run)

    async def _delete(self, kind: Kind, namespace: str, name: str, **kw: Any) -> tuple[Obj, bool]:
        if kind.storage:
            return await self.view_delete(kind, namespace, name, **kw)
        return await self.delete_object(kind, namespace, name, **kw)

    def _refuse_while_terminating(self, kind: Kind) -> None:
        """Upstream's CRD handler: no new custom objects while their CRD is being deleted (its instances are
        still served, so they can be read, updated and deleted)."""
        crd_kind = self.core_kind("customresourcedefinitions", "apiextensions.k8s.io")
        got = self.store.get(self.key(crd_kind, "", kind.resource))
        if got is not None and condition_true(self.decode(crd_kind, got[1]), TERMINATING):
            raise errors.ApiError("create not allowed while custom resource definition is terminating", 405,
                                  "MethodNotAllowed", group=kind.group, kind=kind.plural)

    @staticmethod
    def _need_subresource(kind: Kind, subresource: str) -> None:
        if subresource not in kind.subresources:
            raise errors.path_not_found()

    # ---- CRD lifecycle -----------------------------------------------------------------------------

    def _register_crd(self, crd: Obj) -> None:
        for k in kinds_of(crd):
            existing = self.kinds.by_resource(k.group, k.version, k.plural)
            if existing is not None and not existing.crd:
                log.warning("CRD %s would shadow built-in %s; not served", k.resource, existing.gk)
                continue
            if k.version and k.kind and k.plural:
                self.kinds.add(k)

    def _unregister_crd(self, crd: Obj) -> None:
        for k in kinds_of(crd):
            existing = self.kinds.by_resource(k.group, k.version, k.plural)
            if existing is not None and existing.crd:
                self.kinds.remove(existing)

    async def after_write(self, kind: Kind, obj: Obj, old: Obj | None) -> None:
        if kind.gk != CRD_GK:
            return
        if old is not None:
            self._unregister_crd(old)
        self._register_crd(obj)

    async def after_delete(self, kind: Kind, obj: Obj) -> None:
        if kind.gk != CRD_GK:
            return
        self._unregister_crd(obj)
        spec = obj.get("spec") or {}
        plural = (spec.get("names") or {}).get("plural")
        if not plural or not spec.get("group"):
            return
        if any(k.group == spec["group"] and k.plural == plural and not k.crd for k in self.kinds):
            return  # the stored objects belong to a built-in kind: never delete those
        page, _, _ = self.store.list(f"{spec['group']}/{plural}/")
        for key, _rev, _raw in page:
            try:
                await self.store.delete(key, 0)
            except KeyNotFound:
                continue
