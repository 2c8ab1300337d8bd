"""Escalation prevention: `covers`/`compact`/`describe` tables (upstream policy_comparator semantics) and the
admission hook over a real `PolicyIndex` with the request user set as the HTTP layer sets it."""

from __future__ import annotations

import asyncio

import pytest

from lite.errors import ApiError
from lite.kinds import KindRegistry
from lite.server.admission.escalation import EscalationCheck
from lite.server.api.strategies.base import Admission
from lite.server.authz.chain import AuthorizerChain
from lite.server.authz.comparator import compact, covers, describe
from lite.server.authz.index import PolicyIndex, binding_from
from lite.server.authz.rules import Rule
from lite.server.requestuser import CURRENT_USER, UserInfo

R = Rule

COVERS = [
    # owner rules, requested rules, covered
    ([R(("*",), ("*",), ("*",))], [R(("get", "delete"), ("", "apps"), ("pods", "deployments/scale"))], True),
    ([R(("get",), ("",), ("pods",))], [R(("get",), ("",), ("pods",))], True),
    ([R(("get",), ("",), ("pods",))], [R(("get", "list"), ("",), ("pods",))], False),
    ([R(("get",), ("",), ("pods",))], [R(("get",), ("apps",), ("pods",))], False),
    ([R(("get",), ("",), ("*/log",))], [R(("get",), ("",), ("pods/log",))], True),
    # upstream: "pods/*" does not cover "pods/log" in the comparator (only "*/log" does)
    ([R(("get",), ("",), ("pods/*",))], [R(("get",), ("",), ("pods/log",))], False),
    ([R(("get",), ("",), ("pods",))], [R(("get",), ("",), ("pods/log",))], False),
    # resourceNames: an unrestricted owner covers named rules; a named owner does not cover unnamed ones
    ([R(("get",), ("",), ("configmaps",))], [R(("get",), ("",), ("configmaps",), ("a",))], True),
    ([R(("get",), ("",), ("configmaps",), ("a",))], [R(("get",), ("",), ("configmaps",))], False),
    ([R(("get",), ("",), ("configmaps",), ("a", "b"))], [R(("get",), ("",), ("configmaps",), ("b",))], True),
    ([R(("get",), non_resource_urls=("/logs/*",))], [R(("get",), non_resource_urls=("/logs/a", "/logs/"))], True),
    ([R(("get",), non_resource_urls=("/logs/*",))], [R(("get",), non_resource_urls=("/logs",))], False),
    ([R(("*",), non_resource_urls=("*",))], [R(("get", "post"), non_resource_urls=("/anything",))], True),
    ([], [], True),
]


@pytest.mark.parametrize(("owner", "requested", "ok"), COVERS)
def test_covers(owner: list[Rule], requested: list[Rule], ok: bool) -> None:
    assert covers(owner, requested)[0] is ok


def test_missing_rules_are_compacted_and_described_as_upstream() -> None:
    _, missing = covers([R(("get",), ("",), ("pods",))],
                        [R(("get", "list", "watch"), ("",), ("pods", "secrets")),
                         R(("get",), non_resource_urls=("/x",))])
    lines = sorted(describe(r) for r in compact(missing))
    assert lines == ['{APIGroups:[""], Resources:["pods"], Verbs:["list" "watch"]}',
                     '{APIGroups:[""], Resources:["secrets"], Verbs:["get" "list" "watch"]}',
                     '{NonResourceURLs:["/x"], Verbs:["get"]}']


G = "rbac.authorization.k8s.io"
KINDS = KindRegistry()


def _kind(plural: str):  # type: ignore[no-untyped-def]
    k = KINDS.by_resource(G, "v1", plural)
    assert k is not None
    return k


@pytest.fixture
def check() -> EscalationCheck:
    index = PolicyIndex()
    index.put_cluster_role("edit-ish", (R(("get", "list", "create"), ("",), ("pods", "configmaps")),
                                        R(("create",), (G,), ("roles", "rolebindings"))))
    index.put_cluster_role("cluster-admin", (R(("*",), ("*",), ("*",)), R(("*",), non_resource_urls=("*",))))
    index.put_cluster_role("pods-only", (R(("get",), ("",), ("pods",)),))
    index.put_binding(binding_from({"metadata": {"name": "b", "namespace": "team"},
                                    "roleRef": {"kind": "ClusterRole", "name": "edit-ish"},
                                    "subjects": [{"kind": "Group", "name": "dev"}]}))
    index.put_binding(binding_from({"metadata": {"name": "esc"},
                                    "roleRef": {"kind": "ClusterRole", "name": "pods-only"},
                                    "subjects": [{"kind": "User", "name": "escalator"}]}))
    index.put_cluster_role("escalate-roles", (R(("escalate", "bind", "create"), (G,),
                                                ("roles", "rolebindings", "clusterroles")),))
    index.put_binding(binding_from({"metadata": {"name": "e2"}, "roleRef": {"kind": "ClusterRole",
                                                                            "name": "escalate-roles"},
                                    "subjects": [{"kind": "User", "name": "escalator"}]}))
    index.ready.set()
    return EscalationCheck(AuthorizerChain(index))


