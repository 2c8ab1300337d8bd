"""Table tests of the pure schema checker (`typecheck`), duplicate-key detection (`dupkeys`) and `go_repr`."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from lite.server.api.dupkeys import json_duplicates, yaml_duplicates
from lite.server.api.fieldvalidation import go_repr
from lite.server.api.typecheck import Compiler, Node, at_pointer, check, ssa_path

R = "#/components/schemas/"
SCHEMAS: dict[str, Any] = {
    "io.k8s.api.demo.v1.Thing": {"type": "object", "properties": {
        "apiVersion": {"type": "string"},
        "spec": {"allOf": [{"$ref": f"{R}io.k8s.api.demo.v1.ThingSpec"}], "description": "spec"},
        "labels": {"type": "object", "additionalProperties": {"type": "string"}},
    }},
    "io.k8s.api.demo.v1.ThingSpec": {"type": "object", "properties": {
        "count": {"type": "integer", "format": "int32"},
        "big": {"type": "integer", "format": "int64"},
        "ratio": {"type": "number", "format": "double"},
        "on": {"type": "boolean"},
        "name": {"type": "string"},
        "blob": {"type": "string", "format": "byte"},
        "port": {"$ref": f"{R}io.k8s.apimachinery.pkg.util.intstr.IntOrString"},
        "memory": {"$ref": f"{R}io.k8s.apimachinery.pkg.api.resource.Quantity"},
        "limits": {"type": "object", "additionalProperties": {
            "$ref": f"{R}io.k8s.apimachinery.pkg.api.resource.Quantity"}},
        "when": {"$ref": f"{R}io.k8s.apimachinery.pkg.apis.meta.v1.Time"},
        "items": {"type": "array", "items": {"$ref": f"{R}io.k8s.api.demo.v1.Item"},
                  "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["key"]},
        "tags": {"type": "array", "items": {"type": "string"}, "x-kubernetes-list-type": "set"},
        "plain": {"type": "array", "items": {"$ref": f"{R}io.k8s.api.demo.v1.Item"}},
        "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
        "child": {"$ref": f"{R}io.k8s.api.demo.v1.ThingSpec"},  # recursion
    }},
    "io.k8s.api.demo.v1.Item": {"type": "object", "properties": {"key": {"type": "string"}}},
    "io.k8s.apimachinery.pkg.util.intstr.IntOrString": {"format": "int-or-string", "type": "string"},
    "io.k8s.apimachinery.pkg.api.resource.Quantity": {"type": "string"},
    "io.k8s.apimachinery.pkg.apis.meta.v1.Time": {"type": "string", "format": "date-time"},
}


@pytest.fixture(scope="module")
def thing() -> Node:
    return Compiler(SCHEMAS).named("io.k8s.api.demo.v1.Thing")


def _at(field: str, what: str, typ: str, struct: str = "ThingSpec") -> str:
    return f"json: cannot unmarshal {what} into Go struct field {struct}.{field} of type {typ}"


QUANTITY = "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"

TYPE_TABLE: list[tuple[str, Any, str | None]] = [
    ("count", 3, None),
    ("count", "3", _at("spec.count", "string", "int32")),
    ("count", True, _at("spec.count", "bool", "int32")),
    ("count", 1.5, _at("spec.count", "number 1.5", "int32")),
    ("count", 2**31, _at("spec.count", f"number {2**31}", "int32")),
    ("count", -(2**31), None),
    ("big", 2**40, None),
    ("big", 2**64, _at("spec.big", f"number {2**64}", "int64")),
    ("ratio", 1, None),
    ("ratio", 0.5, None),
    ("ratio", "0.5", _at("spec.ratio", "string", "float64")),
    ("on", False, None),
    ("on", 0, _at("spec.on", "number", "bool")),
    ("on", "true", _at("spec.on", "string", "bool")),
    ("name", "x", None),
    ("name", 5, _at("spec.name", "number", "string")),
    ("name", ["x"], _at("spec.name", "array", "string")),
    ("name", {"a": 1}, _at("spec.name", "object", "string")),
    ("name", None, None),
    ("blob", "aGk=", None),
    ("blob", 1, _at("spec.blob", "number", "[]uint8")),
    ("port", 80, None),
    ("port", "http", None),
    ("port", True, _at("spec.port", "bool", "int32")),
    ("port", {}, _at("spec.port", "object", "int32")),
    ("port", 8.5, _at("spec.port", "number 8.5", "int32")),
    ("memory", "128Mi", None),
    ("memory", 5, None),
    ("memory", "lots", QUANTITY),
    ("memory", True, QUANTITY),
    ("memory", [], QUANTITY),
    ("limits", {"cpu": "1", "memory": "1Gi"}, None),
    ("limits", {"cpu": "x"}, QUANTITY),
    ("limits", ["cpu"], _at("spec.limits", "array", "v1.ResourceList")),
    ("when", "2024-01-02T03:04:05Z", None),
    ("when", "2024-01-02T03:04:05.123+02:00", None),
    ("when", 5, _at("spec.when", "number", "string")),
    ("when", "yesterday",
     'parsing time "yesterday" as "2006-01-02T15:04:05Z07:00": cannot parse "yesterday" as "2006"'),
    ("items", [{"key": "a"}], None),
    ("items", {"key": "a"}, _at("spec.items", "object", "[]v1.Item")),
    ("items", ["a"], _at("spec.items", "string", "v1.Item")),
    ("items", [{"key": 1}], _at("spec.items.key", "number", "string", "Item")),
    ("items", [None], None),
    ("tags", ["a", "b"], None),
    ("tags", "a", _at("spec.tags", "string", "[]string")),
    ("tags", [1], _at("spec.tags", "number", "string")),
    ("free", {"anything": [1, {"x": True}]}, None),
    ("free", 5, None),
    ("child", {"count": "x"}, _at("spec.child.count", "string", "int32")),
    ("child", {"child": {"on": 1}}, _at("spec.child.child.on", "number", "bool")),
]


@pytest.mark.parametrize(("field", "value", "want"), TYPE_TABLE,
                         ids=[f"{f}={v!r}"[:40] for f, v, _ in TYPE_TABLE])
def test_types(thing: Node, field: str, value: Any, want: str | None) -> None:
    assert check(thing, {"spec": {field: value}}).type_error == want


def test_top_level_and_map_values(thing: Node) -> None:
    assert check(thing, {"spec": "x"}).type_error == _at("spec", "string", "v1.ThingSpec", "Thing")
    assert check(thing, {"labels": {"a": 1}}).type_error == _at("labels", "number", "string", "Thing")
    assert check(thing, {"labels": []}).type_error == _at("labels", "array", "map[string]string", "Thing")


def test_unknown_fields_with_strict_paths_in_document_order(thing: Node) -> None:
    obj = {"spek": 1, "spec": {"items": [{"key": "a"}, {"kee": "b"}], "child": {"cownt": 1}},
           "labels": {"x": "y"}}
    report = check(thing, obj)
    assert report.type_error is None
    assert report.unknown == ["spek", "spec.items[1].kee", "spec.child.cownt"]
    assert "spek" in obj  # not pruned unless asked


def test_prune_drops_unknown_fields_only(thing: Node) -> None:
    obj = {"spek": 1, "spec": {"count": 1, "items": [{"kee": "b", "key": "k"}], "free": {"kept": 1}}}
    check(thing, obj, prune=True)
    assert obj == {"spec": {"count": 1, "items": [{"key": "k"}], "free": {"kept": 1}}}


def test_prune_does_nothing_when_a_type_error_stops_the_walk(thing: Node) -> None:
    obj = {"spek": 1, "spec": {"count": "x"}}
    assert check(thing, obj, prune=True).type_error
    assert "spek" in obj


def test_directives_are_skipped_only_when_asked(thing: Node) -> None:
    patch = {"spec": {"$setElementOrder/items": [{"key": "a"}], "items": [{"key": "a", "$patch": "delete"}],
                      "gone": None}}
    assert check(thing, patch, directives=True).unknown == []
    assert check(thing, patch).unknown == ["spec.$setElementOrder/items", "spec.items[0].$patch", "spec.gone"]


POINTERS: list[tuple[list[str], Any, str | None, list[str]]] = [
    (["spec", "count"], 3, None, []),
    (["spec", "count"], "x", _at("spec.count", "string", "int32"), []),
    (["spec", "items", "0"], {"key": 1}, _at("spec.items.key", "number", "string", "Item"), []),
    (["spec", "items", "-"], {"kee": "a"}, None, ["spec.items[-].kee"]),
    (["spec", "limits", "cpu"], "lots", QUANTITY, []),
    (["labels", "a"], 1, _at("labels", "number", "string", "Thing"), []),
    (["spec", "free", "x", "y"], 1, None, []),
]


@pytest.mark.parametrize(("tokens", "value", "want", "unknown"), POINTERS, ids=["/".join(p[0]) for p in POINTERS])
def test_values_at_json_pointers(thing: Node, tokens: list[str], value: Any, want: str | None,
                                 unknown: list[str]) -> None:
    node, at = at_pointer(thing, tokens)
    assert node is not None
    report = check(node, value, at=at)
    assert (report.type_error, report.unknown) == (want, unknown)


def test_pointer_to_unknown_field(thing: Node) -> None:
    node, at = at_pointer(thing, ["spec", "items", "0", "kee"])
    assert node is None and at[2] == "spec.items[0].kee"


DUPS: list[tuple[bytes, list[str]]] = [
    (b'{"a":1,"b":2}', []),
    (b'{"a":1,"a":2}', ["a"]),
    (b'{"a" : 1, "b": {"c": 1, "c" :2}}', ["b.c"]),
    (b'{"l":[{"x":1},{"x":1,"x":2}]}', ["l[1].x"]),
    (b'{"s":"{\\"a\\":1,\\"a\\":2}"}', []),  # duplicates inside a string value are not keys
    (b'{"k\\\\":1,"k\\\\":2}', ["k\\"]),  # a key ending in an escaped backslash is still counted
    (b'{"a":{"x":1},"a":{"y":2}}', ["a"]),
    (b'{"a"\n:1,"a"\n:2}', ["a"]),  # whitespace before the colon, with no space anywhere
    (b'{"a"\t:1,"a"\r\n:2}', ["a"]),
    (b'{"a\\"":1,"a\\"":2}', ['a"']),  # a key ending in an escaped quote
]


@pytest.mark.parametrize(("raw", "want"), DUPS, ids=[d[0].decode()[:30] for d in DUPS])
def test_json_duplicates(raw: bytes, want: list[str]) -> None:
    assert json_duplicates(raw, orjson.loads(raw)) == want


def test_yaml_duplicates_name_lines() -> None:
    assert yaml_duplicates(b"a: 1\nb:\n  c: 1\n  c: 2\na: 3\n") == [
        'line 4: key "c" already set in map', 'line 5: key "a" already set in map']
    assert yaml_duplicates(b"a: 1\nb: 2\n") == []
    assert yaml_duplicates(b"a: [\n") == []  # unparsable: the decoder reports that, not this


@pytest.mark.parametrize(("value", "want"), [
    ({"spec": {"replicas": 3, "a": None}}, "map[spec:map[a:<nil> replicas:3]]"),
    ({"b": [1, "x", True], "a": 1.5}, "map[a:1.5 b:[1 x true]]"),
])
def test_go_repr(value: Any, want: str) -> None:
    assert go_repr(value) == want


@pytest.mark.parametrize(("obj", "strict", "want"), [
    ({"spec": {"items": [{"key": "a"}, {"key": "b", "kee": 1}]}}, "spec.items[1].kee", '.spec.items[key="b"].kee'),
    ({"spec": {"plain": [{"kee": 1}]}}, "spec.plain[0].kee", ".spec.plain[0].kee"),
    ({"spec": {"tags": ["x"]}}, "spec.tags[0]", '.spec.tags[="x"]'),
    ({"spek": 1}, "spek", ".spek"),
])
def test_ssa_paths(thing: Node, obj: Any, strict: str, want: str) -> None:
    assert ssa_path(thing, obj, strict) == want


def test_named_go_types_from_the_go_sources() -> None:
    go_types = {"io.k8s.api.demo.v1.ThingSpec": {"name": "v1.ThingName", "tags": "[]v1.Tag", "items": "[]v1.Nope"}}
    thing = Compiler(SCHEMAS, go_types=go_types).named("io.k8s.api.demo.v1.Thing")
    assert check(thing, {"spec": {"name": 1}}).type_error == _at("spec.name", "number", "v1.ThingName")
    assert check(thing, {"spec": {"tags": "x"}}).type_error == _at("spec.tags", "string", "[]v1.Tag")
    assert check(thing, {"spec": {"tags": [1]}}).type_error == _at("spec.tags", "number", "v1.Tag")
    # the element of a list of structs keeps its own (shared) name
    assert check(thing, {"spec": {"items": [1]}}).type_error == _at("spec.items", "number", "v1.Item")


@pytest.mark.parametrize("obj", [
    {"spec": {"items": [{"key": "a", "kee": {"x": 1}}], "free": {"a": {"b": [{"c": 1}]}}, "limits": {"cpu": "1"}}},
    {"spek": {"a": {"b": 1}}, "labels": {"a": "b", "c": "d"}, "spec": {"tags": ["a"], "child": {"child": {}}}},
    {"spec": {"plain": [None, {"key": "x"}], "on": True, "name": "n"}},
])
def test_the_walk_counts_every_key(thing: Node, obj: Any) -> None:
    """The duplicate-key screening trusts this count: it must never exceed the real number of keys."""
    from lite.server.api.typecheck import count_keys
    assert check(thing, obj).keys == count_keys(obj)


def test_warning_headers_are_bounded_and_safe() -> None:
    from lite.server.api.fieldvalidation import warning_headers
    assert warning_headers(['unknown field "a"', 'unknown field "a"']) == ['299 - "unknown field \\"a\\""']
    assert warning_headers(["x\r\ny\\"]) == ['299 - "x  y\\\\"']
    many = [f"unknown field \"{i:05d}{'p' * 300}\"" for i in range(100)]
    out = warning_headers(many)
    assert len(out) == 16 and 4096 <= sum(len(h) for h in out) < 4096 + 16 * 20  # 16 cut to 256 each
    assert all(len(h) <= 256 + len('299 - ""') + 8 for h in out)


def test_a_recursive_schema_followed_too_deep_is_a_400() -> None:
    """Behind the decoder's depth limit, the checker still never crashes on a deep recursive schema."""
    from lite.errors import ApiError
    from lite.kinds import KindRegistry
    from lite.server.api.builtin_schemas import BuiltinSchemas
    from lite.server.api.fieldvalidation import check_body
    crd = next(k for k in KindRegistry() if k.kind == "CustomResourceDefinition")
    schema: dict[str, Any] = {}
    cur = schema
    for _ in range(600):
        cur["properties"] = {"a": {}}
        cur = cur["properties"]["a"]
    body = {"spec": {"versions": [{"name": "v1", "schema": {"openAPIV3Schema": schema}}]}}
    with pytest.raises(ApiError) as e:
        check_body(BuiltinSchemas(), crd, body, "Strict")
    assert e.value.code == 400 and e.value.message.endswith("json: exceeded max depth")


