"""PATCH: JSON patch, merge patch, strategic merge patch and server-side apply, on top of the update loop.

- A resourceVersion inside the patch is a precondition (409 Conflict on mismatch); without one a concurrent
  write simply re-applies the patch to the new state.
- Strategic merge patches on custom objects are 415 UnsupportedMediaType (no schema), as upstream.
- A patched object over 1.5 MiB of JSON is refused (413) at once, before anything else looks at it.
- Apply patches create the object when it is absent (the caller answers 201) and keep field ownership in
  managedFields (`lite.patch.apply`); `kubectl --server-side` may take over fields that a client-side apply
  set (upstream lastAppliedManager).
"""

from __future__ import annotations

from typing import Any

import orjson

from lite import errors
from lite.client import PatchType
from lite.errors import ApiError
from lite.kinds import Kind
from lite.objects import deep_copy, rfc3339
from lite.patch import Schema, apply, json_patch, merge_patch, object_fields, strategic_merge
from lite.patch.fieldset import path_string
from lite.patch.ssa import Versions
from lite.server.api import versions
from lite.server.api.bodylimits import check_object_size
from lite.server.api.registry_base import STATUS_LIKE, Obj
from lite.server.api.writing import WriteMixin, meta_of, status_write

LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
_STATUS_VIEW = frozenset({"apiVersion", "kind", "metadata", "status"})
_SMP_UNSUPPORTED = ("the body of the request was in an unknown format - accepted media types include: "
                    "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml")


class PatchMixin(WriteMixin):
    """patch."""

    def apply_patch(self, kind: Kind, doc: Obj, patch: Any, patch_type: PatchType, *, manager: str = "",
                    force: bool = False, subresource: str = "", in_versions: Versions | None = None) -> Obj:
        if patch_type == "json":
            out = json_patch(doc, patch)
        elif patch_type == "merge":
            out = merge_patch(doc, patch)
        elif patch_type == "strategic":
            if kind.crd:
                raise errors.unsupported_media_type(_SMP_UNSUPPORTED)
            out = strategic_merge(doc, patch, self.schema(kind))
        elif patch_type == "apply":
            out = _apply(kind, self.schema(kind), doc, patch, manager, force, subresource, in_versions)
        else:
            raise errors.unsupported_media_type(f"unsupported patch type {patch_type!r}")
        if not isinstance(out, dict):
            raise errors.bad_request("the patched document is not an object")
        return out

    def check_view_write(self, view: Kind, new: Obj, old: Obj | None) -> None:
        """Checks that depend on the version a write came through (`viewing.ViewMixin`); none here."""

    async def patch_object(self, kind: Kind, namespace: str, name: str, patch: Any, patch_type: PatchType, *,
                           subresource: str = "", dry_run: bool = False, manager: str = "",
                           force: bool = False, view: Kind | None = None) -> tuple[Obj, bool]:
        """PATCH; apply patches create the object when absent. Returns (object, created). With `view` (a kind
        presenting `kind`'s stored objects in another version), the patch applies to the object in the
        view's shape, and the result is converted back before it is prepared and written."""
        shape = view or kind
        if patch_type == "strategic" and kind.crd:
            raise errors.unsupported_media_type(_SMP_UNSUPPORTED)

        explicit_rv = _patch_sets_rv(patch, patch_type)

        # A status patch keeps only the patched status (and resourceVersion). When the patch names nothing but
        # those parts, merging it into them alone gives the same result as into the whole object, and skips
        # copying the spec inside the merge (the scheduler sends one such patch per pending pod).
        status_view = subresource in STATUS_LIKE and patch_type in ("merge", "strategic") and \
            isinstance(patch, dict) and all(k in _STATUS_VIEW for k in patch)

        def build(old: Obj) -> Obj:
            seen = versions.to_view(view, old) if view is not None else old
            doc = {k: v for k, v in seen.items() if k in _STATUS_VIEW} if status_view else seen
            patched = self.apply_patch(shape, doc, patch, patch_type, manager=manager, force=force,
                                       subresource=subresource, in_versions=self.field_versions(shape)
                                       if patch_type == "apply" else None)
            check_object_size(patched, old=old)  # refuse a grown object before validating or merging more
            if not explicit_rv:  # no precondition: a concurrent write re-applies the patch on the new state
                meta_of(patched)["resourceVersion"] = ""
            if view is not None:
                patched = versions.to_stored(view, patched)
                if not subresource:
                    self.check_view_write(view, patched, old)
            if subresource in STATUS_LIKE:
                new = status_write(self.strategy(kind), old, patched)
                new["metadata"]["resourceVersion"] = (patched.get("metadata") or {}).get("resourceVersion")
                if patch_type == "apply":  # the apply recorded its `{manager, Apply, status}` entry there
                    _take_managed_fields(new, patched)
                return new
            return patched

        create = None
        if patch_type == "apply" and not subresource:
            async def create() -> Obj:
                if not isinstance(patch, dict):
                    raise errors.bad_request("an apply patch must be a JSON object")
                meta = meta_of(deep_copy(patch))
                if meta.get("name") and meta["name"] != name:
                    raise errors.bad_request(f"the name of the object ({meta['name']}) does not match the "
                                             f"name on the URL ({name})")
                obj = apply(None, patch, manager=manager, force=force, api_version=shape.api_version,
                            now=rfc3339(), schema=self.schema(shape))
                meta_of(obj)["name"] = name
                obj["metadata"].pop("resourceVersion", None)
                if view is not None:
                    obj = versions.to_stored(view, obj)
                    probe = deep_copy(obj)
                    probe["metadata"].setdefault("namespace", namespace)
                    self.check_view_write(view, probe, None)
                return await self.create_object(kind, namespace, obj, dry_run=dry_run, view=view)

        # An apply records its own managedFields entry; other patches record an Update entry.
        return await self.update_loop(kind, namespace, name, build, subresource=subresource, dry_run=dry_run,
                                      manager="" if patch_type == "apply" else manager, create=create, view=view)


