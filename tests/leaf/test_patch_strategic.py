"""Strategic merge patch against the bodies real kubectl sends and upstream strategicpatch test cases."""

from __future__ import annotations

from typing import Any

import pytest

from lite.errors import ApiError
from lite.patch import Schema, schema_for, strategic_merge

DEPLOY = schema_for("Deployment", "apps")
POD = schema_for("Pod")
SVC = schema_for("Service")


def deployment(containers: list[dict[str, Any]], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "default", "labels": {"app": "web"}},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}}, **spec,
                 "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": containers}}},
    }


def containers_of(d: dict[str, Any]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = d["spec"]["template"]["spec"]["containers"]
    return out


def test_kubectl_set_image() -> None:
    live = deployment([{"name": "nginx", "image": "nginx:1.25", "ports": [{"containerPort": 80}]},
                       {"name": "side", "image": "busybox"}])
    # kubectl 1.32 `set image deployment/web nginx=nginx:1.26`
    patch = {"spec": {"template": {"spec": {"$setElementOrder/containers": [{"name": "nginx"}, {"name": "side"}],
                                            "containers": [{"image": "nginx:1.26", "name": "nginx"}]}}}}
    out = strategic_merge(live, patch, DEPLOY)
    assert containers_of(out) == [{"name": "nginx", "image": "nginx:1.26", "ports": [{"containerPort": 80}]},
                                  {"name": "side", "image": "busybox"}]
    assert containers_of(live)[0]["image"] == "nginx:1.25"  # input untouched


def test_kubectl_apply_removes_env_and_adds_container() -> None:
    env = [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]
    live = deployment([{"name": "app", "image": "a", "env": env}])
    patch = {"metadata": {"annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}\n"}},
             "spec": {"template": {"spec": {
                 "$setElementOrder/containers": [{"name": "app"}, {"name": "log"}],
                 "containers": [{"$setElementOrder/env": [{"name": "A"}],
                                 "env": [{"$patch": "delete", "name": "B"}], "name": "app"},
                                {"image": "fluent", "name": "log"}]}}}}
    out = strategic_merge(live, patch, DEPLOY)
    assert containers_of(out) == [{"name": "app", "image": "a", "env": [{"name": "A", "value": "1"}]},
                                  {"image": "fluent", "name": "log"}]
    assert out["metadata"]["annotations"] == {"kubectl.kubernetes.io/last-applied-configuration": "{}\n"}


