"""Label and field selectors: parse, match, canonical strings, per-kind field sets (upstream behaviour)."""

from __future__ import annotations

from typing import Any

import pytest

from lite.errors import ApiError
from lite.kinds import KindRegistry
from lite.selectors import (
    LabelSelector,
    check_field_selector,
    field_set,
    parse_field_selector,
    parse_label_selector,
)

KINDS = KindRegistry()
LABELS = {"app": "web", "tier": "front", "env": "prod", "n": "5"}


@pytest.mark.parametrize(("text", "matches"), [
    ("", True),
    ("app=web", True),
    ("app==web", True),
    ("app=db", False),
    ("app!=db", True),
    ("app!=web", False),
    ("missing!=x", True),
    ("app", True),
    ("missing", False),
    ("!missing", True),
    ("!app", False),
    ("tier in (front,back)", True),
    ("tier in (back)", False),
    ("tier notin (back)", True),
    ("tier notin (front, back)", False),
    ("missing notin (a)", True),
    ("missing in (a)", False),
    ("app=web,tier=front", True),
    ("app=web,tier=back", False),
    ("  app = web ,  env in ( prod , dev )  ", True),
    ("n>4", True),
    ("n>5", False),
    ("n<6", True),
    ("app>1", False),
    ("app=", False),
    ("empty=", False),
])
def test_label_selector_matches(text: str, matches: bool) -> None:
    assert parse_label_selector(text).matches(LABELS) is matches


def test_empty_value_matches_empty_label() -> None:
    assert parse_label_selector("k=").matches({"k": ""})
    assert parse_label_selector("k in (a,)").matches({"k": ""})


@pytest.mark.parametrize(("text", "canon"), [
    ("tier in (b,a),app=web", "app=web,tier in (a,b)"),
    ("x,!y", "x,!y"),
    ("b!=1,a==2", "a==2,b!=1"),
    ("k notin (z, y, z)", "k notin (y,z)"),
    ("example.com/role=db", "example.com/role=db"),
    ("n>3", "n>3"),
    ("", ""),
])
def test_label_selector_canonical_string(text: str, canon: str) -> None:
    assert str(parse_label_selector(text)) == canon


@pytest.mark.parametrize("text", [
    "app=web,", ",app", "app in", "app in (a", "app in ()", "!app=web", "app=a b", "=x", "app=(x)",
    "a/b/c=1", "Bad Key=1", "app=-bad-", "app in (a,b", "app notin a", "app>x", "-a=1",
    "app=" + "x" * 64,
])
def test_label_selector_parse_errors(text: str) -> None:
    with pytest.raises(ApiError) as e:
        parse_label_selector(text)
    assert e.value.code == 400 and e.value.reason == "BadRequest"
    assert "found '" in e.value.message or "unable to parse requirement" in e.value.message


@pytest.mark.parametrize(("text", "message"), [
    ("app=web,", "found '', expected: identifier after ','"),
    (",app", "found ',', expected: !, identifier, or 'end of string'"),
    ("!app=web", "found '=', expected: ',' or 'end of string'"),
    ("app=a b", "found 'b', expected: ',' or 'end of string'"),
    ("app foo", "unable to parse requirement: found 'foo', expected: in, notin, =, ==, !=, gt, lt"),
    ("app in ()", "unable to parse requirement: for 'in', 'notin' operators, values set can't be empty"),
])
def test_label_selector_error_messages(text: str, message: str) -> None:
    with pytest.raises(ApiError) as e:
        parse_label_selector(text)
    assert e.value.message == message


def test_operator_at_end_selects_empty_value() -> None:
    # upstream parseExactValue: end of string or ',' after the operator means the empty value
    assert parse_label_selector("app==").matches({"app": ""})
    assert not parse_label_selector("app==,b").matches({"app": "x", "b": "1"})


def test_from_dict_semantics() -> None:
    assert LabelSelector.from_dict(None).matches({}) is False
    assert LabelSelector.from_dict(None).empty is False
    assert LabelSelector.from_dict({}).matches({"a": "b"}) is True
    assert LabelSelector.from_dict({}).empty is True
    sel = LabelSelector.from_dict({
        "matchLabels": {"app": "web"},
        "matchExpressions": [
            {"key": "tier", "operator": "In", "values": ["front", "back"]},
            {"key": "env", "operator": "NotIn", "values": ["dev"]},
            {"key": "app", "operator": "Exists"},
            {"key": "gone", "operator": "DoesNotExist"},
        ],
    })
    assert sel.matches(LABELS)
    assert not sel.matches({**LABELS, "gone": "1"})
    assert not sel.matches({**LABELS, "env": "dev"})
    assert str(sel) == "app=web,app,env notin (dev),!gone,tier in (back,front)"
    assert sel.to_dict()["matchLabels"] == {"app": "web"}


@pytest.mark.parametrize("d", [
    {"matchExpressions": [{"key": "a", "operator": "Bogus", "values": ["x"]}]},
    {"matchExpressions": [{"key": "a", "operator": "In", "values": []}]},
    {"matchExpressions": [{"key": "a", "operator": "Exists", "values": ["x"]}]},
    {"matchLabels": {"bad key": "x"}},
    {"matchLabels": {"k": "bad value"}},
])
def test_from_dict_invalid(d: dict[str, Any]) -> None:
    with pytest.raises(ApiError) as e:
        LabelSelector.from_dict(d)
    assert e.value.code == 400


def test_matches_none_labels() -> None:
    assert parse_label_selector("!a").matches(None)
    assert not parse_label_selector("a").matches(None)


