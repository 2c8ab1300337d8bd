"""Server-side apply: merge, FieldsV1 ownership, removal of dropped fields, conflicts and force."""

from __future__ import annotations

from typing import Any

import pytest

from lite.errors import ApiError
from lite.patch import apply, record_update, schema_for
from lite.patch.fieldset import from_fields_v1, object_fields, path_string, to_fields_v1

DEPLOY = schema_for("Deployment", "apps")
T0, T1 = "2026-01-01T00:00:00Z", "2026-01-01T00:01:00Z"


def intent(image: str = "nginx:1.25", replicas: int | None = 2, **labels: str) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "selector": {"matchLabels": {"app": "web"}},
        "template": {"metadata": {"labels": {"app": "web"}},
                     "spec": {"containers": [{"name": "nginx", "image": image, "ports": [{"containerPort": 80}]}]}},
    }
    if replicas is not None:
        spec["replicas"] = replicas
    meta: dict[str, Any] = {"name": "web", "namespace": "default"}
    if labels:
        meta["labels"] = labels
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta, "spec": spec}


def do_apply(live: dict[str, Any] | None, body: dict[str, Any], manager: str = "kubectl",
             force: bool = False, now: str = T0) -> dict[str, Any]:
    return apply(live, body, manager=manager, force=force, api_version="apps/v1", now=now, schema=DEPLOY)


def entry(obj: dict[str, Any], manager: str, operation: str = "Apply") -> dict[str, Any]:
    (e,) = [e for e in obj["metadata"]["managedFields"] if e["manager"] == manager and e["operation"] == operation]
    return e


def test_create_records_fields_v1_like_upstream() -> None:
    out = do_apply(None, intent(team="a"))
    assert out["spec"]["replicas"] == 2
    e = entry(out, "kubectl")
    assert {k: v for k, v in e.items() if k != "fieldsV1"} == {
        "manager": "kubectl", "operation": "Apply", "apiVersion": "apps/v1", "time": T0, "fieldsType": "FieldsV1"}
    assert e["fieldsV1"] == {
        "f:metadata": {"f:labels": {"f:team": {}}},
        "f:spec": {
            "f:replicas": {},
            "f:selector": {},
            "f:template": {
                "f:metadata": {"f:labels": {"f:app": {}}},
                "f:spec": {"f:containers": {'k:{"name":"nginx"}': {
                    ".": {}, "f:image": {}, "f:name": {},
                    "f:ports": {'k:{"containerPort":80,"protocol":"TCP"}': {".": {}, "f:containerPort": {}}},
                }}},
            },
        },
    }
    assert list(e["fieldsV1"]["f:spec"]["f:template"]["f:spec"]["f:containers"]['k:{"name":"nginx"}']) == \
        [".", "f:image", "f:name", "f:ports"]


def test_reapply_keeps_others_fields_and_live_list_items() -> None:
    live = do_apply(None, intent())
    live["spec"]["template"]["spec"]["containers"].append({"name": "sidecar", "image": "x"})
    live["status"] = {"replicas": 2}
    out = do_apply(live, intent(image="nginx:1.26"), now=T1)
    containers = out["spec"]["template"]["spec"]["containers"]
    assert [c["name"] for c in containers] == ["nginx", "sidecar"]
    assert containers[0]["image"] == "nginx:1.26"
    assert containers[0]["ports"] == [{"containerPort": 80}]
    assert out["status"] == {"replicas": 2}
    assert entry(out, "kubectl")["time"] == T1
    assert len(out["metadata"]["managedFields"]) == 1


def test_dropped_fields_are_removed() -> None:
    live = do_apply(None, intent(team="a", tier="web"))
    out = do_apply(live, intent(replicas=None, team="a"))
    assert "replicas" not in out["spec"]
    assert out["metadata"]["labels"] == {"team": "a"}
    assert "f:replicas" not in entry(out, "kubectl")["fieldsV1"]["f:spec"]


def test_dropped_field_shared_with_other_manager_stays() -> None:
    live = do_apply(None, intent())
    live = do_apply(live, intent(), manager="other")  # same values: shared ownership, no conflict
    assert {e["manager"] for e in live["metadata"]["managedFields"]} == {"kubectl", "other"}
    out = do_apply(live, intent(replicas=None))
    assert out["spec"]["replicas"] == 2


def test_conflict_with_other_apply_manager() -> None:
    live = do_apply(None, intent(replicas=2))
    with pytest.raises(ApiError) as e:
        do_apply(live, intent(replicas=5), manager="ops")
    err = e.value
    assert (err.code, err.reason) == (409, "Conflict")
    assert err.message == 'Apply failed with 1 conflict: conflict with "kubectl": .spec.replicas'
    assert [c.as_dict() for c in err.causes] == [
        {"reason": "FieldManagerConflict", "message": 'conflict with "kubectl"', "field": ".spec.replicas"}]


def test_several_conflicts_message() -> None:
    live = do_apply(None, intent(replicas=2))
    with pytest.raises(ApiError) as e:
        do_apply(live, intent(replicas=5, image="other"), manager="ops")
    assert e.value.message == (
        'Apply failed with 2 conflicts: conflicts with "kubectl":\n- .spec.replicas\n'
        '- .spec.template.spec.containers[name="nginx"].image')


