"""`lite.volumematch`: upstream's claim ↔ volume matching rules and the local-path provisioner's volume, as
tables."""

from __future__ import annotations

from typing import Any

import pytest

from lite.volumematch import (
    default_class,
    find_matching_volume,
    local_path_dir,
    node_affinity_matches,
    provisioned_volume,
    unsatisfied_reason,
)

Obj = dict[str, Any]


def pv(name: str, size: str = "1Gi", cls: str = "", modes: tuple[str, ...] = ("ReadWriteOnce",),
       phase: str = "Available", labels: dict[str, str] | None = None, claim: Obj | None = None,
       node: str | None = None, mode: str = "Filesystem", deleting: bool = False) -> Obj:
    spec: Obj = {"capacity": {"storage": size}, "accessModes": list(modes), "storageClassName": cls,
                 "volumeMode": mode, "hostPath": {"path": f"/srv/{name}"}}
    if claim is not None:
        spec["claimRef"] = claim
    if node is not None:
        spec["nodeAffinity"] = {"required": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}]}]}}
    meta: Obj = {"name": name, "labels": labels or {}}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"metadata": meta, "spec": spec, "status": {"phase": phase}}


def pvc(size: str = "1Gi", cls: str | None = "", modes: tuple[str, ...] = ("ReadWriteOnce",),
        selector: Obj | None = None, mode: str = "Filesystem") -> Obj:
    spec: Obj = {"accessModes": list(modes), "resources": {"requests": {"storage": size}}, "volumeMode": mode}
    if cls is not None:
        spec["storageClassName"] = cls
    if selector is not None:
        spec["selector"] = selector
    return {"metadata": {"name": "c", "namespace": "ns", "uid": "u1", "resourceVersion": "7"}, "spec": spec}


MINE = {"name": "c", "namespace": "ns", "uid": "u1"}
OTHER = {"name": "d", "namespace": "ns", "uid": "u2"}

CASES: list[tuple[str, Obj, list[Obj], str | None]] = [
    ("smallest that fits", pvc("2Gi"), [pv("a", "1Gi"), pv("b", "5Gi"), pv("c", "3Gi")], "c"),
    ("exact size", pvc("1Gi"), [pv("a", "1Gi"), pv("b", "2Gi")], "a"),
    ("none big enough", pvc("10Gi"), [pv("a", "1Gi")], None),
    ("class must match", pvc("1Gi", "fast"), [pv("a", "1Gi", "slow"), pv("b", "2Gi", "fast")], "b"),
    ("no class asks for classless", pvc("1Gi", ""), [pv("a", "1Gi", "fast")], None),
    ("access modes are a subset", pvc(modes=("ReadWriteMany",)),
     [pv("a", modes=("ReadWriteOnce",)), pv("b", "2Gi", modes=("ReadWriteOnce", "ReadWriteMany"))], "b"),
    ("selector", pvc(selector={"matchLabels": {"tier": "gold"}}),
     [pv("a"), pv("b", "2Gi", labels={"tier": "gold"})], "b"),
    ("bound elsewhere skipped", pvc(), [pv("a", claim=OTHER, phase="Bound")], None),
    ("not Available skipped", pvc(), [pv("a", phase="Released")], None),
    ("being deleted skipped", pvc(), [pv("a", deleting=True)], None),
    ("volumeMode must match", pvc(mode="Filesystem"), [pv("a", mode="Block")], None),
    ("pre-bound wins over a smaller free one", pvc("1Gi"),
     [pv("free", "1Gi"), pv("mine", "9Gi", claim={"name": "c", "namespace": "ns"})], "mine"),
    ("pre-bound with another uid is not ours", pvc(), [pv("a", claim=OTHER | {"name": "c"})], None),
    ("pre-bound but too small", pvc("5Gi"), [pv("mine", "1Gi", claim=MINE)], None),
]


@pytest.mark.parametrize(("case", "claim", "volumes", "want"), CASES, ids=[c[0] for c in CASES])
def test_find_matching_volume(case: str, claim: Obj, volumes: list[Obj], want: str | None) -> None:
    got = find_matching_volume(claim, volumes)
    assert (got["metadata"]["name"] if got else None) == want


def test_delayed_binding_leaves_unbound_volumes_to_the_scheduler() -> None:
    volumes = [pv("a"), pv("mine", claim=MINE)]
    assert find_matching_volume(pvc(), [volumes[0]], delay_binding=True) is None
    assert find_matching_volume(pvc(), volumes, delay_binding=True)["metadata"]["name"] == "mine"  # type: ignore[index]
    on_node = find_matching_volume(pvc(), [pv("x", node="n2"), pv("y", node="n1")], node=({"kubernetes.io/hostname":
                                                                                          "n1"}, "n1"),
                                   delay_binding=True)
    assert on_node is not None and on_node["metadata"]["name"] == "y"
    # a pre-bound volume whose affinity excludes the node: no match at all (upstream)
    assert find_matching_volume(pvc(), [pv("mine", claim=MINE, node="n2")],
                                node=({"kubernetes.io/hostname": "n1"}, "n1")) is None


