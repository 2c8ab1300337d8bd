"""lite.cel: the Kubernetes CEL libraries, errors and cost estimates (pure, table-driven)."""

from __future__ import annotations

from typing import Any

import pytest

from lite import cel
from lite.cel import cost

ENV = cel.Environment({"self": cel.DYN, "oldSelf": cel.DYN})


@pytest.mark.parametrize(("src", "want"), [
    # lists
    ("[1, 2, 3].isSorted()", True),
    ("['b', 'a'].isSorted()", False),
    ("[1, 2, 3].sum()", 6),
    ("[1.5, 2.5].sum()", 4.0),
    ("[3, 1, 2].min()", 1),
    ("['a', 'c', 'b'].max()", "c"),
    ("[1, 2, 3, 2].indexOf(2)", 1),
    ("[1, 2, 3, 2].lastIndexOf(2)", 3),
    ("['a', 'b'].indexOf('z')", -1),
    ("[[1], [2]].indexOf([2])", 1),
    ("'hello'.indexOf('l', 3)", 3),
    ("'hello'.lastIndexOf('l', 2)", 2),
    ("'hello'.lastIndexOf('z')", -1),
    ("sets.contains([1, 2, 3], [3, 1])", True),
    ("sets.equivalent([1, 2], [2, 1, 1])", True),
    ("sets.intersects([1, 2], [5])", False),
    # strings extension
    ("'hello'.charAt(1)", "e"),
    ("'hello'.indexOf('l')", 2),
    ("'hello'.lastIndexOf('l')", 3),
    ("'HeLLo'.lowerAscii()", "hello"),
    ("'hello'.upperAscii()", "HELLO"),
    ("'a-b-c'.replace('-', '+')", "a+b+c"),
    ("'a,b,c'.split(',')", ["a", "b", "c"]),
    ("'hello'.substring(1, 3)", "el"),
    ("'  x  '.trim()", "x"),
    ("['a', 'b'].join('/')", "a/b"),
    ("strings.quote('a\"b')", '"a\\"b"'),
    # regex
    ("'abc 123 def 456'.find('[0-9]+')", "123"),
    ("'abc 123 def 456'.findAll('[0-9]+')", ["123", "456"]),
    ("'abc 123 def 456'.findAll('[0-9]+', 1)", ["123"]),
    ("'abc'.find('[0-9]+')", ""),
    ("'/a/b'.matches('^/')", True),
    # URLs
    ("isURL('https://example.com/path')", True),
    ("isURL('/absolute/path')", True),
    ("isURL('relative/path')", False),
    ("isURL('https://a b')", False),
    ("url('https://example.com:8443/a?x=1').getScheme()", "https"),
    ("url('https://example.com:8443/a').getHost()", "example.com:8443"),
    ("url('https://[::1]:8443/a').getHostname()", "::1"),
    ("url('https://example.com:8443/a').getPort()", "8443"),
    ("url('https://example.com').getPort()", ""),
    ("url('https://example.com/a%20b').getEscapedPath()", "/a%20b"),
    ("url('https://example.com/?k=a&k=b&j=c').getQuery()", {"k": ["a", "b"], "j": ["c"]}),
    # IP / CIDR
    ("isIP('192.168.0.1')", True),
    ("isIP('192.168.0.256')", False),
    ("isIP('::ffff:1.2.3.4')", False),
    ("isIP('fe80::1%eth0')", False),
    ("ip('10.0.0.1').family()", 4),
    ("ip('2001:db8::1').family()", 6),
    ("ip.isCanonical('2001:db8::1')", True),
    ("ip.isCanonical('2001:DB8::1')", False),
    ("ip('127.0.0.1').isLoopback()", True),
    ("ip('0.0.0.0').isUnspecified()", True),
    ("ip('169.254.1.1').isLinkLocalUnicast()", True),
    ("ip('224.0.0.1').isLinkLocalMulticast()", True),
    ("ip('8.8.8.8').isGlobalUnicast()", True),
    ("ip('2001:db8::1') == ip('2001:0db8::1')", True),
    ("isCIDR('10.0.0.0/8')", True),
    ("isCIDR('10.0.0.0')", False),
    ("isCIDR('10.0.0.0/33')", False),
    ("cidr('10.0.0.0/8').containsIP('10.1.2.3')", True),
    ("cidr('10.0.0.0/8').containsIP(ip('11.0.0.1'))", False),
    ("cidr('10.0.0.0/8').containsCIDR('10.1.0.0/16')", True),
    ("cidr('10.1.0.0/16').containsCIDR(cidr('10.0.0.0/8'))", False),
    ("cidr('10.1.2.3/8').ip() == ip('10.1.2.3')", True),
    ("cidr('10.1.2.3/8').masked() == cidr('10.0.0.0/8')", True),
    ("cidr('10.0.0.0/8').prefixLength()", 8),
    ("string(ip('2001:DB8::1'))", "2001:db8::1"),
    ("string(cidr('10.0.0.1/8'))", "10.0.0.1/8"),
    ("string(cidr('10.1.0.0/16').ip()) + '|' + string(cidr('10.1.2.3/16').masked())", "10.1.0.0|10.1.0.0/16"),
    ("string(1) + string(1.5) + string(true) + string(b'x') + string(string(ip('::1')))", "11.5truex::1"),
    # quantity
    ("isQuantity('1.5Gi')", True),
    ("isQuantity('1.5Gix')", False),
    ("quantity('1Gi') == quantity('1024Mi')", True),
    ("quantity('1Gi').isGreaterThan(quantity('1000Mi'))", True),
    ("quantity('500m').isLessThan(quantity('1'))", True),
    ("quantity('2').compareTo(quantity('2000m'))", 0),
    ("quantity('1').add(quantity('500m')) == quantity('1500m')", True),
    ("quantity('1').add(2) == quantity('3')", True),
    ("quantity('3').sub(quantity('1')).asInteger()", 2),
    ("quantity('3').sub(5).sign()", -1),
    ("quantity('1.5').isInteger()", False),
    ("quantity('1k').asInteger()", 1000),
    ("quantity('250m').asApproximateFloat()", 0.25),
    # optional, bind
    ("{'a': 1}.?b.orValue(7)", 7),
    ("cel.bind(x, 2, x * x)", 4),
    # two-variable comprehensions (1.32)
    ("[10, 20].all(i, v, v == (i + 1) * 10)", True),
    ("{'a': 1, 'b': 2}.exists(k, v, k == 'b' && v == 2)", True),
    ("[1, 2, 1].existsOne(i, v, v == 2)", True),
    ("[1, 2, 1].existsOne(i, v, v == 1)", False),
    ("[5, 6].transformList(i, v, i * v)", [0, 6]),
    ("[5, 6, 7].transformList(i, v, v > 5, i)", [1, 2]),
    ("{'a': 1}.transformMap(k, v, v + 1)", {"a": 2}),
    ("{'a': 1, 'b': 5}.transformMap(k, v, v > 2, k + '!')", {"b": "b!"}),
    ("{'a': 1}.transformMapEntry(k, v, {v: k})", {1: "a"}),
    ("[[1, 2], [3]].all(i, l, l.all(j, x, x > i))", True),
    # format: validate returns optional<list<string>>, format.named optional<Format>
    ("format.dns1123Label().validate('my-name').hasValue()", False),
    ("format.dns1123Label().validate('Not_OK').value().size()", 1),
    ("format.dns1123Label().validate('ok').orValue(['none'])", ["none"]),
    ("format.named('labelValue').hasValue()", True),
    ("format.named('nosuch').hasValue()", False),
    ("format.named('uuid').value().validate('nope').value()", ["does not match the UUID format"]),
    ("format.named( 'dns1035Label' ).value().validate(format.named('uri').value().validate('x y').hasValue() "
     "? '1a' : 'a1').hasValue()", True),
])
def test_library_functions(src: str, want: Any) -> None:
    assert ENV.compile(src).eval({}) == want


