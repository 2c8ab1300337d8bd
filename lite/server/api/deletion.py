"""DELETE and deletecollection: preconditions, graceful deletion, finalizers, propagation policy.

Follows upstream's generic Store.Delete:
1. preconditions {uid, resourceVersion} -> 409 Conflict;
2. graceful kinds (pods): the first delete sets deletionTimestamp = now + grace and
   deletionGracePeriodSeconds (grace from the options, else spec.terminationGracePeriodSeconds; 0 for pods
   not bound to a node or already terminated); a later delete may only shorten it; a delete that does not
   shorten it returns the object as it is ("already being deleted");
3. propagationPolicy: Orphan adds the `orphan` finalizer, Foreground `foregroundDeletion` (only for kinds
   whose default GC policy is supported, i.e. kinds that can own dependents);
4. an object with finalizers is only marked (deletionTimestamp, grace 0) and stays until the last finalizer
   is removed by an update; otherwise, and once grace is 0, it is removed at once.
Namespaces: the first delete turns them Terminating; they go once spec.finalizers is empty (the namespace
controller empties them through namespaces/finalize and deletes again).
CustomResourceDefinitions (upstream's CRD REST Delete): the first delete only marks the CRD (deletionTimestamp,
the `customresourcecleanup.apiextensions.k8s.io` finalizer, condition Terminating=True with reason
InstanceDeletionPending); the CRD cleanup controller deletes its custom objects and then drops the finalizer.

Invariant: the return value says whether the object is gone (`deleted`); the object returned is its final
or current state.
"""

from __future__ import annotations

import datetime as dt

from lite import errors
from lite.crds import CRD_CLEANUP_FINALIZER, TERMINATING, set_condition
from lite.kinds import Kind
from lite.objects import deep_copy, now, parse_time, rfc3339
from lite.server.api.reading import make_matcher
from lite.server.api.registry_base import CRD_GK, Obj, RegistryBase, RetryWrite
from lite.server.api.strategies import Admission, Strategy
from lite.server.store import KeyNotFound, RevMismatch

ORPHAN = "orphan"
FOREGROUND = "foregroundDeletion"
IMMORTAL_NAMESPACES = ("default", "kube-system", "kube-public")
_ATTEMPTS = 20


def check_preconditions(kind: Kind, obj: Obj, pre: Obj | None) -> None:
    if not pre:
        return
    meta = obj.get("metadata") or {}
    name = str(meta.get("name", ""))
    uid, rv = pre.get("uid"), pre.get("resourceVersion")
    if uid is not None and uid != meta.get("uid"):
        raise errors.conflict(kind.kind, name, kind.group,
                              f"the UID in the precondition ({uid}) does not match the UID in record "
                              f"({meta.get('uid')}). The object might have been deleted and then recreated")
    if rv is not None and rv != meta.get("resourceVersion"):
        raise errors.conflict(kind.kind, name, kind.group,
                              f"the ResourceVersion in the precondition ({rv}) does not match the "
                              f"ResourceVersion in record ({meta.get('resourceVersion')}). The object might "
                              "have been modified")


def gc_finalizers(strategy: Strategy, finalizers: list[str], policy: str | None) -> list[str]:
    """Upstream deletionFinalizersForGarbageCollection."""
    if strategy.gc_policy == "unsupported":
        return list(finalizers)
    if policy:
        orphan, foreground = policy == "Orphan", policy == "Foreground"
    else:
        first = next((f for f in finalizers if f in (ORPHAN, FOREGROUND)), None)
        orphan = first == ORPHAN if first else strategy.gc_policy == "orphan"
        foreground = first == FOREGROUND
    out = [f for f in finalizers if f not in (ORPHAN, FOREGROUND)]
    if orphan:
        out.append(ORPHAN)
    if foreground:
        out.append(FOREGROUND)
    return out


def mark_as_deleting(meta: Obj) -> None:
    """Upstream markAsDeleting: finalizers pending, no grace period."""
    if not meta.get("deletionTimestamp") and int(meta.get("generation") or 0) > 0:
        meta["generation"] = int(meta["generation"]) + 1
    if not meta.get("deletionTimestamp") or parse_time(meta["deletionTimestamp"]) > now():
        meta["deletionTimestamp"] = rfc3339()
    meta["deletionGracePeriodSeconds"] = 0


