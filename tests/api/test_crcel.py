"""crcel: CRD CEL rules compiled from a schema and evaluated on objects (pure, table-driven)."""

from __future__ import annotations

from typing import Any

import pytest

from lite import cel
from lite.goduration import go_duration
from lite.server.api.strategies import crcel


def _node(schema: dict[str, Any]) -> crcel.Node:
    node = crcel.build(schema)
    assert node is not None
    return node


def _msgs(causes: list[Any]) -> list[str]:
    return [f"{c.field}: {c.message}" for c in causes]


def _obj(spec: Any) -> dict[str, Any]:
    return {"apiVersion": "x/v1", "kind": "X", "metadata": {"name": "n", "uid": "u"}, "spec": spec}


def _root(spec_schema: dict[str, Any], rules: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "object", "properties": {"spec": spec_schema}}
    if rules:
        schema["x-kubernetes-validations"] = rules
    return schema


def test_escaped_property_names_are_visible_as_upstream_spells_them() -> None:
    node = _node(_root({"type": "object", "properties": {"namespace": {"type": "string"},
                                                         "a-b": {"type": "string"}},
                        "x-kubernetes-validations": [{"rule": "self.__namespace__ == self.a__dash__b"}]}))
    assert node.validate(_obj({"namespace": "x", "a-b": "x"}), None) == []
    assert _msgs(node.validate(_obj({"namespace": "x", "a-b": "y"}), None)) == [
        'spec: Invalid value: "object": failed rule: self.__namespace__ == self.a__dash__b']


def test_root_rules_see_name_not_the_rest_of_metadata() -> None:
    node = _node(_root({"type": "object"}, [{"rule": "self.metadata.name == 'n' && self.kind == 'X'"}]))
    assert node.validate(_obj({}), None) == []
    spec = {"versions": [{"name": "v1", "schema": {"openAPIV3Schema": _root({"type": "object"}, [
        {"rule": "!has(self.metadata.uid)"}])}}]}
    assert "undefined field 'uid'" in crcel.check_crd(spec)[0].message


def test_a_stored_rule_that_no_longer_compiles_refuses_what_it_applies_to() -> None:
    node = _node(_root({"type": "object", "properties": {"a": {"type": "string"}},
                        "x-kubernetes-validations": [{"rule": "self.b == 1"}]}))
    got = _msgs(node.validate(_obj({"a": "x"}), None))
    assert len(got) == 1 and got[0].startswith('spec: Invalid value: "object": rule compile error: compilation '
                                               "failed: ERROR: <input>:1:5: undefined field 'b'"), got


@pytest.mark.parametrize(("old", "new", "want"), [
    (None, [{"k": "a", "v": 1}], []),  # no old list: transition rules do not run
    ([{"k": "a", "v": 1}], [{"k": "a", "v": 2}], ['spec[0]: Invalid value: "object": v is immutable']),
    ([{"k": "a", "v": 1}], [{"k": "b", "v": 9}, {"k": "a", "v": 1}], []),  # paired by key, not index
    ([{"k": "a", "v": 1}], [{"k": "b", "v": 2}], []),  # new key: nothing to compare with
])
def test_map_list_items_pair_with_old_items_by_key(old: Any, new: Any, want: list[str]) -> None:
    node = _node(_root({"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["k"],
                        "items": {"type": "object", "properties": {"k": {"type": "string"}, "v": {"type": "integer"}},
                                  "x-kubernetes-validations": [{"rule": "self.v == oldSelf.v",
                                                                "message": "v is immutable"}]}}))
    assert _msgs(node.validate(_obj(new), _obj(old) if old is not None else None)) == want


def test_atomic_lists_and_maps_do_not_pair_items() -> None:
    items = {"type": "object", "properties": {"v": {"type": "integer"}},
             "x-kubernetes-validations": [{"rule": "self.v == oldSelf.v"}]}
    atomic_list = _node(_root({"type": "array", "items": items}))
    assert atomic_list.validate(_obj([{"v": 2}]), _obj([{"v": 1}])) == []
    atomic_map = _node(_root({"type": "object", "x-kubernetes-map-type": "atomic", "properties": {"x": items}}))
    assert atomic_map.validate(_obj({"x": {"v": 2}}), _obj({"x": {"v": 1}})) == []
    granular = _node(_root({"type": "object", "additionalProperties": items}))
    assert _msgs(granular.validate(_obj({"x": {"v": 2}}), _obj({"x": {"v": 1}}))) == [
        'spec[x]: Invalid value: "object": failed rule: self.v == oldSelf.v']


