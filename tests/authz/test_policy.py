"""ClusterRole aggregation (`aggregated_rules`), bootstrap reconciliation (`reconciled_role`,
`reconciled_binding`) with the autoupdate annotation, and the bootstrap policy's own consistency."""

from __future__ import annotations

from typing import Any

from lite.server.api.strategies import rbac as rbac_strategy
from lite.server.authz import policy
from lite.server.authz.aggregation import aggregated_rules
from lite.server.authz.bootstrap import reconciled_binding, reconciled_role
from lite.server.authz.rules import Rule, rules_from


def role(name: str, labels: dict[str, str] | None = None, rules: list[dict[str, Any]] | None = None,
         selects: list[dict[str, str]] | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"metadata": {"name": name, "labels": labels or {}}, "rules": rules or []}
    if selects is not None:
        out["aggregationRule"] = {"clusterRoleSelectors": [{"matchLabels": s} for s in selects]}
    return out


GET_PODS = {"verbs": ["get"], "apiGroups": [""], "resources": ["pods"]}
LIST_CMS = {"verbs": ["list"], "apiGroups": [""], "resources": ["configmaps"]}


def test_aggregation_unions_selected_roles_in_name_order_without_duplicates() -> None:
    agg = role("agg", selects=[{"to": "agg"}, {"also": "yes"}])
    roles = [agg, role("b", {"to": "agg"}, [LIST_CMS, GET_PODS]), role("a", {"also": "yes"}, [GET_PODS]),
             role("c", {"to": "other"}, [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}])]
    assert aggregated_rules(agg, roles) == list(rules_from([GET_PODS, LIST_CMS]))


def test_aggregation_skips_itself_and_nothing_selected_is_empty() -> None:
    agg = role("agg", {"to": "agg"}, [GET_PODS], selects=[{"to": "agg"}])
    assert aggregated_rules(agg, [agg]) == []


def test_bootstrap_view_edit_admin_aggregate_in_a_chain() -> None:
    roles = policy.cluster_roles()
    by_name = {r["metadata"]["name"]: r for r in roles}
    view = aggregated_rules(by_name["view"], roles)
    assert Rule(("get", "list", "watch"), ("",), ("bindings", "events", "limitranges", "namespaces/status",
                                                   "pods/log", "pods/status", "replicationcontrollers/status",
                                                   "resourcequotas", "resourcequotas/status")) in view
    by_name["view"]["rules"] = [r.as_dict() for r in view]
    edit = aggregated_rules(by_name["edit"], roles)
    assert set(view) <= set(edit) and any("secrets" in r.resources and "create" in r.verbs for r in edit)
    assert not any("secrets" in r.resources for r in view)  # view never reads Secrets


def test_bootstrap_objects_pass_validation() -> None:
    for obj in policy.cluster_roles():
        assert rbac_strategy.validate_cluster_role(obj) == [], obj["metadata"]["name"]
    for obj in policy.roles():
        assert rbac_strategy.validate_role(obj) == []
    for obj in policy.cluster_role_bindings():
        assert rbac_strategy.validate_cluster_role_binding(obj) == [], obj["metadata"]["name"]
    for obj in policy.role_bindings():
        assert rbac_strategy.validate_role_binding(obj) == []
    names = {r["metadata"]["name"] for r in policy.cluster_roles()}
    assert {"cluster-admin", "admin", "edit", "view", "system:basic-user", "system:discovery",
            "system:public-info-viewer", "system:node", "system:kube-scheduler",
            "system:kube-controller-manager"} <= names
    for b in policy.cluster_role_bindings():
        assert b["roleRef"]["name"] in names


def test_reconcile_adds_missing_rules_and_keeps_extra_ones() -> None:
    expected = policy.cluster_roles()[0]  # cluster-admin
    stored = {"metadata": {"name": "cluster-admin", "labels": {"mine": "x"}},
              "rules": [{"verbs": ["get"], "apiGroups": ["x"], "resources": ["y"]}]}
    out = reconciled_role(stored, expected)
    assert out is not None
    assert out["rules"][0] == stored["rules"][0] and len(out["rules"]) == 3
    assert out["metadata"]["labels"] == {"kubernetes.io/bootstrapping": "rbac-defaults", "mine": "x"}
    assert out["metadata"]["annotations"][policy.AUTOUPDATE] == "true"
    assert reconciled_role(out, expected) is None  # idempotent


def test_reconcile_leaves_autoupdate_false_alone() -> None:
    expected = policy.cluster_roles()[0]
    stored = {"metadata": {"name": "cluster-admin", "annotations": {policy.AUTOUPDATE: "false"}}, "rules": []}
    assert reconciled_role(stored, expected) is None
    binding = policy.cluster_role_bindings()[0]
    stored_b = {**binding, "metadata": {"name": "cluster-admin", "annotations": {policy.AUTOUPDATE: "false"}},
                "subjects": []}
    assert reconciled_binding(stored_b, binding) == (None, False)


def test_reconcile_binding_adds_subjects_and_recreates_on_role_ref_change() -> None:
    expected = policy.cluster_role_bindings()[0]
    extra = {"apiGroup": policy.GROUP, "kind": "User", "name": "someone"}
    stored = {**expected, "metadata": dict(expected["metadata"]), "subjects": [extra]}
    out, recreate = reconciled_binding(stored, expected)
    assert not recreate and out is not None and out["subjects"] == [extra, *expected["subjects"]]
    moved = {**stored, "roleRef": {**expected["roleRef"], "name": "view"}}
    out, recreate = reconciled_binding(moved, expected)
    assert recreate and out is not None and out["roleRef"]["name"] == "cluster-admin"
    assert reconciled_binding(expected, expected) == (None, False)


def test_binding_table_rows_as_kubectl_prints_them() -> None:
    import datetime as dt

    from lite.kinds import KindRegistry
    from lite.server.api.tables import columns, to_table

    kind = KindRegistry().by_resource(policy.GROUP, "v1", "rolebindings")
    assert kind is not None
    obj = {"metadata": {"name": "rb", "namespace": "team", "creationTimestamp": "2026-01-01T00:00:00Z"},
           "roleRef": {"apiGroup": policy.GROUP, "kind": "ClusterRole", "name": "edit"},
           "subjects": [policy.subject("User", "u1"), policy.subject("Group", "dev"),
                        policy.subject("ServiceAccount", "bot", "ci"), policy.subject("User", "u2")]}
    table = to_table(kind, [obj], {}, now=dt.datetime(2026, 1, 1, 0, 5, tzinfo=dt.UTC))
    assert [c["name"] for c in columns(kind)] == ["Name", "Role", "Age", "Users", "Groups", "ServiceAccounts"]
    assert table["rows"][0]["cells"] == ["rb", "ClusterRole/edit", "5m", "u1, u2", "dev", "ci/bot"]