@pytest.mark.parametrize(("name", "value", "errors"), [
    ("dns1123Label", "my-name", []),
    ("dns1123Label", "My-Name", 1),
    ("dns1123Label", "a" * 64, 1),
    ("dns1123Subdomain", "apiextensions.k8s.io", []),
    ("dns1123Subdomain", "-bad.", 1),
    ("dns1035Label", "1abc", 1),
    ("qualifiedName", "example.com/MyName", []),
    ("qualifiedName", "a/b/c", 1),
    ("dns1123LabelPrefix", "my-prefix-", []),
    ("labelValue", "", []),
    ("labelValue", "-x", 1),
    ("uri", "http://example.com", []),
    ("uri", "not a uri", 1),
    ("uuid", "123e4567-e89b-12d3-a456-426614174000", []),
    ("uuid", "nope", 1),
    ("byte", "aGVsbG8=", []),
    ("byte", "!!", 1),
    ("date", "2021-01-01", []),
    ("date", "2021-13-01", 1),
    ("datetime", "2021-01-01T00:00:00Z", []),
    ("datetime", "yesterday", 1),
])
def test_formats(name: str, value: str, errors: Any) -> None:
    from lite.cel.libraries import FORMATS
    got = FORMATS[name](value)
    assert (got == []) if errors == [] else (len(got) == errors and all(isinstance(e, str) for e in got))