@pytest.mark.parametrize(("rule", "want"), [
    ({"rule": "self > 1", "reason": "FieldValueForbidden", "message": "too small"}, "spec: Forbidden: too small"),
    ({"rule": "self > 1", "reason": "FieldValueRequired", "message": "needed"}, "spec: Required value: needed"),
    ({"rule": "self > 1", "reason": "FieldValueDuplicate"}, 'spec: Duplicate value: "integer"'),
    ({"rule": "self > 1", "messageExpression": "'got ' + string(self)"}, 'spec: Invalid value: "integer": got 1'),
    ({"rule": "self > 1", "message": "fixed", "messageExpression": "'x\\ny'"},  # line breaks: the message
     'spec: Invalid value: "integer": fixed'),
    ({"rule": "self > 1", "messageExpression": "string(1/0)"}, 'spec: Invalid value: "integer": failed rule: '
                                                             "self > 1"),
    ({"rule": "self / 0 > 1"}, 'spec: Invalid value: "integer": divide by zero evaluating rule: self / 0 > 1'),
])
def test_messages_and_reasons(rule: dict[str, Any], want: str) -> None:
    node = _node(_root({"type": "integer", "x-kubernetes-validations": [rule]}))
    assert _msgs(node.validate(_obj(1), None)) == [want]


def test_field_path_extends_the_error_path() -> None:
    node = _node(_root({"type": "object", "properties": {"a": {"type": "object", "properties": {
        "b": {"type": "string"}}}, "m": {"type": "object", "additionalProperties": {"type": "string"}}},
        "x-kubernetes-validations": [{"rule": "false", "fieldPath": ".a.b"}, {"rule": "false",
                                                                               "fieldPath": ".m['k.1']"}]}))
    assert [c.field for c in node.validate(_obj({}), None)] == ["spec.a.b", "spec.m[k.1]"]


def test_optional_old_self_runs_on_create_with_an_empty_optional() -> None:
    node = _node(_root({"type": "string", "x-kubernetes-validations": [
        {"rule": "!oldSelf.hasValue() || oldSelf.value() == self", "optionalOldSelf": True,
         "message": "immutable"}, {"rule": "oldSelf == self", "message": "plain transition"}]}))
    assert node.validate(_obj("a"), None) == []
    assert _msgs(node.validate(_obj("b"), _obj("a"))) == ['spec: Invalid value: "string": immutable',
                                                           'spec: Invalid value: "string": plain transition']


def test_unchanged_values_are_ratcheted() -> None:
    node = _node(_root({"type": "string", "x-kubernetes-validations": [{"rule": "self.size() < 3"}]}))
    assert node.validate(_obj("long"), _obj("long")) == []
    assert len(node.validate(_obj("longer"), _obj("long"))) == 1


def test_the_runtime_budget_stops_validation_with_upstreams_cause() -> None:
    node = _node(_root({"type": "array", "items": {"type": "string"},
                        "x-kubernetes-validations": [{"rule": "self.all(x, self.exists(y, x == y))"}]}))
    assert node.validate(_obj(["a", "b"]), None) == []
    got = node.validate(_obj([str(i) for i in range(2000)]), None, cel.Budget())
    assert _msgs(got) == ["spec: Invalid value: \"array\": 'operation cancelled: actual cost limit exceeded': no "
                          "further validation rules will be run due to call cost exceeds limit for rule: "
                          "self.all(x, self.exists(y, x == y))"]
    budget = cel.Budget(remaining=5)
    got = node.validate(_obj(["a", "b", "c"]), None, budget)
    assert _msgs(got) == ['spec: Invalid value: "array": validation failed due to running out of cost budget, no '
                          "further validation rules will be run"]


PREFIX = "spec.validation.openAPIV3Schema.properties[spec]"


