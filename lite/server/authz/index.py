"""The RBAC policy in memory: roles and cluster roles by name, bindings indexed by subject.

Role: `PolicyIndex` answers "which rules apply to this user in this namespace?" by visiting only the
bindings that name the user, one of its groups, or (for ServiceAccount users) the ServiceAccount, so the
cost of a decision does not grow with the number of bindings in the cluster. `PolicyFeed` keeps an index
current from informers over the four RBAC kinds (list + watch through the in-process `Client`).

Invariants:
- The index holds parsed, immutable `Rule` tuples and `Binding` records; it never keeps the objects
  themselves, so no caller can mutate a cached object through it.
- A binding is indexed under each of its subjects (`("User", name)`, `("Group", name)`; a ServiceAccount
  subject is the user `system:serviceaccount:<ns>:<name>`, its namespace defaulting to the binding's), per
  namespace for RoleBindings and cluster-wide for ClusterRoleBindings. `put_*`/`delete_*` keep every entry
  consistent with the last object seen for that key.
- `ready` is set once every informer has listed; authorizers wait for it so a request arriving during start
  is not refused for lack of policy.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from typing import Any

from lite.client import Client
from lite.informer import Informer
from lite.kinds import Kind, KindRegistry
from lite.records import dataclass
from lite.server.authz.rules import Rule, rules_from
from lite.server.requestuser import UserInfo

GROUP = "rbac.authorization.k8s.io"
Subject = tuple[str, str]  # ("User" | "Group", name)


@dataclass(frozen=True)
class Binding:
    """One RoleBinding (namespace set) or ClusterRoleBinding (namespace "")."""

    namespace: str
    name: str
    role_kind: str  # "Role" | "ClusterRole"
    role_name: str
    subjects: tuple[Subject, ...]

    def describe(self) -> str:
        kind = "RoleBinding" if self.namespace else "ClusterRoleBinding"
        where = f"{self.name}/{self.namespace}" if self.namespace else self.name  # upstream: name/ns
        return f'{kind} "{where}" of {self.role_kind} "{self.role_name}"'


def binding_from(obj: dict[str, Any]) -> Binding:
    meta = obj.get("metadata") or {}
    ns = str(meta.get("namespace") or "")
    ref = obj.get("roleRef") or {}
    subjects: list[Subject] = []
    for s in obj.get("subjects") or []:
        if not isinstance(s, dict):
            continue
        kind, name = s.get("kind"), str(s.get("name") or "")
        if kind in ("User", "Group"):
            subjects.append((str(kind), name))
        elif kind == "ServiceAccount":
            sa_ns = str(s.get("namespace") or ns)
            subjects.append(("User", f"system:serviceaccount:{sa_ns}:{name}"))
    return Binding(ns, str(meta.get("name") or ""), str(ref.get("kind") or ""), str(ref.get("name") or ""),
                   tuple(subjects))


def user_subjects(user: UserInfo) -> list[Subject]:
    return [("User", user.name), *(("Group", g) for g in user.groups)]


class PolicyIndex:
    """See the module doc. Not thread-safe; used on the event loop only."""

    def __init__(self) -> None:
        self.roles: dict[tuple[str, str], tuple[Rule, ...]] = {}
        self.cluster_roles: dict[str, tuple[Rule, ...]] = {}
        self._bindings: dict[tuple[str, str], Binding] = {}
        # (namespace or "", subject) -> binding keys
        self._by_subject: dict[tuple[str, Subject], set[tuple[str, str]]] = {}
        self.ready = asyncio.Event()
        self.generation = 0  # moves on every change, so caches of decisions know when they are stale

    # -- updates --

    def put_role(self, namespace: str, name: str, rules: tuple[Rule, ...]) -> None:
        self.generation += 1
        self.roles[(namespace, name)] = rules

    def delete_role(self, namespace: str, name: str) -> None:
        self.generation += 1
        self.roles.pop((namespace, name), None)

    def put_cluster_role(self, name: str, rules: tuple[Rule, ...]) -> None:
        self.generation += 1
        self.cluster_roles[name] = rules

    def delete_cluster_role(self, name: str) -> None:
        self.generation += 1
        self.cluster_roles.pop(name, None)

    def put_binding(self, b: Binding) -> None:
        self.delete_binding(b.namespace, b.name)
        key = (b.namespace, b.name)
        self._bindings[key] = b
        for s in b.subjects:
            self._by_subject.setdefault((b.namespace, s), set()).add(key)

    def delete_binding(self, namespace: str, name: str) -> None:
        self.generation += 1
        key = (namespace, name)
        old = self._bindings.pop(key, None)
        if old is None:
            return
        for s in old.subjects:
            keys = self._by_subject.get((namespace, s))
            if keys is not None:
                keys.discard(key)
                if not keys:
                    del self._by_subject[(namespace, s)]

    # -- reading --

    def bindings_for(self, user: UserInfo, namespace: str) -> Iterator[Binding]:
        """Cluster-wide bindings of the user first, then those in `namespace` (when given), each once, in a
        stable order."""
        subjects = user_subjects(user)
        for ns in ("", namespace) if namespace else ("",):
            keys: set[tuple[str, str]] = set()
            for s in subjects:
                keys |= self._by_subject.get((ns, s), set())
            for key in sorted(keys):
                yield self._bindings[key]

    def role_rules(self, b: Binding) -> tuple[tuple[Rule, ...], str]:
        """The rules a binding grants and an error text ("" if the role exists), upstream's wording."""
        if b.role_kind == "ClusterRole":
            rules = self.cluster_roles.get(b.role_name)
            if rules is None:
                return (), f'clusterrole.{GROUP} "{b.role_name}" not found'
            return rules, ""
        if b.role_kind == "Role" and b.namespace:
            rules = self.roles.get((b.namespace, b.role_name))
            if rules is None:
                return (), f'role.{GROUP} "{b.role_name}" not found'
            return rules, ""
        return (), f"unsupported role reference kind: {b.role_kind!r}"


