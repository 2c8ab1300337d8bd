"""`diff_fields` (one side-by-side walk) gives exactly what comparing each path of the new object's field set
with the old object does (`object_fields` + `get_path`), and the old paths that are gone, on objects that exercise
every list and map rule."""

from __future__ import annotations

import copy
from typing import Any

import orjson
import pytest

from lite.patch.fieldset import (
    MISSING,
    _to_fields_v1_sorted,
    diff_fields,
    from_fields_v1,
    get_path,
    object_fields,
    object_fields_v1,
    to_fields_v1,
)
from lite.patch.jsonpatch import json_equal
from lite.patch.schema import schema_for

Paths = set[tuple[str, ...]]


def reference(old: Any, new: Any, kind: str) -> tuple[Paths, Paths]:
    schema = schema_for(kind)
    before, after = object_fields(old, schema), object_fields(new, schema)

    def same(p: tuple[str, ...]) -> bool:
        a, b = get_path(old, p, schema), get_path(new, p, schema)
        return b is MISSING if a is MISSING else json_equal(a, b)
    return {p for p in after if p not in before or not same(p)}, before - after


POD: dict[str, Any] = {
    "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "labels": {"a": "1"}, "finalizers": ["x/y"]},
    "spec": {"containers": [{"name": "c", "image": "i", "env": [{"name": "A", "value": "1"}],
                             "ports": [{"containerPort": 80, "protocol": "TCP"}], "args": ["a", "b"]}],
             "nodeSelector": {}, "tolerations": [{"key": "k", "operator": "Exists"}], "dnsConfig": None},
    "status": {"phase": "Pending"}}


def _edit(path: str, value: Any) -> dict[str, Any]:
    obj = copy.deepcopy(POD)
    *parents, last = path.split("/")
    cur: Any = obj
    for p in parents:
        cur = cur[int(p)] if isinstance(cur, list) else cur[p]
    if value is None and last.startswith("-"):
        del cur[last[1:]]
    elif isinstance(cur, list):
        cur[int(last)] = value
    else:
        cur[last] = value
    return obj


CASES = [
    ("same", copy.deepcopy(POD), "Pod"),
    ("label value", _edit("metadata/labels/a", "2"), "Pod"),
    ("label added", _edit("metadata/labels/b", "x"), "Pod"),
    ("label removed", _edit("metadata/labels/-a", None), "Pod"),
    ("set member added", _edit("metadata/finalizers", ["x/y", "z/w"]), "Pod"),
    ("keyed item field", _edit("spec/containers/0/image", "j"), "Pod"),
    ("keyed item field removed", _edit("spec/containers/0/-image", None), "Pod"),
    ("nested keyed item", _edit("spec/containers/0/env", [{"name": "A", "value": "2"}, {"name": "B"}]), "Pod"),
    ("atomic list", _edit("spec/containers/0/args", ["a"]), "Pod"),
    ("empty map to map", _edit("spec/nodeSelector", {"k": "v"}), "Pod"),
    ("null to value", _edit("spec/dnsConfig", {"nameservers": ["1.1.1.1"]}), "Pod"),
    ("map to scalar", _edit("spec/tolerations", "x"), "Pod"),
    ("new container", _edit("spec/containers", [POD["spec"]["containers"][0], {"name": "d", "image": "i"}]), "Pod"),
    ("reordered containers", _edit("spec/containers", [{"name": "d", "image": "i"},
                                                      POD["spec"]["containers"][0]]), "Pod"),
    ("int becomes bool", _edit("spec/containers/0/ports/0/containerPort", True), "Pod"),
    ("status only", _edit("status/phase", "Running"), "Pod"),
]


@pytest.mark.parametrize("name, new, kind", CASES, ids=[c[0] for c in CASES])
def test_changed_fields_matches_the_per_path_comparison(name: str, new: dict[str, Any], kind: str) -> None:
    assert diff_fields(POD, new, schema_for(kind)) == reference(POD, new, kind)
    assert diff_fields(new, POD, schema_for(kind)) == reference(new, POD, kind)