@pytest.mark.parametrize(("spec_schema", "want"), [
    ({"type": "string", "x-kubernetes-validations": [{"rule": "self +"}]},
     [f"{PREFIX}.x-kubernetes-validations[0].rule: Invalid value: apiextensions.ValidationRule{{Rule:\"self +\", "
      'Message:"", MessageExpression:"", Reason:(*apiextensions.FieldValueErrorReason)(nil), FieldPath:"", '
      "OptionalOldSelf:(*bool)(nil)}: compilation failed: ERROR: <input>:1:7: Syntax error"]),
    ({"type": "string", "x-kubernetes-validations": [{"rule": "self.size()"}]},
     [f"{PREFIX}.x-kubernetes-validations[0].rule: Invalid value: apiextensions.ValidationRule{{Rule:\"self.size()\""
      ]),
    ({"type": "string", "x-kubernetes-validations": [{"rule": "self.matches('[')"}]},
     [f"{PREFIX}.x-kubernetes-validations[0].rule: Invalid value: apiextensions.ValidationRule{{Rule:"
      "\"self.matches('[')\""]),
    ({"type": "string", "x-kubernetes-validations": [{"rule": "self == 'a'", "reason": "Nope"}]},
     [f'{PREFIX}.x-kubernetes-validations[0].reason: Unsupported value: "Nope"']),
    ({"type": "object", "properties": {"a": {"type": "string"}},
      "x-kubernetes-validations": [{"rule": "true", "fieldPath": ".b"}]},
     [f'{PREFIX}.x-kubernetes-validations[0].fieldPath: Invalid value: ".b": does not refer to a valid field']),
    ({"type": "string", "x-kubernetes-validations": [{"rule": "self == 'a'", "optionalOldSelf": True}]},
     [f"{PREFIX}.x-kubernetes-validations[0].optionalOldSelf: Forbidden: may not be set if rule does not use "
      "oldSelf"]),
    ({"type": "string", "x-kubernetes-validations": [{"rule": "self == 'a'", "messageExpression": "1"}]},
     [f"{PREFIX}.x-kubernetes-validations[0].messageExpression: Invalid value"]),
    ({"type": "array", "maxItems": 10, "items": {"type": "string", "maxLength": 10},
      "x-kubernetes-validations": [{"rule": "self.all(x, self.exists(y, x == y))"}]}, []),
    ({"type": "array", "items": {"type": "string", "maxLength": 10,
                                 "x-kubernetes-validations": [{"rule": "self == oldSelf"}]}},
     [f'{PREFIX}.items.x-kubernetes-validations[0].rule: Invalid value: "self == oldSelf": oldSelf cannot be used '
      f"on the uncorrelatable portion of the schema within {PREFIX}"]),
    ({"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["k"], "items": {
        "type": "object", "properties": {"k": {"type": "string"}}, "required": ["k"],
        "x-kubernetes-validations": [{"rule": "self == oldSelf"}]}}, []),
    ({"type": "object", "x-kubernetes-map-type": "atomic", "properties": {"a": {
        "type": "string", "x-kubernetes-validations": [{"rule": "self == oldSelf"}]}}},
     [f"{PREFIX}.properties[a].x-kubernetes-validations[0].rule: Invalid value"]),
])
def test_crd_time_checks(spec_schema: dict[str, Any], want: list[str]) -> None:
    crd_spec = {"versions": [{"name": "v1", "schema": {"openAPIV3Schema": _root(spec_schema)}}]}
    got = _msgs(crcel.check_crd(crd_spec))
    assert len(got) == len(want), got
    for g, w in zip(got, want, strict=True):
        assert g.startswith(w), (g, w)


def test_cost_limits_per_rule_and_per_crd() -> None:
    rule = {"rule": "self.all(x, self.exists(y, x == y))"}
    spec = _root({"type": "array", "items": {"type": "string"}, "x-kubernetes-validations": [rule]})
    got = _msgs(crcel.check_crd({"versions": [{"name": "v1", "schema": {"openAPIV3Schema": spec}}]}))
    assert got[0] == (f"{PREFIX}.x-kubernetes-validations[0].rule: Forbidden: estimated rule cost exceeds budget by "
                      "factor of more than 100x (try simplifying the rule, or adding maxItems, maxProperties, and "
                      "maxLength where arrays, maps, and strings are declared)")
    assert got[-1].startswith("spec.validation.openAPIV3Schema: Forbidden: x-kubernetes-validations estimated rule & "
                              "messageExpression cost total for entire OpenAPIv3 schema exceeds budget by factor of")
    # many cheap rules under an unbounded list add up past the CRD total without any one passing its limit
    many = _root({"type": "array", "items": {"type": "string", "maxLength": 64, "x-kubernetes-validations": [
        {"rule": f"self.matches('^{chr(97 + i % 26)}')"} for i in range(30)]}})
    got = _msgs(crcel.check_crd({"versions": [{"name": "v1", "schema": {"openAPIV3Schema": many}}]}))
    assert got and got[-1].startswith("spec.validation.openAPIV3Schema: Forbidden: x-kubernetes-validations "
                                      "estimated rule & messageExpression cost total")
    assert not any("estimated rule cost exceeds" in g for g in got)


