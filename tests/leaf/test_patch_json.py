"""RFC 6902 JSON patch and RFC 7386 merge patch (examples from the RFCs and the API server's codes)."""

from __future__ import annotations

from typing import Any

import pytest

from lite.errors import ApiError
from lite.patch import json_equal, json_patch, merge_patch, parse_pointer

DOC = {"metadata": {"name": "a", "labels": {"x": "1", "a/b": "s", "m~n": "t"}}, "spec": {"list": [1, 2, 3]}}


@pytest.mark.parametrize(("ops", "expected"), [
    ([{"op": "add", "path": "/spec/new", "value": {"k": 1}}],
     {**DOC, "spec": {"list": [1, 2, 3], "new": {"k": 1}}}),
    ([{"op": "add", "path": "/spec/list/1", "value": 9}], {**DOC, "spec": {"list": [1, 9, 2, 3]}}),
    ([{"op": "add", "path": "/spec/list/-", "value": 4}], {**DOC, "spec": {"list": [1, 2, 3, 4]}}),
    ([{"op": "add", "path": "/spec/list/3", "value": 4}], {**DOC, "spec": {"list": [1, 2, 3, 4]}}),
    ([{"op": "remove", "path": "/spec/list/0"}], {**DOC, "spec": {"list": [2, 3]}}),
    ([{"op": "replace", "path": "/spec/list/2", "value": "z"}], {**DOC, "spec": {"list": [1, 2, "z"]}}),
    ([{"op": "move", "from": "/spec/list", "path": "/spec/moved"}], {**DOC, "spec": {"moved": [1, 2, 3]}}),
    ([{"op": "copy", "from": "/spec/list/0", "path": "/spec/list/-"}], {**DOC, "spec": {"list": [1, 2, 3, 1]}}),
    ([{"op": "test", "path": "/spec/list/0", "value": 1}], DOC),
    ([{"op": "test", "path": "/spec/list/0", "value": 1.0}], DOC),
    ([{"op": "remove", "path": "/metadata/labels/a~1b"}],
     {**DOC, "metadata": {"name": "a", "labels": {"x": "1", "m~n": "t"}}}),
    ([{"op": "replace", "path": "/metadata/labels/m~0n", "value": "u"}],
     {**DOC, "metadata": {"name": "a", "labels": {"x": "1", "a/b": "s", "m~n": "u"}}}),
    ([{"op": "replace", "path": "", "value": {"whole": True}}], {"whole": True}),
    ([], DOC),
])
def test_json_patch(ops: list[dict[str, Any]], expected: dict[str, Any]) -> None:
    before = json_patch(DOC, [])
    assert json_patch(DOC, ops) == expected
    assert before == DOC  # input untouched


@pytest.mark.parametrize(("ops", "code"), [
    ([{"op": "remove", "path": "/spec/missing"}], 422),
    ([{"op": "replace", "path": "/spec/missing", "value": 1}], 422),
    ([{"op": "add", "path": "/nope/deeper", "value": 1}], 422),
    ([{"op": "add", "path": "/spec/list/5", "value": 1}], 422),
    ([{"op": "add", "path": "/spec/list/01", "value": 1}], 422),
    ([{"op": "test", "path": "/spec/list/0", "value": 2}], 422),
    ([{"op": "test", "path": "/spec/list/0", "value": True}], 422),
    ([{"op": "move", "from": "/spec", "path": "/spec/child"}], 422),
    ([{"op": "add", "path": "spec", "value": 1}], 422),
    ([{"op": "frobnicate", "path": "/spec"}], 422),
    ([{"op": "add", "value": 1}], 422),
    ([{"op": "add", "path": "/x"}], 422),
    ([{"op": "move", "path": "/x"}], 422),
    ([{"op": "add", "path": 5, "value": 1}], 422),
    ([{"op": "test", "path": "/spec"}] * 10001, 413),
    ({"op": "add"}, 400),
    (["add"], 400),
])
def test_json_patch_errors(ops: Any, code: int) -> None:
    with pytest.raises(ApiError) as e:
        json_patch(DOC, ops)
    assert e.value.code == code