def test_force_transfers_ownership() -> None:
    live = do_apply(None, intent(replicas=2))
    out = do_apply(live, intent(replicas=5), manager="ops", force=True)
    assert out["spec"]["replicas"] == 5
    assert "f:replicas" not in entry(out, "kubectl")["fieldsV1"]["f:spec"]
    assert "f:replicas" in entry(out, "ops")["fieldsV1"]["f:spec"]
    # the former owner now conflicts in turn
    with pytest.raises(ApiError):
        do_apply(out, intent(replicas=2))


def test_conflict_with_update_manager_names_api_version() -> None:
    created = record_update(None, intent(replicas=1), manager="kubectl-create", api_version="apps/v1", now=T0,
                            schema=DEPLOY)
    assert entry(created, "kubectl-create", "Update")["fieldsV1"]["f:spec"]["f:replicas"] == {}
    with pytest.raises(ApiError) as e:
        do_apply(created, intent(replicas=3))
    assert e.value.causes[0].message == f'conflict with "kubectl-create" using apps/v1 at {T0}'
    # equal values do not conflict
    out = do_apply(created, intent(replicas=1))
    assert {e["manager"] for e in out["metadata"]["managedFields"]} == {"kubectl-create", "kubectl"}


def test_update_takes_changed_fields() -> None:
    live = do_apply(None, intent(replicas=2))
    scaled = dict(live, spec={**live["spec"], "replicas": 4})
    out = record_update(live, scaled, manager="kubectl-scale", api_version="apps/v1", now=T1, schema=DEPLOY)
    assert entry(out, "kubectl-scale", "Update")["fieldsV1"] == {"f:spec": {"f:replicas": {}}}
    assert "f:replicas" not in entry(out, "kubectl")["fieldsV1"]["f:spec"]


def test_inputs_untouched_and_nulls_ignored() -> None:
    body = intent()
    body["spec"]["paused"] = None
    live = do_apply(None, intent())
    snapshot = repr(live), repr(body)
    out = do_apply(live, body)
    assert (repr(live), repr(body)) == snapshot
    assert "paused" not in out["spec"]


def test_requires_manager() -> None:
    with pytest.raises(ApiError) as e:
        do_apply(None, intent(), manager="")
    assert e.value.code == 400


def test_fields_v1_round_trip_and_paths() -> None:
    obj = {"metadata": {"finalizers": ["a/b"], "labels": {"x": "1"}},
           "spec": {"template": {"spec": {"containers": [{"name": "c", "args": ["1"], "resources": {}}]}}}}
    paths = object_fields(obj, DEPLOY)
    assert ("f:metadata", "f:finalizers", 'v:"a/b"') in paths
    assert ("f:spec", "f:template", "f:spec", "f:containers", 'k:{"name":"c"}', "f:args") in paths
    assert ("f:spec", "f:template", "f:spec", "f:containers", 'k:{"name":"c"}', "f:resources") in paths
    assert from_fields_v1(to_fields_v1(paths)) == paths
    assert path_string(("f:metadata", "f:finalizers", 'v:"a/b"')) == '.metadata.finalizers[="a/b"]'
    assert path_string(("f:spec", "f:ports", 'k:{"port":80,"protocol":"TCP"}', "f:name")) == \
        '.spec.ports[port=80,protocol="TCP"].name'
    # server-owned metadata and status are never owned
    assert object_fields({"apiVersion": "v1", "kind": "X", "metadata": {"name": "n", "uid": "u"},
                          "status": {"a": 1}}, DEPLOY) == set()


def test_dropped_list_item_is_removed_whole() -> None:
    body = intent()
    body["spec"]["template"]["spec"]["containers"].append({"name": "side", "image": "busybox", "args": ["x"]})
    live = do_apply(None, body)
    out = do_apply(live, intent())
    assert [c["name"] for c in out["spec"]["template"]["spec"]["containers"]] == ["nginx"]


def test_merge_decides_conflicts_not_the_raw_intent() -> None:
    # an empty map merges into live labels without changing them, so owning it too is no conflict
    empty = intent()
    empty["metadata"]["labels"] = {}
    live = do_apply(None, empty, manager="ops")  # ops owns `.metadata.labels` itself (an empty map)
    live = do_apply(live, intent(app="web"), manager="x")
    out = do_apply(live, empty)
    assert out["metadata"]["labels"] == {"app": "web"}


def test_managed_fields_sorted_like_upstream() -> None:
    created = record_update(None, intent(replicas=1), manager="kubectl-create", api_version="apps/v1", now=T0,
                            schema=DEPLOY)
    out = do_apply(created, intent(replicas=1, team="a"), manager="zeta", now=T1)
    out = do_apply(out, intent(replicas=1, team="a"), manager="alpha", now=T1)
    assert [(e["operation"], e["manager"]) for e in out["metadata"]["managedFields"]] == [
        ("Apply", "alpha"), ("Apply", "zeta"), ("Update", "kubectl-create")]
