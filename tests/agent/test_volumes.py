"""Pod volumes on a real filesystem: content volumes (AtomicWriter layout), emptyDir, hostPath checks, mounts."""

from __future__ import annotations

import base64
import os
import stat
from pathlib import Path

import pytest

from lite.agent.envs import ConfigError, PodContext
from lite.agent.volumes import VolumeError, check_host_path, container_mounts, refresh, setup, teardown

CTX = PodContext(
    config_maps={"cm": {"data": {"a.conf": "A", "b.conf": "B"}}},
    secrets={"s": {"data": {"user": base64.b64encode(b"admin").decode(), "pw": base64.b64encode(b"x").decode()}}},
    pod_ip="10.42.0.9",
)


def _pod(volumes: list[dict[str, object]]) -> dict[str, object]:
    return {"metadata": {"name": "p", "namespace": "ns", "labels": {"a": "b"}},
            "spec": {"volumes": volumes, "containers": [{"name": "c", "resources": {"limits": {"memory": "64Mi"}}}]}}


def test_configmap_secret_items_modes(tmp_path: Path) -> None:
    pod = _pod([
        {"name": "cfg", "configMap": {"name": "cm"}},
        {"name": "sec", "secret": {"secretName": "s", "defaultMode": 0o400,
                                   "items": [{"key": "user", "path": "dir/u"},
                                             {"key": "pw", "path": "p", "mode": 0o600}]}},
        {"name": "opt", "secret": {"secretName": "missing", "optional": True}},
    ])
    paths = setup(pod, tmp_path, CTX)
    cfg = Path(paths["cfg"])
    assert (cfg / "a.conf").read_text() == "A" and (cfg / "a.conf").is_symlink()
    assert os.readlink(cfg / "..data").startswith("..")
    sec = Path(paths["sec"])
    assert (sec / "dir" / "u").read_bytes() == b"admin"
    assert stat.S_IMODE((sec / "dir" / "u").stat().st_mode) == 0o400
    assert stat.S_IMODE((sec / "p").stat().st_mode) == 0o600
    assert not (sec / "user").exists()
    assert list(Path(paths["opt"]).glob("[!.]*")) == []


def test_refresh_swaps_atomically(tmp_path: Path) -> None:
    pod = _pod([{"name": "cfg", "configMap": {"name": "cm"}}])
    setup(pod, tmp_path, CTX)
    assert refresh(pod, tmp_path, CTX) == []  # unchanged: no rewrite
    ctx2 = PodContext(config_maps={"cm": {"data": {"a.conf": "A2"}}})
    assert refresh(pod, tmp_path, ctx2) == ["cfg"]
    vol = tmp_path / "volumes" / "cfg"
    assert (vol / "a.conf").read_text() == "A2" and not (vol / "b.conf").exists()
    assert len([p for p in vol.iterdir() if p.name.startswith("..") and p.is_dir() and not p.is_symlink()]) == 1


def test_missing_sources_fail(tmp_path: Path) -> None:
    with pytest.raises(VolumeError, match='configmap "nope" not found'):
        setup(_pod([{"name": "v", "configMap": {"name": "nope"}}]), tmp_path, CTX)
    with pytest.raises(VolumeError, match="non-existent config key: zz"):
        setup(_pod([{"name": "v", "configMap": {"name": "cm", "items": [{"key": "zz", "path": "z"}]}}]),
              tmp_path, CTX)


def test_downward_and_projected(tmp_path: Path) -> None:
    pod = _pod([
        {"name": "dw", "downwardAPI": {"items": [
            {"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}},
            {"path": "mem", "resourceFieldRef": {"containerName": "c", "resource": "limits.memory", "divisor": "1Mi"}},
        ]}},
        {"name": "pr", "projected": {"sources": [
            {"configMap": {"name": "cm", "items": [{"key": "a.conf", "path": "x/a"}]}},
            {"secret": {"name": "s"}},
            {"downwardAPI": {"items": [{"path": "ip", "fieldRef": {"fieldPath": "status.podIP"}}]}},
        ]}},
    ])
    paths = setup(pod, tmp_path, CTX)
    assert (Path(paths["dw"]) / "labels").read_text() == 'a="b"'
    assert (Path(paths["dw"]) / "mem").read_text() == "64"
    pr = Path(paths["pr"])
    assert (pr / "x" / "a").read_text() == "A" and (pr / "user").read_text() == "admin"
    assert (pr / "ip").read_text() == "10.42.0.9"


def test_empty_dir_and_host_path(tmp_path: Path) -> None:
    host = tmp_path / "host"
    pod = _pod([{"name": "scratch", "emptyDir": {}},
                {"name": "hp", "hostPath": {"path": str(host / "made"), "type": "DirectoryOrCreate"}},
                {"name": "hf", "hostPath": {"path": str(host / "f.txt"), "type": "FileOrCreate"}}])
    paths = setup(pod, tmp_path / "pod", CTX)
    (Path(paths["scratch"]) / "keep").write_text("1")
    paths = setup(pod, tmp_path / "pod", CTX)  # idempotent: emptyDir content survives
    assert (Path(paths["scratch"]) / "keep").read_text() == "1"
    assert (host / "made").is_dir() and (host / "f.txt").is_file()
    with pytest.raises(VolumeError, match="is not a directory"):
        check_host_path(str(host / "f.txt"), "Directory")
    with pytest.raises(VolumeError, match="is not a file"):
        check_host_path(str(host / "nope"), "File")
    with pytest.raises(VolumeError, match="is not a socket"):
        check_host_path(str(host / "f.txt"), "Socket")
    check_host_path(str(host / "nope"), "")  # untyped: no check
    teardown(tmp_path / "pod")
    teardown(tmp_path / "pod")
    assert not (tmp_path / "pod" / "volumes").exists() and (host / "made").is_dir()


def test_container_mounts_subpath(tmp_path: Path) -> None:
    paths = setup(_pod([{"name": "cfg", "configMap": {"name": "cm"}}, {"name": "e", "emptyDir": {}}]), tmp_path, CTX)
    c = {"volumeMounts": [{"name": "cfg", "mountPath": "/etc/a.conf", "subPath": "a.conf", "readOnly": True},
                          {"name": "e", "mountPath": "/data", "subPath": "sub/dir"}]}
    mounts = container_mounts(c, paths)
    assert Path(mounts[0].source).read_text() == "A" and mounts[0].readonly and mounts[0].target == "/etc/a.conf"
    assert Path(mounts[1].source).is_dir()
    with pytest.raises(ConfigError, match=r"SubPath `\.\./up`: must not contain '\.\.'"):
        container_mounts({"volumeMounts": [{"name": "e", "mountPath": "/x", "subPath": "../up"}]}, paths)
    with pytest.raises(VolumeError, match="not found"):
        container_mounts({"volumeMounts": [{"name": "zz", "mountPath": "/x"}]}, paths)


@pytest.mark.root
def test_memory_empty_dir_is_tmpfs_with_size(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root to mount tmpfs")
    paths = setup(_pod([{"name": "m", "emptyDir": {"medium": "Memory", "sizeLimit": "1Mi"}}]), tmp_path, CTX)
    try:
        assert os.path.ismount(paths["m"])
        with pytest.raises(OSError):
            (Path(paths["m"]) / "big").write_bytes(b"x" * (2 << 20))
    finally:
        teardown(tmp_path)
    assert not os.path.exists(paths["m"])