def test_apply_changes_strategy_with_retain_keys() -> None:
    live = deployment([], strategy={"type": "RollingUpdate",
                                    "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}})
    patch = {"spec": {"strategy": {"$retainKeys": ["type"], "rollingUpdate": None, "type": "Recreate"}}}
    assert strategic_merge(live, patch, DEPLOY)["spec"]["strategy"] == {"type": "Recreate"}


def test_retain_keys_drops_unlisted_live_keys() -> None:
    live = {"spec": {"volumes": [{"name": "v", "emptyDir": {}, "hostPath": {"path": "/x"}}]}}
    patch = {"spec": {"volumes": [{"$retainKeys": ["hostPath", "name"], "name": "v", "hostPath": {"path": "/y"}}]}}
    assert strategic_merge(live, patch, POD)["spec"]["volumes"] == [{"name": "v", "hostPath": {"path": "/y"}}]


def test_retain_keys_mismatch_is_invalid() -> None:
    with pytest.raises(ApiError) as e:
        strategic_merge({"a": {}}, {"a": {"$retainKeys": ["x"], "y": 1}}, POD)
    assert e.value.code == 422


def test_rollout_restart_and_label_delete() -> None:
    live = deployment([{"name": "c", "image": "i"}])
    patch = {"metadata": {"labels": {"app": None, "new": "1"}},
             "spec": {"template": {"metadata": {"annotations": {"kubectl.kubernetes.io/restartedAt": "t"}}}}}
    out = strategic_merge(live, patch, DEPLOY)
    assert out["metadata"]["labels"] == {"new": "1"}
    assert out["spec"]["template"]["metadata"] == {"labels": {"app": "web"},
                                                   "annotations": {"kubectl.kubernetes.io/restartedAt": "t"}}


def test_null_for_missing_key_is_ignored() -> None:
    assert strategic_merge({"a": 1}, {"b": None}, POD) == {"a": 1}


def test_finalizers_merge_as_set_and_delete_from_primitive_list() -> None:
    live = {"metadata": {"finalizers": ["a", "b"]}}
    assert strategic_merge(live, {"metadata": {"finalizers": ["b", "c"]}}, POD)["metadata"]["finalizers"] == \
        ["a", "b", "c"]
    patch = {"metadata": {"$deleteFromPrimitiveList/finalizers": ["b"], "$setElementOrder/finalizers": ["a"]}}
    assert strategic_merge(live, patch, POD)["metadata"]["finalizers"] == ["a"]


@pytest.mark.parametrize("kind", ["ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"])
def test_webhook_configurations_merge_webhooks_by_name(kind: str) -> None:
    """What `kubectl apply` sends when one webhook's failurePolicy changed: only that field of that webhook
    (upstream's `webhooks` is patchStrategy merge, patchMergeKey name)."""
    def hook(name: str, policy: str) -> dict[str, Any]:
        return {"name": name, "admissionReviewVersions": ["v1"], "sideEffects": "None", "failurePolicy": policy,
                "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"],
                           "resources": ["configmaps"]}],
                "clientConfig": {"service": {"namespace": "hooks", "name": "hookd", "path": "/validate"}}}

    live = {"apiVersion": "admissionregistration.k8s.io/v1", "kind": kind, "metadata": {"name": "c"},
            "webhooks": [hook("a.hooks.test", "Fail"), hook("b.hooks.test", "Fail")]}
    patch = {"$setElementOrder/webhooks": [{"name": "a.hooks.test"}, {"name": "b.hooks.test"}],
             "webhooks": [{"failurePolicy": "Ignore", "name": "b.hooks.test"}]}
    out = strategic_merge(live, patch, schema_for(kind, "admissionregistration.k8s.io"))
    assert out["webhooks"] == [hook("a.hooks.test", "Fail"), hook("b.hooks.test", "Ignore")]
    # the rules inside a webhook stay atomic, as upstream's (no patch strategy)
    rules = [{"operations": ["UPDATE"], "apiGroups": ["apps"], "apiVersions": ["v1"], "resources": ["*"]}]
    out = strategic_merge(live, {"webhooks": [{"name": "a.hooks.test", "rules": rules}]},
                          schema_for(kind, "admissionregistration.k8s.io"))
    assert out["webhooks"][0]["rules"] == rules and out["webhooks"][1] == hook("b.hooks.test", "Fail")


def test_atomic_lists_replace() -> None:
    live = {"spec": {"tolerations": [{"key": "a"}], "containers": [{"name": "c", "args": ["x", "y"]}]}}
    patch = {"spec": {"tolerations": [{"key": "b"}], "containers": [{"name": "c", "args": ["z"]}]}}
    out = strategic_merge(live, patch, POD)
    assert out["spec"]["tolerations"] == [{"key": "b"}]
    assert out["spec"]["containers"] == [{"name": "c", "args": ["z"]}]


def test_context_dependent_port_keys() -> None:
    pod = {"spec": {"containers": [{"name": "c", "ports": [{"containerPort": 80, "name": "http"}]}]}}
    patch = {"spec": {"containers": [{"name": "c", "ports": [{"containerPort": 80, "protocol": "TCP"}]}]}}
    assert strategic_merge(pod, patch, POD)["spec"]["containers"][0]["ports"] == \
        [{"containerPort": 80, "name": "http", "protocol": "TCP"}]
    svc = {"spec": {"ports": [{"port": 80, "targetPort": 8080}, {"port": 443, "targetPort": 8443}]}}
    out = strategic_merge(svc, {"spec": {"ports": [{"port": 443, "targetPort": 9443}]}}, SVC)
    assert out["spec"]["ports"] == [{"port": 80, "targetPort": 8080}, {"port": 443, "targetPort": 9443}]
    # without the Service schema the same list is atomic
    assert strategic_merge(svc, {"spec": {"ports": [{"port": 1}]}}, POD)["spec"]["ports"] == [{"port": 1}]