AFFINITY: list[tuple[str, Obj, dict[str, str], bool]] = [
    ("no affinity", {}, {}, True),
    ("In matches", {"required": {"nodeSelectorTerms": [{"matchExpressions": [
        {"key": "zone", "operator": "In", "values": ["a", "b"]}]}]}}, {"zone": "b"}, True),
    ("In misses", {"required": {"nodeSelectorTerms": [{"matchExpressions": [
        {"key": "zone", "operator": "In", "values": ["a"]}]}]}}, {"zone": "b"}, False),
    ("terms ORed", {"required": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]},
        {"matchExpressions": [{"key": "disk", "operator": "Exists"}]}]}}, {"disk": "ssd"}, True),
    ("expressions ANDed", {"required": {"nodeSelectorTerms": [{"matchExpressions": [
        {"key": "zone", "operator": "In", "values": ["a"]}, {"key": "disk", "operator": "DoesNotExist"}]}]}},
     {"zone": "a", "disk": "x"}, False),
    ("Gt", {"required": {"nodeSelectorTerms": [{"matchExpressions": [
        {"key": "gen", "operator": "Gt", "values": ["3"]}]}]}}, {"gen": "4"}, True),
    ("empty term matches nothing", {"required": {"nodeSelectorTerms": [{}]}}, {"zone": "a"}, False),
    ("matchFields by name", {"required": {"nodeSelectorTerms": [{"matchFields": [
        {"key": "metadata.name", "operator": "In", "values": ["n1"]}]}]}}, {}, True),
]


@pytest.mark.parametrize(("case", "affinity", "labels", "want"), AFFINITY, ids=[c[0] for c in AFFINITY])
def test_node_affinity(case: str, affinity: Obj, labels: dict[str, str], want: bool) -> None:
    assert node_affinity_matches({"spec": {"nodeAffinity": affinity}}, labels, "n1") is want


REASONS: list[tuple[str, Obj, Obj, str | None]] = [
    ("fits", pv("a", "2Gi", "x"), pvc("1Gi", "x"), None),
    ("too small", pv("a", "1Gi", "x"), pvc("2Gi", "x"), "requested PV is too small"),
    ("class", pv("a", "2Gi", "x"), pvc("1Gi", "y"), "storageClassName does not match"),
    ("mode", pv("a", "2Gi", "x", mode="Block"), pvc("1Gi", "x"), "incompatible volumeMode"),
    ("access", pv("a", "2Gi", "x"), pvc("1Gi", "x", modes=("ReadWriteMany",)), "incompatible accessMode"),
]


@pytest.mark.parametrize(("case", "volume", "claim", "want"), REASONS, ids=[c[0] for c in REASONS])
def test_unsatisfied_reason(case: str, volume: Obj, claim: Obj, want: str | None) -> None:
    assert unsatisfied_reason(volume, claim) == want


def test_local_path_volume() -> None:
    claim = pvc("3Gi", "local-path", modes=("ReadWriteOnce",))
    assert local_path_dir("/var/lib/lite/storage/", claim) == "/var/lib/lite/storage/pvc-u1_ns_c"
    vol = provisioned_volume(claim, {"reclaimPolicy": "Retain"}, "node-a", "/data/storage")
    assert vol["metadata"]["name"] == "pvc-u1"
    assert vol["metadata"]["annotations"]["pv.kubernetes.io/provisioned-by"] == "rancher.io/local-path"
    spec = vol["spec"]
    assert spec["hostPath"] == {"path": "/data/storage/pvc-u1_ns_c", "type": "DirectoryOrCreate"}
    assert spec["capacity"] == {"storage": "3Gi"} and spec["persistentVolumeReclaimPolicy"] == "Retain"
    assert spec["claimRef"]["uid"] == "u1" and spec["storageClassName"] == "local-path"
    assert node_affinity_matches(vol, {"kubernetes.io/hostname": "node-a"}, "node-a")
    assert not node_affinity_matches(vol, {"kubernetes.io/hostname": "node-b"}, "node-b")
    assert find_matching_volume(claim, [vol]) is vol  # pre-bound to its claim: the binder takes it as it is


def test_default_class_newest_wins() -> None:
    def sc(name: str, created: str, default: bool) -> Obj:
        ann = {"storageclass.kubernetes.io/is-default-class": "true"} if default else {}
        return {"metadata": {"name": name, "creationTimestamp": created, "annotations": ann}}

    assert default_class([sc("a", "2026-01-01T00:00:00Z", False)]) is None
    found = default_class([sc("old", "2025-01-01T00:00:00Z", True), sc("new", "2026-01-01T00:00:00Z", True),
                           sc("plain", "2027-01-01T00:00:00Z", False)])
    assert found is not None and found["metadata"]["name"] == "new"