@pytest.mark.parametrize(("src", "activation", "message"), [
    ("self.missing == 1", {"self": {}}, "no such key: missing"),
    ("self.l[2] == 1", {"self": {"l": [1]}}, "index out of bounds: 2"),
    ("1 / self == 1", {"self": 0}, "divide by zero"),
    ("quantity(self) == quantity('1')", {"self": "x"},
     "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"),
    ("ip(self).family() == 4", {"self": "nope"},
     'IP Address "nope" parse error during conversion from string: ParseAddr("nope"): unable to parse IP'),
    ("url(self).getHost() == ''", {"self": "x y"},
     'URL parse error during conversion from string: parse "x y": invalid URI for request'),
    ("[].min() == 1", {}, "min called on empty list"),
    ("oldSelf == 1", {"self": 1}, "no such attribute: oldSelf"),
])
def test_eval_errors_carry_upstream_text(src: str, activation: dict[str, Any], message: str) -> None:
    with pytest.raises(cel.EvalError) as err:
        ENV.compile(src).eval(activation)
    assert str(err.value) == message


@pytest.mark.parametrize(("src", "fragment"), [
    ("self.x +", "Syntax error"),
    ("self.x.startsWith(1)", "found no matching overload for 'startsWith'"),
    ("nosuch(self)", "undeclared reference to 'nosuch'"),
    ("quantity('1').isGreaterThan(1)", "found no matching overload for 'isGreaterThan'"),
])
def test_compile_errors(src: str, fragment: str) -> None:
    with pytest.raises(cel.CompileError) as err:
        ENV.compile(src)
    assert fragment in str(err.value)
    assert "[INVALID_ARGUMENT]" not in str(err.value) and not str(err.value).startswith("INVALID_ARGUMENT")


@pytest.mark.parametrize(("src", "want"), [
    ("self.l.indexOf(self.v)", 1), ("self.l.lastIndexOf(self.v)", 2), ("self.s.indexOf('c')", 2),
    ("self.s.lastIndexOf('a')", 3)])
def test_index_of_dispatches_on_dynamic_receivers(src: str, want: int) -> None:
    assert ENV.compile(src).eval({"self": {"l": [1, 2, 2], "v": 2, "s": "abca"}}) == want


@pytest.mark.parametrize(("src", "message"), [
    ("self.matches('[a-')", "ERROR: <input>:1:14: invalid matches argument\n | self.matches('[a-')\n"
                            " | .............^"),
    ("self > duration('1x')", "ERROR: <input>:1:17: invalid duration argument"),
    ("self < timestamp('yesterday')", "ERROR: <input>:1:18: invalid timestamp argument"),
    ("true &&\n  self.matches('(')", "ERROR: <input>:2:16: invalid matches argument\n |   self.matches('(')"),
])
def test_invalid_literals_are_compile_errors(src: str, message: str) -> None:
    with pytest.raises(cel.CompileError) as err:
        ENV.compile(src)
    assert str(err.value).startswith(message), str(err.value)


@pytest.mark.parametrize("src", ["self.matches('^\\\\pL+$')", "self.matches(self)", "duration('1h2m') > self",
                                 "timestamp('2024-01-01T00:00:00Z') < self"])
def test_valid_or_dynamic_literals_compile(src: str) -> None:
    ENV.compile(src)


def test_caller_functions_and_opaque_types() -> None:
    env = cel.Environment(
        {"object": cel.DYN, "authorizer": "kubernetes.authorization.Authorizer"},
        functions=[cel.Function("allowed", "authorizer_allowed", ["kubernetes.authorization.Authorizer", cel.STRING],
                                cel.BOOL, lambda a, verb: a.v == "admin" or verb == "get", member=True)],
        opaque_types=["kubernetes.authorization.Authorizer"])
    prog = env.compile("authorizer.allowed('delete') || object.x == 1")
    assert prog.eval({"object": {"x": 2}, "authorizer": env.opaque.make("kubernetes.authorization.Authorizer",
                                                                         "admin")}) is True
    assert prog.eval({"object": {"x": 2}, "authorizer": env.opaque.make("kubernetes.authorization.Authorizer",
                                                                         "bob")}) is False