def test_different_schemas_per_version_are_reported_per_version() -> None:
    bad = _root({"type": "string", "x-kubernetes-validations": [{"rule": "self +"}]})
    good = _root({"type": "string"})
    got = crcel.check_crd({"versions": [{"name": "v1", "schema": {"openAPIV3Schema": good}},
                                        {"name": "v2", "schema": {"openAPIV3Schema": bad}}]})
    assert [c.field for c in got] == ["spec.versions[1].schema.openAPIV3Schema.properties[spec]."
                                      "x-kubernetes-validations[0].rule"]


def test_rules_see_numbers_as_doubles_and_formatted_strings_as_typed_values() -> None:
    spec = {"type": "object", "properties": {
        "ratio": {"type": "number"}, "at": {"type": "string", "format": "date-time"},
        "day": {"type": "string", "format": "date"}, "every": {"type": "string", "format": "duration"},
        "blob": {"type": "string", "format": "byte"}},
        "x-kubernetes-validations": [
            {"rule": "self.ratio + 0.5 > 2.0"},
            {"rule": "self.at < timestamp('2030-01-01T00:00:00Z')"},
            {"rule": "self.day == timestamp('2024-02-29T00:00:00Z')"},
            {"rule": "self.every > duration('1m') && self.every < duration('2h')"},
            {"rule": "self.blob == b'hi'"}]}
    node = _node(_root(spec))
    ok = {"ratio": 2, "at": "2020-01-01T00:00:00Z", "day": "2024-02-29", "every": "1h30m", "blob": "aGk="}
    assert node.validate(_obj(ok), None) == []
    bad = {**ok, "ratio": 1, "every": "30s"}
    assert [c.message for c in node.validate(_obj(bad), None)] == [
        'Invalid value: "object": failed rule: self.ratio + 0.5 > 2.0',
        "Invalid value: \"object\": failed rule: self.every > duration('1m') && self.every < duration('2h')"]


@pytest.mark.parametrize(("text", "micros"), [
    ("1h30m", 5_400_000_000), ("-1.5s", -1_500_000), ("300ms", 300_000), ("0", 0), ("2us", 2), ("1.5h", 5.4e9)])
def test_go_durations(text: str, micros: float) -> None:
    assert go_duration(text).total_seconds() * 1e6 == pytest.approx(micros)


@pytest.mark.parametrize("text", ["", "1", "1x", "h", "1h-2m"])
def test_go_durations_refused(text: str) -> None:
    with pytest.raises(ValueError):
        go_duration(text)


def test_list_items_are_checked_in_one_batch_with_per_item_messages_and_fallback() -> None:
    item = {"type": "object", "properties": {"n": {"type": "integer"}, "d": {"type": "integer"}},
            "x-kubernetes-validations": [{"rule": "self.n < 10", "messageExpression": "'n is ' + string(self.n)"},
                                         {"rule": "self.n / self.d >= 0", "fieldPath": ".d"}]}
    node = _node(_root({"type": "array", "items": item}))
    assert node.properties["spec"].items_batch is not None
    ok = [{"n": 1, "d": 1}, {"n": 2, "d": 1}]
    assert node.validate(_obj(ok), None) == []
    bad = [{"n": 1, "d": 1}, {"n": 12, "d": 1}, {"n": -4, "d": 2}]
    assert _msgs(node.validate(_obj(bad), None)) == [
        'spec[1]: Invalid value: "object": n is 12',
        'spec[2].d: Invalid value: "object": failed rule: self.n / self.d >= 0']
    # an item whose rule fails to evaluate: the items are checked one by one, each with its own error
    erring = [{"n": 1, "d": 0}, {"n": 11, "d": 1}]
    assert _msgs(node.validate(_obj(erring), None)) == [
        'spec[0]: Invalid value: "object": divide by zero evaluating rule: self.n / self.d >= 0',
        'spec[1]: Invalid value: "object": n is 11']


