"""RuntimeClass: validation through the registry, and the pod admission (merge table + the hook over a real
registry)."""

from __future__ import annotations

from typing import Any

import pytest

from lite.errors import ApiError
from lite.kinds import Kind
from lite.server.admission.runtimeclass import RuntimeClassAdmission, merge_runtime_class
from lite.server.api.resources import Resources


def rc_kind(res: Resources) -> Kind:
    k = res.kinds.by_resource("node.k8s.io", "v1", "runtimeclasses")
    assert k is not None
    return k


def pod_kind(res: Resources) -> Kind:
    k = res.kinds.by_resource("", "v1", "pods")
    assert k is not None
    return k


def rc(name: str, handler: Any = "runc", **extra: Any) -> dict[str, Any]:
    return {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": name}, "handler": handler,
            **extra}


def pod(name: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"containers": [{"name": "c", "image": "busybox"}], **spec}}


@pytest.mark.parametrize(("handler", "field"), [("", "handler"), ("Runc", "handler"), ("a.b", "handler"),
                                                (None, "handler")])
async def test_handler_must_be_a_dns_label(res: Resources, handler: Any, field: str) -> None:
    with pytest.raises(ApiError) as e:
        await res.create(rc_kind(res), "", rc("bad", handler))
    assert e.value.code == 422 and e.value.causes[0].field == field


async def test_handler_is_immutable(res: Resources) -> None:
    obj = await res.create(rc_kind(res), "", rc("imm"))
    obj["handler"] = "other"
    with pytest.raises(ApiError) as e:
        await res.update(rc_kind(res), "", "imm", obj)
    assert e.value.code == 422 and "field is immutable" in e.value.causes[0].message


async def test_negative_overhead_refused(res: Resources) -> None:
    with pytest.raises(ApiError) as e:
        await res.create(rc_kind(res), "", rc("neg", overhead={"podFixed": {"cpu": "-1"}}))
    assert e.value.code == 422 and e.value.causes[0].field == "overhead.podFixed[cpu]"


MERGE_CASES: list[tuple[str, dict[str, Any], dict[str, Any] | None, dict[str, Any] | None, str | None]] = [
    ("no class, nothing", {}, None, {}, None),
    ("overhead copied", {}, {"overhead": {"podFixed": {"cpu": "100m"}}}, {"overhead": {"cpu": "100m"}}, None),
    ("same overhead kept", {"overhead": {"cpu": "100m"}}, {"overhead": {"podFixed": {"cpu": "100m"}}},
     {"overhead": {"cpu": "100m"}}, None),
    ("other overhead refused", {"overhead": {"cpu": "1"}}, {"overhead": {"podFixed": {"cpu": "100m"}}}, None,
     "pod rejected: Pod's Overhead doesn't match RuntimeClass's defined Overhead"),
    ("overhead without class refused", {"overhead": {"cpu": "1"}}, None, None,
     "pod rejected: Pod Overhead set without corresponding RuntimeClass defined Overhead"),
    ("selector merged", {"nodeSelector": {"a": "1"}}, {"scheduling": {"nodeSelector": {"b": "2"}}},
     {"nodeSelector": {"a": "1", "b": "2"}}, None),
    ("selector conflict", {"nodeSelector": {"a": "1"}}, {"scheduling": {"nodeSelector": {"a": "2"}}}, None,
     "conflict: runtimeClass.scheduling.nodeSelector[a] = 2; pod.spec.nodeSelector[a] = 1"),
    ("tolerations added once", {"tolerations": [{"key": "k", "operator": "Exists"}]},
     {"scheduling": {"tolerations": [{"key": "k", "operator": "Exists"}, {"key": "g", "operator": "Exists"}]}},
     {"tolerations": [{"key": "k", "operator": "Exists"}, {"key": "g", "operator": "Exists"}]}, None),
]


@pytest.mark.parametrize(("case", "spec", "klass", "want", "reason"), MERGE_CASES, ids=[c[0] for c in MERGE_CASES])
def test_merge(case: str, spec: dict[str, Any], klass: dict[str, Any] | None, want: dict[str, Any] | None,
               reason: str | None) -> None:
    got = merge_runtime_class(spec, klass)
    assert got == reason
    if want is not None:
        assert spec == want


@pytest.fixture
async def admitted(res: Resources) -> Resources:
    res.strategies.add_admission(RuntimeClassAdmission(res, rc_kind(res)).admit)
    return res


async def test_pod_naming_a_missing_class_is_forbidden(admitted: Resources) -> None:
    with pytest.raises(ApiError) as e:
        await admitted.create(pod_kind(admitted), "default", pod("p", runtimeClassName="nope"))
    assert e.value.code == 403 and e.value.reason == "Forbidden"
    assert e.value.status()["message"] == 'pods "p" is forbidden: pod rejected: RuntimeClass "nope" not found'


async def test_pod_gets_overhead_and_scheduling(admitted: Resources) -> None:
    await admitted.create(rc_kind(admitted), "", rc("gvisor", "runsc", overhead={"podFixed": {"memory": "64Mi"}},
                                                    scheduling={"nodeSelector": {"sandbox": "yes"}}))
    out = await admitted.create(pod_kind(admitted), "default", pod("q", runtimeClassName="gvisor"))
    assert out["spec"]["overhead"] == {"memory": "64Mi"}
    assert out["spec"]["nodeSelector"] == {"sandbox": "yes"}
