"""What the agent's join session tells NetworkPolicy enforcement: Pods (slim, of every node), Namespaces and
NetworkPolicies relayed by the server (`lite.server.join.policyrelay`) to agents whose Hello says
`networkPolicy: true`.

Role: route ObjectUpsert/ObjectDelete of kinds "PolicyPod", "Namespace" and "NetworkPolicy" to the `Enforcer`,
and turn the server's resync (Welcome ... Synced) into one `Enforcer.replace`, so objects deleted while the
agent was away disappear and nothing is enforced from a half-received set.

Invariants:
- Between `begin_resync` (Welcome) and `synced` (Synced) objects are collected aside; the enforcer keeps its
  previous state and the kernel's table stays as it is (also across an agent restart: the enforcer does not
  sync before its first full state).
- Outside a resync each message is applied at once (the enforcer folds bursts into one sync).
"""

from __future__ import annotations

from typing import Any

from lite import wire
from lite.agent.netpol.enforcer import KINDS as ENFORCED_KINDS
from lite.agent.netpol.enforcer import Enforcer

KINDS = frozenset(ENFORCED_KINDS)
HELLO_FLAG = "networkPolicy"
Key = tuple[str, str]


class PolicyFeed:
    def __init__(self, enforcer: Enforcer) -> None:
        self.enforcer = enforcer
        self._resync: dict[str, dict[Key, dict[str, Any]]] | None = None

    def begin_resync(self) -> None:
        self._resync = {kind: {} for kind in KINDS}

    def synced(self) -> None:
        if self._resync is not None:
            self.enforcer.replace({kind: objs.values() for kind, objs in self._resync.items()})
            self._resync = None

    def handle(self, msg: wire.ObjectUpsert | wire.ObjectDelete) -> None:
        if isinstance(msg, wire.ObjectUpsert):
            meta = msg.obj.get("metadata") or {}
            key = (str(meta.get("namespace") or ""), str(meta.get("name") or ""))
            if self._resync is not None:
                self._resync[msg.kind][key] = msg.obj
            else:
                self.enforcer.set(msg.kind, msg.obj)
        elif self._resync is not None:
            self._resync[msg.kind].pop((msg.namespace, msg.name), None)
        else:
            self.enforcer.delete(msg.kind, msg.namespace, msg.name)
