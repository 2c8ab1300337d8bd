"""Root CA publisher: every active namespace holds the `kube-root-ca.crt` ConfigMap with the cluster CA (upstream
`pkg/controller/certificates/rootcacertpublisher`), which the `kube-api-access-*` volume of every pod reads.

reconcile(namespace): namespace present and not terminating → the ConfigMap exists with `data["ca.crt"]` equal
to the CA and upstream's description annotation; created when missing, its data put back when changed.
Handlers: namespace added or changed → that namespace; the ConfigMap changed or deleted → its namespace.

Invariants: touches only ConfigMaps named `kube-root-ca.crt`; other data keys and labels a user added are kept
(only `ca.crt` and the annotation are owned); AlreadyExists, NotFound and Conflict are retried, not errors.
"""

from __future__ import annotations

from typing import Any, ClassVar

from lite.client import Client
from lite.errors import ApiError
from lite.events import EventRecorder
from lite.informer import SharedInformers
from lite.objects import deep_copy, is_deleting, name_of, namespace_of
from lite.server.controllers.runtime import Controller, builtin

Obj = dict[str, Any]
NAME = "kube-root-ca.crt"
DESCRIPTION_KEY = "kubernetes.io/description"
DESCRIPTION = ("Contains a CA bundle that can be used to verify the kube-apiserver when using internal endpoints "
               "such as the internal service IP or kubernetes.default.svc. No other usage is guaranteed across "
               "distributions of Kubernetes clusters.")


def desired(namespace: str, ca_pem: str, current: Obj | None) -> Obj | None:
    """The ConfigMap to write (create when `current` is None), or None when `current` is right."""
    if current is not None:
        data = current.get("data") or {}
        notes = (current.get("metadata") or {}).get("annotations") or {}
        if data.get("ca.crt") == ca_pem and notes.get(DESCRIPTION_KEY) == DESCRIPTION:
            return None
        out = deep_copy(current)
        out.setdefault("data", {})["ca.crt"] = ca_pem
        out["metadata"].setdefault("annotations", {})[DESCRIPTION_KEY] = DESCRIPTION
        return out
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": NAME, "namespace": namespace, "annotations": {DESCRIPTION_KEY: DESCRIPTION}},
            "data": {"ca.crt": ca_pem}}


class RootCAPublisher(Controller):
    name: ClassVar[str] = "root-ca-cert-publisher"

    def __init__(self, client: Client, informers: SharedInformers, ca_pem: bytes,
                 recorder: EventRecorder | None = None) -> None:
        super().__init__(client, informers, recorder)
        self.ca_pem = ca_pem.decode()
        self.ns_kind = builtin("", "Namespace")
        self.cm_kind = builtin("", "ConfigMap")
        self.namespaces = self.informer(self.ns_kind, primary=True)
        self.config_maps = self.informer(self.cm_kind)
        self.namespaces.add_handlers(on_add=self.enqueue, on_update=lambda old, new: self.enqueue(new))
        self.config_maps.add_handlers(on_update=lambda old, new: self._changed(new), on_delete=self._changed)

    def _changed(self, cm: Obj) -> None:
        if name_of(cm) == NAME:
            self.queue.add(namespace_of(cm))

    async def reconcile(self, key: str) -> float | None:
        ns = self.namespaces.get(key)
        if ns is None or is_deleting(ns) or (ns.get("status") or {}).get("phase") == "Terminating":
            return None
        current = self.config_maps.get(f"{key}/{NAME}")
        want = desired(key, self.ca_pem, current)
        if want is None:
            return None
        try:
            if current is None:
                await self.client.create(self.cm_kind, key, want)
            else:
                await self.client.update(self.cm_kind, key, NAME, want)
        except ApiError as e:
            terminating = any(c.reason == "NamespaceTerminating" for c in e.causes)
            if e.code in (404, 409) and not terminating:
                return 0.5  # the cache was behind: look again shortly
            if not terminating and e.code != 403:
                raise
        return None
