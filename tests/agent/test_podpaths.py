"""The agent's second line: pods that bypassed API validation cannot make the agent create, write or mount
anything outside the pod directory, nor write a file with setuid/setgid/sticky bits.

Each test injects such a pod straight into the agent's volume code on a real file system and checks that
the host path outside the pod directory stays untouched (and that a clear error names the problem).
"""

from __future__ import annotations

import base64
import os
import re
import stat
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

from lite.agent import podpaths
from lite.agent.envs import PodContext
from lite.agent.hooks.base import PodState
from lite.agent.hooks.containers import log_path, state_dir
from lite.agent.volumes import VolumeError, container_mounts, refresh, setup, teardown

CTX = PodContext(
    config_maps={"cm": {"data": {"k": "v"}}, "evil": {"data": {"..": "x", "..data": "y"}}},
    secrets={"s": {"data": {"k": base64.b64encode(b"v").decode()}}},
    pod_ip="10.42.0.9",
)


def _pod(volumes: list[dict[str, Any]]) -> dict[str, Any]:
    return {"metadata": {"name": "p", "namespace": "ns"},
            "spec": {"volumes": volumes, "containers": [{"name": "c"}]}}


@pytest.fixture
def pod_dir(tmp_path: Path) -> Path:
    d = tmp_path / "pods" / "uid"
    d.mkdir(parents=True)
    return d


def _victim(pod_dir: Path) -> Path:
    """The host path the hostile names below point at: outside the pod directory."""
    return pod_dir.parent.parent / "victim"


@pytest.mark.parametrize(("name", "ok"), [
    ("data", True), ("a.b", True), ("", False), (".", False), ("..", False), ("a/b", False),
    ("../x", False), ("/abs", False), ("a\0b", False), (7, False),
])
def test_component(name: Any, ok: bool) -> None:
    assert podpaths.is_component(name) is ok
    if not ok:
        with pytest.raises(podpaths.UnsafePath, match="would leave the pod directory"):
            podpaths.component(name, "volume name")


@pytest.mark.parametrize(("rel", "ok"), [
    ("a", True), ("a/b/c", True), ("a..b", True), (".hidden", True), ("a/./b", True),
    ("", False), ("/etc/passwd", False), ("..", False), ("../x", False), ("a/../../x", False),
    ("..data", False), ("..2024_01_01", False), ("a\0", False), (None, False),
])
def test_relative(rel: Any, ok: bool) -> None:
    if ok:
        assert ".." not in podpaths.relative(rel, "item path").parts
    else:
        with pytest.raises(podpaths.UnsafePath):
            podpaths.relative(rel, "item path")


@pytest.mark.parametrize(("mode", "ok"), [
    (0, True), (0o644, True), (0o777, True), (0o1777, False), (0o2755, False), (0o4755, False), (-1, False),
    (True, False), ("0644", False),
])
def test_file_mode(mode: Any, ok: bool) -> None:
    if ok:
        assert podpaths.file_mode(mode, "mode") == mode
    else:
        with pytest.raises(podpaths.UnsafePath, match="not a permission mode"):
            podpaths.file_mode(mode, "mode")


@pytest.mark.parametrize("source", [{"emptyDir": {}}, {"emptyDir": {"medium": "Memory"}},
                                    {"configMap": {"name": "cm"}}, {"secret": {"secretName": "s"}}])
def test_volume_name_traversal_touches_nothing_outside(pod_dir: Path, source: dict[str, Any]) -> None:
    victim = _victim(pod_dir)
    try:
        with pytest.raises(VolumeError, match=re.escape("volume name '../../../victim' would leave the pod directory")):
            setup(_pod([{"name": "../../../victim", **source}]), pod_dir, CTX)
        assert not victim.exists()
    finally:
        if os.path.ismount(victim):  # only the unfixed code mounts there; never leave it behind
            from lite.agent.runtime import linux
            linux.umount2(str(victim), 2)
        teardown(pod_dir)


def test_absolute_volume_name_is_refused(pod_dir: Path) -> None:
    target = pod_dir.parent / "abs-target"
    with pytest.raises(VolumeError):
        setup(_pod([{"name": str(target), "emptyDir": {}}]), pod_dir, CTX)
    assert not target.exists()


@pytest.mark.parametrize("item", [{"key": "k", "path": "../../../../victim"},
                                  {"key": "k", "path": "/tmp/never-written-by-lite"},
                                  {"key": "k", "path": "..data"}])
def test_item_path_escape_writes_nothing(pod_dir: Path, item: dict[str, str]) -> None:
    with pytest.raises(VolumeError, match="would leave its volume"):
        setup(_pod([{"name": "v", "configMap": {"name": "cm", "items": [item]}}]), pod_dir, CTX)
    assert not _victim(pod_dir).exists() and not Path("/tmp/never-written-by-lite").exists()


