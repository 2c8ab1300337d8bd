"""The ResourceQuota controller: keeps `status.hard` = `spec.hard` and `status.used` = a recount.

reconcile(quota key):
    gone                                   ──► nothing
    recount every name of spec.hard over the namespace's objects (pods, services and PVCs from the shared
      informers; other kinds, e.g. `count/deployments.apps`, by one list through the API), pods filtered
      by the quota's scopes (`lite.server.admission.quota.usage`)
    status differs                         ──► one RV-guarded status write (409: requeued at once)

Events that requeue a namespace's quotas: the quota created or its spec changed, a pod / Service / PVC
update that changes its usage (a pod finishing, a Service changing type), and any object leaving the store
(`removed`, wired as a `Strategies` removed-hook: that is how a deleted Deployment lowers
`count/deployments.apps` without an informer per kind). Creates need no event: admission charged them,
and recounting on each would make N creates cost O(N^2).

Writes go through the admission's `write_status` (in turn with its charges in that namespace), so a recount
never overwrites a charge. Race with admission (upstream has it too): admission raises `status.used` before
the object is stored, so a recount that runs in between sees one object too few. So while admission charged
this namespace within `settle` seconds, a recount never lowers a value (it keeps the higher one and requeues
after `settle`).

Every quota is recounted again after `RESYNC` (upstream's 5 minutes); a create that admission charged and
that then failed (name taken, commit failed) is given back at once by admission itself (`Admission.undo`),
the recount is what catches anything else (a server stopped between a charge and its object's commit).

Invariants: reconcile is level-triggered and idempotent; status is written only when it differs.
"""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import Awaitable, Callable, Iterable
from fractions import Fraction
from typing import Any, ClassVar, Protocol

from lite import errors
from lite.client import Client
from lite.events import EventRecorder
from lite.informer import SharedInformers
from lite.kinds import Kind, KindRegistry
from lite.objects import deep_copy, key_of, namespace_of
from lite.server.admission.quota import usage as u
from lite.server.controllers.runtime import Controller, builtin

Obj = dict[str, Any]
SETTLE = 5.0
RESYNC = 300.0  # upstream's full recount period: catches charges for creates that then failed
BY_NAMESPACE = "namespace"


class QuotaWriter(Protocol):
    """What the quota admission offers the controller (`lite.server.admission.quota.admission.QuotaAdmission`)."""

    def last_charge(self, namespace: str) -> float: ...

    def write_status(self, namespace: str, name: str,
                     build: Callable[[Obj], Obj | None]) -> Awaitable[None]: ...


def tally(quota: Obj, kind: Kind, objects: Iterable[Obj], now: dt.datetime) -> u.Usage:
    """What `objects` of `kind` use of the names in `quota`'s spec.hard (scopes applied)."""
    hard = (quota.get("spec") or {}).get("hard") or {}
    out: u.Usage = {}
    for obj in objects:
        if not u.matches(quota, kind, obj):
            continue
        for k, v in u.charge(u.object_usage(kind, obj, now), hard).items():
            out[k] = out.get(k, Fraction(0)) + v
    return out


def recount(quota: Obj, counted: dict[str, Fraction], old_used: dict[str, Fraction], keep_higher: bool) -> Obj:
    """The status the quota should have: hard from spec, used for every hard name (0 if nothing uses it);
    with `keep_higher`, no value goes below `old_used`."""
    hard_raw = (quota.get("spec") or {}).get("hard") or {}
    used = {k: counted.get(k, Fraction(0)) for k in hard_raw}
    if keep_higher:
        used = {k: max(v, old_used.get(k, v)) for k, v in used.items()}
    return {"hard": dict(hard_raw), "used": u.format_usage(used, hard_raw)}


def kinds_needed(quota: Obj, kinds: Iterable[Kind]) -> list[Kind]:
    """The namespaced kinds whose objects some name of spec.hard counts."""
    hard = (quota.get("spec") or {}).get("hard") or {}
    return [k for k in kinds if k.namespaced and not k.virtual and not k.storage and any(u.tracks(k, h) for h in hard)]


