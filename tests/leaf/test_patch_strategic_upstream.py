"""Strategic merge patch cases taken from apimachinery's strategicpatch/patch_test.go (MergeItem schema):
each applies an upstream patch to an upstream document and expects upstream's result."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from lite.errors import ApiError
from lite.patch import ATOMIC, ListRule, Schema, strategic_merge
from lite.patch.schema import keyed

MERGE_ITEM = Schema({
    ("*", "mergingList"): keyed("name"),
    ("*", "retainKeysMergingList"): keyed("name"),
    ("*", "mergeItemPtr"): keyed("name"),
    ("*", "mergingIntList"): ListRule("set"),
    ("*", "nonMergingList"): ATOMIC,
})

# (description, document, patch, expected result) in upstream's YAML
CASES: list[tuple[str, str, str, str]] = [
    ("unique scalars when merging lists",
     "mergingIntList: [1, 2]", "mergingIntList: [2, 3]", "mergingIntList: [1, 2, 3]"),
    ("delete map from nested map",
     "simpleMap: {key1: 1, key2: 1}", "simpleMap: {$patch: delete}", "simpleMap: {}"),
    ("delete all items from merging list",
     "mergingList: [{name: 1}, {name: 2}]", "mergingList: [{$patch: replace}]", "mergingList: []"),
    ("merge empty merging lists", "mergingList: []", "mergingList: []", "mergingList: []"),
    ("delete all keys from map", "{name: 1, value: 1}", "{$patch: replace}", "{}"),
    ("add key and delete all keys from map", "{name: 1, value: 1}", "{other: a, $patch: replace}", "{other: a}"),
    ("delete all duplicate entries in a merging list",
     "mergingList: [{name: 1}, {name: 1}, {name: 2, value: a}, {name: 3}, {name: 3}]",
     "mergingList: [{name: 1, $patch: delete}, {name: 3, $patch: delete}]",
     "mergingList: [{name: 2, value: a}]"),
    ("retainKeys map can add a field when no retainKeys directive present",
     "retainKeysMap: {name: foo}", "retainKeysMap: {value: bar}", "retainKeysMap: {name: foo, value: bar}"),
    ("retainKeys map can delete a field when no retainKeys directive present",
     "retainKeysMap: {name: foo, value: a}", "retainKeysMap: {value: null}", "retainKeysMap: {name: foo}"),
    ("retainKeys map merge an empty map",
     "retainKeysMap: {name: foo, value: a}", "retainKeysMap: {}", "retainKeysMap: {name: foo, value: a}"),
    ("retainKeys list can change a field when no retainKeys directive present",
     "retainKeysMergingList: [{name: bar}, {name: foo, value: a}]",
     "retainKeysMergingList: [{name: foo, value: b}]",
     "retainKeysMergingList: [{name: bar}, {name: foo, value: b}]"),
    ("preserve the order from the patch in a merging list",
     "mergingList: [{name: 1}, {name: 2, value: b}, {name: 3}]",
     "mergingList: [{name: 3, value: c}, {name: 1, value: a}, {name: 2, other: x}]",
     "mergingList: [{name: 3, value: c}, {name: 1, value: a}, {name: 2, value: b, other: x}]"),
    ("preserve the order from the patch in a merging list 2",
     "mergingList: [{name: 1}, {name: 2, value: b}, {name: 3}]",
     "mergingList: [{name: 3, value: c}, {name: 1, value: a}]",
     "mergingList: [{name: 2, value: b}, {name: 3, value: c}, {name: 1, value: a}]"),
    ("preserve the order from the patch in a merging int list",
     "mergingIntList: [1, 2, 3]", "mergingIntList: [3, 1, 2]", "mergingIntList: [3, 1, 2]"),
    ("preserve the order from the patch in a merging int list 2",
     "mergingIntList: [1, 2, 3]", "mergingIntList: [3, 1]", "mergingIntList: [2, 3, 1]"),
    ("$setElementOrder contains item that is not present in the list to be merged",
     "mergingList: [{name: 1}, {name: 3}]",
     "{$setElementOrder/mergingList: [{name: 3}, {name: 2}, {name: 1}],"
     " mergingList: [{name: 3, value: 3}, {name: 1, value: 1}]}",
     "mergingList: [{name: 3, value: 3}, {name: 1, value: 1}]"),
    ("$setElementOrder contains item that is not present in the int list to be merged",
     "mergingIntList: [1, 3]", "$setElementOrder/mergingIntList: [3, 2, 1]", "mergingIntList: [3, 1]"),
    ("delete items in lists of scalars",
     "mergingIntList: [1, 2, 3, 4]",
     "{$setElementOrder/mergingIntList: [1, 2], $deleteFromPrimitiveList/mergingIntList: [3]}",
     "mergingIntList: [1, 2, 4]"),
    ("delete all duplicate items in lists of scalars",
     "mergingIntList: [1, 2, 3, 3, 4]",
     "{$setElementOrder/mergingIntList: [1, 2], $deleteFromPrimitiveList/mergingIntList: [3]}",
     "mergingIntList: [1, 2, 4]"),
    ("merge lists of maps",
     "mergingList: [{name: 1, other: a}, {name: 2, value: 2, other: b}]",
     "{$setElementOrder/mergingList: [{name: 4}, {name: 1}, {name: 2}, {name: 3}],"
     " mergingList: [{name: 4, value: 4}, {name: 3, value: 3}]}",
     "mergingList: [{name: 4, value: 4}, {name: 1, other: a}, {name: 2, value: 2, other: b},"
     " {name: 3, value: 3}]"),
    ("merge lists of maps with conflict",
     "mergingList: [{name: 1, other: a}, {name: 2, value: 3, other: b}]",
     "{$setElementOrder/mergingList: [{name: 1}, {name: 2}, {name: 3}],"
     " mergingList: [{name: 2, value: 2}, {name: 3, value: 3}]}",
     "mergingList: [{name: 1, other: a}, {name: 2, value: 2, other: b}, {name: 3, value: 3}]"),
    ("add field to map in merging list with conflict",
     "mergingList: [{name: 1, other: a}, {name: 3, value: 2, other: b}]",
     "{$setElementOrder/mergingList: [{name: 1}, {name: 2}],"
     " mergingList: [{name: 1, value: 1}, {name: 2, value: 2}]}",
     "mergingList: [{name: 1, value: 1, other: a}, {name: 2, value: 2}, {name: 3, value: 2, other: b}]"),
    ("delete field from nested map with conflict",
     "simpleMap: {key1: a, key2: 1, other: a}", "simpleMap: {key1: 1, key2: null}",
     "simpleMap: {key1: 1, other: a}"),
    ("replace list of scalars with conflict",
     "nonMergingIntList: [1, 4]", "nonMergingIntList: [2, 3]", "nonMergingIntList: [2, 3]"),
    ("delete all maps from merging list with conflict",
     "mergingList: [{name: 1, other: a}, {name: 2, other: b}]",
     "mergingList: [{name: 1, $patch: delete}, {name: 2, $patch: delete}]", "mergingList: []"),
    ("delete all maps from empty merging list",
     "mergingList: []", "mergingList: [{name: 1, $patch: delete}, {name: 2, $patch: delete}]",
     "mergingList: []"),
    ("defined null values should propagate overwrite current fields (with conflict)",
     "{name: a, other: a}", "{name: 1, value: 1, other: null}", "{name: 1, value: 1}"),
    ("nested merging list keeps server-only order",
     "mergingList: [{name: 1, mergingList: [{name: a}, {name: b}]}]",
     "mergingList: [{name: 1, mergingList: [{name: c}]}]",
     "mergingList: [{name: 1, mergingList: [{name: c}, {name: a}, {name: b}]}]"),
]


def _load(text: str) -> dict[str, Any]:
    value: dict[str, Any] = yaml.safe_load(text)
    return value


@pytest.mark.parametrize(("doc", "patch", "result"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_upstream_case(doc: str, patch: str, result: str) -> None:
    assert strategic_merge(_load(doc), _load(patch), MERGE_ITEM) == _load(result)


@pytest.mark.parametrize(("doc", "patch", "error"), [
    ("mergingList: [{name: 1}, {name: 3}, {name: 2}]",
     "{$setElementOrder/mergingList: [{name: 1}, {name: 2}, {name: 3}],"
     " mergingList: [{name: 3, value: 3}, {name: 1, value: 1}]}", "doesn't match"),
    ("mergingIntList: [1, 3, 2]",
     "{$setElementOrder/mergingIntList: [1, 2, 3], mergingIntList: [3, 1]}", "doesn't match"),
    ("mergingList: [{name: 1, value: a}]", "mergingList: [{value: b}]", "does not contain declared merge key"),
])
def test_upstream_errors(doc: str, patch: str, error: str) -> None:
    with pytest.raises(ApiError) as e:
        strategic_merge(_load(doc), _load(patch), MERGE_ITEM)
    assert e.value.code == 400
    assert error in e.value.message
