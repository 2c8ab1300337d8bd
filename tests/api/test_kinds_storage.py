"""Storage kinds through the real registry: StorageClass, CSIDriver, CSINode, VolumeAttachment validation,
PersistentVolume/PersistentVolumeClaim rules (Block and Recycle refused with a reason, local volumes need node
affinity, sources immutable), the protection finalizers, the DefaultStorageClass admission and the default
`local-path` class, and StatefulSet templates mounting their claim templates."""

from __future__ import annotations

from typing import Any

import pytest

from lite.errors import ApiError
from lite.kinds import Kind
from lite.server.admission.defaultstorageclass import DefaultStorageClass, ensure_local_path_class
from lite.server.api.resources import Resources

Obj = dict[str, Any]


def kind(res: Resources, group: str, plural: str) -> Kind:
    k = res.kinds.by_resource(group, "v1", plural)
    assert k is not None
    return k


def sc(name: str, **extra: Any) -> Obj:
    return {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": name},
            "provisioner": "example.com/disk", **extra}


def pvc(name: str, **spec: Any) -> Obj:
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": name},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}, **spec}}


def pv(name: str, **spec: Any) -> Obj:
    body: Obj = {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"], "hostPath": {"path": "/srv/x"}}
    body.update(spec)
    return {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": name},
            "spec": {k: v for k, v in body.items() if v is not None}}


async def refused(res: Resources, k: Kind, obj: Obj, ns: str = "") -> ApiError:
    with pytest.raises(ApiError) as e:
        await res.create(k, ns, obj)
    assert e.value.code == 422, e.value.message
    return e.value


async def test_storageclass_defaults_and_validation(res: Resources) -> None:
    k = kind(res, "storage.k8s.io", "storageclasses")
    made = await res.create(k, "", sc("fast"))
    assert made["reclaimPolicy"] == "Delete" and made["volumeBindingMode"] == "Immediate"
    assert (await refused(res, k, {**sc("x"), "provisioner": ""})).causes[0].field == "provisioner"
    err = await refused(res, k, sc("y", reclaimPolicy="Recycle"))
    assert err.causes[0].field == "reclaimPolicy" and "Unsupported value" in err.causes[0].message
    assert (await refused(res, k, sc("z", volumeBindingMode="Later"))).causes[0].field == "volumeBindingMode"
    made["parameters"] = {"type": "ssd"}
    with pytest.raises(ApiError) as e:
        await res.update(k, "", "fast", made)
    assert e.value.code == 422 and e.value.causes[0].message == "Forbidden: updates to parameters are forbidden."


async def test_csi_kinds(res: Resources) -> None:
    drv = kind(res, "storage.k8s.io", "csidrivers")
    made = await res.create(drv, "", {"apiVersion": "storage.k8s.io/v1", "kind": "CSIDriver",
                                      "metadata": {"name": "disk.example.com"}, "spec": {}})
    assert made["spec"]["attachRequired"] is True and made["spec"]["volumeLifecycleModes"] == ["Persistent"]
    node = kind(res, "storage.k8s.io", "csinodes")
    err = await refused(res, node, {"apiVersion": "storage.k8s.io/v1", "kind": "CSINode", "metadata": {"name": "n1"},
                                    "spec": {"drivers": [{"name": "disk.example.com"}]}})
    assert err.causes[0].field == "spec.drivers[0].nodeID"
    va = kind(res, "storage.k8s.io", "volumeattachments")
    body = {"apiVersion": "storage.k8s.io/v1", "kind": "VolumeAttachment", "metadata": {"name": "a1"},
            "spec": {"attacher": "disk.example.com", "nodeName": "n1", "source": {"persistentVolumeName": "pv1"}},
            "status": {"attached": True}}
    made = await res.create(va, "", body)
    assert "status" not in made  # status only through /status
    made["spec"]["nodeName"] = "n2"
    with pytest.raises(ApiError) as e:
        await res.update(va, "", "a1", made)
    assert e.value.code == 422 and e.value.causes[0].field == "spec"


async def test_block_refused_with_reason(res: Resources) -> None:
    claims, volumes = kind(res, "", "persistentvolumeclaims"), kind(res, "", "persistentvolumes")
    for err in (await refused(res, claims, pvc("b", volumeMode="Block"), "default"),
                await refused(res, volumes, pv("b", volumeMode="Block"))):
        cause = next(c for c in err.causes if c.field == "spec.volumeMode")
        assert "Block volumes are not supported by lite" in cause.message


PV_CASES: list[tuple[str, Obj, str, str]] = [
    ("recycle", pv("r", persistentVolumeReclaimPolicy="Recycle"), "spec.persistentVolumeReclaimPolicy",
     "Recycle reclaim policy is not supported"),
    ("no source", pv("n", hostPath=None), "spec", "must specify a volume type"),
    ("two sources", pv("t", local={"path": "/srv/y"}), "spec.local", "may not specify more than 1 volume type"),
    ("local without affinity", pv("l", hostPath=None, local={"path": "/srv/y"}), "metadata.annotations",
     "Local volume requires node affinity"),
    ("no capacity", pv("c", capacity=None), "spec.capacity", "Required value"),
    ("other capacity", pv("o", capacity={"storage": "1Gi", "cpu": "1"}), "spec.capacity", "Unsupported value"),
    ("no access modes", pv("a", accessModes=None), "spec.accessModes", "Required value"),
    ("claimRef without name", pv("cr", claimRef={"namespace": "default"}), "spec.claimRef.name", "Required"),
]


@pytest.mark.parametrize(("case", "body", "field", "text"), PV_CASES, ids=[c[0] for c in PV_CASES])
async def test_pv_validation(res: Resources, case: str, body: Obj, field: str, text: str) -> None:
    err = await refused(res, kind(res, "", "persistentvolumes"), body)
    assert any(c.field == field and text in c.message for c in err.causes), err.causes


async def test_pv_defaults_finalizer_and_immutable_source(res: Resources) -> None:
    k = kind(res, "", "persistentvolumes")
    made = await res.create(k, "", pv("p1"))
    assert made["metadata"]["finalizers"] == ["kubernetes.io/pv-protection"]
    assert made["spec"]["persistentVolumeReclaimPolicy"] == "Retain" and made["status"]["phase"] == "Pending"
    made["spec"]["hostPath"] = {"path": "/elsewhere"}
    with pytest.raises(ApiError) as e:
        await res.update(k, "", "p1", made)
    assert e.value.code == 422 and "immutable" in e.value.causes[0].message
    local = pv("p2", hostPath=None, local={"path": "/srv/l"}, nodeAffinity={"required": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": ["n1"]}]}]}})
    assert (await res.create(k, "", local))["spec"]["local"] == {"path": "/srv/l"}


async def test_pvc_protection_finalizer(res: Resources) -> None:
    made = await res.create(kind(res, "", "persistentvolumeclaims"), "default", pvc("c1"))
    assert made["metadata"]["finalizers"] == ["kubernetes.io/pvc-protection"]
    assert made["status"] == {"phase": "Pending"}


async def test_default_storage_class_admission(res: Resources) -> None:
    classes, claims = kind(res, "storage.k8s.io", "storageclasses"), kind(res, "", "persistentvolumeclaims")
    res.strategies.add_admission(DefaultStorageClass(res, classes).admit)
    assert "storageClassName" not in (await res.create(claims, "default", pvc("before")))["spec"]
    await ensure_local_path_class(res, classes)
    await ensure_local_path_class(res, classes)  # idempotent
    lp = await res.get(classes, "", "local-path")
    assert lp["provisioner"] == "rancher.io/local-path" and lp["volumeBindingMode"] == "WaitForFirstConsumer"
    assert lp["reclaimPolicy"] == "Delete"
    assert lp["metadata"]["annotations"]["storageclass.kubernetes.io/is-default-class"] == "true"
    assert (await res.create(claims, "default", pvc("defaulted")))["spec"]["storageClassName"] == "local-path"
    assert (await res.create(claims, "default", pvc("explicit", storageClassName="")))["spec"]["storageClassName"] == ""
    assert (await res.create(claims, "default", pvc("named", storageClassName="fast")))["spec"]["storageClassName"] \
        == "fast"


async def test_statefulset_template_mounts_claim_templates(res: Resources) -> None:
    k = res.kinds.by_resource("apps", "v1", "statefulsets")
    assert k is not None
    sts = {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "web"},
           "spec": {"serviceName": "web", "selector": {"matchLabels": {"app": "web"}},
                    "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [
                        {"name": "c", "image": "busybox", "volumeMounts": [{"name": "data", "mountPath": "/d"}]}]}},
                    "volumeClaimTemplates": [{"metadata": {"name": "data"}, "spec": {
                        "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}]}}
    made = await res.create(k, "default", sts)
    assert "volumes" not in made["spec"]["template"]["spec"]  # checked against, never stored
    sts["metadata"]["name"] = "bad"
    sts["spec"]["template"]["spec"]["containers"][0]["volumeMounts"][0]["name"] = "nope"
    with pytest.raises(ApiError) as e:
        await res.create(k, "default", sts)
    assert e.value.code == 422


def test_storageclass_table_marks_the_default(res: Resources) -> None:
    from lite.server.api.tables import to_table

    k = kind(res, "storage.k8s.io", "storageclasses")
    default = sc("local-path", metadata={"name": "local-path", "annotations": {
        "storageclass.kubernetes.io/is-default-class": "true"}}, volumeBindingMode="WaitForFirstConsumer",
        reclaimPolicy="Delete")
    table = to_table(k, [default, sc("fast", reclaimPolicy="Retain", allowVolumeExpansion=True)], {})
    assert [c["name"] for c in table["columnDefinitions"]] == [
        "Name", "Provisioner", "ReclaimPolicy", "VolumeBindingMode", "AllowVolumeExpansion", "Age"]
    assert [r["cells"][:5] for r in table["rows"]] == [
        ["local-path (default)", "example.com/disk", "Delete", "WaitForFirstConsumer", "false"],
        ["fast", "example.com/disk", "Retain", "Immediate", "true"]]
