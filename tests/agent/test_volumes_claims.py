"""Claim-backed pod volumes on a real filesystem: the bound volume's directory is used (local-path
directories made world-writable, hostPath types checked, local paths must exist), an unbound or unknown
claim is a FailedMount; and which directories a deleted local-path volume leaves for removal."""

from __future__ import annotations

import stat
from pathlib import Path
from typing import Any

import pytest

from lite.agent import localstorage
from lite.agent.envs import PodContext
from lite.agent.volumes import VolumeError, container_mounts, setup

Obj = dict[str, Any]


def claim(name: str, volume: str = "", phase: str = "Bound") -> Obj:
    return {"metadata": {"name": name, "namespace": "ns"}, "spec": {"volumeName": volume} if volume else {},
            "status": {"phase": phase}}


def pv(name: str, *, host: str = "", local: str = "", kind: str = "", provisioned: bool = False,
       policy: str = "Delete", mode: str = "Filesystem") -> Obj:
    spec: Obj = {"persistentVolumeReclaimPolicy": policy, "volumeMode": mode}
    if host:
        spec["hostPath"] = {"path": host, "type": kind}
    if local:
        spec["local"] = {"path": local}
    ann = {"pv.kubernetes.io/provisioned-by": "rancher.io/local-path",
           "local.path.provisioner/selected-node": "n1"} if provisioned else {}
    return {"metadata": {"name": name, "annotations": ann}, "spec": spec}


def pod(claim_name: str) -> Obj:
    return {"metadata": {"name": "p", "namespace": "ns"},
            "spec": {"volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": claim_name}}],
                     "containers": [{"name": "c"}]}}


def ctx(claims: list[Obj], volumes: list[Obj]) -> PodContext:
    return PodContext(claims={c["metadata"]["name"]: c for c in claims},
                      volumes={v["metadata"]["name"]: v for v in volumes})


def test_local_path_directory_made_and_mounted_with_subpath(tmp_path: Path) -> None:
    target = tmp_path / "storage" / "pvc-1_ns_data"
    paths = setup(pod("data"), tmp_path / "pod", ctx([claim("data", "pvc-1")],
                                                     [pv("pvc-1", host=str(target), kind="DirectoryOrCreate",
                                                         provisioned=True)]))
    assert paths == {"data": str(target)}
    assert stat.S_IMODE(target.stat().st_mode) == 0o777
    mounts = container_mounts({"volumeMounts": [{"name": "data", "mountPath": "/d", "subPath": "sub",
                                                 "readOnly": True}]}, paths)
    assert mounts[0].source == str(target / "sub") and mounts[0].readonly and (target / "sub").is_dir()


def test_hostpath_type_and_local_path_checked(tmp_path: Path) -> None:
    with pytest.raises(VolumeError, match="is not a directory"):
        setup(pod("data"), tmp_path / "pod", ctx([claim("data", "v")],
                                                 [pv("v", host=str(tmp_path / "nope"), kind="Directory")]))
    with pytest.raises(VolumeError, match="does not exist"):
        setup(pod("data"), tmp_path / "pod", ctx([claim("data", "v")], [pv("v", local=str(tmp_path / "nope"))]))
    (tmp_path / "disk").mkdir()
    assert setup(pod("data"), tmp_path / "pod", ctx([claim("data", "v")], [pv("v", local=str(tmp_path / "disk"))])) \
        == {"data": str(tmp_path / "disk")}


@pytest.mark.parametrize(("claims", "volumes", "message"), [
    ([], [], 'persistentvolumeclaim "data" not found'),
    ([claim("data", phase="Pending")], [], "PVC is not bound"),
    ([claim("data", "v")], [], 'persistentvolume "v" not found'),
    ([claim("data", "v")], [pv("v", host="/x", mode="Block")], "Block volumes are not supported"),
    ([claim("data", "v")], [{"metadata": {"name": "v"}, "spec": {"nfs": {"server": "s", "path": "/"}}}],
     "only hostPath and local volumes"),
])
def test_failed_mount(tmp_path: Path, claims: list[Obj], volumes: list[Obj], message: str) -> None:
    with pytest.raises(VolumeError, match=message):
        setup(pod("data"), tmp_path / "pod", ctx(claims, volumes))


@pytest.mark.parametrize(("volume", "want"), [
    (pv("a", host="/data/storage/pvc-1_ns_c", provisioned=True), "/data/storage/pvc-1_ns_c"),
    (pv("b", host="/data/storage/pvc-1_ns_c", provisioned=True, policy="Retain"), None),
    (pv("c", host="/data/storage/pvc-1_ns_c"), None),  # not made by local-path: never removed
    (pv("d", host="/data/storage", provisioned=True), None),  # not a volume directory
    (pv("e", host="relative/pvc-1", provisioned=True), None),
    (pv("f", host="/data/../pvc-1", provisioned=True), None),
])
def test_removable_dir(volume: Obj, want: str | None) -> None:
    got = localstorage.removable_dir(volume, "n1")
    assert (str(got) if got else None) == want
    assert localstorage.removable_dir(volume, "n2") is None  # made for another node: never removed here


def test_remove_dir_does_not_follow_symlinks(tmp_path: Path) -> None:
    keep = tmp_path / "keep"
    keep.mkdir()
    (keep / "f").write_text("x")
    vol = tmp_path / "pvc-1"
    vol.mkdir()
    (vol / "link").symlink_to(keep)
    localstorage.remove_dir(vol)
    assert not vol.exists() and (keep / "f").read_text() == "x"


def test_claim_read_only_in_the_pod_spec(tmp_path: Path) -> None:
    from lite.agent.volumes import read_only_volumes

    spec_pod = pod("data")
    spec_pod["spec"]["volumes"][0]["persistentVolumeClaim"]["readOnly"] = True
    ro = read_only_volumes(spec_pod)
    assert ro == frozenset({"data"}) and read_only_volumes(pod("data")) == frozenset()
    mounts = container_mounts({"volumeMounts": [{"name": "data", "mountPath": "/d"}]}, {"data": str(tmp_path)},
                              read_only=ro)
    assert mounts[0].readonly


def test_local_volumes_record_survives_a_restart(tmp_path: Path) -> None:
    record = tmp_path / "agent" / "local-volumes.json"
    lv = localstorage.LocalVolumes(record, "n1")
    lv.seen(pv("a", host="/data/storage/pvc-a_ns_c", provisioned=True))
    lv.seen(pv("keep", host="/data/storage/pvc-k_ns_c", provisioned=True, policy="Retain"))
    lv.seen(pv("static", host="/srv/pvc-s"))
    again = localstorage.LocalVolumes(record, "n1")  # an agent restart
    assert again.known == {"a": "/data/storage/pvc-a_ns_c"}
    assert again.gone({"keep", "static", "a"}) == [Path("/data/storage/pvc-a_ns_c")]
    assert localstorage.LocalVolumes(record, "n1").known == {}
    again.seen(pv("b", host="/data/storage/pvc-b_ns_c", provisioned=True))
    again.seen(pv("b", host="/data/storage/pvc-b_ns_c", provisioned=True, policy="Retain"))  # policy changed
    assert again.known == {} and localstorage.LocalVolumes(record, "n1").known == {}
