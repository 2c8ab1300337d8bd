"""Creates of equal specs share their validation and managedFields results (`lite.server.api.specmemo`), and
give exactly what computing them afresh gives."""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

import orjson
import pytest

from lite.errors import ApiError
from lite.kinds import KindRegistry
from lite.patch import record_update
from lite.server.api import specmemo
from lite.server.api.resources import Resources
from lite.server.api.specmemo import SpecMemo

POD = KindRegistry().by_resource("", "v1", "pods")
assert POD is not None


def pod(name: str, **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": {"n": name}},
            "spec": {"containers": [{"name": "c", "image": "nginx:1", "env": [{"name": "A", "value": "1"}],
                                     "ports": [{"containerPort": 80}]}], **spec}}


def fresh_fields(res: Resources, out: dict[str, Any]) -> dict[str, Any]:
    """The FieldsV1 a create records for `out`, computed without the memo."""
    bare = copy.deepcopy(out)
    bare["metadata"].pop("managedFields")
    got = record_update(None, bare, manager="m", api_version="v1", now="t", schema=res.schema(POD))
    fields: dict[str, Any] = got["metadata"]["managedFields"][0]["fieldsV1"]
    return fields


async def test_equal_specs_share_results_and_record_what_a_fresh_walk_records(res: Resources) -> None:
    outs = [await res.create(POD, "default", pod(f"p{i}"), field_manager="m") for i in range(3)]
    assert len(res.spec_memo) == 1  # one spec, remembered once
    for out in outs:
        entry = out["metadata"]["managedFields"][0]
        assert orjson.dumps(entry["fieldsV1"]) == orjson.dumps(fresh_fields(res, out))
        assert entry["fieldsV1"]["f:metadata"]["f:labels"] == {"f:n": {}}
        assert entry["time"] == out["metadata"]["creationTimestamp"]  # one "now" per create, as upstream
    # every object gets its own copy: changing one changes no other
    outs[1]["metadata"]["managedFields"][0]["fieldsV1"]["f:spec"].clear()
    again = await res.create(POD, "default", pod("p9"), field_manager="m")
    assert again["metadata"]["managedFields"][0]["fieldsV1"]["f:spec"]


async def test_a_spec_first_created_without_a_manager_gets_its_fields_later(res: Resources) -> None:
    await res.create(POD, "default", pod("a"))  # as in-process controllers write: no managedFields
    assert "managedFields" not in (await res.get(POD, "default", "a"))["metadata"]
    out = await res.create(POD, "default", pod("b"), field_manager="m")
    assert orjson.dumps(out["metadata"]["managedFields"][0]["fieldsV1"]) == orjson.dumps(fresh_fields(res, out))


async def test_an_invalid_spec_is_refused_alike_every_time(res: Resources) -> None:
    causes = []
    for name in ("x1", "x2"):
        with pytest.raises(ApiError) as e:
            await res.create(POD, "default", pod(name, restartPolicy="Sometimes", dnsPolicy="Nope"),
                             field_manager="m")
        causes.append([(c.field, c.reason, c.message) for c in e.value.causes])
    assert causes[0] == causes[1] and {f for f, _, _ in causes[0]} == {"spec.restartPolicy", "spec.dnsPolicy"}


async def test_a_different_spec_is_validated_on_its_own(res: Resources) -> None:
    await res.create(POD, "default", pod("ok"), field_manager="m")
    with pytest.raises(ApiError) as e:
        await res.create(POD, "default", pod("bad", restartPolicy="Sometimes"), field_manager="m")
    assert [c.field for c in e.value.causes] == ["spec.restartPolicy"]


def test_the_memo_is_bounded_oldest_first() -> None:
    memo = SpecMemo(size=2)
    keys = [SpecMemo.key("Pod", len, {"n": i}) for i in range(3)]
    for k in keys:
        assert k is not None
        memo.put(k, [], None)
    assert len(memo) == 2 and memo.get(keys[0]) is None and memo.get(keys[2]) is not None  # type: ignore[arg-type]
    assert SpecMemo.key("Pod", len, {}) is None and SpecMemo.key("Pod", len, "x") is None