def _take_managed_fields(new: Obj, patched: Obj) -> None:
    fields = (patched.get("metadata") or {}).get("managedFields")
    if fields:
        new["metadata"]["managedFields"] = fields
    else:
        new["metadata"].pop("managedFields", None)


def _apply(kind: Kind, schema: Schema, doc: Obj, intent: Any, manager: str, force: bool,
           subresource: str = "", versions: Versions | None = None) -> Obj:
    """Server-side apply. As upstream's lastAppliedManager, `kubectl --server-side` may take over fields a
    client-side apply set (they appear in the last-applied annotation) without a conflict. An apply to a
    status-like subresource owns the status fields it names, as its own `{manager, Apply, subresource}`."""
    ignore_status = subresource not in STATUS_LIKE
    try:
        return apply(doc, intent, manager=manager, force=force, api_version=kind.api_version, now=rfc3339(),
                     schema=schema, ignore_status=ignore_status, subresource=subresource, versions=versions)
    except ApiError as e:
        if e.code != 409 or manager != "kubectl":
            raise
        annotation = ((doc.get("metadata") or {}).get("annotations") or {}).get(LAST_APPLIED)
        try:
            last = orjson.loads(annotation) if isinstance(annotation, str) else None
        except orjson.JSONDecodeError:
            last = None
        if not isinstance(last, dict):
            raise
        allowed = {path_string(p) for p in object_fields(last, schema)}
        if any(c.field not in allowed for c in e.causes):
            raise
    return apply(doc, intent, manager=manager, force=True, api_version=kind.api_version, now=rfc3339(),
                 schema=schema, ignore_status=ignore_status, subresource=subresource, versions=versions)


def _patch_sets_rv(patch: Any, patch_type: PatchType) -> bool:
    """Whether the patch itself carries metadata.resourceVersion (then it is a precondition)."""
    if patch_type == "json":
        return any(isinstance(op, dict) and op.get("path") in ("/metadata/resourceVersion", "/metadata")
                   and op.get("op") in ("add", "replace", "copy", "move") for op in patch or [])
    meta = patch.get("metadata") if isinstance(patch, dict) else None
    return isinstance(meta, dict) and bool(meta.get("resourceVersion"))
