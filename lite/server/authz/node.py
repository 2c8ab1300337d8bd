"""The Node authorizer: what a node's own credential (`system:node:<name>` in `system:nodes`) may do.

Role: `NodeAuthorizer(pods_on_node, lookup)` is the chain's `node` decider (upstream's node authorizer with the
NodeRestriction checks that concern names folded in). `decide(node, info, pods, lookup)` is the pure decision,
table-tested: `pods` are the pods bound to `node` (spec.nodeName), `lookup(resource, namespace, name)` reads a
PersistentVolumeClaim for the claim → volume edge.

What a node may do (everything else: no opinion, so RBAC decides, and no binding gives `system:nodes` more):
- nodes: get/list/watch any; create/update/patch/delete (and `status`) only its own Node;
- leases in kube-node-lease: only the one named after it;
- pods: get/list/watch; update/patch `pods/status` and delete only pods bound to it;
- get secrets, configmaps, persistentvolumeclaims referenced by a pod bound to it, persistentvolumes bound to
  such a claim, and create `serviceaccounts/token` for a ServiceAccount such a pod runs as;
- create/update/patch events.
A refusal for one of the graph resources (secrets ... tokens) carries upstream's reason, "no relationship found
between node '<n>' and this object".

Invariants: pure over what the callables return (the join hub's pod informer, indexed by node); users that are
not node identities get None (no opinion) for everything; synchronous and cheap: the pods of the node are
read only by the requests that need them (`NodePods`: a node's lease and Node need none; its pods' status and
delete need only their keys), since the pod cache decodes the pods it hands out (`lite.informer`, compact).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Iterator
from typing import Any

from lite.server.authz.attrs import Attributes, RequestInfo
from lite.server.authz.rbac import Verdict
from lite.server.requestuser import UserInfo

Obj = dict[str, Any]
NODE_PREFIX = "system:node:"
NODES_GROUP = "system:nodes"
LEASE_NAMESPACE = "kube-node-lease"
PodsOnNode = Callable[[str], Iterable[Obj]]
PodKeysOnNode = Callable[[str], Collection[str]]
Lookup = Callable[[str, str, str], "Obj | None"]
_READ = frozenset({"get", "list", "watch"})
_WRITE_OWN = frozenset({"create", "update", "patch", "delete", "get", "watch", "list"})
_GRAPH_KINDS = {"secrets": "Secret", "configmaps": "ConfigMap"}
ALLOW = Verdict(True, "")


def node_name(user: UserInfo) -> str | None:
    """The node a user is the credential of (`system:node:<name>` in `system:nodes`), else None."""
    if NODES_GROUP in user.groups and user.name.startswith(NODE_PREFIX) and len(user.name) > len(NODE_PREFIX):
        return user.name[len(NODE_PREFIX):]
    return None


def _no_relation(node: str) -> Verdict:
    return Verdict(False, f"no relationship found between node '{node}' and this object")


def _meta(pod: Obj) -> tuple[str, str]:
    meta = pod.get("metadata") or {}
    return str(meta.get("namespace", "")), str(meta.get("name", ""))


def claims_of(pod: Obj) -> set[str]:
    return {str(v["persistentVolumeClaim"]["claimName"]) for v in (pod.get("spec") or {}).get("volumes") or []
            if (v.get("persistentVolumeClaim") or {}).get("claimName")}


def _graph(node: str, info: RequestInfo, pods: Iterable[Obj], lookup: Lookup) -> Verdict:
    """Secrets, ConfigMaps, PVCs, PVs and ServiceAccount tokens: only through a pod bound to `node`."""
    from lite.server.join.relay import pod_refs  # here: lite.server.join imports this module

    res, ns, name = info.resource, info.namespace, info.name
    if res == "serviceaccounts":
        if info.verb != "create" or info.subresource != "token":
            return _no_relation(node)
        used = any(_meta(p)[0] == ns and str((p.get("spec") or {}).get("serviceAccountName") or "default") == name
                   for p in pods)
        return ALLOW if used else _no_relation(node)
    if info.verb != "get" or info.subresource or not name:
        return _no_relation(node)  # a node reads these one by one, never lists or writes them
    if res in _GRAPH_KINDS:
        ref = (_GRAPH_KINDS[res], ns, name)
        return ALLOW if any(ref in pod_refs(p) for p in pods) else _no_relation(node)
    if res == "persistentvolumeclaims":
        return ALLOW if any(_meta(p)[0] == ns and name in claims_of(p) for p in pods) else _no_relation(node)
    # persistentvolumes: bound to a claim a pod of the node uses
    for p in pods:
        pns = _meta(p)[0]
        for claim in claims_of(p):
            pvc = lookup("persistentvolumeclaims", pns, claim)
            if pvc is not None and (pvc.get("spec") or {}).get("volumeName") == name:
                return ALLOW
    return _no_relation(node)


class NodePods:
    """The pods bound to one node, read when first iterated (once); `has(namespace, name)` from their keys
    (`namespace/name`) when given, without reading the pods."""

    def __init__(self, fetch: Callable[[], Iterable[Obj]], keys: Callable[[], Collection[str]] | None = None) -> None:
        self._fetch, self._keys = fetch, keys
        self._pods: list[Obj] | None = None

    def __iter__(self) -> Iterator[Obj]:
        if self._pods is None:
            self._pods = list(self._fetch())
        return iter(self._pods)

    def has(self, namespace: str, name: str) -> bool:
        if self._keys is not None:
            return f"{namespace}/{name}" in self._keys()
        return any(_meta(p) == (namespace, name) for p in self)


def decide(node: str, info: RequestInfo, pods: Iterable[Obj], lookup: Lookup) -> Verdict | None:
    """The verdict for node `node` asking `info`; None for no opinion. See the module doc."""
    if not info.resource_request:
        return None
    group, res, verb = info.api_group, info.resource, info.verb
    if group == "" and res in ("secrets", "configmaps", "persistentvolumeclaims", "persistentvolumes",
                               "serviceaccounts"):
        return _graph(node, info, pods, lookup)
    if group == "" and res == "nodes":
        if verb in _READ and not info.subresource:
            return ALLOW
        if verb in _WRITE_OWN and info.subresource in ("", "status") and (info.name == node or (
                verb == "create" and not info.name)):
            return ALLOW  # create: NodeRestriction checks the body's name (admission)
        return None
    if group == "coordination.k8s.io" and res == "leases":
        own = info.namespace == LEASE_NAMESPACE and (info.name == node or (verb == "create" and not info.name))
        return ALLOW if own and verb in _WRITE_OWN else None
    if group == "" and res == "pods":
        if verb in _READ and not info.subresource:
            return ALLOW
        if (verb in ("update", "patch") and info.subresource == "status") or (verb == "delete"
                                                                               and not info.subresource):
            bound = pods.has(info.namespace, info.name) if isinstance(pods, NodePods) else \
                any(_meta(p) == (info.namespace, info.name) for p in pods)
            return ALLOW if bound else Verdict(False, f"pod is not bound to node '{node}'")
        return None
    if group in ("", "events.k8s.io") and res == "events" and verb in ("create", "update", "patch"):
        return ALLOW
    return None


class NodeAuthorizer:
    """The chain's `node` decider over live pod and claim caches; see the module doc."""

    def __init__(self, pods_on_node: PodsOnNode, lookup: Lookup, pod_keys_on_node: PodKeysOnNode | None = None) -> None:
        self.pods_on_node, self.lookup, self.pod_keys_on_node = pods_on_node, lookup, pod_keys_on_node

    def __call__(self, attrs: Attributes) -> Verdict | None:
        node = node_name(attrs.user)
        if node is None:
            return None
        keys = self.pod_keys_on_node
        pods = NodePods(lambda: self.pods_on_node(node), None if keys is None else lambda: keys(node))
        return decide(node, attrs.info, pods, self.lookup)
