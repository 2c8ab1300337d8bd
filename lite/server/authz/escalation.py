"""RBAC escalation prevention (upstream `pkg/registry/rbac/validation/policy_compact.go`, `policy_comparator.go`,
`rule.go` `ConfirmNoEscalation`, and the policy-based Role/Binding storages).

Role:
- `covers(owner, requested)` breaks each requested rule into single (group, resource, verb[, name]) or
  (url, verb) rules and reports those no owner rule covers; `compact` merges missing rules that differ only
  in verbs; `describe` prints one as upstream's `CompactString` (`{APIGroups:[""], Resources:["secrets"],
  Verbs:["get"]}`).
- `EscalationCheck` is the admission hook on the four RBAC kinds for requests from API users (in-process
  writers, such as the bootstrap policy and the aggregation controller, have no user and are not checked):
  members of `system:masters` pass; a Role/ClusterRole needs the `escalate` verb on it or every permission it
  grants (an aggregationRule needs cluster-admin's); a binding needs the `bind` verb on its role or every
  permission of that role (404 when the role does not exist). Refusals are 403 `<resource> "<name>" is
  forbidden: user "u" (groups=["a" "b"]) is attempting to grant RBAC permissions not currently held:\\n...`.
  An update that grants nothing new (rules and aggregationRule, or roleRef and subjects, unchanged) passes.

Invariants: the comparison functions are pure; the hook reads only the in-memory policy index.
"""

from __future__ import annotations

from dataclasses import dataclass

from lite.errors import ApiError, not_found
from lite.server.api.strategies.base import Admission
from lite.server.authz.attrs import Attributes, RequestInfo
from lite.server.authz.chain import MASTERS, AuthorizerChain
from lite.server.authz.index import GROUP
from lite.server.authz.rules import ALL, Rule, rules_from
from lite.server.requestuser import UserInfo, current_user

FULL_AUTHORITY = (Rule(("*",), ("*",), ("*",)), Rule(("*",), non_resource_urls=("*",)))


def breakdown(rule: Rule) -> list[Rule]:
    """One rule per (group, resource, verb[, name]) or (url, verb), as upstream's `BreakdownRule`."""
    out: list[Rule] = []
    for g in rule.api_groups:
        for res in rule.resources:
            for v in rule.verbs:
                if rule.resource_names:
                    out += [Rule((v,), (g,), (res,), (n,)) for n in rule.resource_names]
                else:
                    out.append(Rule((v,), (g,), (res,)))
    for url in rule.non_resource_urls:
        out += [Rule((v,), non_resource_urls=(url,)) for v in rule.verbs]
    return out


def _has_all(have: tuple[str, ...], want: tuple[str, ...]) -> bool:
    return all(w in have for w in want)


def _resources_cover(have: tuple[str, ...], want: tuple[str, ...]) -> bool:
    if ALL in have or _has_all(have, want):
        return True
    for path in want:
        if path in have:
            continue
        if "/" not in path or "*/" + path.split("/", 1)[1] not in have:
            return False
    return True


def _url_covers(owner: str, sub: str) -> bool:
    return owner == sub or (owner.endswith("*") and sub.startswith(owner.rstrip("*")))


def rule_covers(owner: Rule, sub: Rule) -> bool:
    """upstream `ruleCovers`."""
    verbs = ALL in owner.verbs or _has_all(owner.verbs, sub.verbs)
    groups = ALL in owner.api_groups or _has_all(owner.api_groups, sub.api_groups)
    urls = all(any(_url_covers(o, s) for o in owner.non_resource_urls) for s in sub.non_resource_urls)
    if not sub.resource_names:
        names = not owner.resource_names
    else:
        names = not owner.resource_names or _has_all(owner.resource_names, sub.resource_names)
    return verbs and groups and _resources_cover(owner.resources, sub.resources) and names and urls


def covers(owner: list[Rule] | tuple[Rule, ...], requested: list[Rule] | tuple[Rule, ...]) -> tuple[bool, list[Rule]]:
    """Whether `owner` covers every requested rule, and the uncovered single rules."""
    missing: list[Rule] = []
    for rule in requested:
        for atom in breakdown(rule):
            if not any(rule_covers(o, atom) for o in owner) and atom not in missing:
                missing.append(atom)
    return not missing, missing


def compact(rules: list[Rule]) -> list[Rule]:
    """Merge simple rules (one group, one resource, at most one name, no URLs) that differ only in verbs."""
    out: list[Rule] = []
    simple: dict[tuple[str, str, tuple[str, ...]], Rule] = {}
    order: list[tuple[str, str, tuple[str, ...]]] = []
    for r in rules:
        if len(r.api_groups) == 1 and len(r.resources) == 1 and len(r.resource_names) <= 1 \
                and not r.non_resource_urls:
            key = (r.api_groups[0], r.resources[0], r.resource_names)
            if key in simple:
                prev = simple[key]
                simple[key] = Rule(prev.verbs + tuple(v for v in r.verbs if v not in prev.verbs), prev.api_groups,
                                   prev.resources, prev.resource_names)
            else:
                simple[key] = r
                order.append(key)
        else:
            out.append(r)
    return out + [simple[k] for k in order]


def _go_list(values: tuple[str, ...]) -> str:
    return "[" + " ".join('"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"' for v in values) + "]"


def describe(r: Rule) -> str:
    """upstream `CompactString`."""
    parts = []
    for label, values in (("APIGroups", r.api_groups), ("Resources", r.resources),
                          ("NonResourceURLs", r.non_resource_urls), ("ResourceNames", r.resource_names),
                          ("Verbs", r.verbs)):
        if values:
            parts.append(f"{label}:{_go_list(values)}")
    return "{" + ", ".join(parts) + "}"


def escalation_message(user: str, groups: tuple[str, ...], missing: list[Rule], errors: list[str]) -> str:
    lines = sorted({describe(r) for r in compact(missing)})
    msg = (f"user {_go_list((user,))[1:-1]} (groups={_go_list(groups)}) is attempting to grant RBAC permissions "
           f"not currently held:\n" + "\n".join(lines))
    if errors:
        msg += f"; resolution errors: [{', '.join(errors)}]"
    return msg


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