def test_conditions_and_owner_references_keys() -> None:
    live = {"metadata": {"ownerReferences": [{"uid": "1", "name": "a"}]},
            "status": {"conditions": [{"type": "Ready", "status": "False"}, {"type": "Init", "status": "True"}]}}
    patch = {"metadata": {"ownerReferences": [{"uid": "2", "name": "b"}]},
             "status": {"conditions": [{"type": "Ready", "status": "True"}]}}
    out = strategic_merge(live, patch, POD)
    assert [r["uid"] for r in out["metadata"]["ownerReferences"]] == ["2", "1"]
    assert out["status"]["conditions"] == [{"type": "Ready", "status": "True"}, {"type": "Init", "status": "True"}]


@pytest.mark.parametrize(("live", "patch", "order"), [
    # upstream: items named in the patch come first in patch order when not ordered by $setElementOrder
    ([1, 2, 3], [{"name": 4}], [4, 1, 2, 3]),
    ([1, 2, 3], [{"name": 3, "x": 1}, {"name": 1, "x": 1}], [2, 3, 1]),
    ([1, 2], {"order": [1, 3, 2], "items": [{"name": 3}]}, [1, 3, 2]),
    ([1, 2, 4], {"order": [1, 3, 2], "items": [{"name": 3}]}, [1, 3, 2, 4]),
    ([1, 2, 3], {"order": [3, 2, 1], "items": []}, [3, 2, 1]),
    ([1, 2, 3], [{"$patch": "replace"}, {"name": 9}], [9]),
    ([1, 2, 3], [{"$patch": "delete", "name": 2}], [1, 3]),
])
def test_list_order(live: list[int], patch: Any, order: list[int]) -> None:
    doc = {"spec": {"containers": [{"name": n} for n in live]}}
    if isinstance(patch, dict):
        p = {"spec": {"$setElementOrder/containers": [{"name": n} for n in patch["order"]],
                      "containers": patch["items"]}}
    else:
        p = {"spec": {"containers": patch}}
    out = strategic_merge(doc, p, POD)
    assert [c["name"] for c in out["spec"]["containers"]] == order


def test_map_directives() -> None:
    live = {"spec": {"nodeSelector": {"a": "1", "b": "2"}, "x": {"y": 1}}}
    out = strategic_merge(live, {"spec": {"nodeSelector": {"$patch": "replace", "c": "3"}}}, POD)
    assert out["spec"]["nodeSelector"] == {"c": "3"}
    out = strategic_merge(live, {"spec": {"x": {"$patch": "delete"}}}, POD)
    assert out["spec"]["x"] == {}
    out = strategic_merge(live, {"spec": {"x": {"$patch": "merge", "z": 2}}}, POD)
    assert out["spec"]["x"] == {"y": 1, "z": 2}


def test_unknown_directives_are_never_stored() -> None:
    out = strategic_merge({}, {"spec": {"$foo": 1, "new": {"$patch": "merge", "$bar": 2, "k": [{"$baz": 1}]},
                                        "containers": [{"name": "c", "$setElementOrder/env": [{"name": "E"}],
                                                        "env": [{"name": "E"}]}]}}, POD)
    assert out == {"spec": {"new": {"k": [{}]}, "containers": [{"name": "c", "env": [{"name": "E"}]}]}}


def test_atomic_selector_map() -> None:
    live = deployment([])
    out = strategic_merge(live, {"spec": {"selector": {"matchLabels": {"b": "2"}}}}, DEPLOY)
    assert out["spec"]["selector"] == {"matchLabels": {"b": "2"}}
    svc = {"spec": {"selector": {"a": "1"}}}
    assert strategic_merge(svc, {"spec": {"selector": {"b": "2"}}}, SVC)["spec"]["selector"] == {"a": "1", "b": "2"}


@pytest.mark.parametrize("patch", [
    {"spec": {"containers": [{"image": "no-name"}]}},
    {"spec": {"containers": [{"$patch": "delete"}]}},
    {"spec": {"containers": [{"$patch": "bogus", "name": "c"}]}},
    {"spec": {"containers": [{"$patch": "merge", "name": "c"}]}},
    {"spec": {"$setElementOrder/containers": "x"}},
    {"spec": {"$setElementOrder/containers": [{"name": "b"}, {"name": "a"}],
              "containers": [{"name": "a"}, {"name": "b"}]}},
    {"spec": {"$patch": "bogus"}},
])
def test_bad_patches(patch: dict[str, Any]) -> None:
    with pytest.raises(ApiError) as e:
        strategic_merge({"spec": {"containers": [{"name": "a"}, {"name": "b"}]}}, patch, POD)
    assert e.value.code == 400