def test_keyed_ports_and_atomic_selectors() -> None:
    svc = {"spec": {"ports": [{"port": 80, "protocol": "TCP", "targetPort": 8080}], "selector": {"a": "1"}}}
    for new in ({"spec": {"ports": [{"port": 80, "protocol": "TCP", "targetPort": 9090}], "selector": {"a": "1"}}},
                {"spec": {"ports": [{"port": 81, "protocol": "TCP"}], "selector": {"a": "1", "b": "2"}}}):
        assert diff_fields(svc, new, schema_for("Service")) == reference(svc, new, "Service")
    dep = {"spec": {"selector": {"matchLabels": {"a": "1"}}, "replicas": 1}}
    new = {"spec": {"selector": {"matchLabels": {"a": "2"}}, "replicas": 1}}
    assert diff_fields(dep, new, schema_for("Deployment")) == reference(dep, new, "Deployment") == \
        ({("f:spec", "f:selector")}, set())


def test_to_fields_v1_in_plain_order_is_structured_merge_diffs_order() -> None:
    """The fast encoder (paths inserted in plain string order) writes what sorting every map by
    structured-merge-diff's order writes, for every subset of a pod's fields."""
    paths = sorted(object_fields(POD, schema_for("Pod"), ignore_status=False))
    for n in range(1, len(paths) + 1):
        for sub in (paths[:n], paths[-n:], paths[::n]):
            got = to_fields_v1(sub)
            assert orjson.dumps(got) == orjson.dumps(_to_fields_v1_sorted(list(sub)))
            assert from_fields_v1(got) == set(sub)


@pytest.mark.parametrize("obj, kind", [
    (POD, "Pod"),
    (_edit("spec/containers", []), "Pod"),
    (_edit("metadata/finalizers", ["b/b", "a/a"]), "Pod"),
    ({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s", "managedFields": [{"manager": "x"}]},
      "spec": {"ports": [{"port": 81, "protocol": "UDP"}, {"port": 80}], "selector": {"a": "b"}, "x": None}},
     "Service"),
    ({"spec": {"selector": {"matchLabels": {"a": "1"}}, "template": {"spec": {"containers": [{"name": "z"},
                                                                                            {"name": "a"}]}}}},
     "Deployment"),
    ({"data": {"k": {"nested": [1, 2, {"x": 1}]}}, "status": {"a": 1}}, "Widget"),
    ({"apiVersion": "v1", "kind": "Pod",
      "metadata": {"name": "p", "namespace": "n", "uid": "u", "resourceVersion": "1", "generation": 1,
                   "creationTimestamp": "t", "labels": {"b": "2", "a": "1"}, "ownerReferences": [{"uid": "x"}],
                   "finalizers": ["a/b"], "annotations": {}},
      "spec": {"containers": [{"name": "b", "ports": [{"containerPort": 80}, {"containerPort": 80, "protocol": "UDP"},
                                                      {"containerPort": 81, "protocol": "TCP", "name": "x"}],
                               "env": [{"name": "A", "value": "1"}, {"name": "A", "value": "2"}, {"value": "3"}],
                               "volumeMounts": [], "resources": {"limits": {"cpu": "1"}}},
                              {"name": "a", "args": ["x"], "securityContext": {}}],
               "volumes": [{"name": "v", "emptyDir": {}}], "tolerations": [{"key": "k"}], "nodeSelector": None},
      "status": {"conditions": [{"type": "Ready"}]}}, "Pod"),
    ({"metadata": [{"name": "x"}], "spec": [1]}, "Pod"),
])
def test_object_fields_v1_is_the_encoding_of_object_fields(obj: dict[str, Any], kind: str) -> None:
    for ignore_status in (True, False):
        want = to_fields_v1(object_fields(obj, schema_for(kind), ignore_status=ignore_status))
        got = object_fields_v1(obj, schema_for(kind), ignore_status=ignore_status)
        assert orjson.dumps(got) == orjson.dumps(want)


def test_object_fields_v1_keeps_at_most_path_nodes_per_schema(monkeypatch: pytest.MonkeyPatch) -> None:
    """Paths come from request bodies: past the budget, a schema's path facts are made afresh, never kept, and
    the field sets stay the same."""
    from lite.patch import fieldset
    monkeypatch.setattr(fieldset, "PATH_NODES", 3)
    schema = schema_for("Widget")
    obj = {"data": {f"k{i}": {"nested": [{"x": i}], "m": {"y": i}} for i in range(10)}}
    want = to_fields_v1(object_fields(obj, schema))
    for _ in range(2):
        assert orjson.dumps(object_fields_v1(obj, schema)) == orjson.dumps(want)
    kept, stack = 0, [fieldset.path_root(schema)]
    while stack:
        node = stack.pop()
        kept += len(node._kids)
        stack.extend(node._kids.values())
    assert kept == 3
