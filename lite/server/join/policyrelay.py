"""Pods, Namespaces and NetworkPolicies for the agents' NetworkPolicy enforcement.

Every agent that enforces policies needs every pod's labels and IP (peers live on any node), every
namespace's labels and every NetworkPolicy. `PolicyRelay` reads them from shared informers and sends them as
ObjectUpsert/ObjectDelete of kinds "PolicyPod", "Namespace" and "NetworkPolicy" to the sessions whose agent
announced `networkPolicy: true` in its Hello; other agents never get them.

Invariants:
- On join, `resync(emit)` sends the whole current set before the hub's relay sends Synced (see proxyrelay).
- Changes are forwarded synchronously from the informer handlers, in event order; with no such session the
  handlers do nothing (a session that joins later gets the whole set from `resync`).
- Pods are cut down to what enforcement reads (name, namespace, uid, labels, node, hostNetwork, named
  container ports, IP, phase): no pod spec of another node (env, commands, secrets' names) leaves the server,
  and a pod update that changes none of those (status conditions, heartbeats of probes) is not relayed.
  Namespaces carry only name and labels; NetworkPolicies lose `managedFields`. Nothing relayed carries a
  resourceVersion, because the agent's session drops an ObjectUpsert whose resourceVersion it has seen, which
  would empty a resync after a reconnect.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from lite import wire
from lite.informer import Informer, SharedInformers
from lite.kinds import KindRegistry

Obj = dict[str, Any]
Emit = Callable[[wire.Message], None]
KINDS = (("", "v1", "Pod", "PolicyPod"), ("", "v1", "Namespace", "Namespace"),
         ("networking.k8s.io", "v1", "NetworkPolicy", "NetworkPolicy"))
HELLO_FLAG = "networkPolicy"


def wants_policies(hello: wire.Hello) -> bool:
    return bool((hello.info or {}).get(HELLO_FLAG))


def slim(kind: str, obj: Obj) -> Obj:
    """What enforcement reads of an object of wire kind `kind` (pure)."""
    meta = obj.get("metadata") or {}
    if kind == "Namespace":
        return {"metadata": {"name": meta.get("name"), "labels": meta.get("labels") or {}}}
    if kind == "NetworkPolicy":  # no resourceVersion: the agent's session would drop an unchanged one on resync
        return {**obj, "metadata": {k: v for k, v in meta.items() if k not in ("managedFields", "resourceVersion")}}
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    containers = [{"ports": [p for p in (c or {}).get("ports") or [] if isinstance(p, dict) and p.get("name")]}
                  for c in spec.get("containers") or []]
    return {"metadata": {k: meta.get(k) for k in ("namespace", "name", "uid", "labels")},
            "spec": {"nodeName": spec.get("nodeName"), "hostNetwork": bool(spec.get("hostNetwork")),
                     "containers": [c for c in containers if c["ports"]]},
            "status": {"podIP": status.get("podIP"), "phase": status.get("phase")}}


class PolicyRelay:
    def __init__(self, informers: SharedInformers, kinds: KindRegistry, sessions: Callable[[], Iterable[Emit]],
                 *, pods: Informer | None = None) -> None:
        """`pods`: the pod informer to read (the hub's, which may hold bound pods only: a pending pod has no
        IP for a policy to match); by default the shared one of every pod."""
        self._sessions = sessions
        self.informers: dict[str, Informer] = {}
        for group, version, kind, wire_kind in KINDS:
            k = kinds.by_gvk(group, version, kind)
            assert k is not None
            inf = pods if pods is not None and kind == "Pod" else informers.informer(k)
            inf.add_handlers(
                on_add=lambda o, wk=wire_kind: self._changed(wk, None, o),  # type: ignore[misc]
                on_update=lambda old, o, wk=wire_kind: self._changed(wk, old, o),  # type: ignore[misc]
                on_delete=lambda o, wk=wire_kind: self._changed(wk, None, o, deleted=True),  # type: ignore[misc]
            )
            self.informers[wire_kind] = inf

    async def wait_synced(self) -> None:
        for inf in self.informers.values():
            await inf.wait_synced()

    def resync(self, emit: Emit) -> None:
        for kind, inf in self.informers.items():
            for obj in inf.list():
                emit(wire.ObjectUpsert(kind, slim(kind, obj)))

    def _changed(self, kind: str, old: Obj | None, obj: Obj, deleted: bool = False) -> None:
        emits = list(self._sessions())
        if not emits:  # no agent enforces policies (the usual case, and every pod event asks): nothing to cut
            return
        meta = obj.get("metadata") or {}
        msg: wire.Message
        if deleted:
            msg = wire.ObjectDelete(kind, str(meta.get("namespace") or ""), str(meta.get("name") or ""))
        else:
            new = slim(kind, obj)
            if old is not None and kind != "NetworkPolicy" and slim(kind, old) == new:
                return
            msg = wire.ObjectUpsert(kind, new)
        for emit in emits:
            emit(msg)
