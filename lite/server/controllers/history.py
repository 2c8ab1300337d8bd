"""ControllerRevisions: the template history DaemonSets and StatefulSets keep (upstream `pkg/controller/history`).

A revision stores `data = {"spec": {"template": {..., "$patch": "replace"}}}` (upstream `getPatch`), is named
`<parent>-<hash>` and labelled with the parent template's labels plus `controller-revision-hash: <hash>`,
where hash = FNV-32a over the canonical JSON of the data (and the collision count, when non-zero), encoded
with the same "safe" alphabet upstream uses. It is owned (controller ref) by its parent; `revision` numbers
grow by one for every new template, and an old revision that becomes current again is renumbered to the top.

Invariants: only `sync_revisions` writes; a hash collision (same name, different data) bumps the parent's
collision count and retries with a new name; truncation never deletes the current/update revisions nor a
revision a live pod still carries.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import orjson

from lite.client import Client
from lite.errors import ApiError
from lite.informer import NAMESPACE_INDEX, Informer
from lite.objects import deep_copy, meta, name_of, namespace_of, owner_ref, uid_of
from lite.server.controllers.runtime import builtin

Obj = dict[str, Any]
HASH_LABEL = "controller-revision-hash"
_SAFE = "bcdfghjklmnpqrstvwxz2456789"
CR_KIND = builtin("apps", "ControllerRevision")


def _fnv32a(data: bytes) -> int:
    h = 0x811C9DC5
    for b in data:
        h = ((h ^ b) * 0x01000193) & 0xFFFFFFFF
    return h


def safe_encode(s: str) -> str:
    """Upstream `rand.SafeEncodeString`: map each byte onto an alphabet without vowels (no bad words)."""
    return "".join(_SAFE[b % len(_SAFE)] for b in s.encode())


def revision_data(parent: Obj) -> Obj:
    tpl = deep_copy((parent.get("spec") or {}).get("template") or {})
    tpl["$patch"] = "replace"
    return {"spec": {"template": tpl}}


def hash_revision(data: Obj, collision_count: int = 0) -> str:
    raw = orjson.dumps(data, option=orjson.OPT_SORT_KEYS)
    if collision_count:
        raw += str(collision_count).encode()
    return safe_encode(str(_fnv32a(raw)))


def template_of(revision: Obj) -> Obj:
    """The pod template a revision recorded (without the `$patch` directive)."""
    tpl = deep_copy(((revision.get("data") or {}).get("spec") or {}).get("template") or {})
    tpl.pop("$patch", None)
    return tpl


def number(revision: Obj) -> int:
    return int(revision.get("revision") or 0)


def owned_revisions(revisions: Informer, parent: Obj) -> list[Obj]:
    """The parent's revisions from the cache, oldest first."""
    uid = uid_of(parent)
    owned = [r for r in revisions.by_index(NAMESPACE_INDEX, namespace_of(parent))
             if any(ref.get("uid") == uid and ref.get("controller") for ref in meta(r).get("ownerReferences") or [])]
    return sorted(owned, key=lambda r: (number(r), name_of(r)))


def _same(a: Obj, b: Obj) -> bool:
    return orjson.dumps(a.get("data"), option=orjson.OPT_SORT_KEYS) == \
        orjson.dumps(b.get("data"), option=orjson.OPT_SORT_KEYS)


def new_revision(parent: Obj, revision: int, collision_count: int) -> Obj:
    data = revision_data(parent)
    h = hash_revision(data, collision_count)
    labels = dict(((parent.get("spec") or {}).get("template") or {}).get("metadata", {}).get("labels") or {})
    labels[HASH_LABEL] = h
    return {"apiVersion": "apps/v1", "kind": "ControllerRevision",
            "metadata": {"name": f"{name_of(parent)}-{h}", "namespace": namespace_of(parent), "labels": labels,
                         "ownerReferences": [owner_ref(parent)]},
            "data": data, "revision": revision}


async def sync_revisions(client: Client, parent: Obj, existing: list[Obj]) -> tuple[Obj, int]:
    """The revision for the parent's current template (created or renumbered as needed) and the collision
    count to record in the parent's status."""
    collisions = int((parent.get("status") or {}).get("collisionCount") or 0)
    top = max((number(r) for r in existing), default=0)
    candidate = new_revision(parent, top + 1, collisions)
    equal = [r for r in existing if _same(r, candidate)]
    if equal:
        found = equal[-1]
        if number(found) == top:
            return found, collisions
        body = {"revision": top + 1, "metadata": {"resourceVersion": meta(found).get("resourceVersion")}}
        return await client.patch(CR_KIND, namespace_of(parent), name_of(found), body), collisions
    while True:
        try:
            return await client.create(CR_KIND, namespace_of(parent), candidate), collisions
        except ApiError as e:
            if e.code != 409 or e.reason != "AlreadyExists":
                raise
        clash = await client.get(CR_KIND, namespace_of(parent), name_of(candidate))
        if _same(clash, candidate) and any(r.get("uid") == uid_of(parent)
                                            for r in meta(clash).get("ownerReferences") or []):
            return clash, collisions
        collisions += 1
        candidate = new_revision(parent, top + 1, collisions)


async def truncate(client: Client, parent: Obj, revisions: list[Obj], keep: Iterable[str], limit: int) -> None:
    """Delete the oldest revisions beyond `limit`, never those named in `keep`."""
    keep_names = set(keep)
    spare = [r for r in revisions if name_of(r) not in keep_names]
    for r in spare[:max(0, len(spare) - limit)]:
        try:
            await client.delete(CR_KIND, namespace_of(r), name_of(r), preconditions={"uid": uid_of(r)})
        except ApiError as e:
            if e.code not in (404, 409):
                raise
