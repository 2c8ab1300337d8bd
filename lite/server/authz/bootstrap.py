"""Reconciling the bootstrap RBAC policy (`policy.py`) at every start, with upstream's autoupdate semantics.

Role: `reconcile_policy(client, kinds)` runs once at start, before the port opens, through the in-process
`Client` (no user, so no escalation check). For each bootstrap object:
- missing: created;
- present with annotation `rbac.authorization.kubernetes.io/autoupdate: "false"`: left exactly as it is;
- otherwise (upstream reconciles unless the annotation is "false"): additive repair — rules it lacks are
  appended (as the single rules upstream's `Covers` reports missing), aggregationRule selectors it lacks are
  added, bootstrap labels and annotations are added where absent (existing values win), missing binding
  subjects are appended, and a binding whose roleRef differs is deleted and created again (roleRef is
  immutable). Extra rules and subjects a user added are kept.

Invariants: idempotent (a second run writes nothing); one failing object is logged and the rest still
reconciled; nothing here runs per request. The objects of one kind are reconciled concurrently (distinct
keys, so their writes share the store's group commits: a first start writes ~110 objects in a few
transactions instead of one fsync each).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from lite.client import Client
from lite.errors import ApiError
from lite.kinds import KindRegistry
from lite.objects import deep_copy
from lite.server.authz import policy
from lite.server.authz.comparator import covers
from lite.server.authz.rules import rules_from

log = logging.getLogger(__name__)
Obj = dict[str, Any]


def reconciled_role(existing: Obj, expected: Obj) -> Obj | None:
    """The repaired role, or None when `existing` needs nothing (or must not be touched)."""
    meta = existing.get("metadata") or {}
    if (meta.get("annotations") or {}).get(policy.AUTOUPDATE) == "false":
        return None
    out = deep_copy(existing)
    changed = _merge_meta(out, expected)
    have = rules_from(existing.get("rules"))
    _, missing = covers(have, rules_from(expected.get("rules")))
    if missing:
        out["rules"] = list(existing.get("rules") or []) + [r.as_dict() for r in missing]
        changed = True
    want_agg = expected.get("aggregationRule")
    if want_agg is not None:
        agg = out.setdefault("aggregationRule", {})
        if not isinstance(agg, dict):
            agg = out["aggregationRule"] = {}
        selectors = agg.setdefault("clusterRoleSelectors", [])
        for sel in want_agg.get("clusterRoleSelectors") or []:
            if sel not in selectors:
                selectors.append(sel)
                changed = True
    return out if changed else None


def reconciled_binding(existing: Obj, expected: Obj) -> tuple[Obj | None, bool]:
    """(repaired binding or None, whether it must be recreated because its roleRef differs)."""
    meta = existing.get("metadata") or {}
    if (meta.get("annotations") or {}).get(policy.AUTOUPDATE) == "false":
        return None, False
    if existing.get("roleRef") != expected.get("roleRef"):
        out = deep_copy(expected)
        out["subjects"] = _union(existing.get("subjects") or [], expected.get("subjects") or [])
        return out, True
    out = deep_copy(existing)
    changed = _merge_meta(out, expected)
    subjects = _union(existing.get("subjects") or [], expected.get("subjects") or [])
    if subjects != (existing.get("subjects") or []):
        out["subjects"] = subjects
        changed = True
    return (out if changed else None), False


def _union(have: list[Obj], want: list[Obj]) -> list[Obj]:
    return list(have) + [s for s in want if s not in have]


def _merge_meta(out: Obj, expected: Obj) -> bool:
    meta = out.setdefault("metadata", {})
    changed = False
    for field in ("labels", "annotations"):
        current = meta.get(field) or {}
        merged = {**(expected["metadata"].get(field) or {}), **current}
        if merged != current:
            meta[field] = merged
            changed = True
    return changed


async def reconcile_policy(client: Client, kinds: KindRegistry) -> None:
    """Create or repair every bootstrap RBAC object (see the module doc)."""
    groups = (("clusterroles", policy.cluster_roles()), ("clusterrolebindings", policy.cluster_role_bindings()),
              ("roles", policy.roles()), ("rolebindings", policy.role_bindings()))
    for plural, objects in groups:
        kind = kinds.by_resource(policy.GROUP, "v1", plural)
        if kind is None:
            raise LookupError(f"{plural}.{policy.GROUP} is not served")
        async with asyncio.TaskGroup() as tg:
            for expected in objects:
                tg.create_task(_reconcile_logged(client, kind, plural, expected))
    crb = kinds.by_resource(policy.GROUP, "v1", "clusterrolebindings")
    for name in policy.RETIRED_CLUSTER_ROLE_BINDINGS:
        try:  # bindings earlier versions created and this one must not keep (they would grant too much)
            await client.delete(crb, "", name)  # type: ignore[arg-type]
            log.info("bootstrap RBAC: removed the retired ClusterRoleBinding %s", name)
        except ApiError as e:
            if e.code != 404:
                log.warning("bootstrap RBAC: retired ClusterRoleBinding %s: %s", name, e)


async def _reconcile_logged(client: Client, kind: Any, plural: str, expected: Obj) -> None:
    ns = str(expected["metadata"].get("namespace") or "")
    name = str(expected["metadata"]["name"])
    try:
        await _reconcile_one(client, kind, ns, name, expected)
    except ApiError as e:
        log.warning("bootstrap RBAC %s %s/%s: %s", plural, ns, name, e)


async def _reconcile_one(client: Client, kind: Any, ns: str, name: str, expected: Obj) -> None:
    try:
        existing = await client.get(kind, ns, name)
    except ApiError as e:
        if e.code != 404:
            raise
        try:
            await client.create(kind, ns, deep_copy(expected))
        except ApiError as e2:
            if e2.code != 409:
                raise
        return
    if kind.kind.endswith("Binding"):
        repaired, recreate = reconciled_binding(existing, expected)
        if repaired is not None and recreate:
            await client.delete(kind, ns, name)
            await client.create(kind, ns, repaired)
            return
    else:
        repaired = reconciled_role(existing, expected)
    if repaired is not None:
        await client.update(kind, ns, name, repaired)