async def test_a_write_that_keeps_the_spec_skips_spec_validation(res: Resources,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Status, label and finalizer writes of a pod leave its spec as stored: its spec-only validation would give
    the stored causes, all ratcheted away, so it is not run; a write that changes the spec still runs it."""
    out = await res.create(POD, "default", pod("s"), field_manager="m")
    strategy = res.strategy(POD)
    calls: list[Any] = []
    original = strategy.validate

    def counting(obj: dict[str, Any]) -> Any:
        calls.append(obj.get("spec"))
        return original(obj)

    counted = dataclasses.replace(strategy, validate=counting)
    lookup = res.strategy
    monkeypatch.setattr(res, "strategy", lambda kind: counted if kind == POD else lookup(kind))
    status = {**out, "status": {"phase": "Running"}}
    await res.update(POD, "default", "s", status, subresource="status", field_manager="kubelet")
    got = await res.get(POD, "default", "s")
    labelled = {**got, "metadata": {**got["metadata"], "labels": {"n": "s", "x": "y"}}}
    await res.update(POD, "default", "s", labelled, field_manager="m")
    assert calls == []
    got = await res.get(POD, "default", "s")
    bad = copy.deepcopy(got)
    bad["spec"]["activeDeadlineSeconds"] = -1  # a spec change: validated, and refused as before
    with pytest.raises(ApiError) as err:
        await res.update(POD, "default", "s", bad, field_manager="m")
    assert calls and err.value.code == 422


@pytest.mark.parametrize("kind_name", ["ReplicaSet", "Deployment"])
async def test_workload_status_writes_skip_the_template_walk(res: Resources, monkeypatch: pytest.MonkeyPatch,
                                                             kind_name: str) -> None:
    """ReplicaSet and Deployment validation reads the spec alone: the status their controllers write on every
    sync does not validate the template again (its causes are the stored ones); a spec change still does."""
    kind = KindRegistry().by_api_version("apps/v1", kind_name)
    assert kind is not None
    labels = {"app": "w"}
    body = {"apiVersion": "apps/v1", "kind": kind_name, "metadata": {"name": "w"},
            "spec": {"replicas": 1, "selector": {"matchLabels": labels},
                     "template": {"metadata": {"labels": labels}, "spec": pod("x")["spec"]}}}
    await res.create(kind, "default", body)
    strategy = res.strategy(kind)
    calls: list[Any] = []
    original = strategy.validate

    def counting(obj: dict[str, Any]) -> Any:
        calls.append(obj.get("spec"))
        return original(obj)

    counted = dataclasses.replace(strategy, validate=counting)
    lookup = res.strategy
    monkeypatch.setattr(res, "strategy", lambda k: counted if k == kind else lookup(k))
    await res.patch(kind, "default", "w", {"status": {"replicas": 1, "observedGeneration": 1}}, subresource="status")
    assert calls == []
    await res.patch(kind, "default", "w", {"spec": {"replicas": 2}})
    assert len(calls) == 1


async def test_equal_specs_share_create_defaulting_and_get_what_defaulting_gives(res: Resources) -> None:
    """A pod's create defaulting (`default_pod`, `prepare_create_pod`) runs once per spec
    (`specmemo.CreateDefaults`): later creates of an equal spec get exactly what it gives, whatever status their
    body had, each in objects of their own."""
    from lite.server.api.strategies.pods import default_pod, prepare_create_pod

    runs: list[str] = []

    def counting(obj: dict[str, Any]) -> None:
        runs.append(obj["metadata"]["name"])
        default_pod(obj)

    res.strategies.register("Pod", dataclasses.replace(res.strategy(POD), default=counting))
    first = await res.create(POD, "default", pod("d1"))
    second = await res.create(POD, "default", {**pod("d2"), "status": {"phase": "Running"}})
    assert runs == ["d1"]
    want = pod("d2")
    default_pod(want)
    prepare_create_pod(want)
    for out in (first, second):
        assert orjson.dumps(out["status"]) == orjson.dumps(want["status"])
    assert want["status"] == {"phase": "Pending", "qosClass": "BestEffort"}
    assert orjson.dumps(second["spec"]) == orjson.dumps(want["spec"])  # the spec as defaulting leaves it
    first["spec"]["containers"].clear()  # objects of their own
    third = await res.create(POD, "default", pod("d3"))
    assert runs == ["d1"] and third["spec"]["containers"][0]["terminationMessagePath"] == "/dev/termination-log"
    await res.create(POD, "default", pod("d4", hostNetwork=True))  # another spec: its own run
    assert runs == ["d1", "d4"]


META_VARIANTS: list[dict[str, Any]] = [
    {"labels": {"a": "1", "b": "2"}},
    {"labels": {"b": "2", "a": "1"}, "annotations": {"x/y": "z"}},
    {"labels": {}, "annotations": {"k": ""}},
    {"labels": {"a": "1"}, "generateName": "g-"},
    {"labels": {"a": "1"}, "ownerReferences": [{"apiVersion": "v1", "kind": "X", "name": "o", "uid": "u"}]},
    {"labels": {"a": "1"}, "finalizers": ["x/y"]},
    {"annotations": None},
]


@pytest.mark.parametrize("answer_only", [False, True])
@pytest.mark.parametrize("extra", META_VARIANTS)
async def test_remembered_create_fields_equal_a_fresh_walk(res: Resources, extra: dict[str, Any],
                                                           answer_only: bool) -> None:
    """The whole FieldsV1 remembered per (spec, metadata field set) (`specmemo.CreateFields`) is exactly what
    walking the object gives, for every metadata shape (those `meta_shape` refuses are walked); an object created
    for another caller than a request's answer gets a copy of its own."""
    from lite.server.api.registry_base import WRITTEN, Written

    outs = []
    for i in range(4):
        body = pod(f"f{i}")
        body["metadata"] = {"name": f"f{i}", **copy.deepcopy(extra)}
        token = WRITTEN.set(Written() if answer_only else None)
        try:
            outs.append(await res.create_owned(POD, "default", body, field_manager="m"))
        finally:
            WRITTEN.reset(token)
    for out in outs:
        assert orjson.dumps(out["metadata"]["managedFields"][0]["fieldsV1"]) == orjson.dumps(fresh_fields(res, out))
    if not answer_only:
        outs[2]["metadata"]["managedFields"][0]["fieldsV1"].clear()
        assert outs[3]["metadata"]["managedFields"][0]["fieldsV1"]


def test_meta_shape_names_the_field_set_or_refuses() -> None:
    from lite.server.api.specmemo import meta_shape

    assert meta_shape({"metadata": {"name": "a", "labels": {"x": "1", "y": "2"}}, "spec": {}, "status": {}}) == \
        ("name", ("labels", ("x", "y")))
    assert meta_shape({"metadata": {"labels": {"x": "1"}}}) != meta_shape({"metadata": {"labels": {"y": "1"}}})
    assert meta_shape({"metadata": {"labels": {"x": "1"}}}) == meta_shape({"metadata": {"labels": {"x": "2"}}})
    for refused in ({"metadata": {"finalizers": ["f"]}}, {"metadata": {"labels": {"x": 1}}},
                    {"metadata": {"labels": {"x": {"y": "z"}}}}, {"metadata": {}, "data": {}},
                    {"metadata": None}, [], {"metadata": {"x": {1, 2}}}, {"metadata": {"x": [{}]}}):
        assert meta_shape(refused) is None


@pytest.mark.parametrize("obj", [
    {"spec": {}},
    {"spec": {"a": 1}},
    {"metadata": {"name": "p", "labels": {"x": "é"}}, "spec": {"containers": [{"name": "c", "image": "i"}]},
     "status": {"phase": "Pending"}},
    {"apiVersion": "v1", "kind": "Pod", "spec": {"n": 1.5, "t": True, "z": None, "s": "\"\\\u2028"}, "b": []},
    {"spec": [1, 2], "metadata": {}},
])
def test_encoded_size_is_the_whole_encodings_length(obj: dict[str, Any]) -> None:
    assert specmemo.encoded_size(obj, "spec", orjson.dumps(obj["spec"])) == len(orjson.dumps(obj))


def test_encoded_size_leaves_what_is_not_plain_json_to_the_caller() -> None:
    assert specmemo.encoded_size({"spec": {}, "metadata": {1: "x"}}, "spec", b"{}") is None



async def test_a_create_measures_its_size_as_the_whole_encoding(res: Resources,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """The create path measures a pod by its known spec encoding: the same size as measuring the whole object
    (checked on each create), the same 413 over the limit."""
    from lite.server.api import writing
    from lite.server.api.bodylimits import MAX_OBJECT_BYTES

    measured: list[int] = []

    def checked(obj: dict[str, Any], field: str, encoded: bytes) -> int | None:
        got = specmemo.encoded_size(obj, field, encoded)
        assert got == len(orjson.dumps(obj))
        measured.append(got)
        return got

    monkeypatch.setattr(writing, "encoded_size", checked)
    await res.create(POD, "default", pod("small"), field_manager="m")
    await res.create(POD, "default", pod("again"))
    big = pod("big", containers=[{"name": "c", "image": "i", "args": ["x" * MAX_OBJECT_BYTES]}])
    with pytest.raises(ApiError) as e:
        await res.create(POD, "default", big)
    assert e.value.code == 413 and e.value.reason == "RequestEntityTooLarge"
    assert f"the object is {measured[-1]} bytes" in e.value.message and len(measured) == 3
