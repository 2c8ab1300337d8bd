"""lite.cel.schematypes and lite.cel.checking: structural schemas as upstream's CEL declared types, rules
type-checked against them with cel-go's messages (pure, table-driven)."""

from __future__ import annotations

from typing import Any

import pytest

from lite import cel
from lite.cel import checking, schematypes
from lite.cel.schematypes import DeclType


def _show(t: DeclType | None) -> str | None:
    """A DeclType as text: `object{a: int, b: list(string)}`."""
    if t is None:
        return None
    if t.kind == "object":
        return "object{" + ", ".join(f"{k}: {_show(v)}" for k, v in t.fields) + "}"
    if t.kind in ("list", "map"):
        inner = _show(t.elem)
        return f"list({inner})" if t.kind == "list" else f"map(string, {inner})"
    return t.kind


S = {"type": "string"}
META = "metadata: object{name: string, generateName: string}"


@pytest.mark.parametrize(("schema", "root", "want"), [
    ({"type": "integer"}, False, "int"),
    ({"type": "number"}, False, "double"),
    ({"type": "boolean"}, False, "bool"),
    (S, False, "string"),
    ({"type": "string", "format": "byte"}, False, "bytes"),
    ({"type": "string", "format": "duration"}, False, "google.protobuf.Duration"),
    ({"type": "string", "format": "date"}, False, "google.protobuf.Timestamp"),
    ({"type": "string", "format": "date-time"}, False, "google.protobuf.Timestamp"),
    ({"type": "string", "format": "email"}, False, "string"),
    ({"x-kubernetes-int-or-string": True}, False, "dyn"),
    ({"x-kubernetes-int-or-string": True, "anyOf": [{"type": "integer"}, {"type": "string"}]}, False, "dyn"),
    ({"type": "array", "items": {"type": "integer"}}, False, "list(int)"),
    ({"type": "array", "items": {"type": "array", "items": S}}, False, "list(list(string))"),
    ({"type": "array"}, False, None),  # no items: not exposed
    ({"type": "array", "items": {"x-kubernetes-preserve-unknown-fields": True}}, False, None),
    ({"type": "object", "additionalProperties": {"type": "integer"}}, False, "map(string, int)"),
    ({"type": "object", "additionalProperties": {"type": "object", "properties": {"v": S}}}, False,
     "map(string, object{v: string})"),
    ({"type": "object", "properties": {"a": S, "b": {"type": "array", "items": {"type": "number"}}}}, False,
     "object{a: string, b: list(double)}"),
    # escaped names as rules spell them; a name that cannot be escaped is left out, as are untyped fields
    ({"type": "object", "properties": {"namespace": S, "a-b": S, "x.y": S, "a/b": S, "__c": S, "in": S, "1x": S,
                                       "a b": S, "free": {"x-kubernetes-preserve-unknown-fields": True}}}, False,
     "object{__namespace__: string, a__dash__b: string, x__dot__y: string, a__slash__b: string, "
     "__underscores__c: string, __in__: string}"),
    # an object that preserves unknown fields exposes its declared fields only
    ({"type": "object", "x-kubernetes-preserve-unknown-fields": True, "properties": {"a": S}}, False,
     "object{a: string}"),
    ({"type": "object", "x-kubernetes-preserve-unknown-fields": True}, False, "object{}"),
    ({"x-kubernetes-preserve-unknown-fields": True}, False, None),
    # the root of a resource (and an embedded resource): apiVersion, kind, metadata of name and generateName
    ({"type": "object", "properties": {"spec": {"type": "object"}}}, True,
     f"object{{spec: object{{}}, apiVersion: string, kind: string, {META}}}"),
    ({"type": "object", "properties": {"metadata": {"type": "object", "properties": {"labels": {
        "type": "object", "additionalProperties": S}}}}}, True,
     f"object{{{META}, apiVersion: string, kind: string}}"),
    ({"type": "object", "properties": {"t": {"type": "object", "x-kubernetes-embedded-resource": True,
                                             "x-kubernetes-preserve-unknown-fields": True}}}, False,
     f"object{{t: object{{apiVersion: string, kind: string, {META}}}}}"),
])
def test_schema_decl_types_follow_upstream(schema: dict[str, Any], root: bool, want: str | None) -> None:
    assert _show(schematypes.decl_type(schema, root)) == want


