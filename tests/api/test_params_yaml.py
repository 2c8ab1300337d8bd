"""Table tests of the pure decoding rules: `lite.server.api.params` (upstream's ParameterCodec and *Options
validation) and `lite.server.api.yamlbody` (sigs.k8s.io/yaml's YAML-to-JSON conversion)."""

from __future__ import annotations

from typing import Any

import pytest
from multidict import MultiDict

from lite.errors import ApiError
from lite.server.api import params, yamlbody


@pytest.mark.parametrize(("text", "want"), [
    ("0", 0), ("7", 7), ("+7", 7), ("-7", -7), ("9223372036854775807", 2**63 - 1),
    ("-9223372036854775808", -(2**63)),
])
def test_parse_int64_accepts(text: str, want: int) -> None:
    assert params.parse_int64(text) == want


@pytest.mark.parametrize(("text", "why"), [
    ("1_0", "invalid syntax"), (" 7", "invalid syntax"), ("7 ", "invalid syntax"), ("1e3", "invalid syntax"),
    ("", "invalid syntax"), ("٣", "invalid syntax"), ("0x10", "invalid syntax"), ("--1", "invalid syntax"),
    ("9223372036854775808", "value out of range"), ("-9223372036854775809", "value out of range"),
])
def test_parse_int64_refuses(text: str, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        params.parse_int64(text)


@pytest.mark.parametrize(("value", "want"), [
    (None, False), ("0", False), ("false", False), ("FALSE", False), ("fAlSe", False),
    ("1", True), ("true", True), ("", True), ("maybe", True), ("no", True), ("f", True),
])
def test_query_bool(value: str | None, want: bool) -> None:
    query = {} if value is None else {"watch": value}
    assert params.query_bool(query, "watch") is want


@pytest.mark.parametrize(("rv", "ok"), [
    ("", 0), ("0", 0), ("15", 15), ("18446744073709551615", 2**64 - 1),
    (" 7", None), ("abc", None), ("-1", None), ("1_0", None), ("+5", None), ("18446744073709551616", None),
])
def test_parse_resource_version(rv: str, ok: int | None) -> None:
    if ok is None:
        with pytest.raises(ApiError) as e:
            params.parse_resource_version(rv)
        assert (e.value.code, e.value.reason) == (400, "BadRequest")
        assert e.value.message.startswith("invalid resource version: resourceVersion: Invalid value: ")
    else:
        assert params.parse_resource_version(rv) == ok


@pytest.mark.parametrize(("value", "want"), [
    ("12", 12), ("0", 0), ("abc", 0), ("-5", 0), (" 7", 0), ("", 0), (None, 0), (12, 0),
])
def test_stored_resource_version(value: Any, want: int) -> None:
    assert params.stored_resource_version(value) == want


@pytest.mark.parametrize(("query", "verb", "patch_type", "field"), [
    ({"dryRun": "x"}, "Create", "", "dryRun"),
    ({"fieldValidation": "strict"}, "Update", "", "fieldValidation"),
    ({"fieldManager": "m" * 129}, "Create", "", "fieldManager"),
    ({"fieldManager": "a\tb"}, "Create", "", "fieldManager"),
    ({"force": "false"}, "Patch", "merge", "force"),
    ({}, "Patch", "apply", "fieldManager"),
])
def test_write_options_refused(query: dict[str, str], verb: str, patch_type: str, field: str) -> None:
    with pytest.raises(ApiError) as e:
        params.write_options(MultiDict(query), verb, patch_type)
    assert (e.value.code, e.value.reason) == (422, "Invalid")
    assert e.value.message.startswith(f'{verb}Options.meta.k8s.io "" is invalid: {field}: ')
    assert [c.field for c in e.value.causes] == [field]


def test_write_options_accepted() -> None:
    got = params.write_options(MultiDict([("dryRun", "All"), ("fieldManager", "kubectl"),
                                          ("fieldValidation", "Strict"), ("force", "true")]), "Patch", "apply")
    assert got == (True, "kubectl", "Strict")
    assert params.write_options(MultiDict(), "Create") == (False, "", "")


@pytest.mark.parametrize("agent", ["", "kubectl/v1.32.4 (linux/amd64)", "bench", "a\tb/1", "m" * 200])
@pytest.mark.parametrize("verb", ["Create", "Update"])
def test_write_options_without_parameters_as_with_the_full_checks(verb: str, agent: str) -> None:
    """An empty query skips the checks (nothing to refuse): the answer is the one a query whose parameters are
    all given empty would get through them."""
    empty = MultiDict([("fieldManager", ""), ("fieldValidation", "")])
    assert params.write_options(MultiDict(), verb, user_agent=agent) == \
        params.write_options(empty, verb, user_agent=agent)


@pytest.mark.parametrize(("body", "message"), [
    ({"dryRun": "All"}, "cannot unmarshal string into Go struct field DeleteOptions.dryRun of type []string"),
    ({"dryRun": [True]}, "cannot unmarshal bool into Go struct field DeleteOptions.dryRun of type string"),
    ({"gracePeriodSeconds": 2.5}, "cannot unmarshal number 2.5 into Go struct field DeleteOptions.gracePeriodSeconds"),
    ({"gracePeriodSeconds": 2**63}, "cannot unmarshal number into Go struct field DeleteOptions.gracePeriodSeconds"),
    ({"orphanDependents": 1}, "DeleteOptions.orphanDependents of type bool"),
    ({"preconditions": {"resourceVersion": 3}}, "DeleteOptions.preconditions.resourceVersion of type string"),
    ([], "cannot unmarshal array into Go value of type v1.DeleteOptions"),
    ({"kind": "Status"}, 'no kind "Status"'),
])
def test_check_delete_body_refuses(body: Any, message: str) -> None:
    with pytest.raises(ApiError) as e:
        params.check_delete_body(body)
    assert (e.value.code, e.value.reason) == (400, "BadRequest")
    assert message in e.value.message


def test_check_delete_body_accepts() -> None:
    assert params.check_delete_body(None) == {}
    body = {"kind": "DeleteOptions", "apiVersion": "v1", "dryRun": None, "gracePeriodSeconds": 3,
            "preconditions": {"uid": "u"}, "bogus": 1}
    assert params.check_delete_body(body) == {"kind": "DeleteOptions", "apiVersion": "v1",
                                              "gracePeriodSeconds": 3, "preconditions": {"uid": "u"}}


@pytest.mark.parametrize(("opts", "field"), [
    ({"propagationPolicy": ""}, "propagationPolicy"),
    ({"propagationPolicy": "orphan"}, "propagationPolicy"),
    ({"orphanDependents": False, "propagationPolicy": "Orphan"}, "propagationPolicy"),
    ({"dryRun": ["All", "None"]}, "dryRun"),
])
def test_validate_delete_options(opts: dict[str, Any], field: str) -> None:
    with pytest.raises(ApiError) as e:
        params.validate_delete_options(opts)
    assert (e.value.code, e.value.reason, e.value.kind) == (422, "Invalid", "DeleteOptions")
    assert [c.field for c in e.value.causes] == [field]


@pytest.mark.parametrize(("text", "want"), [
    (b"1: a\n1.5: b\n2.0: e\n", {"1": "a", "1.5": "b", "2": "e"}),
    (b"true: c\nfalse: d\n", {"true": "c", "false": "d"}),
    (b"k: !!binary aGVsbG8=\n", {"k": "hello"}),
    (b"k: !!binary /w==\n", {"k": "\ufffd"}),
    (b"k: !!set {p, q}\n", {"k": {"p": None, "q": None}}),
    (b"at: 2001-12-14t21:59:43.10-05:00\nday: 2002-12-14\n",
     {"at": "2001-12-14t21:59:43.10-05:00", "day": "2002-12-14"}),
    (b"v: 123456789012345678901234567890\n", {"v": 1.2345678901234568e29}),
    (b"v: 18446744073709551615\nm: -9223372036854775808\n", {"v": 2**64 - 1, "m": -(2**63)}),
    (b"- 1\n- {2: x}\n", [1, {"2": "x"}]),
    # plain scalars as go-yaml v2 resolves them, not as PyYAML does
    (b"a: y\nb: N\nc: off\n", {"a": True, "b": False, "c": False}),
    (b"y: x\n", {"true": "x"}),
    (b"a: 0o17\nb: 0x1F\nc: 017\nd: -0b101\ne: 1_000\nf: +1\n",
     {"a": 15, "b": 31, "c": 15, "d": -5, "e": 1000, "f": 1}),
    (b"a: 1e3\nb: .5\nc: 1.\nd: 08\ne: 1.5e-3\n", {"a": 1000.0, "b": 0.5, "c": 1.0, "d": 8.0, "e": 0.0015}),
    (b"a: 1:20\nb: 1e400\nc: .\nd: 0x\ne: 1__\n", {"a": "1:20", "b": "1e400", "c": ".", "d": "0x", "e": 1}),
    (b"a: 9223372036854775808\nb: -9223372036854775809\n", {"a": 2**63, "b": -9.223372036854776e18}),
    (b"a: !!int '0x10'\nb: !!str 5\nc: !!float 5\nd: !!bool y\ne: '5'\n", {"a": 16, "b": "5", "c": 5.0, "d": True,
                                                                           "e": "5"}),
    (b"<<: {b: 1}\nc: 2\n", {"b": 1, "c": 2}),
    (b"a: ~\nb: null\nc:\n", {"a": None, "b": None, "c": None}),
])
def test_yaml_like_upstream(text: bytes, want: Any) -> None:
    assert yamlbody.load(text) == want


@pytest.mark.parametrize("text", [
    b"~: x\n", b"? [a]\n: x\n", b"k: .inf\n", b"k: -.inf\n", b"k: .nan\n", b"k: !!binary '%%%'\n",
    b"k: !!python/name:os.system\n", b"a: [\n", b"a: 1\n---\nb: 2\n", b"k: !!int 1:20\n", b"k: !!float abc\n",
    b"k: !!bool maybe\n", b"a: " + b"[" * 500 + b"]" * 500,
    b"a:\n" + b"".join(b" " * i + b"- x:\n" for i in range(1, 600)),
])
def test_yaml_refused(text: bytes) -> None:
    with pytest.raises(ApiError) as e:
        yamlbody.load(text)
    assert (e.value.code, e.value.reason) == (400, "BadRequest")