def test_config_keys_that_are_paths_are_refused(pod_dir: Path) -> None:
    with pytest.raises(VolumeError, match="configmap key"):
        setup(_pod([{"name": "v", "configMap": {"name": "evil"}}]), pod_dir, CTX)


def test_downward_item_path_escape(pod_dir: Path) -> None:
    vol = {"name": "d", "downwardAPI": {"items": [{"path": "../../../victim",
                                                   "fieldRef": {"fieldPath": "metadata.name"}}]}}
    with pytest.raises(VolumeError, match="would leave its volume"):
        setup(_pod([vol]), pod_dir, CTX)
    assert not _victim(pod_dir).exists()


@pytest.mark.parametrize("vol", [
    {"name": "v", "configMap": {"name": "cm", "defaultMode": 0o4755}},
    {"name": "v", "configMap": {"name": "cm", "items": [{"key": "k", "path": "k", "mode": 0o6777}]}},
    {"name": "v", "secret": {"secretName": "s", "defaultMode": 0o2755}},
    {"name": "v", "projected": {"defaultMode": 0o1777, "sources": [{"configMap": {"name": "cm"}}]}},
    {"name": "v", "downwardAPI": {"items": [{"path": "n", "mode": 0o4700,
                                             "fieldRef": {"fieldPath": "metadata.name"}}]}},
])
def test_modes_above_0777_are_never_written(pod_dir: Path, vol: dict[str, Any]) -> None:
    with pytest.raises(VolumeError, match="not a permission mode"):
        setup(_pod([vol]), pod_dir, CTX)
    special = stat.S_ISUID | stat.S_ISGID | stat.S_ISVTX
    for dirpath, _dirs, files in os.walk(pod_dir):
        for f in files:
            assert not os.lstat(Path(dirpath) / f).st_mode & special


def test_refresh_skips_unsafe_volumes(pod_dir: Path) -> None:
    assert refresh(_pod([{"name": "../../../victim", "configMap": {"name": "cm"}}]), pod_dir, CTX) == []
    assert not _victim(pod_dir).exists()


def test_subpath_through_a_symlink_creates_nothing_outside(pod_dir: Path) -> None:
    paths = setup(_pod([{"name": "e", "emptyDir": {}}]), pod_dir, CTX)
    victim = _victim(pod_dir)
    victim.mkdir()
    # What a container could leave in its emptyDir: a symlink pointing at a host directory.
    (Path(paths["e"]) / "link").symlink_to(victim)
    with pytest.raises(VolumeError, match="escapes volume"):
        container_mounts({"volumeMounts": [{"name": "e", "mountPath": "/x", "subPath": "link/made"}]}, paths)
    assert list(victim.iterdir()) == []
    with pytest.raises(VolumeError, match="escapes volume"):
        container_mounts({"volumeMounts": [{"name": "e", "mountPath": "/x", "subPath": "link"}]}, paths)


def test_subpath_sibling_prefix_is_not_inside(pod_dir: Path) -> None:
    """`/vol2` starts with `/vol` but is not inside it (a string-prefix check would let it through)."""
    paths = setup(_pod([{"name": "vol", "emptyDir": {}}, {"name": "vol2", "emptyDir": {}}]), pod_dir, CTX)
    (Path(paths["vol"]) / "link").symlink_to(Path(paths["vol2"]))
    with pytest.raises(VolumeError, match="escapes volume"):
        container_mounts({"volumeMounts": [{"name": "vol", "mountPath": "/x", "subPath": "link"}]}, paths)


def test_container_names_never_leave_the_pod_dir(pod_dir: Path) -> None:
    st = cast(PodState, SimpleNamespace(pod_dir=pod_dir))
    assert log_path(st, "web", 2) == pod_dir / "logs" / "web" / "2.log"
    for bad in ("../../victim", "..", "a/b", ""):
        with pytest.raises(podpaths.UnsafePath):
            log_path(st, bad, 0)
        with pytest.raises(podpaths.UnsafePath):
            state_dir(st, bad)


def test_agent_refuses_a_pod_whose_uid_is_a_path(tmp_path: Path) -> None:
    """The uid names `<data>/agent/pods/<uid>`, which the agent creates and later removes with rmtree."""
    from lite.agent.agent import Agent, AgentConfig

    agent = Agent(AgentConfig(server_url="https://127.0.0.1:1", token="t", node_name="n1", data_dir=tmp_path / "d",
                              runtime="process", use_cgroups=False, node_ip="10.9.9.9"))
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep").write_text("x")
    for uid in ("../../../victim", "..", "a/b"):
        pod = {"metadata": {"name": "p", "namespace": "ns", "uid": uid}, "spec": {"containers": [{"name": "c"}]}}
        agent._upsert(pod)
        assert agent.runners == {} and agent._pending == []
    assert (victim / "keep").read_text() == "x"