def _env(schema: dict[str, Any], root: bool = False) -> cel.Environment:
    decl = schematypes.decl_type(schema, root)
    assert decl is not None
    decls = schematypes.Declarations()
    t = decls.cel_type(decl)
    return cel.Environment({"self": t, "oldSelf": t}, messages=decls.files(), checking=True)


SPEC = {"type": "object", "properties": {
    "replicas": {"type": "integer"}, "name": S, "ratio": {"type": "number"},
    "port": {"x-kubernetes-int-or-string": True},
    "tags": {"type": "array", "items": S}, "labels": {"type": "object", "additionalProperties": S},
    "grid": {"type": "array", "items": {"type": "array", "items": {"type": "integer"}}},
    "byKey": {"type": "object", "additionalProperties": {"type": "array", "items": {"type": "integer"}}},
    "items": {"type": "array", "items": {"type": "object", "properties": {"n": {"type": "integer"}}}},
    "when": {"type": "string", "format": "date-time"}, "every": {"type": "string", "format": "duration"},
    "raw": {"type": "string", "format": "byte"}, "in": S, "free": {"type": "object",
                                                                  "x-kubernetes-preserve-unknown-fields": True}}}
ENV = _env(SPEC, True)


@pytest.mark.parametrize(("rule", "error"), [
    ("self.replicas.startsWith('a')", "ERROR: <input>:1:25: found no matching overload for 'startsWith' applied to "
                                      "'int.(string)'\n | self.replicas.startsWith('a')\n | ........................^"),
    ("self.name + 1 == 'a'", "ERROR: <input>:1:11: found no matching overload for '_+_' applied to '(string, int)'"),
    ("self.replicas == 'a'", "found no matching overload for '_==_' applied to '(int, string)'"),
    ("self.name == null", "found no matching overload for '_==_' applied to '(string, null_type)'"),
    ("size(self.replicas) > 0", "found no matching overload for 'size' applied to '(int)'"),
    ("self.tags.exists(t, t > 1)", "found no matching overload for '_>_' applied to '(string, int)'"),
    ("self.items.all(i, i.n.startsWith('x'))", "applied to 'int.(string)'"),
    ("self.labels['a'] + 1 > 0", "found no matching overload for '_+_' applied to '(string, int)'"),
    ("self.when + 1 > self.when", "applied to '(google.protobuf.Timestamp, int)'"),
    ("self.nosuch == 1", "ERROR: <input>:1:5: undefined field 'nosuch'\n | self.nosuch == 1\n | ....^"),
    ("self.free.x == 1", "ERROR: <input>:1:10: undefined field 'x'"),
    ("self.metadata.labels.size() > 0", "ERROR: <input>:1:14: undefined field 'labels'"),
    ("self.name.first == 'a'", "ERROR: <input>:1:10: type 'string' does not support field selection"),
    # fine: what upstream's checker accepts
    ("self.replicas > 0 && self.ratio > 0 && self.ratio <= self.replicas", None),  # cross-type numeric
    ("self.port > 1 || self.port.startsWith('a')", None),  # int-or-string: dyn
    ("self.byKey['a'].all(x, x > 0) && self.grid.all(r, r.all(c, c >= 0))", None),
    # a list in a list (or map) inside an object: protobuf cannot declare it, the inner one is list(dyn) and
    # what it holds is checked at runtime only
    ("self.grid[0][0] == 'a'", None),
    ("self.when < timestamp('2030-01-01T00:00:00Z') && self.every > duration('1s')", None),
    ("self.raw.size() > 0 && string(self.raw) != ''", None),
    ("self.__in__ == 'a' && self.metadata.name.startsWith('w-') && self.kind == 'W'", None),
    ("self.tags.all(i, t, t.size() > i) && self.tags.isSorted() && self.tags.indexOf('a') >= 0", None),
    ("has(self.name) && self.?name.orValue('') != '' && self == oldSelf", None),
    ("quantity(self.name).isLessThan(quantity('1Gi')) && isCIDR(self.name) && url(self.name).getHost() != ''", None),
])
def test_rules_are_checked_against_the_schema_types(rule: str, error: str | None) -> None:
    if error is None:
        assert ENV.check(rule) == cel.BOOL
        return
    with pytest.raises(cel.CompileError) as info:
        ENV.check(rule)
    assert error in str(info.value), str(info.value)
    assert "*error*" not in str(info.value) and "not found in struct" not in str(info.value)