class PolicyFeed:
    """Keeps a `PolicyIndex` current from informers on the RBAC kinds. `run()` until cancelled."""

    def __init__(self, client: Client, kinds: KindRegistry, index: PolicyIndex) -> None:
        self.index = index
        self.on_cluster_roles: list[Callable[[], None]] = []  # told after any ClusterRole change
        self.informers: dict[str, Informer] = {}
        for plural in ("roles", "clusterroles", "rolebindings", "clusterrolebindings"):
            kind = kinds.by_resource(GROUP, "v1", plural)
            if kind is None:
                raise LookupError(f"{plural}.{GROUP} is not served")
            inf = Informer(client, kind, compact=True)  # the index holds what it needs: keep only bytes
            self._watch(inf, kind)
            self.informers[plural] = inf

    def _watch(self, inf: Informer, kind: Kind) -> None:
        def put(obj: dict[str, Any]) -> None:
            self._put(kind, obj)

        def update(_old: dict[str, Any], new: dict[str, Any]) -> None:
            self._put(kind, new)

        def delete(obj: dict[str, Any]) -> None:
            self._delete(kind, obj)

        inf.add_handlers(on_add=put, on_update=update, on_delete=delete)

    def _put(self, kind: Kind, obj: dict[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        ns, name = str(meta.get("namespace") or ""), str(meta.get("name") or "")
        if kind.plural == "roles":
            self.index.put_role(ns, name, rules_from(obj.get("rules")))
        elif kind.plural == "clusterroles":
            self.index.put_cluster_role(name, rules_from(obj.get("rules")))
            self._cluster_roles_changed()
        else:
            self.index.put_binding(binding_from(obj))

    def _delete(self, kind: Kind, obj: dict[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        ns, name = str(meta.get("namespace") or ""), str(meta.get("name") or "")
        if kind.plural == "roles":
            self.index.delete_role(ns, name)
        elif kind.plural == "clusterroles":
            self.index.delete_cluster_role(name)
            self._cluster_roles_changed()
        else:
            self.index.delete_binding(ns, name)

    def _cluster_roles_changed(self) -> None:
        for fn in self.on_cluster_roles:
            fn()

    async def run(self) -> None:
        async with asyncio.TaskGroup() as tg:
            for inf in self.informers.values():
                tg.create_task(inf.run(), name=f"rbac-{inf.kind.plural}")
            for inf in self.informers.values():
                await inf.wait_synced()
            self.index.ready.set()