@pytest.mark.parametrize(("rule", "want"), [
    ("self.nosuch == 1", ["ERROR: <input>:1:5: undefined field 'nosuch'"]),
    ("has(self.a.zz)", ["ERROR: <input>:1:11: undefined field 'zz'"]),
    ("self.l.all(x, x.name == 'a' && x.bad)", ["ERROR: <input>:1:33: undefined field 'bad'"]),
    ("self.m.all(k, self.m[k].v > 0 && self.m[k].w > 0)", ["ERROR: <input>:1:43: undefined field 'w'"]),
    ("self.__namespace__ == '' && self.a.b == ''", []),  # escaped names refer to their properties
    # an object that preserves unknown fields exposes its declared fields only, as upstream's declared types
    ("self.free.anything == 1", ["ERROR: <input>:1:10: undefined field 'anything'"]),
    ("self.dyn.x == 1", []),  # int-or-string: dyn, checked at runtime
    ("self.l.map(x, x.name).all(n, n.size() > 0)", []),
    ("cel.bind(x, self.a, x.b == '')", []),
])
def test_fields_a_schema_does_not_declare_are_compile_errors(rule: str, want: list[str]) -> None:
    spec = {"type": "object", "properties": {
        "namespace": {"type": "string"}, "a": {"type": "object", "properties": {"b": {"type": "string"}}},
        "l": {"type": "array", "items": {"type": "object", "properties": {"name": {"type": "string"}}}},
        "m": {"type": "object", "additionalProperties": {"type": "object", "properties": {"v": {"type": "integer"}}}},
        "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
        "dyn": {"x-kubernetes-int-or-string": True}},
        "x-kubernetes-validations": [{"rule": rule}]}
    got = crcel.check_crd({"versions": [{"name": "v1", "schema": {"openAPIV3Schema": _root(spec)}}]})
    assert [w in got[0].message for w in want] == [True] * len(want) if want else got == [], _msgs(got)
    if want:
        assert "compilation failed: ERROR: <input>:1:" in got[0].message


DURATION_RULE = {"rule": "duration(self) >= duration('1ms')", "message": "must be a valid duration greater than 1ms"}


def _nested_lists(outer: int | None, inner: int | None) -> dict[str, Any]:
    def bounded(schema: dict[str, Any], n: int | None) -> dict[str, Any]:
        return schema if n is None else {**schema, "maxItems": n}
    leaf = {"type": "object", "properties": {"idleTimeout": {"type": "string",
                                                             "x-kubernetes-validations": [DURATION_RULE]}}}
    return _root(bounded({"type": "array", "items": {"type": "object", "properties": {
        "ports": bounded({"type": "array", "items": leaf}, inner)}}}, outer))


def test_a_rule_under_unbounded_lists_is_costed_by_how_many_of_its_values_fit_a_request() -> None:
    # Istio's DestinationRule: subsets[].trafficPolicy.portLevelSettings[].connectionPool.http.idleTimeout, no
    # maxItems anywhere; upstream multiplies the rule (4) by 3 MiB / len('"",') = 1,048,576, not by the product
    # of both lists' estimated lengths, and accepts it
    assert crcel.check_crd({"versions": [{"name": "v1", "schema": {
        "openAPIV3Schema": _nested_lists(None, None)}}]}) == []
    assert crcel.check_crd({"versions": [{"name": "v1", "schema": {
        "openAPIV3Schema": _nested_lists(None, 10**6)}}]}) == []


def test_declared_bounds_multiply_down_the_schema() -> None:
    # every enclosing list bounded: 2000 x 2000 values x 4 = 16,000,000 > 10,000,000
    got = _msgs(crcel.check_crd({"versions": [{"name": "v1", "schema": {
        "openAPIV3Schema": _nested_lists(2000, 2000)}}]}))
    assert got == [f"{PREFIX}.items.properties[ports].items.properties[idleTimeout]."
                   "x-kubernetes-validations[0].rule: Forbidden: estimated rule cost exceeds budget by factor of 1.6x "
                   "(try simplifying the rule, or adding maxItems, maxProperties, and maxLength where arrays, maps, "
                   "and strings are declared)"]
    assert crcel.check_crd({"versions": [{"name": "v1", "schema": {
        "openAPIV3Schema": _nested_lists(1000, 2000)}}]}) == []


TYPED = {"type": "object", "properties": {"replicas": {"type": "integer"}, "name": {"type": "string"},
                                         "port": {"x-kubernetes-int-or-string": True}}}


