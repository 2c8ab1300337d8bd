"""What the agent's join session tells the service proxy: Services and EndpointSlices relayed by the server.

Role: route ObjectUpsert/ObjectDelete of kind "Service" and "EndpointSlice" to the `Proxier`, and turn the
server's resync (Welcome ... Synced) into one `Proxier.replace`, so objects deleted while the agent was away
disappear and nothing is synced from a half-received set.

Invariants:
- Between `begin_resync` (Welcome) and `synced` (Synced) objects are collected aside; the proxier keeps its
  previous state, so the rules the kernel holds stay untouched meanwhile (and across an agent restart: the
  proxier does not sync before its first state arrives).
- Outside a resync each message is applied at once (the proxier folds bursts into one sync).
- Further sinks with the proxier's recording methods (the node's cluster DNS) get exactly the same calls.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol

from lite import wire
from lite.agent.proxy.proxier import Proxier

KINDS = frozenset({"Service", "EndpointSlice"})
Key = tuple[str, str]


class Sink(Protocol):
    def set_service(self, obj: dict[str, Any]) -> None: ...
    def delete_service(self, namespace: str, name: str) -> None: ...
    def set_slice(self, obj: dict[str, Any]) -> None: ...
    def delete_slice(self, namespace: str, name: str) -> None: ...
    def replace(self, services: Iterable[dict[str, Any]], slices: Iterable[dict[str, Any]]) -> None: ...


class ProxyFeed:
    def __init__(self, proxier: Proxier, *also: Sink) -> None:
        self.proxier = proxier
        self.sinks: tuple[Sink, ...] = (proxier, *also)
        self._resync: dict[str, dict[Key, dict[str, Any]]] | None = None

    def begin_resync(self) -> None:
        self._resync = {kind: {} for kind in KINDS}

    def synced(self) -> None:
        if self._resync is not None:
            for sink in self.sinks:
                sink.replace(self._resync["Service"].values(), self._resync["EndpointSlice"].values())
            self._resync = None

    def handle(self, msg: wire.ObjectUpsert | wire.ObjectDelete) -> None:
        if isinstance(msg, wire.ObjectUpsert):
            meta = msg.obj.get("metadata") or {}
            key = (str(meta.get("namespace") or "default"), str(meta.get("name") or ""))
            if self._resync is not None:
                self._resync[msg.kind][key] = msg.obj
                return
            for sink in self.sinks:
                if msg.kind == "Service":
                    sink.set_service(msg.obj)
                else:
                    sink.set_slice(msg.obj)
        elif self._resync is not None:
            self._resync[msg.kind].pop((msg.namespace, msg.name), None)
        else:
            for sink in self.sinks:
                if msg.kind == "Service":
                    sink.delete_service(msg.namespace, msg.name)
                else:
                    sink.delete_slice(msg.namespace, msg.name)