class ResourceQuotaController(Controller):
    name: ClassVar[str] = "resourcequota"
    workers = 2

    def __init__(self, client: Client, informers: SharedInformers, kinds: KindRegistry,
                 recorder: EventRecorder | None = None, *,
                 admission: QuotaWriter | None = None, settle: float = SETTLE) -> None:
        super().__init__(client, informers, recorder or EventRecorder(client, "resourcequota-controller"))
        self.kinds = kinds
        self.admission = admission
        self.settle = settle
        self.kind = builtin("", "ResourceQuota")
        self.quotas = self.informer(self.kind, primary=True)
        self.quotas.ensure_index(BY_NAMESPACE, lambda o: [namespace_of(o)])
        self.quotas.add_handlers(on_add=self.enqueue, on_update=self._quota_changed)
        self.cached: dict[str, Any] = {}
        for gk in ("Pod", "Service", "PersistentVolumeClaim"):
            kind = builtin("", gk)
            inf = self.informer(kind)
            inf.ensure_index(BY_NAMESPACE, lambda o: [namespace_of(o)])
            inf.add_handlers(on_update=self._usage_changed(kind), on_delete=self._touch)
            self.cached[gk] = inf

    def _quota_changed(self, old: Obj, new: Obj) -> None:
        """Only a spec change, or a status that does not mirror spec.hard, needs a recount (not the status
        writes of admission and of this controller, which would otherwise recount on every create)."""
        status = new.get("status") or {}
        if old.get("spec") != new.get("spec") or status.get("hard") != (new.get("spec") or {}).get("hard"):
            self.enqueue(new)

    def _usage_changed(self, kind: Kind) -> Callable[[Obj, Obj], None]:
        """Creates are charged by admission; an update matters only when it changes what the object uses
        (a pod finishing, a Service changing type) — upstream's replenishment rule."""
        def handler(old: Obj, new: Obj) -> None:
            if not self.quotas.by_index(BY_NAMESPACE, namespace_of(new)):
                return  # no quota to recount: skip computing the usage (every pod update of the cluster)
            now = dt.datetime.now(dt.UTC)
            if u.object_usage(kind, old, now) != u.object_usage(kind, new, now):
                self._touch(new)
        return handler

    def _touch(self, obj: Obj) -> None:
        for q in self.quotas.by_index(BY_NAMESPACE, namespace_of(obj)):
            self.queue.add(key_of(q))

    async def removed(self, kind: Kind, obj: Obj) -> None:
        """Strategies removed-hook: an object of any kind left the store; recount its namespace's quotas."""
        if kind.namespaced and kind.gk != "ResourceQuota":
            self._touch(obj)

    async def _objects(self, kind: Kind, ns: str) -> list[Obj]:
        inf = self.cached.get(kind.gk) if kind.group == "" else None
        if inf is not None:
            return list(inf.by_index(BY_NAMESPACE, ns))
        return list((await self.client.list(kind, ns))["items"])

    async def reconcile(self, key: str) -> float | None:
        quota = self.quotas.get(key)
        if quota is None:
            return None
        ns, _, name = key.partition("/")
        now = dt.datetime.now(dt.UTC)
        counted: dict[str, Fraction] = {}
        for kind in kinds_needed(quota, self.kinds):
            for k, v in tally(quota, kind, await self._objects(kind, ns), now).items():
                counted[k] = counted.get(k, Fraction(0)) + v
        loop = asyncio.get_running_loop()
        last = self.admission.last_charge(ns) if self.admission is not None else 0.0
        recent = loop.time() - last < self.settle

        def build(fresh: Obj) -> Obj | None:
            status = fresh.get("status") or {}
            want = recount(fresh, counted, u.resource_list(status.get("used")), keep_higher=recent)
            if want == {"hard": status.get("hard"), "used": status.get("used")}:
                return None
            body = deep_copy(fresh)
            body["status"] = {**status, **want}
            return body

        try:
            if self.admission is not None:
                await self.admission.write_status(ns, name, build)  # in turn with admission's charges
            else:
                body = build(quota)
                if body is not None:
                    await self.client.update(self.kind, ns, name, body, subresource="status")
        except errors.ApiError as e:
            if e.code == 409:
                return 0.05
            if e.code == 404:
                return None
            raise
        old_used = u.resource_list((quota.get("status") or {}).get("used"))
        lowered_later = recent and any(counted.get(k, Fraction(0)) < v for k, v in old_used.items())
        return self.settle - (loop.time() - last) if lowered_later else RESYNC
