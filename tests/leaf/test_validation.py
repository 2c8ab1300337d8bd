"""Name, label, annotation and ObjectMeta validation: upstream messages and JSON field paths."""

from __future__ import annotations

from typing import Any

import pytest

from lite.validation import (
    is_dns1035_label,
    is_dns1123_label,
    is_dns1123_subdomain,
    is_qualified_name,
    is_valid_label_value,
    name_is_dns_label,
    plain_qualified_name,
    validate_annotations,
    validate_label_selector,
    validate_labels,
    validate_object_meta,
    validate_object_meta_update,
)

SUBDOMAIN_MSG = ("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
                 "and must start and end with an alphanumeric character (e.g. 'example.com', regex used for "
                 "validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')")
LABEL_MSG = ("a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must "
             "start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for "
             "validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')")
VALUE_MSG = ("a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and "
             "must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', "
             "regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')")
NAME_PART_MSG = ("name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end "
                 "with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for "
                 "validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')")


@pytest.mark.parametrize(("value", "ok"), [
    ("a", True), ("my-name", True), ("123-abc", True), ("a" * 63, True),
    ("", False), ("A", False), ("-a", False), ("a-", False), ("a_b", False), ("a" * 64, False), ("a.b", False),
])
def test_dns1123_label(value: str, ok: bool) -> None:
    assert (is_dns1123_label(value) == []) is ok


def test_dns1123_label_messages() -> None:
    assert is_dns1123_label("Bad") == [LABEL_MSG]
    assert is_dns1123_label("a.b") == ["must not contain dots"]
    assert is_dns1123_label("a" * 64) == ["must be no more than 63 characters"]


@pytest.mark.parametrize(("value", "ok"), [
    ("example.com", True), ("a", True), ("a-b.c-d", True), ("1.2.3", True), ("a" * 253, True),
    ("", False), ("Example.com", False), ("a..b", False), (".a", False), ("a.", False), ("a_b", False),
    ("a" * 254, False), ("a/b", False),
])
def test_dns1123_subdomain(value: str, ok: bool) -> None:
    assert (is_dns1123_subdomain(value) == []) is ok


def test_subdomain_message() -> None:
    assert is_dns1123_subdomain("Foo") == [SUBDOMAIN_MSG]


@pytest.mark.parametrize(("value", "ok"), [
    ("abc", True), ("abc-123", True), ("1abc", False), ("abc-", False), ("a.b", False), ("", False),
])
def test_dns1035(value: str, ok: bool) -> None:
    assert (is_dns1035_label(value) == []) is ok


@pytest.mark.parametrize(("value", "ok"), [
    ("app", True), ("MyName", True), ("my.name", True), ("123-abc", True), ("a_b", True),
    ("example.com/MyName", True), ("k8s.io/app", True), ("a/b", True),
    ("", False), ("/a", False), ("a/", False), ("a/b/c", False), ("-a", False), ("a-", False),
    ("Example.com/a", False), ("a" * 64, False), ("x/" + "a" * 64, False), ("a b", False),
])
def test_qualified_name(value: str, ok: bool) -> None:
    assert (is_qualified_name(value) == []) is ok


def test_qualified_name_messages() -> None:
    assert is_qualified_name("-a") == [NAME_PART_MSG]
    assert is_qualified_name("/a") == ["prefix part must be non-empty"]
    assert is_qualified_name("a/") == ["name part must be non-empty", NAME_PART_MSG]
    assert is_qualified_name("Ex/a") == ["prefix part " + SUBDOMAIN_MSG]
    assert is_qualified_name("a/b/c")[0].startswith("a qualified name must consist of")
    assert is_qualified_name("a/b/c")[0].endswith(
        "with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')")


@pytest.mark.parametrize(("value", "ok"), [
    ("", True), ("v1", True), ("my_value", True), ("a.b-c", True), ("a" * 63, True),
    ("-a", False), ("a b", False), ("a" * 64, False), ("a/b", False),
])
def test_label_value(value: str, ok: bool) -> None:
    assert (is_valid_label_value(value) == []) is ok


def test_label_value_message() -> None:
    assert is_valid_label_value("-x") == [VALUE_MSG]