def test_a_list_of_lists_as_self_is_typed_all_the_way_down() -> None:
    env = _env({"type": "array", "items": {"type": "array", "items": {"type": "integer"}}})
    assert env.check("self[0][0] > 1") == cel.BOOL
    with pytest.raises(cel.CompileError, match=r"applied to '\(int, string\)'"):
        env.check("self[0][0] == 'a'")


def _type_of(text: str) -> str | None:
    try:
        return cel.go_type_name(ENV.check(text))
    except cel.CompileError:
        return None


@pytest.mark.parametrize(("src", "want"), [
    ("self.name in [1, 'a']", [(17, "expected type 'int' but found 'string'")]),
    ("['a', 'b', 1].size() > 0", [(11, "expected type 'string' but found 'int'")]),
    ("[1, 2.0].size() > 0", [(4, "expected type 'int' but found 'double'")]),
    ("[1, -1, 'x' + 'y'].size() > 0", [(12, "expected type 'int' but found 'string'")]),  # at the operator
    ("[self.replicas, self.name].size() > 0", [(20, "expected type 'int' but found 'string'")]),  # at the dot
    ("[[1], ['a']].size() > 0", [(6, "expected type 'list(int)' but found 'list(string)'")]),
    ("{'a': 1, 'b': 'c'}.size() > 0", [(14, "expected type 'int' but found 'string'")]),
    ("{'a': 1, 2: 1}.size() > 0", [(9, "expected type 'string' but found 'int'")]),
    ("[1, 2, 3].size() > 0 && self.name in ['a', 'b']", []),
    ("[1, self.port].size() > 0", []),  # dyn: not compared
    ("self.tags.all(t, [t, 1].size() > 0)", []),  # a macro's variable: cannot be typed alone
    ("'%s %d'.format(['a', 1]) != ''", []),  # format's arguments are exempt
])
def test_list_and_map_literals_must_be_homogeneous(src: str, want: list[tuple[int, str]]) -> None:
    assert checking.mixed_literals(src, _type_of) == want


def test_a_type_check_environment_is_not_a_runtime_one() -> None:
    # the comparison overloads of a checking environment exist to type-check; evaluation runs dyn programs
    assert ENV.check("self.ratio >= 1") == cel.BOOL
    dyn = cel.Environment({"self": cel.DYN})
    assert dyn.compile("self.ratio >= 1").eval({"self": {"ratio": 1.5}}) is True


def test_fields_whose_json_names_would_clash_are_declared() -> None:
    env = _env({"type": "object", "properties": {"x_y": S, "xY": {"type": "integer"}}})
    assert env.check("self.x_y.size() > self.xY") == cel.BOOL
    with pytest.raises(cel.CompileError, match=r"applied to '\(string, int\)'"):
        env.check("self.x_y + self.xY == 'a'")


def test_a_reserved_word_selects_its_escaped_property_as_in_kubernetes_1_32() -> None:
    # JobSet's CRD: `!has(t.metadata.namespace)`; escaped or not, the same string field
    env = _env({"type": "object", "properties": {"namespace": S, "continue": {"type": "integer"}}})
    assert env.check("has(self.namespace) && self.__namespace__ == self.namespace && self.continue > 0") == cel.BOOL
    with pytest.raises(cel.CompileError, match=r"applied to '\(string, int\)'"):
        env.check("self.namespace + 1 == 2")
