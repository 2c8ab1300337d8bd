"""Views: built-in kinds served in another version of the same stored objects (upstream's multi-version REST).

A view `Kind` (`Kind.storage` set: autoscaling/v1 HPAs, events.k8s.io/v1 Events) has no store of its own.
Each verb runs on the stored kind, with conversions (`lite.server.api.versions`) at the edges:
- reads (get, list, watch, including BOOKMARKs and lists' apiVersion/kind) present stored objects in the view;
- create and update convert the body to the stored shape first, so the stored kind's defaulting, validation,
  admission and generation rules apply once, whatever version a client used;
- patches are applied to the object *in the view's shape* (a merge patch on v1's
  `targetCPUUtilizationPercentage` means what it says), then converted back and written with the read revision;
- field selectors are the view's labels renamed to the stored ones (events: `regarding.name` ->
  `involvedObject.name`); a label the view lacks is 400, as upstream.
Writes through events.k8s.io/v1 also pass upstream's strict event validation (`versions.events`).

Invariants: a view never writes or reads a store key of its own; every object returned is in the view's
version; errors name the stored resource, as upstream's shared storage does.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from lite import errors
from lite.client import PatchType, WatchEvent
from lite.kinds import Kind
from lite.objects import deep_copy
from lite.server.api import versions
from lite.server.api.reading import ReadMixin
from lite.server.api.registry_base import Obj
from lite.server.api.subresources import SubresourceMixin
from lite.server.api.versions import events as event_rules
from lite.server.api.watching import WatchMixin

_EVENTS_V1 = ("events.k8s.io", "Event")


class ViewMixin(SubresourceMixin, ReadMixin, WatchMixin):
    """The verbs of view kinds (see the module docstring)."""

    def stored_kind(self, kind: Kind) -> Kind:
        if not kind.storage:
            return kind
        group, version = kind.storage
        found = self.kinds.by_gvk(group, version, kind.kind)
        if found is None:
            raise errors.internal(f"{kind.api_version} {kind.kind} is stored as {group}/{version}, which is not "
                                  "registered")
        return found

    def _view_list(self, kind: Kind, out: Obj) -> Obj:
        out["apiVersion"], out["kind"] = kind.api_version, kind.list_kind
        out["items"] = [versions.to_view(kind, o) for o in out.get("items") or []]
        return out

    def view_get(self, kind: Kind, namespace: str, name: str) -> Obj:
        return versions.to_view(kind, self.get_object(self.stored_kind(kind), namespace, name))

    def view_list(self, kind: Kind, namespace: str, field_selector: str, **kw: Any) -> Obj:
        sel = versions.stored_field_selector(kind, field_selector)
        return self._view_list(kind, self.list_objects(self.stored_kind(kind), namespace, field_selector=sel, **kw))

    def view_watch(self, kind: Kind, namespace: str, field_selector: str, **kw: Any) -> AsyncIterator[WatchEvent]:
        sel = versions.stored_field_selector(kind, field_selector)
        return self._view_events(kind, self.watch_objects(self.stored_kind(kind), namespace, field_selector=sel,
                                                          **kw))

    async def _view_events(self, kind: Kind, events: AsyncIterator[WatchEvent]) -> AsyncIterator[WatchEvent]:
        try:
            async for ev in events:
                if ev.type in ("ADDED", "MODIFIED", "DELETED"):
                    ev = WatchEvent(ev.type, versions.to_view(kind, ev.object))
                elif ev.type == "BOOKMARK":
                    ev = WatchEvent("BOOKMARK", {**ev.object, "apiVersion": kind.api_version, "kind": kind.kind})
                yield ev
        finally:
            close = getattr(events, "aclose", None)
            if close is not None:
                await close()

    async def view_create(self, kind: Kind, namespace: str, body: Obj, dry_run: bool, manager: str) -> Obj:
        stored = versions.to_stored(kind, body)
        if (kind.group, kind.kind) == _EVENTS_V1:
            probe = deep_copy(stored)
            probe.setdefault("metadata", {}).setdefault("namespace", namespace)
            self.check_view_write(kind, probe, None)
        out = await self.create_object(self.stored_kind(kind), namespace, stored, dry_run=dry_run, manager=manager,
                                       view=kind)
        return versions.to_view(kind, out)

    async def view_update(self, kind: Kind, namespace: str, name: str, body: Obj, subresource: str,
                          dry_run: bool, manager: str) -> Obj:
        stored = versions.to_stored(kind, body)
        if (kind.group, kind.kind) == _EVENTS_V1:
            self.check_view_write(kind, stored, self.get_object(self.stored_kind(kind), namespace, name))
        out = await self.update_object(self.stored_kind(kind), namespace, name, stored, subresource=subresource,
                                       dry_run=dry_run, manager=manager, view=kind)
        return versions.to_view(kind, out)

    async def view_patch(self, kind: Kind, namespace: str, name: str, patch: Any, patch_type: PatchType,
                         subresource: str, dry_run: bool, manager: str, force: bool) -> tuple[Obj, bool]:
        out, created = await self.patch_object(self.stored_kind(kind), namespace, name, patch, patch_type,
                                               subresource=subresource, dry_run=dry_run, manager=manager,
                                               force=force, view=kind)
        return versions.to_view(kind, out), created

    def check_view_write(self, view: Kind, new: Obj, old: Obj | None) -> None:
        """The version-dependent checks of a write through `view` (stored shapes; `old` None on create)."""
        if (view.group, view.kind) != _EVENTS_V1:
            return
        causes = event_rules.create_causes(new) if old is None else \
            event_rules.update_causes(_with_namespace(new, old), old)
        self._refuse(view, new, causes)

    @staticmethod
    def _refuse(kind: Kind, obj: Obj, causes: list[errors.Cause]) -> None:
        if causes:
            name = str((obj.get("metadata") or {}).get("name") or "")
            raise errors.invalid(kind.kind, name, causes, kind.group)

    async def view_delete(self, kind: Kind, namespace: str, name: str, **kw: Any) -> tuple[Obj, bool]:
        out, deleted = await self.delete_object(self.stored_kind(kind), namespace, name, view=kind, **kw)
        return versions.to_view(kind, out), deleted

    async def view_delete_many(self, kind: Kind, namespace: str, field_selector: str, **kw: Any) -> Obj:
        sel = versions.stored_field_selector(kind, field_selector)
        out = await self.delete_many(self.stored_kind(kind), namespace, field_selector=sel, view=kind, **kw)
        return self._view_list(kind, out)


def _with_namespace(new: Obj, old: Obj) -> Obj:
    meta: Obj = new["metadata"] if isinstance(new.get("metadata"), dict) else {}
    if meta.get("namespace"):
        return new
    return {**new, "metadata": {**meta, "namespace": (old.get("metadata") or {}).get("namespace", "")}}
