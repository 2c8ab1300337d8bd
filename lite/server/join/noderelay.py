"""Nodes for the agents' pod network: every agent hears about every Node (as flannel's subnet manager does).

`NodeFabricRelay` reads Nodes from the hub's shared informer and sends them as ObjectUpsert/ObjectDelete(kind
"Node") to the sessions whose agent runs the pod network (Hello info `podNetwork: true`, `wants_nodes`); the
agent's `lite.agent.fabric.Fabric` turns them into routes, neighbours and FDB entries towards the other nodes'
podCIDRs.

Invariants:
- On join, `resync(emit)` sends every Node before the hub's relay sends Synced, so an agent that sees Synced holds
  the complete set (a node deleted while the agent was away disappears from it).
- Only what the data path reads is relayed (name, the `flannel.alpha.coreos.com/` annotations, spec.podCIDR,
  status.addresses), and an update that leaves that slim view unchanged (heartbeats, conditions, images) is
  not sent at all.
- Changes are forwarded synchronously from the informer handlers, in event order (see the hub's invariant).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from lite import wire
from lite.informer import Informer

Obj = dict[str, Any]
Emit = Callable[[wire.Message], None]
KIND = "Node"
HELLO_FLAG = "podNetwork"
ANNOTATION_PREFIX = "flannel.alpha.coreos.com/"


def wants_nodes(hello: wire.Hello) -> bool:
    return bool((hello.info or {}).get(HELLO_FLAG))


def slim_node(node: Obj) -> Obj:
    meta = node.get("metadata") or {}
    ann = {k: v for k, v in (meta.get("annotations") or {}).items() if k.startswith(ANNOTATION_PREFIX)}
    addresses = [a for a in (node.get("status") or {}).get("addresses") or [] if isinstance(a, dict)]
    return {"metadata": {"name": meta.get("name"), "annotations": ann},
            "spec": {"podCIDR": (node.get("spec") or {}).get("podCIDR") or ""},
            "status": {"addresses": addresses}}


class NodeFabricRelay:
    def __init__(self, nodes: Informer, sessions: Callable[[], Iterable[Emit]]) -> None:
        self.nodes = nodes
        self._sessions = sessions
        nodes.add_handlers(on_add=lambda o: self._send(wire.ObjectUpsert(KIND, slim_node(o))),
                           on_update=self._updated, on_delete=self._deleted)

    def resync(self, emit: Emit) -> None:
        for node in self.nodes.list():
            emit(wire.ObjectUpsert(KIND, slim_node(node)))

    def _updated(self, old: Obj, new: Obj) -> None:
        slim = slim_node(new)
        if old is new or slim_node(old) != slim:
            self._send(wire.ObjectUpsert(KIND, slim))

    def _deleted(self, node: Obj) -> None:
        self._send(wire.ObjectDelete(KIND, "", str((node.get("metadata") or {}).get("name") or "")))

    def _send(self, msg: wire.Message) -> None:
        for emit in self._sessions():
            emit(msg)
