"""The PersistentVolume controller against the real in-process API: static binding (smallest fitting volume,
annotations, claimRef, phases), a claim's own volumeName, release and reclaim (Retain keeps Released, Delete
of a volume nobody can delete goes Failed, a local-path volume is deleted), the local-path provisioner
waiting for the scheduler's node, and both protection finalizers."""

from __future__ import annotations

from typing import Any

from conftest import EVENT, POD, Kit, running

from lite.server.controllers.persistentvolume import PersistentVolumeController, claim_in_use
from lite.server.controllers.runtime import builtin

PVC = builtin("", "PersistentVolumeClaim")
PV = builtin("", "PersistentVolume")
SC = builtin("storage.k8s.io", "StorageClass")
Obj = dict[str, Any]


def pv(name: str, size: str, cls: str = "manual", policy: str = "Retain", **spec: Any) -> Obj:
    return {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": name},
            "spec": {"capacity": {"storage": size}, "accessModes": ["ReadWriteOnce"], "storageClassName": cls,
                     "persistentVolumeReclaimPolicy": policy, "hostPath": {"path": f"/srv/{name}"}, **spec}}


def pvc(name: str, size: str, cls: str = "manual", **spec: Any) -> Obj:
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": name, "namespace": "default"},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": size}},
                     "storageClassName": cls, **spec}}


async def phase(kit: Kit, kind: Any, name: str, ns: str = "") -> str | None:
    try:
        obj = await kit.api.get(kind, ns, name)
    except Exception:
        return None
    return str((obj.get("status") or {}).get("phase"))


async def gone(kit: Kit, kind: Any, name: str, ns: str = "") -> bool:
    return name not in {o["metadata"]["name"] for o in (await kit.api.list(kind, ns))["items"]}


async def reasons(kit: Kit, name: str) -> set[str]:
    return {e["reason"] for e in (await kit.api.list(EVENT, "default"))["items"]
            if e["involvedObject"]["name"] == name}


async def test_static_binding_release_and_reclaim(kit: Kit) -> None:
    for name, size in (("small", "1Gi"), ("big", "5Gi"), ("huge", "10Gi")):
        await kit.api.create(PV, "", pv(name, size))
    await kit.api.create(PV, "", pv("nodeleter", "5Gi", cls="gone", policy="Delete"))
    c = PersistentVolumeController(kit.api, kit.informers)
    await kit.api.create(PVC, "default", pvc("claim", "2Gi"))
    await kit.api.create(PVC, "default", pvc("gone", "1Gi", cls="gone"))
    async with running(c):
        await kit.until(lambda: phase(kit, PVC, "claim", "default"))
        await kit.until(lambda: _is(phase(kit, PVC, "claim", "default"), "Bound"))
        await kit.until(lambda: _is(phase(kit, PVC, "gone", "default"), "Bound"))
        claim = await kit.api.get(PVC, "default", "claim")
        assert claim["spec"]["volumeName"] == "big"
        ann = claim["metadata"]["annotations"]
        assert ann["pv.kubernetes.io/bind-completed"] == "yes" and ann["pv.kubernetes.io/bound-by-controller"] == "yes"
        assert claim["status"]["capacity"] == {"storage": "5Gi"}
        assert claim["status"]["accessModes"] == ["ReadWriteOnce"]
        big = await kit.api.get(PV, "", "big")
        assert big["spec"]["claimRef"]["uid"] == claim["metadata"]["uid"]
        assert big["metadata"]["annotations"]["pv.kubernetes.io/bound-by-controller"] == "yes"
        await kit.until(lambda: _is(phase(kit, PV, "big"), "Bound"))
        await kit.until(lambda: _is(phase(kit, PV, "small"), "Available"))

        await kit.api.delete(PVC, "default", "claim")  # pvc-protection: no pod uses it, so it goes
        await kit.api.delete(PVC, "default", "gone")
        await kit.until(lambda: _is(phase(kit, PV, "big"), "Released"))
        await kit.until(lambda: _is(phase(kit, PV, "nodeleter"), "Failed"))
        assert "VolumeFailedDelete" in {e["reason"] for e in (await kit.api.list(EVENT, ""))["items"]
                                        if e["involvedObject"]["name"] == "nodeleter"}
        await kit.api.delete(PV, "", "big")  # not Bound: pv-protection lets it go
        await kit.until(lambda: gone(kit, PV, "big"))


async def _is(value: Any, want: str) -> bool:
    return bool(await value == want)


async def test_claim_volume_name_must_satisfy(kit: Kit) -> None:
    await kit.api.create(PV, "", pv("tiny", "1Gi"))
    await kit.api.create(PV, "", pv("fits", "3Gi"))
    c = PersistentVolumeController(kit.api, kit.informers)
    await kit.api.create(PVC, "default", pvc("wants-tiny", "2Gi", volumeName="tiny"))
    await kit.api.create(PVC, "default", pvc("wants-fits", "2Gi", volumeName="fits"))
    async with running(c):
        await kit.until(lambda: _is(phase(kit, PVC, "wants-fits", "default"), "Bound"))
        await kit.until(lambda: _has(reasons(kit, "wants-tiny"), "VolumeMismatch"))
        assert await phase(kit, PVC, "wants-tiny", "default") == "Pending"
        claim = await kit.api.get(PVC, "default", "wants-fits")
        # the user chose the volume: the claim is not marked bound-by-controller, the volume is
        assert "pv.kubernetes.io/bound-by-controller" not in claim["metadata"]["annotations"]
        assert (await kit.api.get(PV, "", "fits"))["metadata"]["annotations"]["pv.kubernetes.io/bound-by-controller"]


