"""Adoption and release of children by controllerRef (upstream's ControllerRefManager), shared by controllers.

Invariants: both helpers only read or patch through the client; a patch carries the child's resourceVersion, so
an adoption or release races no other writer. A child that vanished or became invalid is reported as None.
"""

from __future__ import annotations

from typing import Any

from lite.client import Client
from lite.errors import ApiError
from lite.kinds import Kind
from lite.objects import is_deleting, meta, name_of, namespace_of, owner_ref, uid_of

Obj = dict[str, Any]


async def still_ours(client: Client, kind: Kind, owner: Obj) -> bool:
    """Upstream's adoption recheck: the live owner is the same object (uid) and is not being deleted."""
    try:
        live = await client.get(kind, namespace_of(owner), name_of(owner))
    except ApiError as e:
        if e.code == 404:
            return False
        raise
    return uid_of(live) == uid_of(owner) and not is_deleting(live)


async def set_owner_refs(client: Client, kind: Kind, child: Obj, refs: list[Obj]) -> Obj | None:
    """Replace the child's ownerReferences (RV-guarded); None when the child is gone or refused the patch."""
    patch = {"metadata": {"resourceVersion": meta(child).get("resourceVersion"), "ownerReferences": refs or None}}
    try:
        return await client.patch(kind, namespace_of(child), name_of(child), patch)
    except ApiError as e:
        if e.code in (404, 422):
            return None
        raise


async def release(client: Client, kind: Kind, child: Obj, owner: Obj) -> Obj | None:
    """Drop `owner`'s reference from the child (it no longer matches the owner's selector)."""
    refs = [r for r in meta(child).get("ownerReferences") or [] if r.get("uid") != uid_of(owner)]
    return await set_owner_refs(client, kind, child, refs)


async def adopt(client: Client, kind: Kind, child: Obj, owner: Obj) -> Obj | None:
    """Add `owner` as the child's controller (an orphan that matches the owner's selector)."""
    return await set_owner_refs(client, kind, child, [*(meta(child).get("ownerReferences") or []), owner_ref(owner)])
