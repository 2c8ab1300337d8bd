"""ServiceAccount controller: every active namespace has a `default` ServiceAccount (upstream
`pkg/controller/serviceaccount` ServiceAccountsController).

reconcile(namespace): namespace present and not terminating, no `default` ServiceAccount in the cache →
create it. Handlers: namespace added or changed → that namespace; a `default` ServiceAccount deleted → its
namespace (it is recreated).

Invariants: only creates, never updates or deletes; AlreadyExists and a namespace that started terminating
meanwhile are not errors.
"""

from __future__ import annotations

from typing import Any, ClassVar

from lite.client import Client
from lite.errors import ApiError
from lite.events import EventRecorder
from lite.informer import SharedInformers
from lite.objects import is_deleting, name_of, namespace_of
from lite.server.controllers.runtime import Controller, builtin

Obj = dict[str, Any]
DEFAULT = "default"


class ServiceAccountController(Controller):
    name: ClassVar[str] = "serviceaccount"

    def __init__(self, client: Client, informers: SharedInformers, recorder: EventRecorder | None = None) -> None:
        super().__init__(client, informers, recorder)
        self.ns_kind = builtin("", "Namespace")
        self.sa_kind = builtin("", "ServiceAccount")
        self.namespaces = self.informer(self.ns_kind, primary=True)
        self.accounts = self.informer(self.sa_kind)
        self.namespaces.add_handlers(on_add=self.enqueue, on_update=lambda old, new: self.enqueue(new))
        self.accounts.add_handlers(on_delete=self._account_deleted)

    def _account_deleted(self, sa: Obj) -> None:
        if name_of(sa) == DEFAULT:
            self.queue.add(namespace_of(sa))

    async def reconcile(self, key: str) -> float | None:
        ns = self.namespaces.get(key)
        if ns is None or is_deleting(ns) or (ns.get("status") or {}).get("phase") == "Terminating":
            return None
        if self.accounts.get(f"{key}/{DEFAULT}") is not None:
            return None
        try:
            await self.client.create(self.sa_kind, key, {"apiVersion": "v1", "kind": "ServiceAccount",
                                                         "metadata": {"name": DEFAULT, "namespace": key}})
        except ApiError as e:
            terminating = any(c.reason == "NamespaceTerminating" for c in e.causes)
            if e.code != 409 and e.code != 404 and not terminating:
                raise
        return None