def test_no_partial_application() -> None:
    doc = {"a": 1}
    with pytest.raises(ApiError):
        json_patch(doc, [{"op": "add", "path": "/b", "value": 2}, {"op": "remove", "path": "/zzz"}])
    assert doc == {"a": 1}


def test_added_value_is_not_shared_with_patch() -> None:
    value = {"k": [1]}
    out = json_patch({}, [{"op": "add", "path": "/v", "value": value}])
    out["v"]["k"].append(2)
    assert value == {"k": [1]}


def test_pointer_and_equality() -> None:
    assert parse_pointer("/a~1b/c~0d/~01") == ["a/b", "c~d", "~1"]
    assert parse_pointer("") == []
    assert json_equal(1, 1.0) and not json_equal(1, True) and not json_equal("1", 1)
    assert json_equal({"a": [1, {"b": None}]}, {"a": [1.0, {"b": None}]})


# RFC 7386 appendix A test cases
@pytest.mark.parametrize(("target", "patch", "result"), [
    ({"a": "b"}, {"a": "c"}, {"a": "c"}),
    ({"a": "b"}, {"b": "c"}, {"a": "b", "b": "c"}),
    ({"a": "b"}, {"a": None}, {}),
    ({"a": "b", "b": "c"}, {"a": None}, {"b": "c"}),
    ({"a": ["b"]}, {"a": "c"}, {"a": "c"}),
    ({"a": "c"}, {"a": ["b"]}, {"a": ["b"]}),
    ({"a": {"b": "c"}}, {"a": {"b": "d", "c": None}}, {"a": {"b": "d"}}),
    ({"a": [{"b": "c"}]}, {"a": [1]}, {"a": [1]}),
    (["a", "b"], ["c", "d"], ["c", "d"]),
    ({"a": "b"}, ["c"], ["c"]),
    ({"a": "foo"}, None, None),
    ({"a": "foo"}, "bar", "bar"),
    ({"e": None}, {"a": 1}, {"e": None, "a": 1}),
    ([1, 2], {"a": "b", "c": None}, {"a": "b"}),
    ({}, {"a": {"bb": {"ccc": None}}}, {"a": {"bb": {}}}),
])
def test_merge_patch(target: Any, patch: Any, result: Any) -> None:
    assert merge_patch(target, patch) == result


def test_merge_patch_does_not_mutate() -> None:
    target = {"a": {"b": 1}, "keep": {"x": [1]}}
    out = merge_patch(target, {"a": {"c": 2}})
    out["keep"]["x"].append(2)
    assert target == {"a": {"b": 1}, "keep": {"x": [1]}}


# Upstream's json-patch counts the JSON size of every copied value against AccumulatedCopySizeLimit.
@pytest.mark.parametrize(("copies", "limit", "refused"), [
    (1, 100, False),   # '"AAAAAAAAAA"' is 12 bytes
    (8, 100, False),   # 96 bytes
    (9, 100, True),    # 108 bytes
    (30, 3 * 1024 * 1024, False),
    (84, 1000, True),   # 1008 bytes
    (83, 1000, False),  # 996 bytes
])
def test_json_patch_copy_budget(copies: int, limit: int, refused: bool) -> None:
    ops = [{"op": "copy", "from": "/a/0", "path": "/a/-"} for _ in range(copies)]
    doc = {"a": ["A" * 10]}
    if refused:
        with pytest.raises(ApiError) as e:
            json_patch(doc, ops, max_copy_bytes=limit)
        assert e.value.code == 422 and "accumulated size increase of copy" in e.value.message
    else:
        assert len(json_patch(doc, ops, max_copy_bytes=limit)["a"]) == copies + 1


def test_json_patch_doubling_copies_stop_at_the_budget() -> None:
    ops = [{"op": "copy", "from": "/d", "path": f"/d/c{i}"} for i in range(64)]
    with pytest.raises(ApiError) as e:
        json_patch({"d": {"x": "y" * 1024}}, ops)
    assert e.value.code == 422 and "exceeding the limit 3145728" in e.value.message