def _admit(check: EscalationCheck, who: UserInfo | None, plural: str, obj: dict[str, object],
           ns: str = "team", op: str = "CREATE", old: dict[str, object] | None = None) -> None:
    async def run() -> None:
        CURRENT_USER.set(who)
        name = str((obj.get("metadata") or {}).get("name", ""))  # type: ignore[union-attr]
        await check(Admission(op, _kind(plural), ns, name, obj, old))  # type: ignore[arg-type]
    asyncio.run(run())


DEV = UserInfo("dev-user", ("dev", "system:authenticated"))


def _role(*rules: dict[str, object], name: str = "r") -> dict[str, object]:
    return {"metadata": {"name": name, "namespace": "team"}, "rules": list(rules)}


def test_role_within_own_permissions_is_allowed(check: EscalationCheck) -> None:
    _admit(check, DEV, "roles", _role({"verbs": ["get"], "apiGroups": [""], "resources": ["pods"]}))


def test_role_beyond_own_permissions_is_refused_with_upstreams_message(check: EscalationCheck) -> None:
    with pytest.raises(ApiError) as e:
        _admit(check, DEV, "roles", _role({"verbs": ["get", "delete"], "apiGroups": [""], "resources": ["secrets"]}))
    assert e.value.code == 403 and e.value.reason == "Forbidden"
    assert e.value.message == (
        'roles.rbac.authorization.k8s.io "r" is forbidden: user "dev-user" (groups=["dev" "system:authenticated"]) '
        'is attempting to grant RBAC permissions not currently held:\n'
        '{APIGroups:[""], Resources:["secrets"], Verbs:["get" "delete"]}')


def test_other_namespace_has_none_of_the_permissions(check: EscalationCheck) -> None:
    with pytest.raises(ApiError):
        _admit(check, DEV, "roles", _role({"verbs": ["get"], "apiGroups": [""], "resources": ["pods"]}), ns="other")


def test_escalate_verb_allows_any_rules(check: EscalationCheck) -> None:
    _admit(check, UserInfo("escalator"), "roles", _role({"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}))


def test_in_process_writes_and_masters_are_not_checked(check: EscalationCheck) -> None:
    big = _role({"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]})
    _admit(check, None, "roles", big)
    _admit(check, UserInfo("root", ("system:masters",)), "roles", big)


def _binding(role: str, kind: str = "ClusterRole", subject: str = "dev-user") -> dict[str, object]:
    return {"metadata": {"name": "rb", "namespace": "team"}, "roleRef": {"apiGroup": G, "kind": kind, "name": role},
            "subjects": [{"kind": "User", "name": subject, "apiGroup": G}]}


def test_binding_a_role_one_holds_is_allowed(check: EscalationCheck) -> None:
    _admit(check, DEV, "rolebindings", _binding("pods-only"))


def test_binding_cluster_admin_is_refused(check: EscalationCheck) -> None:
    with pytest.raises(ApiError) as e:
        _admit(check, DEV, "rolebindings", _binding("cluster-admin"))
    assert e.value.code == 403
    assert e.value.message.startswith('rolebindings.rbac.authorization.k8s.io "rb" is forbidden: user "dev-user" '
                                      '(groups=["dev" "system:authenticated"]) is attempting to grant RBAC '
                                      'permissions not currently held:\n')


def test_bind_verb_allows_binding(check: EscalationCheck) -> None:
    _admit(check, UserInfo("escalator"), "rolebindings", _binding("cluster-admin"))


def test_binding_a_missing_role_is_404(check: EscalationCheck) -> None:
    with pytest.raises(ApiError) as e:
        _admit(check, DEV, "rolebindings", _binding("nope"))
    assert (e.value.code, e.value.message) == (404, 'clusterroles.rbac.authorization.k8s.io "nope" not found')


def test_update_adding_a_subject_is_checked_but_metadata_only_is_not(check: EscalationCheck) -> None:
    old = _binding("cluster-admin", subject="someone")
    new = _binding("cluster-admin", subject="dev-user")
    with pytest.raises(ApiError):
        _admit(check, DEV, "rolebindings", new, op="UPDATE", old=old)
    relabelled = {**old, "metadata": {"name": "rb", "namespace": "team", "labels": {"a": "b"}}}
    _admit(check, DEV, "rolebindings", relabelled, op="UPDATE", old=old)


def test_aggregation_rule_needs_cluster_admin(check: EscalationCheck) -> None:
    role = {"metadata": {"name": "agg"}, "rules": [],
            "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {"x": "y"}}]}}
    with pytest.raises(ApiError) as e:
        _admit(check, DEV, "clusterroles", role, ns="")
    assert e.value.message == ('clusterroles.rbac.authorization.k8s.io "agg" is forbidden: must have cluster-admin '
                               'privileges to use the aggregationRule')
