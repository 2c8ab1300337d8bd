"""Resources: status, scale, binding, eviction, token subresources; CRDs and the custom objects they serve."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from lite import errors
from lite.errors import ApiError
from lite.kinds import Kind, KindRegistry
from lite.server.api.resources import Resources
from lite.server.api.strategies import default_strategies
from lite.server.store import Store

KINDS = KindRegistry()


def kind(plural: str, group: str = "", version: str = "v1") -> Kind:
    k = KINDS.by_resource(group, version, plural)
    assert k is not None
    return k


POD, SA, DEPLOY, RS = kind("pods"), kind("serviceaccounts"), kind("deployments", "apps"), kind("replicasets", "apps")
CRD = kind("customresourcedefinitions", "apiextensions.k8s.io")


async def _open(path: Path, **kw: Any) -> tuple[Store, Resources]:
    store = await Store.open(str(path / "db.sqlite"))
    r = Resources(store, KindRegistry(), default_strategies(), **kw)
    await r.start()
    return store, r




def deployment(name: str = "web", replicas: int = 2) -> dict[str, Any]:
    return {"metadata": {"name": name},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}},
                                  "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}}


async def test_status_subresource(res: Resources) -> None:
    d = await res.create(DEPLOY, "default", deployment())
    st = dict(d, status={"replicas": 2, "observedGeneration": 1}, spec={**d["spec"], "replicas": 9})
    out = await res.update(DEPLOY, "default", "web", st, subresource="status")
    assert out["status"] == {"replicas": 2, "observedGeneration": 1}
    assert out["spec"]["replicas"] == 2 and out["metadata"]["generation"] == 1  # spec untouched
    with pytest.raises(ApiError) as e:  # stale RV
        await res.update(DEPLOY, "default", "web", st, subresource="status")
    assert e.value.code == 409
    out = await res.patch(DEPLOY, "default", "web", {"status": {"readyReplicas": 1}}, subresource="status")
    assert out["status"]["readyReplicas"] == 1 and out["status"]["replicas"] == 2
    assert (await res.get(DEPLOY, "default", "web", subresource="status"))["status"]["readyReplicas"] == 1


async def test_scale_subresource(res: Resources) -> None:
    await res.create(DEPLOY, "default", deployment())
    scale = await res.get(DEPLOY, "default", "web", subresource="scale")
    assert scale["kind"] == "Scale" and scale["apiVersion"] == "autoscaling/v1"
    assert scale["spec"] == {"replicas": 2} and scale["status"] == {"replicas": 0, "selector": "app=web"}
    scale["spec"]["replicas"] = 5
    out = await res.update(DEPLOY, "default", "web", scale, subresource="scale")
    assert out["spec"]["replicas"] == 5
    with pytest.raises(ApiError) as e:  # the Scale's RV is a precondition
        await res.update(DEPLOY, "default", "web", scale, subresource="scale")
    assert e.value.code == 409
    out = await res.patch(DEPLOY, "default", "web", {"spec": {"replicas": 3}}, subresource="scale")
    assert out["spec"]["replicas"] == 3
    d = await res.get(DEPLOY, "default", "web")
    assert d["spec"]["replicas"] == 3 and d["metadata"]["generation"] == 3
    with pytest.raises(ApiError) as e:
        await res.patch(DEPLOY, "default", "web", {"spec": {"replicas": -1}}, subresource="scale")
    assert e.value.code == 422
    with pytest.raises(ApiError) as e:
        await res.get(POD, "default", "x", subresource="scale")
    assert e.value.code == 404


async def test_binding(res: Resources) -> None:
    await res.create(POD, "default", {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c",
                                                                                          "image": "i"}]}})
    binding = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "p"},
               "target": {"apiVersion": "v1", "kind": "Node", "name": "n1"}}
    out = await res.create(POD, "default", binding, name="p", subresource="binding")
    assert out["status"] == "Success" and out["code"] == 201
    p = await res.get(POD, "default", "p")
    assert p["spec"]["nodeName"] == "n1"
    assert next(c for c in p["status"]["conditions"] if c["type"] == "PodScheduled")["status"] == "True"
    with pytest.raises(ApiError) as e:
        await res.create(POD, "default", {**binding, "target": {"name": "n2"}}, name="p", subresource="binding")
    assert e.value.code == 409 and e.value.message == (
        'Operation cannot be fulfilled on pods/binding "p": pod p is already assigned to node "n1"')


async def test_binding_validates_the_target_only(res: Resources) -> None:
    """As upstream's BindingREST: ValidatePodBinding checks the target (kind Node, a name), and the pod is then
    written with nodeName set but not validated again (a name that is no DNS subdomain binds too)."""
    await res.create(POD, "default", {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c",
                                                                                          "image": "i"}]}})
    with pytest.raises(ApiError) as e:
        await res.create(POD, "default", {"metadata": {"name": "p"}, "target": {"kind": "Pod", "name": "n1"}},
                         name="p", subresource="binding")
    assert e.value.code == 422 and "target.kind" in e.value.message
    out = await res.create(POD, "default", {"metadata": {"name": "p"}, "target": {"name": "Node_1"}}, name="p",
                           subresource="binding")
    assert out["code"] == 201
    assert (await res.get(POD, "default", "p"))["spec"]["nodeName"] == "Node_1"


async def test_eviction(tmp_path: Path) -> None:
    calls: list[str] = []

    async def check(pod: dict[str, Any], eviction: dict[str, Any]) -> None:
        calls.append(pod["metadata"]["name"])
        if pod["metadata"]["name"] == "guarded":
            raise errors.too_many_requests("Cannot evict pod as it would violate the pod's disruption budget.")

    store, res = await _open(tmp_path, eviction_check=check)
    try:
        for name in ("p", "guarded"):
            await res.create(POD, "default", {"metadata": {"name": name}, "spec": {
                "nodeName": "n1", "containers": [{"name": "c", "image": "i"}]}})
            await res.patch(POD, "default", name, {"status": {"phase": "Running"}}, subresource="status")
        ev = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "p"},
              "deleteOptions": {"gracePeriodSeconds": 0}}
        out = await res.create(POD, "default", ev, name="p", subresource="eviction")
        assert out["status"] == "Success" and out["code"] == 201
        with pytest.raises(ApiError) as e:
            await res.get(POD, "default", "p")
        assert e.value.code == 404
        with pytest.raises(ApiError) as e:
            await res.create(POD, "default", {**ev, "metadata": {"name": "guarded"}}, name="guarded",
                             subresource="eviction")
        assert e.value.code == 429
        assert (await res.get(POD, "default", "guarded"))["metadata"]["name"] == "guarded"
        assert calls == ["p", "guarded"]
    finally:
        await store.close()


async def test_token_request(res: Resources) -> None:
    await res.create(SA, "default", {"metadata": {"name": "default"}})
    out = await res.create(SA, "default", {"spec": {"audiences": ["api"]}}, name="default", subresource="token")
    assert out["kind"] == "TokenRequest" and out["status"]["token"] and out["status"]["expirationTimestamp"]
    assert out["spec"]["expirationSeconds"] == 3600 and out["spec"]["audiences"] == ["api"]
    with pytest.raises(ApiError) as e:
        await res.create(SA, "default", {"spec": {"expirationSeconds": 10}}, name="default", subresource="token")
    assert e.value.code == 422
    with pytest.raises(ApiError) as e:
        await res.create(SA, "default", {}, name="missing", subresource="token")
    assert e.value.code == 404


SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "spec": {"type": "object", "required": ["size"],
                 "properties": {"size": {"type": "integer", "minimum": 0},
                                "mode": {"type": "string", "enum": ["fast", "slow"], "default": "fast"},
                                "extra": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}},
        "status": {"type": "object", "properties": {"size": {"type": "integer"},
                                                    "selector": {"type": "string"}}},
    },
}


def crd(scale: bool = True) -> dict[str, Any]:
    sub: dict[str, Any] = {"status": {}}
    if scale:
        sub["scale"] = {"specReplicasPath": ".spec.size", "statusReplicasPath": ".status.size",
                        "labelSelectorPath": ".status.selector"}
    return {"metadata": {"name": "widgets.example.com"},
            "spec": {"group": "example.com", "scope": "Namespaced",
                     "names": {"plural": "widgets", "kind": "Widget", "shortNames": ["wd"]},
                     "versions": [{"name": "v1", "served": True, "storage": True, "subresources": sub,
                                   "schema": {"openAPIV3Schema": SCHEMA}},
                                  {"name": "v1beta1", "served": True, "storage": False}]}}


async def test_crd_lifecycle(tmp_path: Path) -> None:
    store, res = await _open(tmp_path)
    try:
        out = await res.create(CRD, "", crd())
        conds = {c["type"]: c["status"] for c in out["status"]["conditions"]}
        assert conds == {"NamesAccepted": "True", "Established": "True"}
        assert out["status"]["acceptedNames"]["kind"] == "Widget" and out["status"]["storedVersions"] == ["v1"]
        assert out["spec"]["names"]["singular"] == "widget" and out["spec"]["names"]["listKind"] == "WidgetList"
        w1 = res.kinds.by_resource("example.com", "v1", "widgets")
        wb = res.kinds.by_resource("example.com", "v1beta1", "widgets")
        assert w1 is not None and wb is not None and w1.crd and w1.subresources == ("status", "scale")
        obj = await res.create(w1, "default", {"metadata": {"name": "w"}, "spec": {"size": 2}})
        assert obj["apiVersion"] == "example.com/v1" and obj["kind"] == "Widget"
        assert obj["metadata"]["generation"] == 1
        assert (await res.get(wb, "default", "w"))["apiVersion"] == "example.com/v1beta1"
        with pytest.raises(ApiError) as e:
            await res.patch(w1, "default", "w", {"spec": {"size": 3}}, patch_type="strategic")
        assert e.value.code == 415 and e.value.reason == "UnsupportedMediaType"
        out = await res.patch(w1, "default", "w", {"spec": {"size": 3}, "status": {"size": 1}})
        assert out["metadata"]["generation"] == 2 and "status" not in out
        scale = await res.get(w1, "default", "w", subresource="scale")
        assert scale["spec"]["replicas"] == 3 and scale["status"]["replicas"] == 0
        await res.patch(w1, "default", "w", {"spec": {"replicas": 5}}, subresource="scale")
        assert (await res.get(w1, "default", "w"))["spec"]["size"] == 5
    finally:
        await store.close()
    # After a restart the CRD's kinds come back from the store.
    store, res = await _open(tmp_path)
    try:
        w1 = res.kinds.by_resource("example.com", "v1", "widgets")
        assert w1 is not None
        assert (await res.get(w1, "default", "w"))["spec"]["size"] == 5
        marked = await res.delete(CRD, "", "widgets.example.com")  # marked only: the cleanup controller's turn
        assert marked["metadata"]["finalizers"] == ["customresourcecleanup.apiextensions.k8s.io"]
        assert res.kinds.by_resource("example.com", "v1", "widgets") is not None
        # without the finalizer (as if removed by hand, objects left) the CRD goes with what it stored
        await res.patch(CRD, "", "widgets.example.com", {"metadata": {"finalizers": None}})
        assert res.kinds.by_resource("example.com", "v1", "widgets") is None
        assert store.list("example.com/widgets/")[0] == []
    finally:
        await store.close()


async def test_crd_validation(res: Resources) -> None:
    bad = crd()
    bad["metadata"]["name"] = "wrong.example.com"
    bad["spec"]["versions"][1]["storage"] = True
    with pytest.raises(ApiError) as e:
        await res.create(CRD, "", bad)
    assert e.value.code == 422
    assert {c.field for c in e.value.causes} == {"metadata.name", "spec.versions"}
    bad = crd()
    bad["spec"]["group"] = "nodot"
    bad["metadata"]["name"] = "widgets.nodot"
    with pytest.raises(ApiError) as e:
        await res.create(CRD, "", bad)
    assert [c.field for c in e.value.causes] == ["spec.group"]


async def test_crd_cannot_shadow_builtins(res: Resources) -> None:
    leases = crd(scale=False)
    leases["metadata"] = {"name": "leases.coordination.k8s.io"}
    leases["spec"].update(group="coordination.k8s.io", names={"plural": "leases", "kind": "Lease"})
    with pytest.raises(ApiError) as e:
        await res.create(CRD, "", leases)
    assert [c.field for c in e.value.causes] == ["metadata.annotations[api-approved.kubernetes.io]"]
    leases["metadata"]["annotations"] = {"api-approved.kubernetes.io": "unapproved"}
    await res.create(CRD, "", leases)
    lease = res.kinds.by_resource("coordination.k8s.io", "v1", "leases")
    assert lease is not None and not lease.crd
    await res.create(lease, "default", {"metadata": {"name": "l"}, "spec": {}})
    await res.delete(CRD, "", "leases.coordination.k8s.io")
    assert (await res.get(lease, "default", "l"))["metadata"]["name"] == "l"


async def test_custom_objects_follow_the_schema(res: Resources) -> None:
    await res.create(CRD, "", crd())
    w1 = res.kinds.by_resource("example.com", "v1", "widgets")
    assert w1 is not None
    obj = await res.create(w1, "default", {"metadata": {"name": "w"},
                                           "spec": {"size": 1, "unknown": 1, "extra": {"any": {"thing": 1}}},
                                           "top": "level"})
    assert obj["spec"] == {"size": 1, "mode": "fast", "extra": {"any": {"thing": 1}}}  # pruned and defaulted
    assert "top" not in obj
    with pytest.raises(ApiError) as e:
        await res.create(w1, "default", {"metadata": {"name": "x"}, "spec": {"size": "big", "mode": "medium"}})
    assert e.value.code == 422
    assert [c.field for c in e.value.causes] == ["spec.size", "spec.mode"]
    assert 'spec.size in body must be of type integer: "string"' in e.value.message
    with pytest.raises(ApiError) as e:
        await res.patch(w1, "default", "w", {"spec": {"size": -1}})
    assert e.value.causes[0].message.endswith("spec.size in body should be greater than or equal to 0")
    with pytest.raises(ApiError) as e:
        await res.create(w1, "default", {"metadata": {"name": "y"}, "spec": {}})
    assert [c.field for c in e.value.causes] == ["spec.size"]
    # An unknown field alone changes nothing: no write, no generation bump.
    same = await res.patch(w1, "default", "w", {"spec": {"bogus": True}})
    assert same["metadata"]["resourceVersion"] == obj["metadata"]["resourceVersion"]


async def test_scale_for_other_workloads(res: Resources) -> None:
    rc = kind("replicationcontrollers")
    await res.create(rc, "default", {"metadata": {"name": "r"}, "spec": {"replicas": 2, "template": {
        "metadata": {"labels": {"b": "2", "a": "1"}}, "spec": {"containers": [{"name": "c", "image": "i"}]}}}})
    scale = await res.get(rc, "default", "r", subresource="scale")
    assert scale["status"]["selector"] == "a=1,b=2" and scale["spec"]["replicas"] == 2
    sts = kind("statefulsets", "apps")
    body = deployment("db")
    await res.create(sts, "default", body)
    out = await res.patch(sts, "default", "db", {"spec": {"replicas": 4}}, subresource="scale")
    assert out["spec"]["replicas"] == 4 and out["status"]["selector"] == "app=db"
    ds = kind("daemonsets", "apps")
    await res.create(ds, "default", deployment("agent"))
    with pytest.raises(ApiError) as e:
        await res.get(ds, "default", "agent", subresource="scale")
    assert e.value.code == 404
    with pytest.raises(ApiError) as e:  # DaemonSet selectors are immutable too
        await res.patch(ds, "default", "agent", {"spec": {"selector": {"matchLabels": {"app": "x"}}}})
    assert e.value.code == 422 and "spec.selector" in [c.field for c in e.value.causes]


async def test_crd_printer_columns_validated_and_served(res: Resources) -> None:
    """additionalPrinterColumns live on the version; upstream's checks (names, types, formats, JSONPath) refuse
    bad ones with its messages, and a path kubectl's JSONPath cannot parse is refused too."""
    bad = crd()
    bad["spec"]["versions"][0]["additionalPrinterColumns"] = [
        {"name": "Ok", "type": "string", "jsonPath": '.status.conditions[?(@.type=="Ready")].status'},
        {"type": "text", "format": "fancy", "jsonPath": "status.size"},
        {"name": "T", "jsonPath": ".spec[?(@.x=="},
        {"name": "U", "type": "integer"}]
    with pytest.raises(ApiError) as e:
        await res.create(CRD, "", bad)
    at = "spec.versions[0].additionalPrinterColumns"
    assert e.value.code == 422
    assert [(c.field, c.message) for c in e.value.causes] == [
        (f"{at}[1].name", "Required value"),
        (f"{at}[1].type", 'Invalid value: "text": must be one of boolean,date,integer,number,string'),
        (f"{at}[1].format", 'Invalid value: "fancy": must be one of byte,date,date-time,double,float,int32,int64,'
                            "password"),
        (f"{at}[1].JSONPath", 'Invalid value: "status.size": must be a simple json path starting with .'),
        (f"{at}[2].type", "Required value: must be one of boolean,date,integer,number,string"),
        (f"{at}[2].JSONPath", 'Invalid value: ".spec[?(@.x==": must be a valid JSONPath: unterminated array'),
        (f"{at}[3].JSONPath", "Required value")]
    good = crd()
    good["spec"]["versions"][0]["additionalPrinterColumns"] = [
        {"name": "Size", "type": "integer", "jsonPath": ".spec.size", "priority": 1}]
    await res.create(CRD, "", good)
    w1 = res.kinds.by_resource("example.com", "v1", "widgets")
    assert w1 is not None and w1.printer_columns == ({"name": "Size", "type": "integer", "jsonPath": ".spec.size",
                                                      "priority": 1},)
    wb = res.kinds.by_resource("example.com", "v1beta1", "widgets")
    assert wb is not None and wb.printer_columns == ()