@pytest.mark.parametrize(("rule", "where", "want"), [
    ({"rule": "self.replicas.startsWith('a')"}, "rule",
     "compilation failed: ERROR: <input>:1:25: found no matching overload for 'startsWith' applied to "
     "'int.(string)'\n | self.replicas.startsWith('a')\n | ........................^"),
    ({"rule": "self.name in [1, 'a']"}, "rule",
     "compilation failed: ERROR: <input>:1:18: expected type 'int' but found 'string'"),
    ({"rule": "self.name"}, "rule", "cel expression must evaluate to a bool"),
    ({"rule": "self.port"}, "rule", "cel expression must evaluate to a bool"),  # dyn is not bool
    ({"rule": "self.replicas > 0", "messageExpression": "self.port"}, "messageExpression",
     "must evaluate to a string"),
    ({"rule": "self.replicas > 0", "messageExpression": "'replicas: ' + self.replicas"}, "messageExpression",
     "messageExpression compilation failed: ERROR: <input>:1:14: found no matching overload for '_+_' applied "
     "to '(string, int)'"),
    # oldSelf is an optional with optionalOldSelf: compared bare, it does not type-check (upstream's case)
    ({"rule": "self.replicas >= oldSelf.replicas", "optionalOldSelf": True}, "rule",
     "compilation failed: ERROR: <input>:1:15: found no matching overload for '_>=_' applied to "
     "'(int, optional_type(int))'\n | self.replicas >= oldSelf.replicas\n | ..............^"),
    ({"rule": "self.replicas >= oldSelf.value().replicas", "optionalOldSelf": True}, "", ""),
    ({"rule": "self.replicas >= 1 && self.name.startsWith('a')", "messageExpression": "self.name + ' is bad'"}, "",
     ""),
])
def test_rules_are_type_checked_against_the_schema_at_crd_time(rule: dict[str, Any], where: str, want: str) -> None:
    spec = {"versions": [{"name": "v1", "schema": {"openAPIV3Schema": _root({
        **TYPED, "x-kubernetes-validations": [rule]})}}]}
    got = crcel.check_crd(spec)
    if not want:
        assert got == [], _msgs(got)
        return
    assert len(got) == 1, _msgs(got)
    assert got[0].field == f"spec.validation.openAPIV3Schema.properties[spec].x-kubernetes-validations[0].{where}"
    assert got[0].message.startswith("Invalid value: apiextensions.ValidationRule{Rule:"), got[0].message
    assert want in got[0].message, got[0].message


def test_a_schema_protobuf_cannot_declare_is_not_refused_for_it() -> None:
    # two maps `a_b` and `aB` need the same protobuf entry type name: no typed check, never a false refusal
    spec = {"type": "object", "properties": {
        "a_b": {"type": "object", "additionalProperties": {"type": "string"}},
        "aB": {"type": "object", "additionalProperties": {"type": "integer"}}},
        "x-kubernetes-validations": [{"rule": "self.a_b['k'] == 'x' && self.aB['k'] == 1"}]}
    assert crcel.check_crd({"versions": [{"name": "v1", "schema": {"openAPIV3Schema": _root(spec)}}]}) == []


def test_envoy_gateway_rule_shapes_fit_upstreams_cost_limits() -> None:
    # Envoy Gateway's CRDs (accepted upstream): durations compared as durations, prefixes traversed, under
    # lists without maxItems
    keepalive = {"type": "object", "properties": {"timeout": {"type": "string"}, "interval": {"type": "string"}},
                 "x-kubernetes-validations": [{"rule": "!has(self.timeout) || !has(self.interval) || "
                                                       "duration(self.timeout) < duration(self.interval)"}]}
    namespaces = {"type": "array", "maxItems": 8, "items": {"type": "string"},
                  "x-kubernetes-validations": [{"rule": "self.all(f, !f.startsWith('envoy.filters.http'))"}]}
    sinks = {"type": "array", "maxItems": 50, "items": {"type": "object", "properties": {"keepalive": keepalive}}}
    spec = {"type": "object", "properties": {
        "settings": {"type": "array", "maxItems": 50, "items": {"type": "object", "properties": {"sinks": sinks}}},
        "extProc": {"type": "array", "maxItems": 16, "items": {"type": "object", "properties": {
            "namespaces": namespaces}}}}}
    assert crcel.check_crd({"versions": [{"name": "v1", "schema": {"openAPIV3Schema": _root(spec)}}]}) == []
