"""RBAC escalation prevention as an admission plugin (upstream `rule.go` `ConfirmNoEscalation` and the
policy-based Role/Binding storages), over the pure rule comparison of `lite.server.authz.comparator`.

Role:
- `EscalationCheck` is the admission hook on the four RBAC kinds for requests from API users (in-process
  writers, such as the bootstrap policy and the aggregation controller, have no user and are not checked):
  members of `system:masters` pass; a Role/ClusterRole needs the `escalate` verb on it or every permission it
  grants (an aggregationRule needs cluster-admin's); a binding needs the `bind` verb on its role or every
  permission of that role (404 when the role does not exist). Refusals are 403 `<resource> "<name>" is
  forbidden: user "u" (groups=["a" "b"]) is attempting to grant RBAC permissions not currently held:\\n...`.
  An update that grants nothing new (rules and aggregationRule, or roleRef and subjects, unchanged) passes.

Invariants: the hook reads only the in-memory policy index.
"""

from __future__ import annotations

from lite.errors import ApiError, not_found
from lite.records import dataclass
from lite.server.api.strategies.base import Admission
from lite.server.authz.attrs import Attributes, RequestInfo
from lite.server.authz.chain import MASTERS, AuthorizerChain
from lite.server.authz.comparator import covers, escalation_message
from lite.server.authz.index import GROUP
from lite.server.authz.rules import Rule, rules_from
from lite.server.requestuser import UserInfo, current_user

FULL_AUTHORITY = (Rule(("*",), ("*",), ("*",)), Rule(("*",), non_resource_urls=("*",)))


@dataclass
class EscalationCheck:
    """The admission hook (see the module doc)."""

    chain: AuthorizerChain

    async def __call__(self, a: Admission) -> None:
        if a.kind.group != GROUP or a.operation == "DELETE" or a.obj is None or a.subresource:
            return
        user = current_user()
        if user is None or MASTERS in user.groups:
            return
        await self.chain.ready()
        if a.kind.kind in ("Role", "ClusterRole"):
            self._check_role(a, user)
        elif a.kind.kind in ("RoleBinding", "ClusterRoleBinding"):
            self._check_binding(a, user)

    def _allowed(self, user: UserInfo, verb: str, resource: str, namespace: str, name: str) -> bool:
        info = RequestInfo(True, "", verb, GROUP, "v1", resource, "", namespace, name)
        return self.chain.authorize(Attributes(user, info)).allowed

    def _refuse(self, a: Admission, user: UserInfo, requested: tuple[Rule, ...], message: str = "") -> None:
        assert a.obj is not None
        owner, errors = self.chain.rules_for(user, a.namespace)
        ok, missing = covers(owner, requested)
        if ok:
            return
        text = message or escalation_message(user.name, user.groups, missing, errors)
        name = a.name or str((a.obj.get("metadata") or {}).get("name") or "")
        raise ApiError(f'{a.kind.plural}.{GROUP} "{name}" is forbidden: {text}', 403, "Forbidden", name=name,
                       group=GROUP, kind=a.kind.plural)

    def _check_role(self, a: Admission, user: UserInfo) -> None:
        assert a.obj is not None
        new, old = a.obj, a.old or {}
        if a.operation == "UPDATE" and new.get("rules") == old.get("rules") \
                and new.get("aggregationRule") == old.get("aggregationRule"):
            return
        if self._allowed(user, "escalate", a.kind.plural, a.namespace, a.name):
            return
        self._refuse(a, user, rules_from(new.get("rules")))
        if a.kind.kind == "ClusterRole" and new.get("aggregationRule") is not None:
            self._refuse(a, user, FULL_AUTHORITY, "must have cluster-admin privileges to use the aggregationRule")

    def _check_binding(self, a: Admission, user: UserInfo) -> None:
        assert a.obj is not None
        new, old = a.obj, a.old or {}
        if a.operation == "UPDATE" and new.get("roleRef") == old.get("roleRef") \
                and new.get("subjects") == old.get("subjects"):
            return
        ref = new.get("roleRef") or {}
        kind, role = str(ref.get("kind") or ""), str(ref.get("name") or "")
        plural = "clusterroles" if kind == "ClusterRole" else "roles"
        if self._allowed(user, "bind", plural, a.namespace, role):
            return
        index = self.chain.index
        rules = index.cluster_roles.get(role) if kind == "ClusterRole" else index.roles.get((a.namespace, role))
        if rules is None:
            raise not_found(plural, role, GROUP)
        self._refuse(a, user, rules)