def test_validate_labels_causes() -> None:
    causes = validate_labels({"good": "ok", "bad key": "v", "k": "bad value"}, "metadata.labels")
    assert [(c.reason, c.field) for c in causes] == [("FieldValueInvalid", "metadata.labels")] * 2
    assert causes[0].message == 'Invalid value: "bad key": ' + NAME_PART_MSG
    assert causes[1].message == 'Invalid value: "bad value": ' + VALUE_MSG


def test_annotations_size() -> None:
    assert validate_annotations({"a": "x" * 1000}) == []
    causes = validate_annotations({"a": "x" * (256 * 1024)})
    assert [c.reason for c in causes] == ["FieldValueTooLong"]
    assert causes[0].field == "metadata.annotations"
    assert "262144" in causes[0].message
    # the limit counts bytes: 100k three-byte characters are too much
    assert [c.reason for c in validate_annotations({"a": "\u20ac" * 100_000})] == ["FieldValueTooLong"]
    assert validate_annotations({"a": "x" * 100_000}) == []
    # keys are checked case-insensitively (upstream lower-cases them)
    assert validate_annotations({"Example.COM/Key": "v"}) == []
    assert validate_annotations({"bad key": "v"})[0].field == "metadata.annotations"


def _fields(causes: list[Any]) -> list[tuple[str, str]]:
    return [(c.field, c.reason) for c in causes]


def test_object_meta_ok() -> None:
    assert validate_object_meta({"name": "web", "namespace": "default", "labels": {"a": "b"},
                                 "finalizers": ["kubernetes.io/pv-protection", "foregroundDeletion"]},
                                namespaced=True) == []
    assert validate_object_meta({"generateName": "web-"}, namespaced=False) == []


@pytest.mark.parametrize(("meta", "namespaced", "expected"), [
    ({"namespace": "ns"}, True, [("metadata.name", "FieldValueRequired")]),
    ({"name": "Web", "namespace": "ns"}, True, [("metadata.name", "FieldValueInvalid")]),
    ({"name": "web"}, True, [("metadata.namespace", "FieldValueRequired")]),
    ({"name": "web", "namespace": "Bad_NS"}, True, [("metadata.namespace", "FieldValueInvalid")]),
    ({"name": "web", "namespace": "ns"}, False, [("metadata.namespace", "FieldValueForbidden")]),
    ({"generateName": "Web-", "namespace": "ns"}, True, [("metadata.generateName", "FieldValueInvalid")]),
    ({"name": "w", "namespace": "n", "finalizers": ["a/b/c"]}, True, [("metadata.finalizers",
                                                                       "FieldValueInvalid")]),
    ({"name": "w", "namespace": "n", "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": "p"}]},
     True, [("metadata.ownerReferences.uid", "FieldValueInvalid")]),
    ({"name": "w", "namespace": "n", "ownerReferences": [{"apiVersion": "apps/", "kind": "K", "name": "p",
                                                          "uid": "u"}]},
     True, [("metadata.ownerReferences.apiVersion", "FieldValueInvalid")]),
    ({"name": "w", "namespace": "n", "ownerReferences": [
        {"apiVersion": "v1", "kind": "A", "name": "a", "uid": "1", "controller": True},
        {"apiVersion": "v1", "kind": "B", "name": "b", "uid": "2", "controller": True}]},
     True, [("metadata.ownerReferences", "FieldValueInvalid")]),
    ({"name": "w", "finalizers": ["orphan", "foregroundDeletion"]}, False, [("metadata.finalizers",
                                                                              "FieldValueInvalid")]),
    ({"name": "w", "namespace": "n", "labels": {"k": "-"}}, True, [("metadata.labels", "FieldValueInvalid")]),
])
def test_object_meta_errors(meta: dict[str, Any], namespaced: bool, expected: list[tuple[str, str]]) -> None:
    assert _fields(validate_object_meta(meta, namespaced=namespaced)) == expected


def test_name_required_message() -> None:
    (cause,) = validate_object_meta({}, namespaced=False)
    assert cause.message == "Required value: name or generateName is required"
    (cause,) = validate_object_meta({"name": "Web"}, namespaced=False)
    assert cause.message == 'Invalid value: "Web": ' + SUBDOMAIN_MSG