def _shape(schema: dict[str, Any]) -> Any:
    return lambda _name: cel.Shape(schema)


STRINGS_UNBOUNDED = {"type": "array", "items": {"type": "string"}}
STRINGS_BOUNDED = {"type": "array", "maxItems": 10, "items": {"type": "string", "maxLength": 20}}


@pytest.mark.parametrize(("src", "schema", "low", "high"), [
    ("self.size() > 1", {"type": "string"}, 1, 10),
    ("self.all(x, x.startsWith('a'))", STRINGS_BOUNDED, 20, 200),
    # cel-go: startsWith traverses its prefix, not the string: ~3 per item of ~1M
    ("self.all(x, x.startsWith('a'))", STRINGS_UNBOUNDED, 10**6, 10**7),
    ("self.all(x, self.exists(y, x == y))", STRINGS_BOUNDED, 100, 2000),
    # n^2 comparisons of strings up to 3 MiB, each a traversal of 0.1 per character (cel-go's == cost)
    ("self.all(x, self.exists(y, x == y))", STRINGS_UNBOUNDED, 10**17, 10**18),
    ("self.matches('^[a-z]+$')", {"type": "string", "maxLength": 63}, 2, 60),
])
def test_static_cost_estimates_follow_schema_bounds(src: str, schema: dict[str, Any], low: int, high: int) -> None:
    cost = ENV.compile(src, sizes=_shape(schema)).estimated_cost.max
    assert low <= cost <= high, cost


@pytest.mark.parametrize(("src", "schema", "want"), [
    # cel-go: == and != (and ordering) cost ceil(0.1 x the smaller operand's size) besides the operands
    ("self == oldSelf", {"type": "string", "maxLength": 1000}, 1 + 1 + 100),
    ("self != oldSelf", {"type": "string", "maxLength": 1000}, 1 + 1 + 100),
    ("self == 'abc'", {"type": "string", "maxLength": 1000}, 1 + 1),  # the literal is the smaller: 1
    ("self < oldSelf", {"type": "string", "maxLength": 1000}, 1 + 1 + 100),
    ("self == oldSelf", {"type": "array", "maxItems": 50, "items": {"type": "integer"}}, 1 + 1 + 5),
    ("self == oldSelf", {"type": "integer"}, 1 + 1 + 1),  # two scalars: 1
    ("self == oldSelf", {"type": "string", "format": "date-time"}, 1 + 1 + 1),  # timestamps are scalars
    # conversions give scalars whatever the size of what they convert: two durations compared cost 1
    ("duration(self) < duration(oldSelf)", {"type": "string"}, 2 + 2 + 1),
    ("self.startsWith('abc')", {"type": "string"}, 1 + 1 + 1),  # the prefix is traversed, not the string
])
def test_equality_costs_the_traversal_of_its_smaller_operand(src: str, schema: dict[str, Any], want: int) -> None:
    assert ENV.compile(src, sizes=_shape(schema)).estimated_cost.max == want


def test_runtime_cost_uses_actual_sizes_and_budget_runs_out() -> None:
    prog = ENV.compile("self.all(x, self.exists(y, x == y))", sizes=_shape(STRINGS_UNBOUNDED))
    small = prog.runtime_cost({"self": cel.Shape(STRINGS_UNBOUNDED, values=[["a", "b"]])})
    big = prog.runtime_cost({"self": cel.Shape(STRINGS_UNBOUNDED, values=[["a"] * 2000])})
    assert small < 50 < 1_000_000 < big < prog.estimated_cost.max
    budget = cel.Budget()
    prog.eval({"self": ["a", "b"]}, budget, runtime_cost=small)
    assert budget.remaining == cel.RUNTIME_CEL_COST_BUDGET - small
    with pytest.raises(cel.CostExceeded, match="actual cost limit exceeded"):
        prog.eval({"self": ["a"] * 2000}, budget, runtime_cost=big)


@pytest.mark.parametrize(("cost", "shown"), [
    (20_000_000, "2.0x"), (12_000_000, "1.200000x"), (10**12, "more than 100x")])
def test_cost_error_message(cost: int, shown: str) -> None:
    msg = cel.cost_error_message("estimated rule cost", cost, cel.STATIC_ESTIMATED_COST_LIMIT)
    assert msg == (f"estimated rule cost exceeds budget by factor of {shown} (try simplifying the rule, or adding "
                   "maxItems, maxProperties, and maxLength where arrays, maps, and strings are declared)")