# --- field selectors --------------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "fields", "matches"), [
    ("metadata.name=x", {"metadata.name": "x"}, True),
    ("metadata.name==x", {"metadata.name": "x"}, True),
    ("metadata.name!=x", {"metadata.name": "x"}, False),
    ("metadata.name=x,status.phase=Running", {"metadata.name": "x", "status.phase": "Running"}, True),
    ("metadata.name=x,status.phase!=Running", {"metadata.name": "x", "status.phase": "Running"}, False),
    ("spec.nodeName=", {"spec.nodeName": ""}, True),
    ("spec.nodeName=", {}, True),
    ("spec.nodeName!=", {"spec.nodeName": "n1"}, True),
    ("a=x\\,y", {"a": "x,y"}, True),
    ("", {"a": "b"}, True),
])
def test_field_selector(text: str, fields: dict[str, str], matches: bool) -> None:
    assert parse_field_selector(text).matches(fields) is matches


@pytest.mark.parametrize("text", ["name", "=x", "a=b=c", "a=x\\y"])
def test_field_selector_errors(text: str) -> None:
    with pytest.raises(ApiError) as e:
        parse_field_selector(text)
    assert e.value.code == 400


def test_field_selector_string_sorted() -> None:
    assert str(parse_field_selector("status.phase!=Failed,metadata.name=a")) == \
        "metadata.name=a,status.phase!=Failed"


POD = {
    "metadata": {"name": "p", "namespace": "ns"},
    "spec": {"nodeName": "n1", "restartPolicy": "Always", "schedulerName": "default-scheduler",
             "serviceAccountName": "default", "hostNetwork": True},
    "status": {"phase": "Running", "podIP": "10.0.0.5", "podIPs": [{"ip": "10.0.0.5"}]},
}


def test_pod_field_set() -> None:
    pod = KINDS.by_resource("", "v1", "pods")
    assert pod is not None
    assert field_set(pod, POD) == {
        "metadata.name": "p", "metadata.namespace": "ns", "spec.nodeName": "n1", "spec.restartPolicy": "Always",
        "spec.schedulerName": "default-scheduler", "spec.serviceAccountName": "default",
        "spec.hostNetwork": "true", "status.phase": "Running", "status.podIP": "10.0.0.5",
        "status.nominatedNodeName": "",
    }
    assert parse_field_selector("spec.nodeName=n1,status.phase!=Succeeded").matches(field_set(pod, POD))
    assert field_set(pod, {"metadata": {"name": "q"}})["spec.hostNetwork"] == "false"


def test_event_field_set() -> None:
    ev = KINDS.by_resource("", "v1", "events")
    assert ev is not None
    obj = {"metadata": {"name": "e", "namespace": "ns"},
           "involvedObject": {"kind": "Pod", "name": "p", "namespace": "ns", "uid": "u1"},
           "reason": "Scheduled", "type": "Normal", "reportingComponent": "sched"}
    fs = field_set(ev, obj)
    assert fs["involvedObject.kind"] == "Pod" and fs["involvedObject.uid"] == "u1"
    assert fs["source"] == "sched"  # falls back to reportingComponent when source.component is empty
    assert fs["involvedObject.fieldPath"] == ""
    assert field_set(ev, {**obj, "source": {"component": "kubelet"}})["source"] == "kubelet"


@pytest.mark.parametrize(("plural", "group", "obj", "field", "value"), [
    ("secrets", "", {"type": "Opaque"}, "type", "Opaque"),
    ("nodes", "", {"spec": {"unschedulable": True}}, "spec.unschedulable", "true"),
    ("nodes", "", {}, "spec.unschedulable", "false"),
    ("namespaces", "", {"status": {"phase": "Active"}}, "status.phase", "Active"),
    ("replicasets", "apps", {"status": {"replicas": 3}}, "status.replicas", "3"),
    ("replicationcontrollers", "", {}, "status.replicas", "0"),
    ("jobs", "batch", {"status": {"succeeded": 2}}, "status.successful", "2"),
])
def test_kind_field_sets(plural: str, group: str, obj: dict[str, Any], field: str, value: str) -> None:
    kind = KINDS.by_resource(group, "v1", plural)
    assert kind is not None
    fs = field_set(kind, {"metadata": {"name": "x"}, **obj})
    assert fs[field] == value
    assert fs["metadata.name"] == "x"
    sel = parse_field_selector(f"{field}={value},metadata.name=x")
    assert check_field_selector(kind, sel) == sel
    assert check_field_selector(kind, sel).matches(fs)


def test_pod_spec_host_alias() -> None:
    pod = KINDS.by_resource("", "v1", "pods")
    assert pod is not None
    sel = check_field_selector(pod, parse_field_selector("spec.host=n1"))
    assert str(sel) == "spec.nodeName=n1"
    assert sel.matches(field_set(pod, POD))


@pytest.mark.parametrize(("plural", "group", "text"), [
    ("pods", "", "spec.foo=x"),
    ("configmaps", "", "data.x=1"),
    ("deployments", "apps", "status.replicas=1"),
    ("secrets", "", "status.phase=x"),
    ("nodes", "", "metadata.namespace=x"),
    ("namespaces", "", "metadata.namespace="),
])
def test_field_label_not_supported(plural: str, group: str, text: str) -> None:
    kind = KINDS.by_resource(group, "v1", plural)
    assert kind is not None
    with pytest.raises(ApiError) as e:
        check_field_selector(kind, parse_field_selector(text))
    assert e.value.code == 400
    assert e.value.message == f"field label not supported: {text.split('=')[0]}"
