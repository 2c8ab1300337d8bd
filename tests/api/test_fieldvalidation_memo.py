"""A body's `spec` that type-checked clean is not walked again (`fieldvalidation._check_object`), and every
report stays what a full walk gives: unknown fields (pruned or refused), type errors, the key count that the
duplicate-key screening relies on."""

from __future__ import annotations

import copy
from typing import Any

import orjson
import pytest

from lite.errors import ApiError
from lite.kinds import KindRegistry
from lite.server.api import fieldvalidation
from lite.server.api.builtin_schemas import BuiltinSchemas
from lite.server.api.fieldvalidation import check_body
from lite.server.api.typecheck import check

POD = KindRegistry().by_resource("", "v1", "pods")
assert POD is not None
SPEC: dict[str, Any] = {"containers": [{"name": "c", "image": "i", "ports": [{"containerPort": 80}],
                                        "resources": {"limits": {"cpu": "1"}}}], "restartPolicy": "Always"}


def body(name: str, spec: dict[str, Any] | None = None, **meta: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, **meta}, "spec": copy.deepcopy(spec or SPEC)}


@pytest.fixture(scope="module")
def schemas() -> BuiltinSchemas:
    return BuiltinSchemas()


def full(schemas: BuiltinSchemas, obj: dict[str, Any]) -> tuple[list[str], int, str | None]:
    node = schemas.node(POD)  # type: ignore[arg-type]
    assert node is not None
    r = check(node, copy.deepcopy(obj))
    return r.unknown, r.keys, r.type_error


def test_a_clean_spec_is_remembered_and_the_rest_still_checked(schemas: BuiltinSchemas) -> None:
    before = len(schemas.clean_specs)
    assert check_body(schemas, POD, body("a"), "Strict") == []  # type: ignore[arg-type]
    assert len(schemas.clean_specs) == before + 1
    obj = body("b", extra="x")  # metadata.extra is unknown: warned and dropped, the spec not walked again
    assert check_body(schemas, POD, obj, "Warn") == ['unknown field "metadata.extra"']  # type: ignore[arg-type]
    assert "extra" not in obj["metadata"] and len(schemas.clean_specs) == before + 1
    top = body("c") | {"bogus": 1}
    assert check_body(schemas, POD, top, "") == ['unknown field "bogus"']  # type: ignore[arg-type]
    assert "bogus" not in top and list(top) == ["apiVersion", "kind", "metadata", "spec"]
    with pytest.raises(ApiError) as e:
        check_body(schemas, POD, body("d", labels="x"), "Strict")  # type: ignore[arg-type]
    assert "cannot unmarshal string into Go struct field ObjectMeta.metadata.labels" in e.value.message


def test_an_unclean_spec_is_never_remembered(schemas: BuiltinSchemas) -> None:
    bad = copy.deepcopy(SPEC)
    bad["containers"][0]["imagePullPolcy"] = "Always"
    before = len(schemas.clean_specs)
    for _ in range(2):
        obj = body("e", bad)
        warned = check_body(schemas, POD, obj, "Warn")  # type: ignore[arg-type]
        assert warned == ['unknown field "spec.containers[0].imagePullPolcy"']
        assert "imagePullPolcy" not in obj["spec"]["containers"][0]
    typo = copy.deepcopy(SPEC)
    typo["containers"][0]["ports"][0]["containerPort"] = "80"
    with pytest.raises(ApiError) as e:
        check_body(schemas, POD, body("f", typo), "Strict")  # type: ignore[arg-type]
    assert "Go struct field ContainerPort.spec.containers.ports.containerPort of type int32" in e.value.message
    assert len(schemas.clean_specs) == before


def test_the_key_count_is_the_full_walks(schemas: BuiltinSchemas) -> None:
    """The duplicate-key screening compares it with the text: a remembered spec must count as walked."""
    obj = body("g", labels={"a": "b"})
    check_body(schemas, POD, copy.deepcopy(obj), "Strict")  # type: ignore[arg-type]
    node = schemas.node(POD)  # type: ignore[arg-type]
    assert node is not None
    got = fieldvalidation._check_object(schemas, node, copy.deepcopy(obj), True, True)
    assert (got.unknown, got.keys, got.type_error) == full(schemas, obj)
    raw = b'{"apiVersion":"v1","kind":"Pod","metadata":{"name":"h","name":"h2"},"spec":' + orjson.dumps(SPEC) + b"}"
    decoded = orjson.loads(raw)
    assert check_body(schemas, POD, decoded, "Warn", raw, "application/json") == \
        ['duplicate field "metadata.name"']  # type: ignore[arg-type]