@pytest.mark.parametrize("src", [
    "self.a.b[0].c == 'x' ? 1 : 2", "has(self.x) && !self.y", "self.l.map(e, e * 2).filter(e, e > 1)",
    "{'a': [1, 2], 'b': 3}.size() == 2", "self in ['a', 'b'] || -1 < 0", "r'raw\\d' + \"s\" + '''t'''",
    "self.?x.orValue(1) % 3 == 1", "cel.bind(v, self.x, v.size())", "type(self) == string",
])
def test_cost_parser_reads_cel(src: str) -> None:
    assert cel.parse(src)[0] in ("op", "call", "sel", "idx", "lit", "id")


ISTIO_MATCH = {"type": "object", "properties": {
    "context": {"type": "string", "enum": ["ANY", "SIDECAR_INBOUND", "SIDECAR_OUTBOUND", "GATEWAY", "WAYPOINT"]},
    "waypoint": {"type": "object", "properties": {"portNumber": {"type": "integer"}}}}}


@pytest.mark.parametrize(("src", "schema", "want"), [
    # cel-go as Kubernetes configures it: has() costs its operand only (PresenceTestHasCost(false)); a
    # conditional costs its condition plus its dearer branch, not both branches
    ("has(self.context)", ISTIO_MATCH, 1),
    ("!has(self.waypoint)", ISTIO_MATCH, 2),
    ("has(self.context) ? ((self.context == 'WAYPOINT') ? has(self.waypoint) : !has(self.waypoint))"
     " : !has(self.waypoint)", ISTIO_MATCH, 6),  # Istio EnvoyFilter's rule on configPatches[].match
    ("duration(self) >= duration('1ms')", {"type": "string"}, 4),
])
def test_static_cost_estimates_match_upstreams_for_presence_tests_and_conditionals(
        src: str, schema: dict[str, Any], want: int) -> None:
    assert ENV.compile(src, sizes=_shape(schema)).estimated_cost.max == want


@pytest.mark.parametrize(("schema", "size"), [
    ({"type": "string"}, 2), ({"type": "string", "minLength": 40}, 2), ({"type": "string", "format": "duration"}, 3),
    ({"type": "string", "format": "date"}, 12), ({"type": "string", "format": "date-time"}, 21),
    ({"type": "integer"}, 1), ({"type": "number"}, 1), ({"type": "boolean"}, 4),
    ({"x-kubernetes-int-or-string": True}, 1), ({"type": "array", "items": {"type": "string"}}, 2),
    ({"type": "object", "additionalProperties": {"type": "string"}, "required": ["a"]}, 2),
    ({"type": "object", "properties": {"a": {"type": "string"}}}, 2),
    # {} plus `"name":` and the smallest value of each required property that has no default
    ({"type": "object", "required": ["name", "port", "on"], "properties": {
        "name": {"type": "string"}, "port": {"type": "integer"}, "on": {"type": "boolean", "default": True}}},
     2 + (4 + 2 + 4) + (4 + 1 + 4)),
])
def test_min_serialized_sizes_are_upstreams(schema: dict[str, Any], size: int) -> None:
    from lite.cel import cost
    assert cost.min_serialized(schema) == size


def test_bounded_cost_over_actual_values() -> None:
    """`bounded_cost`: the runtime bound of an expression over actual values, sizes the walk cannot know (what a
    `filter` or `map` builds) capped by the largest value of the variables rather than the request-size bound."""
    node = cost.parse("object.items.filter(c, c.x).all(c, c.name.startsWith('a'))")
    obj = {"items": [{"x": True, "name": "abc"}] * 4}
    got, _ = cost.bounded_cost(node, {"object": cost.CappedShape(values=[obj], cap=100)}, 100)
    assert got < 200  # 4 elements, each a few operations
    # every size at most 1,000: two nested loops over one list
    quadratic = cost.parse("object.items.all(a, object.items.all(b, b.x))")
    low, _ = cost.bounded_cost(quadratic, {"object": cost.CappedShape(cap=1000)}, 1000)
    high, _ = cost.bounded_cost(quadratic, {"object": cost.CappedShape(cap=2000)}, 2000)
    assert 1000 * 1000 < low < 5 * 1000 * 1000 < high
    values = cost.CappedShape(values=[{"items": list(range(1500))}], cap=9000)
    assert cost.bounded_cost(quadratic, {"object": values}, 9000)[0] > 1500 * 1500
