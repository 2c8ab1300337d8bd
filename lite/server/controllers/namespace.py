"""Namespace lifecycle: empty a deleted namespace, then let it go (upstream `pkg/controller/namespace`).

reconcile(name) for a namespace with deletionTimestamp:
    phase Terminating (the API sets it on delete; kept here too)
    ──► delete every object of every namespaced, stored Kind in the KindRegistry (CRD kinds included)
    ──► conditions NamespaceDeletion*Failure / NamespaceContentRemaining / NamespaceFinalizersRemaining
    ──► content left (graceful pods, finalizers) → look again shortly
    ──► empty → PUT namespaces/<name>/finalize without the `kubernetes` finalizer, then DELETE again so the
        API removes it (it waits for spec.finalizers to be empty)

Invariants: idempotent; never touches an active namespace; the finalizer goes only once a fresh list of
every kind in the namespace comes back empty.
"""

from __future__ import annotations

import logging
from typing import Any, ClassVar

from lite.client import Client
from lite.errors import ApiError
from lite.events import EventRecorder
from lite.informer import SharedInformers
from lite.kinds import Kind, KindRegistry
from lite.objects import is_deleting, meta, rfc3339
from lite.server.controllers.runtime import Controller, builtin

Obj = dict[str, Any]
log = logging.getLogger("lite.controllers.namespace")

FINALIZER = "kubernetes"
RECHECK = 1.0  # seconds between looks at a namespace whose content is still going away
_SKIP = {("", "Event"), ("events.k8s.io", "Event")}


class NamespaceController(Controller):
    name: ClassVar[str] = "namespace"
    workers = 2

    def __init__(self, client: Client, informers: SharedInformers, kinds: KindRegistry,
                 recorder: EventRecorder | None = None) -> None:
        super().__init__(client, informers, recorder or EventRecorder(client, "namespace-controller"))
        self.kinds = kinds
        self.kind = builtin("", "Namespace")
        self.namespaces = self.informer(self.kind, primary=True)
        self.watch_primary(self.namespaces)

    def content_kinds(self) -> list[Kind]:
        """Every namespaced stored kind that can be listed and deleted; events last (they record the rest)."""
        kinds = [k for k in self.kinds if k.namespaced and not k.virtual and not k.storage and "list" in k.verbs
                 and "delete" in k.verbs]  # a view (Kind.storage) shows objects its stored kind deletes
        return sorted(kinds, key=lambda k: ((k.group, k.kind) in _SKIP, k.group, k.plural))

    async def reconcile(self, key: str) -> float | None:
        ns = self.namespaces.get(key)
        if ns is None or not is_deleting(ns):
            return None
        name = str(meta(ns)["name"])
        if FINALIZER not in ((ns.get("spec") or {}).get("finalizers") or []):
            await self._delete_again(name)
            return None
        remaining, finalizers, failures = await self._delete_content(name)
        await self._write_conditions(ns, remaining, finalizers, failures)
        if remaining or failures:
            return RECHECK
        await self._finalize(ns)
        return None

    async def _delete_content(self, ns: str) -> tuple[dict[str, int], dict[str, int], list[str]]:
        """Delete what is there; return (items left per resource, finalizers left, failure messages)."""
        remaining: dict[str, int] = {}
        finalizers: dict[str, int] = {}
        failures: list[str] = []
        for kind in self.content_kinds():
            try:
                items = (await self.client.list(kind, ns))["items"]
                if not items:
                    continue
                await self._delete_all(kind, ns, items)
                left = (await self.client.list(kind, ns))["items"]
            except ApiError as e:
                if e.code != 404:  # a CRD kind removed meanwhile has nothing left to delete
                    failures.append(f"{kind.resource}: {e.message}")
                continue
            if left:
                remaining[f"{kind.plural}.{kind.group}"] = len(left)
            for obj in left:
                for f in meta(obj).get("finalizers") or []:
                    finalizers[f] = finalizers.get(f, 0) + 1
        return remaining, finalizers, failures

    async def _delete_all(self, kind: Kind, ns: str, items: list[Obj]) -> None:
        if "deletecollection" in kind.verbs:
            await self.client.delete_collection(kind, ns, propagation_policy="Background")
            return
        for obj in items:
            if is_deleting(obj):
                continue
            try:
                await self.client.delete(kind, ns, str(meta(obj)["name"]), propagation_policy="Background")
            except ApiError as e:
                if e.code not in (404, 409):
                    raise

    async def _write_conditions(self, ns: Obj, remaining: dict[str, int], finalizers: dict[str, int],
                                failures: list[str]) -> None:
        old = {c.get("type"): c for c in (ns.get("status") or {}).get("conditions") or []}
        content = ", ".join(f"{r} has {n} resource instances" for r, n in sorted(remaining.items()))
        fins = ", ".join(f"{f} in {n} resource instances" for f, n in sorted(finalizers.items()))
        wanted = [
            ("NamespaceDeletionDiscoveryFailure", False, "ResourcesDiscovered",
             "All resources successfully discovered"),
            ("NamespaceDeletionGroupVersionParsingFailure", False, "ParsedGroupVersions",
             "All legacy kube types successfully parsed"),
            ("NamespaceDeletionContentFailure", bool(failures),
             "ContentDeletionFailed" if failures else "ContentDeleted",
             "; ".join(failures) if failures else "All content successfully deleted, may be waiting on finalization"),
            ("NamespaceContentRemaining", bool(remaining), "SomeResourcesRemain" if remaining else "ContentRemoved",
             f"Some resources are remaining: {content}" if remaining else "All content successfully removed"),
            ("NamespaceFinalizersRemaining", bool(finalizers),
             "SomeFinalizersRemain" if finalizers else "ContentHasNoFinalizers",
             f"Some content in the namespace has finalizers remaining: {fins}" if finalizers
             else "All content-preserving finalizers finished"),
        ]
        conditions = []
        for ctype, true, reason, message in wanted:
            status = "True" if true else "False"
            prev = old.get(ctype)
            same = prev is not None and prev.get("status") == status
            conditions.append({"type": ctype, "status": status, "reason": reason, "message": message,
                               "lastTransitionTime": prev.get("lastTransitionTime") if same and prev else rfc3339()})
        status_now = ns.get("status") or {}
        if status_now.get("phase") == "Terminating" and _same(status_now.get("conditions") or [], conditions):
            return
        try:
            await self.client.patch(self.kind, "", str(meta(ns)["name"]),
                                    {"status": {"phase": "Terminating", "conditions": conditions}},
                                    subresource="status")
        except ApiError as e:
            if e.code != 404:
                raise

    async def _finalize(self, ns: Obj) -> None:
        name = str(meta(ns)["name"])
        try:
            live = await self.client.get(self.kind, "", name)
            spec = dict(live.get("spec") or {})
            spec["finalizers"] = [f for f in spec.get("finalizers") or [] if f != FINALIZER]
            body = {**live, "spec": spec}
            await self.client.update(self.kind, "", name, body, subresource="finalize")
        except ApiError as e:
            if e.code == 404:
                return
            raise
        await self._delete_again(name)

    async def _delete_again(self, name: str) -> None:
        try:
            await self.client.delete(self.kind, "", name)
        except ApiError as e:
            if e.code != 404:
                raise


def _same(a: list[Obj], b: list[Obj]) -> bool:
    def strip(cs: list[Obj]) -> list[tuple[Any, ...]]:
        return sorted((c.get("type"), c.get("status"), c.get("reason"), c.get("message")) for c in cs)
    return strip(a) == strip(b)