def test_custom_name_fn_and_path() -> None:
    causes = validate_object_meta({"name": "a.b"}, namespaced=False, name_fn=name_is_dns_label,
                                  path="spec.template.metadata")
    assert _fields(causes) == [("spec.template.metadata.name", "FieldValueInvalid")]
    assert causes[0].message == 'Invalid value: "a.b": must not contain dots'


def test_label_selector_validation() -> None:
    assert validate_label_selector({"matchLabels": {"a": "b"}}, "spec.selector") == []
    causes = validate_label_selector({"matchExpressions": [
        {"key": "a", "operator": "In"},
        {"key": "b", "operator": "Exists", "values": ["x"]},
        {"key": "c", "operator": "Foo"},
        {"key": "bad key", "operator": "Exists"},
        {"key": "d", "operator": "In", "values": ["ok", "bad value"]},
    ]}, "spec.selector")
    assert _fields(causes) == [
        ("spec.selector.matchExpressions[0].values", "FieldValueRequired"),
        ("spec.selector.matchExpressions[1].values", "FieldValueForbidden"),
        ("spec.selector.matchExpressions[2].operator", "FieldValueInvalid"),
        ("spec.selector.matchExpressions[3].key", "FieldValueInvalid"),
        ("spec.selector.matchExpressions[4].values[1]", "FieldValueInvalid"),
    ]


def test_object_meta_update() -> None:
    old = {"name": "a", "namespace": "ns", "uid": "u1", "generation": 3, "creationTimestamp": "t",
           "finalizers": ["x/y"], "resourceVersion": "5"}
    assert validate_object_meta_update(dict(old), old) == []
    changed = {**old, "name": "b", "uid": "u2", "generation": 2}
    assert _fields(validate_object_meta_update(changed, old)) == [
        ("metadata.generation", "FieldValueInvalid"), ("metadata.name", "FieldValueInvalid"),
        ("metadata.uid", "FieldValueInvalid")]
    assert validate_object_meta_update(changed, old)[1].message == 'Invalid value: "b": field is immutable'
    deleting = {**old, "deletionTimestamp": "t2"}
    causes = validate_object_meta_update({**deleting, "finalizers": ["x/y", "new/f"]}, deleting)
    assert _fields(causes) == [("metadata.finalizers", "FieldValueForbidden")]
    assert causes[0].message == ('Forbidden: no new finalizers can be added if the object is being deleted, '
                                 'found new finalizers []string{"new/f"}')
    assert validate_object_meta_update({**deleting, "finalizers": []}, deleting) == []
    no_rv = {k: v for k, v in old.items() if k != "resourceVersion"}
    assert _fields(validate_object_meta_update(no_rv, old, require_resource_version=True)) == [
        ("metadata.resourceVersion", "FieldValueInvalid")]


@pytest.mark.parametrize("value", [
    "app", "App.Name_1", "a", "example.com/app", "a.b-c.d/x", "kubernetes.io/metadata.name", "x" * 63,
    "x" * 64, "", "/", "/app", "example.com/", "a/b/c", "-app", "app-", "app_", "ex ample.com/app", "Example.com/app",
    "example..com/app", "-example.com/app", ("a" * 63 + ".") * 3 + "b/app", ("a" * 63 + ".") * 4 + "b/app",
    "app/" + "x" * 63, "app/" + "x" * 64, "é", "exämple.com/app", "a\n", "1.2.3/4",
    "App9", "9", "x" * 62 + "9", "X" * 64, "²", "a²", "٣", "ab٣", "Ⅻ",
])
def test_plain_qualified_name_is_exactly_no_error(value: str) -> None:
    assert plain_qualified_name(value) == (is_qualified_name(value) == [])


@pytest.mark.parametrize("value", ["bench", "Web9", "", "x" * 63, "x" * 64, "²", "a²", "٣", "Ⅻ", "a-b", "a b", "é"])
def test_label_values_are_judged_alike_on_the_word_shortcut(value: str) -> None:
    """`validate_labels` takes plain ASCII words without the regex: it judges every value as the full check."""
    assert (validate_labels({"k": value}) == []) == (is_valid_label_value(value) == [])