def _load_generator() -> Any:
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "tools" / "gen_openapi_schemas.py"
    spec = importlib.util.spec_from_file_location("gen_openapi_schemas", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _same_tree(a: Node, b: Node, seen: set[tuple[int, int]]) -> None:
    if (id(a), id(b)) in seen:
        return
    seen.add((id(a), id(b)))
    assert (a.tag, a.go, a.plain, a.keys, sorted(a.props)) == (b.tag, b.go, b.plain, b.keys, sorted(b.props))
    assert (a.item is None) == (b.item is None)
    if a.item is not None and b.item is not None:
        _same_tree(a.item, b.item, seen)
    for name, child in a.props.items():
        _same_tree(child, b.props[name], seen)


def test_lean_copy_is_the_full_data_reduced_and_compiles_the_same_trees() -> None:
    """The lean copy the server compiles from is what the generator makes of the full data (so it is not stale),
    and every published kind compiles from it to the tree the full schemas give."""
    import gzip
    import importlib.resources

    from lite.server.api.builtin_schemas import DATA_FILE, LEAN_FILE, OBJECT_META, BuiltinSchemas

    files = importlib.resources.files("lite.server.api")
    full = orjson.loads(gzip.decompress(files.joinpath(DATA_FILE).read_bytes()))
    lean = gzip.decompress(files.joinpath(LEAN_FILE).read_bytes())
    assert orjson.loads(lean) == orjson.loads(_load_generator().lean(full))
    reference = Compiler(full["schemas"], go_types=full["gotypes"])
    schemas = BuiltinSchemas()
    seen: set[tuple[int, int]] = set()
    for key, name in full["kinds"].items():
        node = schemas.node_for(*key.split("/"))
        assert node is not None
        _same_tree(node, reference.named(name), seen)
    meta = schemas.object_meta()
    assert meta is not None
    _same_tree(meta, reference.named(OBJECT_META), seen)


def test_builtin_trees_are_compiled_per_kind_on_first_use() -> None:
    from lite.server.api.builtin_schemas import BuiltinSchemas

    schemas = BuiltinSchemas()
    pod = schemas.node_for("", "v1", "Pod")
    assert pod is not None and pod.go == "v1.Pod"
    compiled = schemas._compiler._named if schemas._compiler else {}
    assert "io.k8s.api.core.v1.PodSpec" in compiled
    assert "io.k8s.api.apps.v1.Deployment" not in compiled and "io.k8s.api.batch.v1.Job" not in compiled
    assert len(schemas._lean) == 0  # the lean schemas are held only while a kind compiles
    deploy = schemas.node_for("apps", "v1", "Deployment")
    assert deploy is not None and "io.k8s.api.apps.v1.Deployment" in compiled
    assert len(schemas._lean) == 0
    # the pod template of a Deployment is the very PodSpec tree the Pod has (compiled once)
    assert deploy.props["spec"].props["template"].props["spec"] is pod.props["spec"]
    assert schemas.node_for("", "v1", "NoSuchKind") is None