class DeleteMixin(RegistryBase):
    """delete / deletecollection."""

    async def delete_object(self, kind: Kind, namespace: str, name: str, *, propagation_policy: str | None = None,
                            grace_period_seconds: int | None = None, preconditions: Obj | None = None,
                            dry_run: bool = False, view: Kind | None = None) -> tuple[Obj, bool]:
        """(object, deleted now). `view`: the view kind the request came through (for admission)."""
        self.check_stored(kind)
        if kind.gk == "Namespace" and name in IMMORTAL_NAMESPACES:
            raise errors.forbidden(f'namespaces "{name}" is forbidden: this namespace may not be deleted',
                                   "namespaces", "", name)
        for _ in range(_ATTEMPTS):
            rev, old = self.read(kind, namespace, name)
            check_preconditions(kind, old, preconditions)
            await self.admit(Admission("DELETE", kind, self.scoped(kind, namespace), name, None, old,
                                       dry_run=dry_run, view=view))
            try:
                if kind.gk == "Namespace":
                    return await self._delete_namespace(kind, rev, old, propagation_policy, dry_run)
                if kind.gk == CRD_GK and not (old.get("metadata") or {}).get("deletionTimestamp"):
                    return await self._mark_crd(kind, rev, old, dry_run), False
                return await self._delete_once(kind, namespace, rev, old, propagation_policy,
                                               grace_period_seconds, dry_run)
            except RetryWrite:
                continue
        raise errors.conflict(kind.plural, name, kind.group)

    async def _delete_once(self, kind: Kind, namespace: str, rev: int, old: Obj, policy: str | None,
                           grace: int | None, dry_run: bool) -> tuple[Obj, bool]:
        strategy = self.strategy(kind)
        if grace is not None and grace < 0:
            grace = 1
        obj = deep_copy(old)
        meta = obj["metadata"]
        key = self.key(kind, self.scoped(kind, namespace), str(meta["name"]))
        graceful = False
        current = meta.get("deletionGracePeriodSeconds")
        if meta.get("deletionTimestamp") and strategy.graceful is not None and current:
            if grace is None or grace >= current:
                return old, False  # graceful deletion already pending
            start = parse_time(meta["deletionTimestamp"]) - dt.timedelta(seconds=int(current))
            meta["deletionTimestamp"] = rfc3339(start + dt.timedelta(seconds=grace))
            meta["deletionGracePeriodSeconds"] = grace
            graceful = True
        elif not meta.get("deletionTimestamp") and strategy.graceful is not None:
            period = strategy.graceful(obj, grace)
            meta["deletionTimestamp"] = rfc3339(now() + dt.timedelta(seconds=period))
            meta["deletionGracePeriodSeconds"] = period
            if int(meta.get("generation") or 0) > 0:
                meta["generation"] = int(meta["generation"]) + 1
            graceful = True
        finalizers = list(meta.get("finalizers") or [])
        wanted = gc_finalizers(strategy, finalizers, policy)
        if wanted != finalizers:
            meta["finalizers"] = wanted
        if not wanted:
            meta.pop("finalizers", None)
        if wanted and not graceful:
            mark_as_deleting(meta)
        if wanted or (graceful and int(meta.get("deletionGracePeriodSeconds") or 0) > 0):
            return await self._write_deleting(kind, key, rev, obj, old, dry_run), False
        return await self.remove(kind, key, obj, rev, dry_run), True

    async def _mark_crd(self, kind: Kind, rev: int, old: Obj, dry_run: bool) -> Obj:
        obj = deep_copy(old)
        meta = obj["metadata"]
        meta["deletionTimestamp"] = rfc3339()
        meta["deletionGracePeriodSeconds"] = 0
        if CRD_CLEANUP_FINALIZER not in (meta.get("finalizers") or []):
            meta["finalizers"] = [*(meta.get("finalizers") or []), CRD_CLEANUP_FINALIZER]
        if int(meta.get("generation") or 0) > 0:
            meta["generation"] = int(meta["generation"]) + 1
        status = obj.setdefault("status", {})
        status["conditions"] = set_condition(status.get("conditions"), TERMINATING, "True",
                                             "InstanceDeletionPending", "CustomResourceDefinition marked for "
                                             "deletion; CustomResource deletion will begin soon")
        return await self._write_deleting(kind, self.key(kind, "", str(meta["name"])), rev, obj, old, dry_run)

    async def _write_deleting(self, kind: Kind, key: str, rev: int, obj: Obj, old: Obj, dry_run: bool) -> Obj:
        if obj == old or dry_run:
            return obj
        try:
            new_rev, _ = await self.store.update(key, obj, rev)
        except (RevMismatch, KeyNotFound) as e:
            raise RetryWrite from e
        obj["metadata"]["resourceVersion"] = str(new_rev)
        return obj

    async def _delete_namespace(self, kind: Kind, rev: int, old: Obj, policy: str | None,
                                dry_run: bool) -> tuple[Obj, bool]:
        meta = old.get("metadata") or {}
        key = self.key(kind, "", str(meta.get("name", "")))
        if not meta.get("deletionTimestamp"):
            obj = deep_copy(old)
            obj["metadata"]["deletionTimestamp"] = rfc3339()
            obj.setdefault("status", {})["phase"] = "Terminating"
            finalizers = list(obj["metadata"].get("finalizers") or [])
            extra = {"Orphan": ORPHAN, "Foreground": FOREGROUND}.get(policy or "")
            if extra and extra not in finalizers:
                obj["metadata"]["finalizers"] = [*finalizers, extra]
            return await self._write_deleting(kind, key, rev, obj, old, dry_run), False
        if (old.get("spec") or {}).get("finalizers"):
            return old, False
        if meta.get("finalizers"):
            return old, False
        return await self.remove(kind, key, deep_copy(old), rev, dry_run), True

    async def delete_many(self, kind: Kind, namespace: str = "", *, label_selector: str = "",
                          field_selector: str = "", propagation_policy: str | None = None,
                          grace_period_seconds: int | None = None, dry_run: bool = False,
                          view: Kind | None = None) -> Obj:
        """deletecollection: list with the selectors, then delete each (NotFound ignored)."""
        self.check_stored(kind)
        matcher = make_matcher(kind, label_selector, field_selector)
        page, rev, _ = self.store.list(self.prefix(kind, self.scoped(kind, namespace)))
        items: list[Obj] = []
        for _key, _rev, raw in page:
            obj = self.decode(kind, raw)
            if matcher is not None and not matcher(obj):
                continue
            meta = obj.get("metadata") or {}
            try:
                out, _ = await self.delete_object(kind, str(meta.get("namespace", "")), str(meta.get("name")),
                                                  propagation_policy=propagation_policy,
                                                  grace_period_seconds=grace_period_seconds, dry_run=dry_run,
                                                  view=view)
            except errors.ApiError as e:
                if e.code != 404:
                    raise
                continue
            items.append(out)
        return {"apiVersion": kind.api_version, "kind": kind.list_kind,
                "metadata": {"resourceVersion": str(rev)}, "items": items}