async def _has(value: Any, want: str) -> bool:
    return want in await value


async def test_local_path_waits_for_node_then_provisions_and_deletes(kit: Kit) -> None:
    await kit.api.create(SC, "", {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
                                  "metadata": {"name": "local-path"}, "provisioner": "rancher.io/local-path",
                                  "volumeBindingMode": "WaitForFirstConsumer", "reclaimPolicy": "Delete"})
    c = PersistentVolumeController(kit.api, kit.informers, local_path_root="/data/storage")
    claim = await kit.api.create(PVC, "default", pvc("data", "1Gi", cls="local-path"))
    async with running(c):
        await kit.until(lambda: _has(reasons(kit, "data"), "WaitForFirstConsumer"))
        assert (await kit.api.list(PV, ""))["items"] == []
        await kit.api.patch(PVC, "default", "data", {"metadata": {"annotations": {
            "volume.kubernetes.io/selected-node": "node-a"}}}, patch_type="merge")
        await kit.until(lambda: _is(phase(kit, PVC, "data", "default"), "Bound"))
        name = f"pvc-{claim['metadata']['uid']}"
        vol = await kit.api.get(PV, "", name)
        assert vol["spec"]["hostPath"]["path"] == f"/data/storage/{name}_default_data"
        assert vol["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"][0]["matchExpressions"][0]["values"] \
            == ["node-a"]
        bound = await kit.api.get(PVC, "default", "data")
        assert bound["metadata"]["annotations"]["volume.kubernetes.io/storage-provisioner"] == "rancher.io/local-path"
        assert {"Provisioning", "ProvisioningSucceeded"} <= await reasons(kit, "data")

        pod = await kit.api.create(POD, "default", {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "user"},
                                                   "spec": {"containers": [{"name": "c", "image": "busybox"}],
                                                            "volumes": [{"name": "v", "persistentVolumeClaim": {
                                                                "claimName": "data"}}]}})
        await kit.settle(c)
        await kit.api.delete(PVC, "default", "data")
        await kit.settle(c)
        await c.reconcile("claim:default/data")
        held = await kit.api.get(PVC, "default", "data")  # in use: pvc-protection holds it
        assert held["metadata"]["deletionTimestamp"] and held["metadata"]["finalizers"] == [
            "kubernetes.io/pvc-protection"]
        await kit.api.delete(POD, "default", pod["metadata"]["name"], grace_period_seconds=0)
        await kit.until(lambda: gone(kit, PVC, "data", "default"))
        await kit.until(lambda: gone(kit, PV, name))  # reclaim Delete: released, deleted, pv-protection lifted


def test_claim_in_use() -> None:
    def user(phase: str, claim: str = "data") -> Obj:
        return {"metadata": {"name": "p"}, "spec": {"volumes": [{"name": "v", "persistentVolumeClaim": {
            "claimName": claim}}]}, "status": {"phase": phase}}

    data = {"metadata": {"name": "data"}}
    assert claim_in_use(data, [user("Running")]) and claim_in_use(data, [user("Pending")])
    assert not claim_in_use(data, [user("Succeeded"), user("Failed"), user("Running", "other")])


async def test_pv_protection_and_lost_claim(kit: Kit) -> None:
    await kit.api.create(PV, "", pv("held", "1Gi"))
    await kit.api.create(PV, "", pv("vanish", "1Gi", cls="other"))
    c = PersistentVolumeController(kit.api, kit.informers)
    await kit.api.create(PVC, "default", pvc("a", "1Gi"))
    await kit.api.create(PVC, "default", pvc("b", "1Gi", cls="other"))
    async with running(c):
        await kit.until(lambda: _is(phase(kit, PVC, "a", "default"), "Bound"))
        await kit.until(lambda: _is(phase(kit, PVC, "b", "default"), "Bound"))
        await kit.api.delete(PV, "", "held")  # Bound: pv-protection keeps it
        await kit.settle(c)
        await c.reconcile("volume:held")
        held = await kit.api.get(PV, "", "held")
        assert held["metadata"]["deletionTimestamp"] and held["metadata"]["finalizers"] == [
            "kubernetes.io/pv-protection"]
        await kit.api.delete(PVC, "default", "a")  # released: now it may go
        await kit.until(lambda: gone(kit, PV, "held"))

        vanish = await kit.api.get(PV, "", "vanish")  # an administrator forces a bound volume away
        vanish["metadata"]["finalizers"] = []
        await kit.api.update(PV, "", "vanish", vanish)
        await kit.api.delete(PV, "", "vanish")
        await kit.until(lambda: _is(phase(kit, PVC, "b", "default"), "Lost"))
        assert "ClaimLost" in await reasons(kit, "b")