def test_empty_schema_is_atomic_everywhere() -> None:
    live = {"spec": {"containers": [{"name": "a", "image": "x"}]}}
    out = strategic_merge(live, {"spec": {"containers": [{"name": "a"}]}}, Schema())
    assert out["spec"]["containers"] == [{"name": "a"}]


def test_type_change_replaces() -> None:
    assert strategic_merge({"a": {"b": 1}}, {"a": "s"}, POD) == {"a": "s"}
    assert strategic_merge({"a": "s"}, {"a": {"b": None, "c": 1}}, POD) == {"a": {"c": 1}}


def test_merge_keys_compare_as_json_values_whatever_their_types() -> None:
    """String merge keys are looked up by value, any other key by JSON equality: a key "80" is not 80, a
    patch item with a repeated key merges into the item the patch itself added, and order follows the patch."""
    live = {"status": {"conditions": [{"type": "A", "status": "False"}, {"type": "B", "status": "True"}]}}
    patch = {"status": {"conditions": [{"type": "C", "status": "True"}, {"type": "A", "status": "True"},
                                       {"type": "C", "reason": "again"}]}}
    out = strategic_merge(live, patch, POD)
    assert out["status"]["conditions"] == [{"type": "C", "status": "True", "reason": "again"},
                                           {"type": "A", "status": "True"}, {"type": "B", "status": "True"}]
    mixed = {"spec": {"containers": [{"name": "c", "ports": [{"containerPort": 80, "name": "int"}]}]}}
    patched = strategic_merge(mixed, {"spec": {"containers": [{"name": "c", "ports": [
        {"containerPort": "80", "name": "text"}, {"containerPort": 80.0, "protocol": "UDP"}]}]}}, POD)
    assert patched["spec"]["containers"][0]["ports"] == [
        {"containerPort": "80", "name": "text"}, {"containerPort": 80, "name": "int", "protocol": "UDP"}]


# A keyed list merged into an absent or empty one: items with distinct merge keys are taken as they are (their
# nulls dropped); duplicates merge into one, `$patch` items and items without the key go the general way.
INTO_EMPTY = [
    ([{"name": "a", "image": "x", "command": None}, {"name": "b", "image": "y"}],
     [{"name": "a", "image": "x"}, {"name": "b", "image": "y"}]),
    ([{"name": "a", "image": "x"}, {"name": "a", "imagePullPolicy": "Always"}],
     [{"name": "a", "image": "x", "imagePullPolicy": "Always"}]),
    ([{"name": "a", "image": "x"}, {"$patch": "delete", "name": "a"}], [{"name": "a", "image": "x"}]),
    ([{"name": "a", "env": [{"name": "E", "value": "1"}, {"name": "E", "valueFrom": None}]}],
     [{"name": "a", "env": [{"name": "E", "value": "1"}]}]),
    ([], []),
]


@pytest.mark.parametrize(("containers", "want"), INTO_EMPTY)
@pytest.mark.parametrize("live", [None, []])
def test_keyed_list_into_an_empty_one(containers: list[dict[str, Any]], want: list[dict[str, Any]],
                                      live: list[dict[str, Any]] | None) -> None:
    doc: dict[str, Any] = {"metadata": {"name": "p"}, "spec": {} if live is None else {"containers": live}}
    out = strategic_merge(doc, {"spec": {"containers": containers}}, POD)
    assert out["spec"]["containers"] == want


def test_keyed_list_item_without_its_key_into_an_empty_list() -> None:
    with pytest.raises(ApiError) as e:
        strategic_merge({"spec": {}}, {"spec": {"containers": [{"image": "x"}]}}, POD)
    assert e.value.code == 400 and "does not contain declared merge key: name" in e.value.message


def test_map_without_directives_merges_and_deletes() -> None:
    live = {"metadata": {"labels": {"a": "1", "b": "2"}, "annotations": {"k": "v"}}, "status": {"phase": "Pending"}}
    patch = {"metadata": {"labels": {"a": None, "c": "3"}, "annotations": None},
             "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}
    out = strategic_merge(live, patch, POD)
    assert out == {"metadata": {"labels": {"b": "2", "c": "3"}},
                   "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}
    assert live["metadata"]["labels"] == {"a": "1", "b": "2"}  # input untouched
