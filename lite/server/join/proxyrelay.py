"""Services and EndpointSlices for the agents' service proxies.

Every node's proxy needs every Service and EndpointSlice (kube-proxy watches them all). `ServiceRelay` reads
them from shared informers and sends them as ObjectUpsert/ObjectDelete(kind "Service" | "EndpointSlice") to
the sessions whose agent announced a proxy in its Hello (`info["serviceProxy"]`); other agents never get them.

Invariants:
- On join, `resync(emit)` sends the whole current set before the hub's relay sends Synced, so when an agent sees
  Synced it holds the complete set and can replace its state (objects deleted while it was away disappear).
- Changes are forwarded synchronously from the informer handlers, in event order; the caller registers a
  session and takes the resync snapshot with no await in between (as for pods), so nothing is missed or doubled.
- Only what the proxy reads is relayed: `managedFields` are dropped to keep frames small.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from lite import wire
from lite.informer import Informer, SharedInformers
from lite.kinds import KindRegistry

Obj = dict[str, Any]
Emit = Callable[[wire.Message], None]
KINDS = (("", "v1", "Service"), ("discovery.k8s.io", "v1", "EndpointSlice"))
HELLO_FLAG = "serviceProxy"


def wants_services(hello: wire.Hello) -> bool:
    return bool((hello.info or {}).get(HELLO_FLAG))


def _slim(obj: Obj) -> Obj:
    meta = obj.get("metadata") or {}
    if "managedFields" not in meta:
        return obj
    return {**obj, "metadata": {k: v for k, v in meta.items() if k != "managedFields"}}


class ServiceRelay:
    def __init__(self, informers: SharedInformers, kinds: KindRegistry, sessions: Callable[[], Iterable[Emit]]) -> None:
        self._sessions = sessions
        self.informers: dict[str, Informer] = {}
        for group, version, kind in KINDS:
            k = kinds.by_gvk(group, version, kind)
            assert k is not None
            inf = informers.informer(k)
            inf.add_handlers(
                on_add=lambda o, kd=kind: self._changed(kd, o),  # type: ignore[misc]
                on_update=lambda _old, o, kd=kind: self._changed(kd, o),  # type: ignore[misc]
                on_delete=lambda o, kd=kind: self._changed(kd, o, deleted=True),  # type: ignore[misc]
            )
            self.informers[kind] = inf

    async def wait_synced(self) -> None:
        for inf in self.informers.values():
            await inf.wait_synced()

    def resync(self, emit: Emit) -> None:
        for kind, inf in self.informers.items():
            for obj in inf.list():
                emit(wire.ObjectUpsert(kind, _slim(obj)))

    def _changed(self, kind: str, obj: Obj, deleted: bool = False) -> None:
        meta = obj.get("metadata") or {}
        msg: wire.Message
        if deleted:
            msg = wire.ObjectDelete(kind, str(meta.get("namespace") or ""), str(meta.get("name") or ""))
        else:
            msg = wire.ObjectUpsert(kind, _slim(obj))
        for emit in self._sessions():
            emit(msg)
