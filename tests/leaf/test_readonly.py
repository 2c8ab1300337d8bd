"""lite.readonly: every in-place change of a frozen value is refused; reads and copies behave as plain values."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import orjson
import pytest

from lite.readonly import FrozenDict, FrozenList, SharedObjectMutated, freeze, thaw

VALUE = {"metadata": {"name": "a", "labels": {"x": "1"}}, "spec": {"items": [1, {"k": "v"}, [2]]}}

CHANGES: list[tuple[str, Callable[[Any], object]]] = [
    ("setitem", lambda f: f.__setitem__("n", 1)),
    ("nested setitem", lambda f: f["metadata"]["labels"].__setitem__("x", "2")),
    ("delitem", lambda f: f.__delitem__("spec")),
    ("update", lambda f: f["metadata"].update(name="b")),
    ("ior", lambda f: f["metadata"].__ior__({"name": "b"})),
    ("pop", lambda f: f.pop("spec")),
    ("popitem", lambda f: f.popitem()),
    ("clear", lambda f: f["metadata"].clear()),
    ("setdefault of a missing key", lambda f: f.setdefault("status", {})),
    ("list append", lambda f: f["spec"]["items"].append(3)),
    ("list extend", lambda f: f["spec"]["items"].extend([3])),
    ("list insert", lambda f: f["spec"]["items"].insert(0, 3)),
    ("list setitem", lambda f: f["spec"]["items"].__setitem__(0, 3)),
    ("list delitem", lambda f: f["spec"]["items"].__delitem__(0)),
    ("list pop", lambda f: f["spec"]["items"].pop()),
    ("list remove", lambda f: f["spec"]["items"].remove(1)),
    ("list sort", lambda f: f["spec"]["items"][2].sort()),
    ("list reverse", lambda f: f["spec"]["items"].reverse()),
    ("list iadd", lambda f: f["spec"]["items"].__iadd__([3])),
    ("list imul", lambda f: f["spec"]["items"].__imul__(2)),
    ("list clear", lambda f: f["spec"]["items"].clear()),
    ("dict in a list", lambda f: f["spec"]["items"][1].__setitem__("k", "w")),
    ("frozen child of a shallow copy", lambda f: dict(f)["metadata"].__setitem__("name", "b")),
]


@pytest.mark.parametrize(("what", "change"), CHANGES, ids=[c[0] for c in CHANGES])
def test_every_in_place_change_is_refused(what: str, change: Callable[[Any], object]) -> None:
    frozen = freeze(VALUE)
    with pytest.raises(SharedObjectMutated):
        change(frozen)
    assert frozen == VALUE


def test_reads_and_copies_behave_as_plain_values() -> None:
    frozen = freeze(VALUE)
    assert isinstance(frozen, dict) and type(frozen) is FrozenDict and type(frozen["spec"]["items"]) is FrozenList
    assert frozen == VALUE and orjson.loads(orjson.dumps(frozen)) == VALUE
    assert frozen.setdefault("metadata") is frozen["metadata"]  # a read of a present key is allowed
    for plain in (thaw(frozen), copy.deepcopy(frozen)):
        plain["metadata"]["labels"]["x"] = "2"
        plain["spec"]["items"].append(3)
        assert type(plain) is dict and frozen == VALUE
    shallow = copy.copy(frozen)
    shallow["status"] = {}
    assert type(shallow) is dict and "status" not in frozen
    assert freeze(3) == 3 and freeze("s") == "s"