def test_a_clean_body_spec_hands_its_encoding_on_and_no_other_does(schemas: BuiltinSchemas) -> None:
    """`specmemo.BODY_SPEC`: the spec dict a clean body check left untouched, with its exact encoding (create
    defaulting keys its memo by it); a spec the check changed (an unknown field pruned) hands nothing on."""
    import contextvars

    from lite.server.api.specmemo import BODY_SPEC

    def run() -> None:
        obj = body("i")
        check_body(schemas, POD, obj, "Warn")  # type: ignore[arg-type]
        got = BODY_SPEC.get()
        assert got is not None and got[0] is obj["spec"] and got[1] == orjson.dumps(obj["spec"])
        bad = copy.deepcopy(SPEC)
        bad["containers"][0]["imagePullPolcy"] = "Always"
        BODY_SPEC.set(None)
        check_body(schemas, POD, body("j", bad), "Warn")  # type: ignore[arg-type]
        assert BODY_SPEC.get() is None

    contextvars.copy_context().run(run)


async def test_create_defaulting_gives_the_same_with_the_body_checks_encoding(tmp_path: Any) -> None:
    """A create after the body check (its encoding reused) stores exactly what a create without it stores."""
    from lite.server.api.resources import Resources
    from lite.server.api.specmemo import BODY_SPEC
    from lite.server.api.strategies import default_strategies
    from lite.server.store import Store

    store = await Store.open(str(tmp_path / "db.sqlite"))
    try:
        res = Resources(store, KindRegistry(), default_strategies())
        await res.start()
        schemas = BuiltinSchemas()
        outs = []
        for i, checked in enumerate([True, False, True, True]):
            obj = body(f"p{i}")
            BODY_SPEC.set(None)
            if checked:
                check_body(schemas, POD, obj, "Warn")  # type: ignore[arg-type]
                assert BODY_SPEC.get() is not None
            out = await res.create_owned(POD, "default", obj, field_manager="m")  # type: ignore[arg-type]
            assert BODY_SPEC.get() is None or not checked  # taken
            outs.append(out)
        for out in outs[1:]:
            assert orjson.dumps(out["spec"]) == orjson.dumps(outs[0]["spec"])
            assert out["status"] == outs[0]["status"]
        assert len(res.create_defaults) == 1
    finally:
        await store.close()


def test_the_rest_of_a_clean_body_is_remembered_but_for_its_name(schemas: BuiltinSchemas) -> None:
    """Bodies that differ only by name share the check of all but their spec; every other difference is
    walked again and reported as a full walk reports it (unknown fields, type errors, the key count)."""
    before = len(schemas.clean_rests)
    for name in ("r1", "r2", "r3"):
        obj = body(name, labels={"app": "x"})
        assert check_body(schemas, POD, obj, "Strict") == []  # type: ignore[arg-type]
        node = schemas.node(POD)  # type: ignore[arg-type]
        assert node is not None
        got = fieldvalidation._check_object(schemas, node, copy.deepcopy(obj), True, True)
        assert (got.unknown, got.keys, got.type_error) == full(schemas, obj)
    assert len(schemas.clean_rests) == before + 1
    for _ in range(2):  # an unknown metadata field after the same shape was clean: reported, pruned each time
        obj = body("r4", labels={"app": "x"}, extra=1)
        assert check_body(schemas, POD, obj, "Warn") == ['unknown field "metadata.extra"']  # type: ignore[arg-type]
        assert "extra" not in obj["metadata"]
    with pytest.raises(ApiError) as e:  # a label value of the wrong type: the walk's type error
        check_body(schemas, POD, body("r5", labels={"app": 1}), "Strict")  # type: ignore[arg-type]
    assert "cannot unmarshal number into Go struct field ObjectMeta.metadata.labels of type string" in e.value.message
    with pytest.raises(ApiError) as e:  # a name of the wrong type is never blanked: its own walk, its error
        check_body(schemas, POD, body(5, labels={"app": "x"}), "Strict")  # type: ignore[arg-type]
    assert "Go struct field ObjectMeta.metadata.name of type string" in e.value.message
    assert len(schemas.clean_rests) == before + 1
